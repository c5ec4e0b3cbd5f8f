#!/usr/bin/env python3
"""Latency of two kiln builds (before / after a change) on the same models, interleaved.

Usage: python3 bench/ab_models.py KILN_A KILN_B MODEL.onnx... [--threads 1,2] [--runs 10] [--rounds 3]

For each model and thread count, `kiln bench MODEL --json` of A and of B alternate --rounds times
(each its own process, a warm JIT cache after the first), B first in every other round; the
figures are the median of the rounds' medians per build and the median over the rounds of the
per-round ratio B / A (a slow stretch of the machine moves both sides of a round). Prints a
markdown table with both ratios per row (the per-round ones sorted after it) and the geomean of
the per-round ratio per thread count.
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
    print("| model | threads | A ms | B ms | B / A of medians | B / A per round (median; sorted) |")
    print("|---|---|---|---|---|---|")
    ratios = {}
    for t in [int(x) for x in args.threads.split(",")]:
        for model in args.models:
            ta, tb = [], []
            for r in range(args.rounds):
                if r % 2:
                    tb.append(bench(args.b, model, t, args.runs))
                    ta.append(bench(args.a, model, t, args.runs))
                else:
                    ta.append(bench(args.a, model, t, args.runs))
                    tb.append(bench(args.b, model, t, args.runs))
            a, b = statistics.median(ta), statistics.median(tb)
            per_round = sorted(y / x for x, y in zip(ta, tb))
            ratios.setdefault(t, []).append(statistics.median(per_round))
            name = os.path.splitext(os.path.basename(model))[0]
            spread = " ".join(f"{r:.2f}" for r in per_round)
            print(f"| {name} | {t} | {a:.3f} | {b:.3f} | {b / a:.3f} | {statistics.median(per_round):.3f}; {spread} |",
                  flush=True)
    for t, r in ratios.items():
        print(f"| **geomean** | {t} | | | | **{math.exp(sum(map(math.log, r)) / len(r)):.3f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
