#!/usr/bin/env python3
"""How much a tuning batch's compile gains from being split over two compiler processes.

kiln tune splits each batch of candidates into --compile-jobs C sources (each a whole translation
unit: prelude, micro-kernels, its share of the candidates) compiled side by side
(docs/tuning.md "Parallel compile"). This script runs a short `kiln tune --compile-jobs 1` with
TMPDIR pointed at a private folder, copies the one-source batches LocalMeasurer writes there while
it runs, splits the largest in two halves (each the whole head, then half the candidates: the
head holds the micro-kernels of every tile of the batch, a little more than kiln's own split
emits, so the split is if anything priced high), and times, interleaved, the one source with one
compiler process against the two halves with two processes at once.

    python3 bench/tune_compile_split.py build/kiln MODEL.onnx [--batches 6] [--reps 3] [--budget 60s]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=fast"]


def kernels_of(text):
    return re.findall(r"^void (tune_c\d+_\d+)\(", text, re.M)


def head_and_kernels(text):
    i = text.find("/* kernel tune_c")
    return (text, "") if i < 0 else (text[:i], text[i:])


def compile_many(paths, out_dir):
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["cc", *FLAGS, "-o", os.path.join(out_dir, os.path.basename(p) + ".so"), p])
             for p in paths]
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"cc failed on one of {paths}")
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("model")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", default="60s")
    ap.add_argument("--min-candidates", type=int, default=8)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-split-")
    try:
        tmp, saved = os.path.join(work, "tmp"), os.path.join(work, "saved")
        os.makedirs(tmp)
        os.makedirs(saved)
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [a.kiln, "tune", a.model, "--budget", a.budget, "--threads", "1", "--no-fusion-search", "--no-filter",
               "--compile-jobs", "1", "--records", os.path.join(work, "r.jsonl"), "--samples",
               os.path.join(work, "s.jsonl")]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            for f in glob.glob(os.path.join(tmp, "kiln-tune-*", "kiln_*.c")):
                dst = os.path.join(saved, os.path.basename(f))
                if not os.path.exists(dst):
                    try:
                        shutil.copyfile(f, dst)
                    except OSError:
                        pass
            time.sleep(0.2)
        texts = {}
        for f in glob.glob(os.path.join(saved, "*.c")):
            with open(f) as fh:
                t = fh.read()
            if len(kernels_of(t)) >= a.min_candidates:
                texts[f] = t
        if not texts:
            sys.exit(f"no batch of {a.min_candidates}+ candidates was captured; try a longer --budget")
        # The largest batches first.
        batches = sorted(texts, key=lambda f: -len(kernels_of(texts[f])))[: a.batches]
        print(f"{len(batches)} batches, {a.reps} reps each, interleaved; cc {' '.join(FLAGS)}")
        one_total = two_total = 0.0
        alone_total = [0.0]
        for n, f in enumerate(batches):
            head, body = head_and_kernels(texts[f])
            parts = body.split("/* kernel tune_c")[1:]
            half = (len(parts) + 1) // 2
            paths = []
            for k, chunk in enumerate([parts[:half], parts[half:]]):
                paths.append(os.path.join(work, f"b{n}_{k}.c"))
                with open(paths[-1], "w") as fh:
                    fh.write(head + "".join("/* kernel tune_c" + p for p in chunk))
            hp = os.path.join(work, f"head{n}.c")
            with open(hp, "w") as fh:  # what each half repeats: the prelude and micro-kernels
                fh.write(head)
            one, two, rep, h0, h1 = [], [], [], [], []
            for _ in range(a.reps):
                one.append(compile_many([f], work))
                two.append(compile_many(paths, work))
                rep.append(compile_many([hp], work))
                h0.append(compile_many(paths[:1], work))
                h1.append(compile_many(paths[1:], work))
            med = lambda v: sorted(v)[len(v) // 2]
            o, t = med(one), med(two)
            one_total += o
            two_total += t
            # The halves one at a time: their work; on two idle cores the split's wall time would be
            # the longer half's.
            alone_total[0] += max(med(h0), med(h1))
            print(f"batch {n}: {len(parts)} candidates, one source {o:.2f} s, two halves at once {t:.2f} s "
                  f"({o / t:.2f}x); halves alone {med(h0):.2f} + {med(h1):.2f} s; the repeated head alone "
                  f"{med(rep):.2f} s")
        print(f"total: one source {one_total:.2f} s, two halves at once {two_total:.2f} s "
              f"({one_total / two_total:.2f}x); the longer half alone {alone_total[0]:.2f} s "
              f"({one_total / alone_total[0]:.2f}x: the split on two idle cores); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
