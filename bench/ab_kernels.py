#!/usr/bin/env python3
"""Kernel time of several kiln builds on the same models, interleaved rounds.

Usage: python3 bench/ab_kernels.py KILN_A KILN_B [...] --models M1.onnx M2.onnx ... [--threads 1]
                                   [--runs 20] [--rounds 3]

Per round, each build runs `kiln bench MODEL --kernels` (its own process) on every model in turn;
a model's figure is the sum of its kernels' medians (the launch and harness overheads of
`kiln bench`'s whole-model time left out), and the table shows, per build and model, the minimum
and the median over the rounds. For single-kernel models (a one-node Conv) this is the kernel's
time; builds alternate so that a noisy stretch of the machine hits them alike.
"""
import argparse
import os
import statistics
import subprocess
import sys


def kernel_ms(kiln, model, threads, runs):
    r = subprocess.run([kiln, "bench", model, "--kernels", "--threads", str(threads), "--runs", str(runs)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{kiln} bench {model} failed: {r.stderr.strip()}")
    total = 0.0
    for line in r.stdout.splitlines():
        p = line.split()
        # "#  kernel  kind  gen|lib  ms  MB  GB/s  level  % bw"
        if len(p) > 5 and p[0].isdigit() and p[3] in ("gen", "lib"):
            total += float(p[4])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    times = {}
    for _ in range(a.rounds):
        for b in a.builds:
            for m in a.models:
                times.setdefault((b, m), []).append(kernel_ms(b, m, a.threads, a.runs))
    names = [os.path.splitext(os.path.basename(m))[0] for m in a.models]
    print("| build | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for b in a.builds:
        cells = [f"{min(times[(b, m)]):.3f} / {statistics.median(times[(b, m)]):.3f}" for m in a.models]
        print(f"| {b} | " + " | ".join(cells) + " |")
    print(f"\nkernel ms (sum of kernel medians), min / median over {a.rounds} rounds, {a.threads} thread(s)")


if __name__ == "__main__":
    main()
