#!/usr/bin/env python3
"""Where a model's time goes against ONNX Runtime (or OpenVINO), block by block.

Usage: python3 bench/ort_blocks.py MODEL.onnx [--kiln build/kiln] [--threads 1] [--rounds 4]
                                   [--ort-runs 30] [--runs 10] [--nodes] [--peer openvino]

Per round: ONNX Runtime runs the model with its profiler on (its own session, default options,
`--threads` intra-op threads, ORT-RUNS inferences; per-node medians of the kernel times), then
`kiln bench MODEL --kernels` (its own process, RUNS runs). Both sides' times are summed per block:
the part of a node's name that names the model's block (`layer2/layer2.1`, `features.4/features.4.0`,
`inception3a`, `trunk_output/block2/block2-1`, `stages.1/blocks.0`, `conv1`, `fc`, ...); a kiln
kernel counts for the block of its first node (`kiln explain`), and an ONNX Runtime node whose name
names no block (its layout reorders) for the block of the node before it. Printed per block: the
medians of both sides over the rounds, and the median of the per-round ratios kiln / ONNX Runtime.
With --nodes, each round's per-node / per-kernel lines are kept in the work folder printed last.

ONNX Runtime names a fused node after one of its ops (a Conv + Relu after the Relu), so a block's
first or last node can land in its neighbour: a block of a few small nodes reads noisily.
ONNX Runtime's profiler adds to its node times, so its sum is above its plain latency: read the
blocks against each other (which block loses more than the model does), and take whole-model
ratios from bench/interleave.py. Needs the python with onnxruntime (the default python3).

With --peer openvino the peer is OpenVINO (CPU, LATENCY hint, f32, INFERENCE_NUM_THREADS =
--threads) with its per-node counters on (PERF_COUNT; ORT-RUNS inferences, the first three left
out); its node names carry the model's (a Reorder before a conv names that conv), so blocks map
the same way.
"""
import argparse
import collections
import json
import os
import re
import statistics
import tempfile

import kiln_out

# Blocks by the exporters' node names: torchvision's CNNs (features.N, layerN/layerN.M, inception*,
# Inception-v3's Mixed_* and Conv2d_*,
# trunk_output/blockN/blockN-M), its ViT (encoder_layer_N), Hugging Face-style encoders and
# decoders (layer.N, h.N), and the front ends of audio models (convs.N).
BLOCK = re.compile(r"(layers\.\d+(?:/layers\.\d+\.\d+)?|features\.\d+(?:/features\.\d+\.\d+)?|layer\d/layer\d\.\d+|inception\w+|classifier"
                   r"|trunk_output/block\d/block\d-\d+|stem|blocks\.\d+|stages?\.\d+(?:/blocks?\.\d+)?"
                   r"|encoder_layer_\d+|layer\.\d+|h\.\d+|convs\.\d+|layer(?=/)"
                   r"|Mixed_\w+?(?=/)|Conv2d_\w+?(?=/)|conv\d\w*|maxpool\w*|fc)")


def block_of(name):
    m = BLOCK.search(name)
    return m.group(1) if m else None


def ort_nodes(model, threads, runs, work):
    """[(node name, median ms)] from one profiled ONNX Runtime session, in execution order."""
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(work, "ort")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in s.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = np.random.rand(*shape).astype(np.float32)
    for _ in range(runs):
        s.run(None, feeds)
    with open(s.end_profiling()) as fh:
        events = json.load(fh)
    times, order = collections.defaultdict(list), []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            if name not in times:
                order.append(name)
            times[name].append(e["dur"] / 1000.0)
    # The first inferences warm up: medians over the rest.
    return [(n, statistics.median(times[n][3:] or times[n])) for n in order]


def ov_nodes(model, threads, runs, work):
    """[(node name, median ms)] from OpenVINO's per-node counters (CPU, LATENCY hint, f32,
    PERF_COUNT on), in execution order; nodes that did not run (0 us) left out."""
    import numpy as np
    import openvino as ov
    cm = ov.Core().compile_model(model, "CPU", {"PERF_COUNT": "YES", "PERFORMANCE_HINT": "LATENCY",
                                                "INFERENCE_NUM_THREADS": str(threads), "INFERENCE_PRECISION_HINT": "f32"})
    req = cm.create_infer_request()
    feeds = {i: np.random.rand(*[d if d > 0 else 1 for d in p.get_partial_shape().get_min_shape()]).astype(np.float32)
             for i, p in enumerate(cm.inputs)}
    times, order = collections.defaultdict(list), {}  # (a dict keeps the order, found in O(1))
    for r in range(runs):
        req.infer(feeds)
        for info in req.get_profiling_info():
            order.setdefault(info.node_name, None)
            if r >= 3:  # the first inferences warm up
                times[info.node_name].append(info.real_time.total_seconds() * 1000.0)
    return [(n, statistics.median(times[n])) for n in order if times[n] and statistics.median(times[n]) > 0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ort-runs", type=int, default=30)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--nodes", action="store_true")
    ap.add_argument("--peer", choices=["onnxruntime", "openvino"], default="onnxruntime",
                    help="the runtime whose per-node profile kiln is set against")
    a = ap.parse_args()
    peer_nodes, peer = (ov_nodes, "OpenVINO") if a.peer == "openvino" else (ort_nodes, "ONNX Runtime")
    work = tempfile.mkdtemp(prefix="kiln-ort-blocks-")
    first_node = {k: nodes[0] for k, nodes in kiln_out.kernel_nodes(a.kiln, a.model).items() if nodes}
    kiln_rounds, ort_rounds, blocks = [], [], []
    for r in range(a.rounds):
        o = peer_nodes(a.model, a.threads, a.ort_runs, work)
        k = [(n, t) for _, n, t in kiln_out.kernel_times(a.kiln, a.model, a.threads, a.runs)]
        if a.nodes:
            with open(os.path.join(work, f"round{r}.txt"), "w") as fh:
                fh.writelines(f"{a.peer} {n} {t:.4f}\n" for n, t in o)
                fh.writelines(f"kiln {n} {t:.4f}\n" for n, t in k)
        ob, kb, last = collections.defaultdict(float), collections.defaultdict(float), "other"
        for n, t in o:
            last = block_of(n) or last
            ob[last] += t
        for n, t in k:
            kb[block_of(first_node.get(n, "")) or "other"] += t
        for b in list(kb) + list(ob):
            if b not in blocks:
                blocks.append(b)
        kiln_rounds.append(kb)
        ort_rounds.append(ob)
    ks = [sum(x.values()) for x in kiln_rounds]
    os_ = [sum(x.values()) for x in ort_rounds]
    print(f"{a.model}, {a.threads} thread(s), {a.rounds} rounds: kiln {statistics.median(ks):.3f} ms, "
          f"{peer} (profiled) {statistics.median(os_):.3f} ms, per-round ratio "
          f"{statistics.median(k / o for k, o in zip(ks, os_)):.3f}")
    short = "OV" if a.peer == "openvino" else "ORT"
    print(f"{'block':40s} {'kiln':>8s} {short:>8s} {'kiln/' + short:>9s}")
    for b in blocks:
        k = statistics.median(x[b] for x in kiln_rounds)
        o = statistics.median(x[b] for x in ort_rounds)
        ratios = [x[b] / y[b] for x, y in zip(kiln_rounds, ort_rounds) if y[b] > 0]
        print(f"{b:40s} {k:8.3f} {o:8.3f} {statistics.median(ratios) if ratios else float('nan'):9.2f}")
    if a.nodes:
        print(f"per-round node and kernel times: {work}")


if __name__ == "__main__":
    main()
