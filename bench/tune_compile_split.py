#!/usr/bin/env python3
"""How much a tuning batch's compile gains from being split over two compiler processes.

kiln tune splits each batch of candidates into --compile-jobs C sources (each a whole translation
unit: prelude, micro-kernels, its share of the candidates) compiled side by side
(docs/tuning.md "Parallel compile"). This script runs a short `kiln tune --compile-jobs 2` with
TMPDIR pointed at a private folder, copies the batch sources LocalMeasurer writes there while it
runs, pairs the two halves of each batch, rebuilds the batch's one-source form (the first half,
then the second half's kernels: the halves must share their prelude and micro-kernels, other pairs
are skipped), and times, interleaved, the one source with one compiler process against the two
halves with two processes at once.

    python3 bench/tune_compile_split.py build/kiln MODEL.onnx [--batches 8] [--reps 3]
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
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", default="30s")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln-split-")
    try:
        tmp, saved = os.path.join(work, "tmp"), os.path.join(work, "saved")
        os.makedirs(tmp)
        os.makedirs(saved)
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [a.kiln, "tune", a.model, "--budget", a.budget, "--threads", "1", "--no-fusion-search", "--no-filter",
               "--compile-jobs", "2", "--records", os.path.join(work, "r.jsonl"), "--samples",
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
            if kernels_of(t):
                texts[f] = t
        # The halves of one batch: tune_cB_0..k-1 and tune_cB_k..n-1 with the same head. Batch
        # numbers restart per kernel, so a half may have several partners; take the first.
        firsts = {f: kernels_of(t) for f, t in texts.items()}
        pairs, used = [], set()
        for f, ks in firsts.items():
            if not ks[0].endswith("_0") or f in used:
                continue
            b, last = ks[-1].rsplit("_", 1)
            want = f"{b}_{int(last) + 1}"
            head = head_and_kernels(texts[f])[0]
            for g, gs in firsts.items():
                if g not in used and g != f and gs[0] == want and head_and_kernels(texts[g])[0] == head:
                    pairs.append((f, g))
                    used.update({f, g})
                    break
        # The largest batches first (a mutant batch is the incumbent and eight points): small ones
        # are dominated by the part each half repeats.
        pairs.sort(key=lambda p: -(len(firsts[p[0]]) + len(firsts[p[1]])))
        pairs = pairs[: a.batches]
        if not pairs:
            sys.exit("no batch split in two halves with a shared head was captured; try a longer --budget")
        print(f"{len(pairs)} batches, {a.reps} reps each, interleaved; cc {' '.join(FLAGS)}")
        one_total = two_total = 0.0
        for n, (f, g) in enumerate(pairs):
            whole = os.path.join(work, f"whole{n}.c")
            with open(whole, "w") as fh:
                fh.write(texts[f] + head_and_kernels(texts[g])[1])
            head = os.path.join(work, f"head{n}.c")
            with open(head, "w") as fh:  # what each half repeats: the prelude and micro-kernels
                fh.write(head_and_kernels(texts[f])[0])
            one, two, rep = [], [], []
            for _ in range(a.reps):
                one.append(compile_many([whole], work))
                two.append(compile_many([f, g], work))
                rep.append(compile_many([head], work))
            one.sort()
            two.sort()
            rep.sort()
            o, t = one[len(one) // 2], two[len(two) // 2]
            one_total += o
            two_total += t
            print(f"batch {n}: {len(firsts[f]) + len(firsts[g])} candidates, one source {o:.2f} s, "
                  f"two sources at once {t:.2f} s ({o / t:.2f}x); the repeated head alone {rep[len(rep) // 2]:.2f} s")
        print(f"total: one source {one_total:.2f} s, two at once {two_total:.2f} s ({one_total / two_total:.2f}x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
