#!/usr/bin/env python3
"""GFLOP/s of single contractions in kiln and ONNX Runtime: GEMMs, ResNet-50's convolutions and
MobileNetV2's depthwise and pointwise convolutions with their activations (--set mobile).

Usage: python3 bench/kernel_sweep.py KILN [--threads 1,2] [--runs 20] [--rounds 3] [--set gemm,conv,mobile]
                                          [--only NAME] [--strict-fp]

Each case is a one-node ONNX model (MatMul of an input [M, K] by a constant [K, N]; Conv of an
input by constant weights, with the bias) written to a temporary folder. kiln runs it through
`kiln bench --json` (its own process); ONNX Runtime (default session options, its shipped thread
spinning) runs it in this process. The two alternate in blocks of --runs runs, --rounds times, so
neither side's threads share the cores with the other's; the figure is the median of the blocks'
medians. Percent of peak is against `kiln probe`'s FMA peak for the thread count.

Needs the python that has onnx, numpy and onnxruntime (the default python3 after scripts/setup.sh).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GEMMS = [  # (M, N, K)
    (64, 64, 64), (128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
    (128, 768, 768), (128, 3072, 768), (128, 768, 3072), (64, 3072, 1024), (1024, 3072, 256),
    (3072, 1024, 512),
    (49, 768, 3072), (49, 3072, 768), (196, 384, 1536),  # ConvNeXt-tiny's MLPs at its last stages
]

# ResNet-50's distinct convolutions at batch 1: (C_in, H, W, C_out, kernel, stride, pad).
RESNET50_CONVS = [
    (3, 224, 224, 64, 7, 2, 3),
    (64, 56, 56, 64, 1, 1, 0), (64, 56, 56, 64, 3, 1, 1), (64, 56, 56, 256, 1, 1, 0), (256, 56, 56, 64, 1, 1, 0),
    (256, 56, 56, 128, 1, 1, 0), (128, 56, 56, 128, 3, 2, 1), (128, 28, 28, 512, 1, 1, 0),
    (256, 56, 56, 512, 1, 2, 0), (512, 28, 28, 128, 1, 1, 0), (128, 28, 28, 128, 3, 1, 1),
    (512, 28, 28, 256, 1, 1, 0), (256, 28, 28, 256, 3, 2, 1), (256, 14, 14, 1024, 1, 1, 0),
    (512, 28, 28, 1024, 1, 2, 0), (1024, 14, 14, 256, 1, 1, 0), (256, 14, 14, 256, 3, 1, 1),
    (1024, 14, 14, 512, 1, 1, 0), (512, 14, 14, 512, 3, 2, 1), (512, 7, 7, 2048, 1, 1, 0),
    (1024, 14, 14, 2048, 1, 2, 0), (2048, 7, 7, 512, 1, 1, 0), (512, 7, 7, 512, 3, 1, 1),
]


def gemm_model(m, n, k, path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"])], "gemm",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return 2.0 * m * n * k


# MobileNetV2's distinct depthwise (group = C) and pointwise convs at batch 1, each followed by its
# activation (Clip to [0, 6], as torchvision exports ReLU6; "" for the linear projections):
# (C_in, H, W, C_out, kernel, stride, pad, group, activation).
MOBILE_CONVS = [
    (32, 112, 112, 32, 3, 1, 1, 32, "clip"), (96, 112, 112, 96, 3, 2, 1, 96, "clip"),
    (144, 56, 56, 144, 3, 1, 1, 144, "clip"), (144, 56, 56, 144, 3, 2, 1, 144, "clip"),
    (192, 28, 28, 192, 3, 1, 1, 192, "clip"), (384, 14, 14, 384, 3, 1, 1, 384, "clip"),
    (576, 14, 14, 576, 3, 2, 1, 576, "clip"), (960, 7, 7, 960, 3, 1, 1, 960, "clip"),
    (672, 14, 14, 672, 5, 1, 2, 672, "clip"), (768, 7, 7, 768, 7, 1, 3, 768, ""),
    (16, 112, 112, 96, 1, 1, 0, 1, "clip"), (96, 56, 56, 24, 1, 1, 0, 1, ""),
    (24, 56, 56, 144, 1, 1, 0, 1, "clip"), (32, 28, 28, 192, 1, 1, 0, 1, "clip"),
    (64, 14, 14, 384, 1, 1, 0, 1, "clip"), (320, 7, 7, 1280, 1, 1, 0, 1, "clip"),
    (3, 224, 224, 32, 3, 2, 1, 1, "clip"),
]


def conv_model(c, h, w_, co, ks, s, p, path, group=1, act=""):
    rng = np.random.default_rng(0)
    cg = c // group
    wt = numpy_helper.from_array((rng.standard_normal((co, cg, ks, ks)) / np.sqrt(cg * ks * ks)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(co, dtype=np.float32), "B")
    ho, wo = (h + 2 * p - ks) // s + 1, (w_ + 2 * p - ks) // s + 1
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C" if act else "Y"], kernel_shape=[ks, ks], strides=[s, s],
                              pads=[p] * 4, group=group)]
    inits = [wt, b]
    if act == "clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", ["C", "lo", "hi"], ["Y"]))
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, h, w_])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, co, ho, wo])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return 2.0 * co * ho * wo * cg * ks * ks


def kiln_block(kiln, model, threads, runs, extra):
    r = subprocess.run([kiln, "bench", model, "--json", "--threads", str(threads), "--runs", str(runs),
                        "--warmup", "3"] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kiln bench {model} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["median_ms"]


def ort_session(model, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])


def ort_block(sess, feed, runs):
    for _ in range(3):
        sess.run(None, feed)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feed)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def peak_gflops(kiln, threads):
    # `kiln probe` prints "peak fp32 GFLOP/s  <1 thread>  <2 threads>".
    out = subprocess.run([kiln, "probe"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("peak fp32 GFLOP/s"):
            vals = [float(x) for x in line.split()[3:]]
            return vals[min(threads, len(vals)) - 1]
    return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--set", default="gemm,conv")
    ap.add_argument("--only", default="", help="run only cases whose name contains this")
    ap.add_argument("--strict-fp", action="store_true", help="pass --strict-fp to kiln")
    a = ap.parse_args()
    extra = (["--strict-fp"] if a.strict_fp else []) + os.environ.get("KILN_SWEEP_FLAGS", "").split()
    tmp = tempfile.mkdtemp(prefix="kiln_sweep_")
    cases = []
    if "gemm" in a.set:
        for m, n, k in GEMMS:
            name = f"gemm {m}x{n}x{k}"
            path = os.path.join(tmp, f"gemm_{m}_{n}_{k}.onnx")
            cases.append((name, path, gemm_model(m, n, k, path), {"X": np.ones((m, k), np.float32)}))
    if "conv" in a.set:
        for c, h, w, co, ks, s, p in RESNET50_CONVS:
            name = f"conv {c}x{h}x{w} -> {co} k{ks} s{s}"
            path = os.path.join(tmp, f"conv_{c}_{h}_{co}_{ks}_{s}.onnx")
            cases.append((name, path, conv_model(c, h, w, co, ks, s, p, path), {"X": np.ones((1, c, h, w), np.float32)}))
    if "mobile" in a.set:
        for c, h, w, co, ks, s, p, grp, act in MOBILE_CONVS:
            kind = "dw" if grp > 1 else "conv"
            name = f"{kind} {c}x{h}x{w} -> {co} k{ks} s{s}{' ' + act if act else ''}"
            path = os.path.join(tmp, f"{kind}_{c}_{h}_{co}_{ks}_{s}.onnx")
            cases.append((name, path, conv_model(c, h, w, co, ks, s, p, path, grp, act),
                          {"X": np.ones((1, c, h, w), np.float32)}))
    cases = [cs for cs in cases if a.only in cs[0]]
    print("| case | threads | GFLOP | kiln ms | kiln GFLOP/s | kiln % peak | ORT ms | ORT GFLOP/s | kiln / ORT |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = {}
    for t in [int(x) for x in a.threads.split(",")]:
        peak = peak_gflops(a.kiln, t)
        for name, path, flops, feed in cases:
            sess = ort_session(path, t)
            km, om = [], []
            for _ in range(a.rounds):
                km.append(kiln_block(a.kiln, path, t, a.runs, extra))
                om.append(ort_block(sess, feed, a.runs))
            k, o = statistics.median(km), statistics.median(om)
            kg, og = flops / k / 1e6, flops / o / 1e6
            totals.setdefault(t, []).append((flops, k, o))
            print(f"| {name} | {t} | {flops / 1e9:.3f} | {k:.3f} | {kg:.1f} | {100 * kg / peak:.0f} % | {o:.3f} | "
                  f"{og:.1f} | {k / o:.2f} |", flush=True)
    for t, rows in totals.items():
        gm = float(np.exp(np.mean([np.log(k / o) for _, k, o in rows])))
        print(f"\n{t} thread(s): geomean kiln / ORT = {gm:.2f} over {len(rows)} cases; peak {peak_gflops(a.kiln, t):.0f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
