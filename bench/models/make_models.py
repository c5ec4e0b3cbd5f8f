#!/usr/bin/python3
"""Export kiln's end-to-end test models to ONNX, with a fixed input and PyTorch's output for it.

Usage: /usr/bin/python3 bench/models/make_models.py [--out DIR] [--list] [NAME ...]

For each model NAME (all when none are given) this writes, into DIR (default bench/models/out):
  NAME.onnx         the model (opset 13, constant folding on, fixed batch-1 input shape)
  NAME.input.npy    the input, drawn from a fixed seed
  NAME.output.npy   PyTorch's output for that input
  NAME.json         {"input_name", "output_name", "input_shape", "output_shape", "ops": histogram, ...}
NAME.json is written last, so its presence means the other three files are complete.

Weights are random (no network access, so no pretrained weights) but deterministic: every model
re-seeds torch and numpy with its own fixed seed, so one model's files do not depend on which
other models were exported in the same run.
"""

import argparse
import collections
import json
import os
import sys
import time

import numpy as np
import onnx
import torch
import torch.nn as nn
import torchvision

OPSET = 13
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def calibrate_batchnorm(model, input_shape, passes=4, batch=8):
    """Give every BatchNorm running statistics measured on real activations.

    With freshly initialised BN (running mean 0, var 1) a randomly initialised deep CNN's
    activations grow or shrink layer by layer until the logits are ~1e15 or ~1e-15, and a
    relative-error comparison against them means nothing. momentum=None makes running_mean/var
    the cumulative average over all passes rather than an exponential average.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.randn(batch, *input_shape[1:]))
    model.eval()


class MlpLn(nn.Module):
    """Transformer-style feed-forward block: LayerNorm(x + W2 gelu(W1 x))."""

    def __init__(self, d=256, hidden=512):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.fc2(self.act(self.fc1(x))))


class Encoder(nn.Module):
    """Two BERT-base sized post-norm encoder layers.

    The layers are stacked by hand rather than with nn.TransformerEncoder so that no
    nested-tensor conversion logic is involved; each layer's own fast path is avoided by
    exporting with autograd enabled (see export_model).
    """

    def __init__(self, d_model=768, nhead=12, ff=3072, layers=2):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model=d_model, nhead=nhead, dim_feedforward=ff,
                                       activation="gelu", batch_first=True, dropout=0.1)
            for _ in range(layers)
        ])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class DemoCnn(nn.Module):
    """A tiny 10-class image classifier on 32x32 inputs, for `make demo`."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, classes)
        # With default init the logits differ by ~0.3 and the softmax is nearly uniform (~0.1
        # everywhere): a dull demo and a weak check. Wider weights give a clear top class.
        with torch.no_grad():
            self.classifier.weight.mul_(8.0)

    def forward(self, x):
        x = torch.flatten(self.features(x), 1)
        return torch.softmax(self.classifier(x), dim=-1)


# name -> (seed, constructor, input shape, description)
MODELS = {
    "demo": (100, DemoCnn, (1, 3, 32, 32), "tiny CNN: Conv-BN-ReLU-MaxPool-Conv-ReLU-GAP-Linear-Softmax"),
    "mlp_ln": (101, MlpLn, (1, 64, 256), "Linear(256,512)-GELU-Linear(512,256)-residual-LayerNorm"),
    "encoder": (102, Encoder, (1, 128, 768), "2 x TransformerEncoderLayer(768, 12 heads, ff 3072, gelu)"),
    "resnet18": (103, lambda: torchvision.models.resnet18(weights=None), (1, 3, 224, 224),
                 "torchvision resnet18, random init"),
    "mobilenet_v2": (104, lambda: torchvision.models.mobilenet_v2(weights=None), (1, 3, 224, 224),
                     "torchvision mobilenet_v2, random init"),
}


def op_histogram(model):
    counts = collections.Counter()
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        counts[key] += 1
    return dict(sorted(counts.items()))


def write_atomic(path, writer):
    """Write via a temporary name so a concurrent reader never sees a half-written file."""
    tmp = f"{path}.tmp{os.getpid()}"
    writer(tmp)
    os.replace(tmp, path)


def save_npy(path, array):
    def writer(tmp):
        with open(tmp, "wb") as f:
            np.save(f, array)
    write_atomic(path, writer)


def accept_export(name, tmp_onnx, onnx_path, x, expected, out_dir):
    """Check an exported model (written to tmp_onnx) and its PyTorch output; on success move it to
    onnx_path and save NAME.input.npy (x) and NAME.output.npy (expected). Returns (proto, op
    histogram, max |expected|). Raises RuntimeError, removing tmp_onnx, when the export has
    non-standard ops or more than one input or output, or the output is not finite or too tiny or
    huge for a relative-error check to mean anything (see calibrate_batchnorm)."""
    proto = onnx.load(tmp_onnx)
    onnx.checker.check_model(proto, full_check=True)
    ops = op_histogram(proto)
    foreign = [op for op in ops if "::" in op]
    if foreign:
        os.remove(tmp_onnx)
        raise RuntimeError(f"{name}: export produced non-standard ops {foreign}")
    if len(proto.graph.input) != 1 or len(proto.graph.output) != 1:
        os.remove(tmp_onnx)
        raise RuntimeError(f"{name}: expected one graph input and one output")
    os.replace(tmp_onnx, onnx_path)
    if not np.isfinite(expected).all():
        raise RuntimeError(f"{name}: PyTorch output is not finite")
    max_abs = float(np.abs(expected).max())
    if not 1e-2 <= max_abs <= 1e4:
        raise RuntimeError(f"{name}: PyTorch output magnitude {max_abs:g} is not sane")
    save_npy(os.path.join(out_dir, f"{name}.input.npy"), x)
    save_npy(os.path.join(out_dir, f"{name}.output.npy"), expected)
    return proto, ops, max_abs


def write_meta(out_dir, name, meta):
    """NAME.json, written last: its presence means the model's other files are complete."""
    def write_json(tmp):
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
    write_atomic(os.path.join(out_dir, f"{name}.json"), write_json)


# Models whose ops need a later opset than OPSET (GridSample: 16); at most 17, what kiln's ONNX
# library knows.
MODEL_OPSET = {}


def export_model(name, out_dir):
    seed, ctor, input_shape, description = MODELS[name]
    opset = MODEL_OPSET.get(name, OPSET)
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    np.random.seed(seed)

    model = ctor()
    calibrate_batchnorm(model, input_shape)
    model.eval()
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal(input_shape).astype(np.float32))

    # Deliberately NOT under torch.no_grad(): TransformerEncoderLayer takes its fused fast path
    # (exported as an opaque aten op) when autograd is off. With grad enabled and parameters
    # requiring grad it runs the plain op-by-op path, both for the reference output here and for
    # the trace inside torch.onnx.export.
    expected = model(x).detach().numpy()
    t_run = time.perf_counter()

    onnx_path = os.path.join(out_dir, f"{name}.onnx")
    tmp_onnx = f"{onnx_path}.tmp{os.getpid()}"
    torch.onnx.export(model, (x,), tmp_onnx, opset_version=opset, do_constant_folding=True,
                      input_names=["input"], output_names=["output"],
                      training=torch.onnx.TrainingMode.EVAL)
    t_export = time.perf_counter()

    proto, ops, max_abs = accept_export(name, tmp_onnx, onnx_path, x.numpy(), expected, out_dir)
    meta = {
        "name": name,
        "description": description,
        "opset": opset,
        "input_name": proto.graph.input[0].name,
        "output_name": proto.graph.output[0].name,
        "input_shape": list(input_shape),
        "output_shape": list(expected.shape),
        "output_max_abs": max_abs,
        "num_nodes": len(proto.graph.node),
        "num_initializers": len(proto.graph.initializer),
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "ops": ops,
    }
    write_meta(out_dir, name, meta)

    t_end = time.perf_counter()
    size_mb = os.path.getsize(onnx_path) / 1e6
    print(f"{name:13s} build+run {t_run - t0:6.2f}s  export {t_export - t_run:6.2f}s  "
          f"total {t_end - t0:6.2f}s  onnx {size_mb:7.2f} MB  nodes {len(proto.graph.node):4d}  "
          f"max|out| {max_abs:.4g}", flush=True)
    return meta


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"models to export (default: all of {', '.join(MODELS)})")
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--ops", action="store_true", help="print each model's op histogram")
    args = parser.parse_args()

    if args.list:
        for name, (_, _, shape, description) in MODELS.items():
            print(f"{name:13s} {'x'.join(map(str, shape)):12s} {description}")
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")

    os.makedirs(args.out, exist_ok=True)
    # Single-threaded CPU kernels make PyTorch's reference output bit-reproducible across
    # machines with different core counts; the models are small enough that it costs little.
    torch.set_num_threads(1)
    for name in args.names or list(MODELS):
        meta = export_model(name, args.out)
        if args.ops:
            print("  " + ", ".join(f"{op} {n}" for op, n in meta["ops"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
