#!/usr/bin/env python3
"""Interleaved latency of kiln fused, kiln --no-fusion and ONNX Runtime on models, as a markdown table.

Usage: /usr/bin/python3 bench/compare_models.py KILN MODEL.onnx... [--threads 1,2] [--runs 20] [--warmup 3]

Each model and thread count is one `kiln bench MODEL --compare --json` run (the three systems
interleaved round by round on the same inputs; see docs/cli.md). Prints one row per (model,
threads): medians, kernel counts and the ratios fused/unfused and kiln/onnxruntime.
"""
import argparse
import json
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
    print("| model | threads | kiln fused ms | kiln --no-fusion ms | ONNX Runtime ms | kernels (fused / unfused) "
          "| fused / unfused | kiln / ORT |")
    print("|---|---|---|---|---|---|---|---|")
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
            o = j.get("onnxruntime", {}).get("median_ms")
            ort = f"{o:.3f}" if o else "n/a"
            ratio = f"{f / o:.2f}" if o else "n/a"
            print(f"| {name} | {t} | {f:.3f} | {u:.3f} | {ort} | {kf} / {ku} | {f / u:.2f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
