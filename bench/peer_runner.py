#!/usr/bin/env python3
"""The peer runtimes of `kiln bench --compare`: ONNX Runtime or OpenVINO in a process of its own,
driven over stdin/stdout so that kiln and the peers run the same model on the same inputs, in
alternating blocks of runs.

Usage: peer_runner.py ENGINE MODEL.onnx THREADS NAME=FILE.npy...     (ENGINE: onnxruntime | openvino)
Prints "ready <engine version>" once the session is built; then for every line "block N" runs N
inferences and prints their wall times in milliseconds on one line; "quit" ends it. Any failure
prints "error <message>" and exits 1; an engine that is not installed prints "missing <message>".

Each engine runs as shipped, with only the thread count set: ONNX Runtime with its default session
options (ORT_ENABLE_ALL, intra-op threads spinning), OpenVINO's CPU plugin with the LATENCY hint and
f32 inference precision. Spinning threads are why kiln runs the peers in blocks, each in its own
process, with a pause after every block: a peer's spinning workers then never compete with kiln's
for the cores (one process per peer, interleaved run by run, slowed ONNX Runtime's ResNet-18 1.7x).
Runs with the python that has the engines (pip install onnxruntime openvino).
"""
import sys
import time


def onnxruntime_session(model, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return (lambda feeds: sess.run(None, feeds)), ort.__version__


def openvino_session(model, threads):
    import openvino as ov
    core = ov.Core()
    cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(model, "CPU", cfg)
    req = compiled.create_infer_request()
    return (lambda feeds: req.infer(feeds)), ov.__version__.split("-")[0]


def main():
    engine, model, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        import numpy as np
        make = {"onnxruntime": onnxruntime_session, "openvino": openvino_session}[engine]
    except KeyError:
        print(f"error unknown engine {engine}", flush=True)
        return 1
    except ImportError as e:
        print(f"missing numpy for {sys.executable}: {e}", flush=True)
        return 1
    feeds = {}
    for spec in sys.argv[4:]:
        name, _, path = spec.partition("=")
        feeds[name] = np.load(path)
    try:
        run, version = make(model, threads)
    except ImportError as e:
        print(f"missing {engine} is not installed for {sys.executable}: {e}", flush=True)
        return 1
    except Exception as e:  # noqa: BLE001 - reported to kiln as one line
        print("error " + str(e).replace("\n", " "), flush=True)
        return 1
    print(f"ready {version}", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        n = int(cmd[1]) if cmd[0] == "block" and len(cmd) > 1 else 1
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            run(feeds)
            times.append((time.perf_counter() - t0) * 1e3)
        print(" ".join(f"{t:.6f}" for t in times), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
