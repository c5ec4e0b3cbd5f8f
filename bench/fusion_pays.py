#!/usr/bin/env python3
"""Does each fused kernel pay? Its time against the `--no-fusion` kernels of its nodes.

Usage: python3 bench/fusion_pays.py MODEL.onnx [--kiln build/kiln] [--threads 1] [--runs 10]
                                    [--rounds 5] [--top 25]

Runs `kiln bench MODEL --kernels` fused and with --no-fusion, alternating, ROUNDS times (each
its own process), and maps every unfused kernel to the fused kernel that holds its first node
(`kiln explain`'s node lists). Per fused kernel: its median time, the summed medians of its
unfused kernels, and the difference, the fused kernels that lose most first. A fused kernel
slower than its parts is a cost-model or code-generation question (issue 11: fusion should pay
on the mobile-class models). The unfused kernels see other neighbours (their inputs come from
memory, not from a fused producer), so a difference of a few percent is not a finding.
"""
import argparse
import collections
import statistics

import kiln_out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    fused, unfused = kiln_out.kernel_nodes(a.kiln, a.model), kiln_out.kernel_nodes(a.kiln, a.model, ["--no-fusion"])
    owner = {n: k for k, nodes in fused.items() for n in nodes}
    ft, ut = collections.defaultdict(list), collections.defaultdict(list)
    for r in range(a.rounds):
        sides = [(ft, []), (ut, ["--no-fusion"])]
        for times, extra in sides if r % 2 == 0 else reversed(sides):
            for _, k, v in kiln_out.kernel_times(a.kiln, a.model, a.threads, a.runs, extra):
                times[k].append(v)
    fmed = {k: statistics.median(v) for k, v in ft.items()}
    umed = {k: statistics.median(v) for k, v in ut.items()}
    parts, count = collections.defaultdict(float), collections.defaultdict(int)
    for k, nodes in unfused.items():
        f = owner.get(nodes[0]) if nodes else None
        parts[f] += umed.get(k, 0.0)
        count[f] += 1
    fs, us = sum(fmed.values()), sum(umed.values())
    print(f"{a.model}, {a.threads} thread(s), {a.rounds} rounds: fused kernels {fs:.3f} ms, unfused {us:.3f} ms, "
          f"fused / unfused {fs / us:.3f}")
    rows = sorted(((fmed.get(k, 0.0) - parts[k], k) for k in fused), reverse=True)
    print(f"{'fused kernel':45s} {'fused':>8s} {'parts':>8s} {'n':>3s} {'diff':>8s} {'ratio':>6s}")
    for d, k in rows[:a.top]:
        f, u = fmed.get(k, 0.0), parts[k]
        print(f"{k:45s} {f:8.3f} {u:8.3f} {count[k]:3d} {d:+8.3f} {f / u if u else 0:6.2f}")


if __name__ == "__main__":
    main()
