#!/usr/bin/env python3
"""Latency of kiln fused, kiln --no-fusion, ONNX Runtime and OpenVINO on models, as a markdown table.

Usage: /usr/bin/python3 bench/compare_models.py KILN MODEL.onnx... [--threads 1,2] [--runs 20] [--warmup 3]

Each model and thread count is one `kiln bench MODEL --compare --json` run (the systems in
alternating blocks of runs on the same inputs, each peer in its own process; see docs/cli.md).
Prints one row per (model, threads): medians, kernel counts and the ratios fused/unfused,
kiln/onnxruntime and kiln/openvino, then the geomeans of the ratios per thread count.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys


def kernel_count(kiln, model, no_fusion):
    args = [kiln, "explain", model] + (["--no-fusion"] if no_fusion else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^kernels: (\d+)", out, re.M)
    return int(m.group(1)) if m else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    print("| model | threads | kiln fused ms | kiln --no-fusion ms | ONNX Runtime ms | OpenVINO ms "
          "| kernels (fused / unfused) | fused / unfused | kiln / ORT | kiln / OpenVINO |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for model in a.models:
        name = os.path.splitext(os.path.basename(model))[0]
        kf, ku = kernel_count(a.kiln, model, False), kernel_count(a.kiln, model, True)
        for t in a.threads.split(","):
            r = subprocess.run([a.kiln, "bench", model, "--compare", "--json", "--threads", t, "--runs", str(a.runs),
                                "--warmup", str(a.warmup)], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"kiln bench {model} failed: {r.stderr.strip()}", file=sys.stderr)
                return 1
            j = json.loads(r.stdout)
            f, u = j["kiln"]["median_ms"], j["kiln_no_fusion"]["median_ms"]
            o = (j.get("onnxruntime") or {}).get("median_ms")
            v = (j.get("openvino") or {}).get("median_ms")
            r = ratios.setdefault(t, {"ort": [], "ov": []})
            if o:
                r["ort"].append(f / o)
            if v:
                r["ov"].append(f / v)
            cell = lambda x: f"{x:.3f}" if x else "n/a"  # noqa: E731
            rat = lambda x: f"{f / x:.2f}" if x else "n/a"  # noqa: E731
            print(f"| {name} | {t} | {f:.3f} | {u:.3f} | {cell(o)} | {cell(v)} | {kf} / {ku} | {f / u:.2f} | {rat(o)} "
                  f"| {rat(v)} |", flush=True)
    for t, r in ratios.items():
        gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")  # noqa: E731
        print(f"| **geomean** | {t} | | | | | | | **{gm(r['ort']):.2f}** | **{gm(r['ov']):.2f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
