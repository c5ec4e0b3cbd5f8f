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
import re
import statistics
import subprocess
import sys


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return r.stdout


def kernel_nodes(kiln, model, extra):
    """{kernel name: [node names]} from `kiln explain`."""
    kernels, cur = {}, None
    for line in run([kiln, "explain", model] + extra).splitlines():
        m = re.match(r"kernel \d+: (\S+)", line)
        if m:
            cur = m.group(1)
            kernels[cur] = []
        elif cur and line.strip().startswith("nodes:"):
            kernels[cur] = [n.strip() for n in line.split(":", 1)[1].split(",")]
    return kernels


def kernel_times(kiln, model, threads, runs, extra):
    times = {}
    for line in run([kiln, "bench", model, "--kernels", "--threads", str(threads), "--runs", str(runs)] + extra).splitlines():
        p = line.split()
        if len(p) > 5 and p[0].isdigit() and p[3] in ("gen", "lib"):
            times[p[1]] = float(p[4])
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    fused, unfused = kernel_nodes(a.kiln, a.model, []), kernel_nodes(a.kiln, a.model, ["--no-fusion"])
    owner = {n: k for k, nodes in fused.items() for n in nodes}
    ft, ut = collections.defaultdict(list), collections.defaultdict(list)
    for r in range(a.rounds):
        sides = [(ft, []), (ut, ["--no-fusion"])]
        for times, extra in sides if r % 2 == 0 else reversed(sides):
            for k, v in kernel_times(a.kiln, a.model, a.threads, a.runs, extra).items():
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
