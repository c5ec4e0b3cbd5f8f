#!/usr/bin/env python3
"""Kernel time of several kiln builds on the same models, interleaved rounds.

Usage: python3 bench/ab_kernels.py KILN_A KILN_B [...] --models M1.onnx M2.onnx ... [--threads 1]
                                   [--runs 20] [--rounds 3] [--per-kernel 0.04]

Per round, each build runs `kiln bench MODEL --kernels` (its own process) on every model in turn;
a model's figure is the sum of its kernels' medians (the launch and harness overheads of
`kiln bench`'s whole-model time left out), and the table shows, per build and model, the minimum
and the median over the rounds. For single-kernel models (a one-node Conv) this is the kernel's
time; builds alternate so that a noisy stretch of the machine hits them alike, in reverse order
every other round (the second of two back-to-back processes ran systematically faster or slower
for minutes at a time on these VMs).

With two builds it also prints, per model, the median over the rounds of the per-round ratio
B / A of the kernel sums: a stretch of the machine at half speed moves both sides of one round,
where medians of each side taken apart can land in different stretches. With --per-kernel T, the
same median ratio per kernel (kernels of the same name in both builds: their partitions must
agree) wherever it is more than T away from 1, with the sorted per-round ratios to show the spread.
"""
import argparse
import os
import statistics

import kiln_out


def kernel_times(kiln, model, threads, runs):
    """{"number name": median ms} from one `kiln bench MODEL --kernels` process."""
    return {f"{i} {name}": ms for i, name, ms in kiln_out.kernel_times(kiln, model, threads, runs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-kernel", type=float, default=None, metavar="T",
                    help="with two builds: per-kernel median ratios more than T away from 1")
    a = ap.parse_args()
    runs = {}  # (build's position, model) -> [per-round {kernel: ms}]
    for r in range(a.rounds):
        order = list(enumerate(a.builds))
        for bi, b in order if r % 2 == 0 else reversed(order):
            for m in a.models:
                runs.setdefault((bi, m), []).append(kernel_times(b, m, a.threads, a.runs))
    sums = {key: [sum(t.values()) for t in v] for key, v in runs.items()}
    names = [os.path.splitext(os.path.basename(m))[0] for m in a.models]
    print("| build | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for bi, b in enumerate(a.builds):
        cells = [f"{min(sums[(bi, m)]):.3f} / {statistics.median(sums[(bi, m)]):.3f}" for m in a.models]
        print(f"| {b} | " + " | ".join(cells) + " |")
    print(f"\nkernel ms (sum of kernel medians), min / median over {a.rounds} rounds, {a.threads} thread(s)")
    if len(a.builds) != 2:
        return
    ba, bb = 0, 1
    print(f"\nB / A = {a.builds[1]} / {a.builds[0]}, median of the per-round ratios (the sorted ratios after it)")
    for m, name in zip(a.models, names):
        ratios = sorted(y / x for x, y in zip(sums[(ba, m)], sums[(bb, m)]) if x > 0)
        print(f"{name}: kernels summed {statistics.median(ratios):.3f}  [" + " ".join(f"{x:.2f}" for x in ratios) + "]")
        if a.per_kernel is None:
            continue
        for k in runs[(ba, m)][0]:
            ratios = sorted(tb[k] / ta[k] for ta, tb in zip(runs[(ba, m)], runs[(bb, m)]) if k in tb and ta.get(k, 0) > 0)
            if ratios and abs(statistics.median(ratios) - 1) > a.per_kernel:
                print(f"  {k}: {statistics.median(ratios):.3f}  [" + " ".join(f"{x:.2f}" for x in ratios) + "]")


if __name__ == "__main__":
    main()
