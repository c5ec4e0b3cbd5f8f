#!/usr/bin/python3
"""Bad input through the `kiln` command line: each case must exit nonzero with exactly one line on
stderr naming the problem, and must leave no output file behind.

Usage: test_cli_errors.py KILN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = sys.argv[1]
failures = []


def relu_model(path, dims=("2", "3"), op="Relu", initializers=(), extra_inputs=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [int(d) if d.isdigit() else d for d in dims])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x", *extra_inputs], ["y"], name="the_node")
    g = helper.make_graph([node], "g", [x], [y], initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, path)


def expect_error(name, args, pieces, outdir=None):
    r = subprocess.run([KILN, *args], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    problems = []
    if r.returncode == 0:
        problems.append("exit status 0")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines: {r.stderr!r}")
    for p in pieces:
        if p not in r.stderr:
            problems.append(f"'{p}' missing from: {r.stderr.strip()}")
    if outdir and os.path.isdir(outdir) and os.listdir(outdir):
        problems.append(f"files left in output dir: {os.listdir(outdir)}")
    status = "ok" if not problems else "FAIL"
    print(f"{status:4} {name}: {r.stderr.strip()}")
    if problems:
        failures.append((name, problems))


with tempfile.TemporaryDirectory() as d:
    good = os.path.join(d, "good.onnx")
    relu_model(good)
    x = os.path.join(d, "x.npy")
    np.save(x, np.ones((2, 3), np.float32))
    out = os.path.join(d, "out")

    trunc = os.path.join(d, "trunc.onnx")
    data = open(good, "rb").read()
    open(trunc, "wb").write(data[: len(data) // 2])
    expect_error("truncated model", ["run", trunc, "--input", f"x={x}", "--output-dir", out],
                 ["trunc.onnx", "not a valid ONNX model"], out)

    unsup = os.path.join(d, "unsup.onnx")
    relu_model(unsup, op="NonZero")
    expect_error("unsupported op", ["run", unsup, "--input", f"x={x}", "--output-dir", out],
                 ["unsup.onnx", "node 'the_node'", "NonZero", "opset 13", "unsupported op"], out)

    sym = os.path.join(d, "sym.onnx")
    relu_model(sym, dims=("batch", "3"))
    expect_error("symbolic dim", ["run", sym, "--input", f"x={x}", "--output-dir", out],
                 ["input 'x'", "symbolic dimension 'batch'", "--input-shape"], out)
    r = subprocess.run([KILN, "run", sym, "--input", f"x={x}", "--input-shape", "x=2x3", "--output-dir", out],
                       capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(os.path.join(out, "y.npy")):
        failures.append(("symbolic dim fixed by --input-shape", [r.stderr]))
    else:
        print("ok   symbolic dim fixed by --input-shape")
        os.remove(os.path.join(out, "y.npy"))

    ext = os.path.join(d, "ext.onnx")
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    entry = w.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    relu_model(ext, op="Add", initializers=[w], extra_inputs=["w"])
    expect_error("external data outside the folder", ["run", ext, "--input", f"x={x}", "--output-dir", out],
                 ["ext.onnx", "initializer 'w'", "escapes the model's folder"], out)

    bad = os.path.join(d, "bad.npy")
    np.save(bad, np.ones((3, 2), np.float32))
    expect_error("wrong input shape", ["run", good, "--input", f"x={bad}", "--output-dir", out],
                 ["input 'x' expects f32[2,3], got f32[3,2]"], out)

    expect_error("missing input", ["run", good, "--output-dir", out], ["missing input 'x'"], out)
    expect_error("unknown option", ["run", good, "--frobnicate"], ["unknown option --frobnicate"])
    expect_error("no such file", ["info", os.path.join(d, "nope.onnx")], ["nope.onnx", "no such model file"])

if failures:
    for name, problems in failures:
        print(f"FAILED {name}: {'; '.join(problems)}")
    sys.exit(1)
print("all bad-input cases gave one clear line and a nonzero exit")
