#!/usr/bin/env python3
"""One kernel under two schedules, alternated call by call in one C program.

Usage: python3 bench/ab_schedule.py MODEL.onnx FIELD=VALUE [FIELD=VALUE ...] [--kiln build/kiln]
                                    [--calls 40] [--work DIR] [--buffer-mib 16]

MODEL is a one-kernel model (a one-node conv from bench/kernel_sweep.py's conv_model, say). Its
kernel is built twice with `kiln compile` (1 thread): A with the default schedule, B with a
records file whose one record sets the given schedule fields (`kiln tune`'s field names, e.g.
contraction.implicit_channels_inner=0) and leaves every other field at its default. Both kernels
are linked into one program that calls A, then B, on the same operand buffers (16 MiB each;
--buffer-mib for a kernel with a larger input or output), CALLS times; it prints each one's minimum and median and the median of the per-call ratios B / A. A
phase of a noisy machine then slows both alike, where separate processes (ab_kernels.py) or
blocks of runs see different phases. The operands are synthetic (the kernel's weights are not
the model's), which changes nothing for float arithmetic without subnormals.

The records file's machine key is this machine's; the record comes from a short `kiln tune` of
the model (its signature; 20 s). It keeps only the given fields: a record's schedule is the
target's default with the record's fields set.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void kern_a(void* const* args);
void kern_b(void* const* args);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void* x, const void* y) { double a = *(const double*)x, b = *(const double*)y; return a < b ? -1 : a > b; }
int main(int argc, char** argv) {
  void* a[16];
  for (int i = 0; i < 16; i++) {
    float* p = aligned_alloc(64, (size_t)KILN_AB_MIB << 20);
    for (size_t j = 0; j < ((size_t)KILN_AB_MIB << 18); j++) p[j] = (float)((unsigned)j * 7919u % 1000u) * 0.001f - 0.5f;
    a[i] = p;
  }
  const int n = argc > 1 ? atoi(argv[1]) : 40;
  double* ta = malloc(n * sizeof(double)); double* tb = malloc(n * sizeof(double)); double* r = malloc(n * sizeof(double));
  kern_a(a); kern_b(a);
  for (int i = 0; i < n; i++) {
    double t = now(); kern_a(a); ta[i] = now() - t;
    t = now(); kern_b(a); tb[i] = now() - t;
    r[i] = tb[i] / ta[i];
  }
  qsort(ta, n, sizeof(double), cmp); qsort(tb, n, sizeof(double), cmp); qsort(r, n, sizeof(double), cmp);
  printf("A min %.3f med %.3f ms | B min %.3f med %.3f ms | B / A median %.3f\n", ta[0] * 1e3, ta[n / 2] * 1e3,
         tb[0] * 1e3, tb[n / 2] * 1e3, r[n / 2]);
  return 0;
}
"""


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"ab_schedule: {' '.join(cmd)} failed:\n{r.stderr.strip()}")
    return r


def signature_record(kiln, model, work):
    """A records line for the model's kernel: its signature and machine key, from a short tune."""
    # kiln tune appends to its records file: a fresh one per model (the default fields' reference
    # conv is tuned into the same folder, and --work folders are reused).
    path = os.path.join(work, "signature_" + os.path.basename(model) + ".jsonl")
    if os.path.exists(path):
        os.remove(path)
    run([kiln, "tune", model, "--budget", "20s", "--threads", "1", "--records", path])
    # Its fusion search's records (pairs measured fused and apart) are not the kernel's.
    recs = [r for r in (json.loads(l) for l in open(path) if l.strip()) if r.get("emitter") != "fusion"]
    if len(recs) != 1:
        sys.exit(f"ab_schedule: {model}: {len(recs)} tuned kernels; a one-kernel model is needed")
    return recs[0]


def kernel_source(kiln, model, work, name, records=None):
    """The bundle's prelude and its one kernel, renamed `name`."""
    out = os.path.join(work, name)
    cmd = [kiln, "compile", model, "-o", out, "--threads", "1"]
    cmd += ["--records", records] if records else ["--no-records"]
    run(cmd)
    src = open(os.path.join(out, "kiln_model.c")).read()
    i = src.index("/* kernel ")
    j = src.index("\n}\n", src.index("void fused_", i)) + 3
    kernels = re.findall(r"void (fused_\w+)\(void\* const\* args\)", src[i:])
    if len(set(kernels)) != 1:
        sys.exit(f"ab_schedule: {model}: {len(set(kernels))} kernels; a one-kernel model is needed")
    body = src[i:j].replace(f"void {kernels[0]}(", f"void {name}(")
    return src[:i], body


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("fields", nargs="+", help="FIELD=VALUE schedule fields for B")
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build", "kiln"))
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--work", help="folder for the bundles and the program (default: a temporary one)")
    ap.add_argument("--buffer-mib", type=int, default=16, help="size of each operand buffer (MiB)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="kiln_ab_schedule_")
    os.makedirs(work, exist_ok=True)
    rec = signature_record(a.kiln, a.model, work)
    # A record's schedule is the target's default with the record's fields set (tune/records.cc,
    # record_schedule): keep only the given ones.
    known = {k for k in rec if k.startswith("s:")}
    rec = {k: v for k, v in rec.items() if not k.startswith("s:")}
    rec["improved"] = True
    rec["tuned_ms"] = rec["default_ms"] / 2
    for f in a.fields:
        k, _, v = f.partition("=")
        if "s:" + k not in known:
            sys.exit(f"ab_schedule: {k}: not a schedule field of the records (see docs/tuning.md)")
        rec["s:" + k] = int(v)
    records = os.path.join(work, "b.jsonl")
    with open(records, "w") as fh:
        fh.write(json.dumps(rec) + "\n")
    pre_a, ka = kernel_source(a.kiln, a.model, work, "kern_a")
    pre_b, kb = kernel_source(a.kiln, a.model, work, "kern_b", records)
    # B's prelude defines the same helpers: prefix them so both copies link into one object.
    pre_b, kb = pre_b.replace("kiln_", "kilnb_"), kb.replace("kiln_", "kilnb_")
    c = os.path.join(work, "ab.c")
    with open(c, "w") as fh:
        fh.write(pre_a + ka + pre_b + kb)
    with open(os.path.join(work, "driver.c"), "w") as fh:
        fh.write(DRIVER)
    exe = os.path.join(work, "ab")
    run(["gcc", "-O3", "-march=native", "-fPIC", "-fopenmp", "-ffp-contract=fast", "-w", "-c", c, "-o", exe + ".o"])
    run(["gcc", "-O2", f"-DKILN_AB_MIB={a.buffer_mib}", os.path.join(work, "driver.c"), exe + ".o", "-fopenmp", "-lm",
         "-o", exe])
    for name, body in (("A", ka), ("B", kb)):
        m = re.search(r"/\* (tiled contraction.*?) \*/", body)
        if m:
            print(f"{name}: {m.group(1).strip()}")
    r = run([exe, str(a.calls)], env=dict(os.environ, OMP_NUM_THREADS="1"))
    print(r.stdout.strip())


if __name__ == "__main__":
    main()
