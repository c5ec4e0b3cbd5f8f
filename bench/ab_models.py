#!/usr/bin/env python3
"""Latency of two kiln builds (before / after a change) on the same models, interleaved.

Usage: python3 bench/ab_models.py KILN_A KILN_B MODEL.onnx... [--threads 1,2] [--runs 10] [--rounds 3]

For each model and thread count, `kiln bench MODEL --json` of A and of B alternate --rounds times
(each its own process, a warm JIT cache after the first); the figure is the median of the rounds'
medians. Prints a markdown table with the ratio B / A per row and the geomean per thread count.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys


def bench(kiln, model, threads, runs):
    r = subprocess.run([kiln, "bench", model, "--json", "--threads", str(threads), "--runs", str(runs), "--warmup", "3"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{kiln} bench {model} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| model | threads | A ms | B ms | B / A |")
    print("|---|---|---|---|---|")
    ratios = {}
    for t in [int(x) for x in args.threads.split(",")]:
        for model in args.models:
            ta, tb = [], []
            for _ in range(args.rounds):
                ta.append(bench(args.a, model, t, args.runs))
                tb.append(bench(args.b, model, t, args.runs))
            a, b = statistics.median(ta), statistics.median(tb)
            ratios.setdefault(t, []).append(b / a)
            name = os.path.splitext(os.path.basename(model))[0]
            print(f"| {name} | {t} | {a:.3f} | {b:.3f} | {b / a:.2f} |", flush=True)
    for t, r in ratios.items():
        print(f"| **geomean** | {t} | | | **{math.exp(sum(map(math.log, r)) / len(r)):.2f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
