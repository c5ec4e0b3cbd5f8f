#!/usr/bin/env python3
"""ONNX Runtime side of `kiln bench --compare`: a small server kiln drives over stdin/stdout so that
kiln's and ONNX Runtime's runs interleave in one process tree on the same inputs.

Usage: ort_runner.py MODEL.onnx THREADS NAME=FILE.npy...
Prints "ready <ort version>" once the session is built; then for every line "run" on stdin runs
one inference and prints its wall time in milliseconds; "quit" ends it. Any failure prints
"error <message>" and exits 1. Runs with the python that has onnxruntime (pip install onnxruntime).
"""
import sys
import time


def main():
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"error onnxruntime is not installed for {sys.executable}: {e}", flush=True)
        return 1
    model, threads = sys.argv[1], int(sys.argv[2])
    feeds = {}
    for spec in sys.argv[3:]:
        name, _, path = spec.partition("=")
        feeds[name] = np.load(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # ORT's worker threads spin after a run by default; interleaved with kiln they would steal the
    # cores kiln's next run needs, so spinning is off (kiln's OpenMP threads sleep too).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - reported to kiln as one line
        print("error " + str(e).replace("\n", " "), flush=True)
        return 1
    print(f"ready {ort.__version__}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        t0 = time.perf_counter()
        sess.run(None, feeds)
        print(f"{(time.perf_counter() - t0) * 1e3:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
