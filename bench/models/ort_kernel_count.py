#!/usr/bin/env python3
"""Count ONNX Runtime's kernels for a model under kiln's counting rule.

Usage: python3 bench/models/ort_kernel_count.py MODEL.onnx [MODEL.onnx ...] [--json] [--keep DIR]
                                              [--level all|extended|basic]

Run with a Python that has onnxruntime and onnx (the pyenv python3 on PATH, not Debian's
/usr/bin/python3). For each model this creates an InferenceSession on the CPU provider with
graph_optimization_level=ORT_ENABLE_ALL, intra_op_num_threads=2 and optimized_model_filepath set to
a temporary file, loads the optimized model ORT wrote there with onnx, and counts its nodes except
pure views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) and Constant — the rule in
docs/fusion.md ("Counting kernels"). Fused com.microsoft ops (FusedConv, FusedMatMul, Attention,
SkipLayerNormalization, BiasGelu, ...) count one kernel each; their domain is shown in the
histogram. Nodes inside subgraphs (If/Loop bodies) are not counted.

Prints, per model, "MODEL: N kernels (ORT VERSION)" and the op histogram of the counted nodes (and
of the excluded ones); --json prints one JSON object per model instead. --keep DIR keeps the
optimized models as DIR/NAME.ort_opt.onnx.

--level picks the optimization level (default all = ORT_ENABLE_ALL, kiln's rule). At "all" ORT's
CPU provider also applies the NCHWc layout transformer, whose com.microsoft.nchwc::ReorderInput /
ReorderOutput layout conversions count as kernels; whether and how it applies depends on the host's
vector ISA (ORT warns that the optimized model is hardware specific), so the "all" count can differ
between machines. "extended" = ORT_ENABLE_EXTENDED (all fusions, no NCHWc layout) is a
host-independent reference point.
"""

import argparse
import collections
import json
import os
import sys
import tempfile

import onnx
import onnxruntime as ort

NOT_KERNELS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Constant"}


def op_key(node):
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
}


def count(model_path, keep_dir=None, level="all"):
    with tempfile.TemporaryDirectory() as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        if keep_dir:
            os.makedirs(keep_dir, exist_ok=True)
            base = os.path.splitext(os.path.basename(model_path))[0]
            opt_path = os.path.join(keep_dir, f"{base}.ort_opt.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = LEVELS[level]
        so.intra_op_num_threads = 2
        so.optimized_model_filepath = opt_path
        # Large models: keep weights in an external file next to the optimized model.
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    os.path.basename(opt_path) + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                    "1024")
        ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        opt = onnx.load(opt_path, load_external_data=False)
    counted = collections.Counter()
    excluded = collections.Counter()
    for node in opt.graph.node:
        key = op_key(node)
        (excluded if node.op_type in NOT_KERNELS and node.domain in ("", "ai.onnx") else counted)[key] += 1
    return {
        "model": model_path,
        "ort_version": ort.__version__,
        "level": level,
        "kernels": sum(counted.values()),
        "ops": dict(sorted(counted.items())),
        "excluded": dict(sorted(excluded.items())),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--json", action="store_true", help="one JSON object per model")
    parser.add_argument("--keep", metavar="DIR", help="keep the optimized models in DIR")
    parser.add_argument("--level", choices=list(LEVELS), default="all",
                        help="graph optimization level (default: %(default)s, kiln's rule)")
    args = parser.parse_args()
    for path in args.models:
        r = count(path, args.keep, args.level)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            print(f"{path}: {r['kernels']} kernels (ORT {r['ort_version']}, level {r['level']})")
            print("  counted:  " + ", ".join(f"{k} {v}" for k, v in r["ops"].items()))
            print("  excluded: " + (", ".join(f"{k} {v}" for k, v in r["excluded"].items()) or "-"),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
