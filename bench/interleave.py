#!/usr/bin/env python3
"""kiln, kiln --no-fusion, ONNX Runtime and OpenVINO in one process, one inference each in turn,
1 thread: per-model latencies and per-round ratios.

Usage: python3 bench/interleave.py MODEL.onnx... [--iters 40] [--kiln build/python] [--no-peers]
                                   [--no-unfused]

Why: the machines these figures come from are shared VMs whose speed changes by 30-60 % for
seconds at a time (the same binary's ResNet-50 ran 60 ms and 109 ms in one hour). Blocks of runs,
even alternated (`kiln bench --compare`, bench/compare_models.py), land in different phases and
their ratios swing by as much as the differences they are meant to show. Here every system runs
one inference, then the next, round after round, so each round's systems see the same phase; the
figure to read is the median over rounds of the per-round ratio kiln / X. Minima and medians of
each system are printed too.

Only one thread: with more, the peers' worker threads (ONNX Runtime spins after each run as
shipped) would compete with kiln's in the next inference; use `kiln bench --compare` (each system
in its own process, alternating blocks) for thread counts above 1.

Before/after a change: run it with each build's package (--kiln OTHER_BUILD/python) and compare
the kiln / ONNX Runtime columns; ONNX Runtime is the yardstick that both runs share. (Two kiln
builds cannot share one process: nanobind registers their types once, so the second build's
objects would run the first build's code.)

Needs the python that has onnxruntime and openvino (the default python3 after scripts/setup.sh)
and a kiln build whose Python package matches it (build/python after `make build`).
"""
import argparse
import importlib
import os
import statistics
import sys
import time

import numpy as np


def load_kiln(pkg_dir):
    """Imports the kiln package found in pkg_dir."""
    if not os.path.isfile(os.path.join(pkg_dir, "kiln", "__init__.py")):
        sys.exit(f"{pkg_dir}: no kiln package here (expected {pkg_dir}/kiln/__init__.py; run `make build`)")
    sys.path.insert(0, pkg_dir)
    return importlib.import_module("kiln")


def model_input(path, shape):
    """The model's sample input next to it (MODEL.input.npy, as bench/models writes) or a
    deterministic random one."""
    npy = path[:-len(".onnx")] + ".input.npy" if path.endswith(".onnx") else ""
    if npy and os.path.exists(npy):
        return np.load(npy)
    return np.random.default_rng(0).random(shape, dtype=np.float32)


def systems(path, args, kiln):
    """name -> callable running one inference, in the order they take turns."""
    fs = {}
    main = kiln.compile(path, threads=1, progress=False)
    spec = main.inputs[0]
    if len(main.inputs) != 1:
        sys.exit(f"{path}: {len(main.inputs)} inputs; this harness feeds models of one input")
    x = model_input(path, list(spec.shape))
    fs["kiln"] = lambda: main(x)
    if not args.no_unfused:
        unfused = kiln.compile(path, threads=1, fusion=False, progress=False)
        fs["unfused"] = lambda: unfused(x)
    if not args.no_peers:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x}
        fs["onnxruntime"] = lambda: sess.run(None, feed)
        try:
            import openvino as ov
            cm = ov.Core().compile_model(path, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "1",
                                                       "INFERENCE_PRECISION_HINT": "f32"})
            req = cm.create_infer_request()
            fs["openvino"] = lambda: req.infer({0: x})
        except ImportError:
            pass
        except RuntimeError as e:  # OpenVINO refuses some exports (torchvision's swin_t)
            print(f"{os.path.basename(path)}: OpenVINO refuses the model: {str(e).splitlines()[0]}", file=sys.stderr)
    return fs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--iters", type=int, default=40, help="rounds (each system once per round)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build", "python"),
                    help="folder holding the kiln package (default: build/python)")
    ap.add_argument("--no-peers", action="store_true", help="leave ONNX Runtime and OpenVINO out")
    ap.add_argument("--no-unfused", action="store_true", help="leave kiln --no-fusion out")
    a = ap.parse_args()
    kiln = load_kiln(os.path.abspath(a.kiln))

    header = None
    logs = {}
    for path in a.models:
        fs = systems(path, a, kiln)
        for f in fs.values():
            for _ in range(a.warmup):
                f()
        t = {n: [] for n in fs}
        for _ in range(a.iters):
            for n, f in fs.items():
                s = time.perf_counter()
                f()
                t[n].append((time.perf_counter() - s) * 1e3)
        others = [n for n in fs if n != "kiln"]
        if header != list(fs):
            header = list(fs)
            print("| model | " + " | ".join(f"{n} min / median ms" for n in fs) + " | "
                  + " | ".join(f"kiln / {n}" for n in others) + " |")
            print("|---" * (1 + len(fs) + len(others)) + "|")
        ratios = {n: statistics.median(k / o for k, o in zip(t["kiln"], t[n])) for n in others}
        for n, r in ratios.items():
            logs.setdefault(n, []).append(r)
        print(f"| {os.path.splitext(os.path.basename(path))[0]} | "
              + " | ".join(f"{min(v):.3f} / {statistics.median(v):.3f}" for v in t.values()) + " | "
              + " | ".join(f"{r:.2f}" for r in ratios.values()) + " |", flush=True)
    if len(a.models) > 1:
        print("\ngeomean of the per-round median ratios: " + ", ".join(
            f"kiln / {n} {np.exp(np.mean(np.log(v))):.3f} over {len(v)}" for n, v in logs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
