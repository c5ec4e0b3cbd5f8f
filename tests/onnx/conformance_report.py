#!/usr/bin/python3
"""Classifies the ONNX backend tests into kiln's conformance scope and writes the report.

Usage: conformance_report.py KILN DATA_DIR OUT_MD OUT_EXPECTED

Runs `KILN test-onnx` over DATA_DIR/{node,pytorch-converted,pytorch-operator,simple}, reads each
test's model.onnx (with Debian's python3-onnx) to find its ops, and writes
  - OUT_MD: docs/conformance.md (counts, in-scope failures with reasons, out-of-scope tests);
  - OUT_EXPECTED: the sorted names of the tests that pass (the CI regression list).
A test is in scope when every op it uses (including in subgraphs) is in SCOPE, the op list of the
foundation issue and the ops added since (GridSample, 2026-12-06).
"""
import collections
import os
import subprocess
import sys

import onnx

SCOPE = set("""
Abs Neg Reciprocal Sqrt Exp Log Erf Tanh Sigmoid Relu LeakyRelu Elu Selu Celu HardSigmoid HardSwish
Softplus Softsign ThresholdedRelu Shrink Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Floor
Ceil Round Sign Not IsNaN IsInf Add Sub Mul Div Pow Mod Min Max Sum Mean PRelu Where Equal Less
LessOrEqual Greater GreaterOrEqual And Or Xor Clip MatMul Gemm Conv ConvTranspose BatchNormalization
InstanceNormalization LayerNormalization LRN MeanVarianceNormalization MaxPool AveragePool
GlobalAveragePool GlobalMaxPool ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
ReduceLogSum ReduceLogSumExp ReduceSumSquare ArgMax ArgMin Softmax LogSoftmax Hardmax Reshape Flatten
Squeeze Unsqueeze Transpose Concat Split Slice Gather GatherElements GatherND Expand Tile Pad Shape
Size ConstantOfShape Range Cast CastLike Identity Dropout Constant DepthToSpace SpaceToDepth Resize
Upsample CumSum TopK Trilu EyeLike OneHot ScatterElements ScatterND Einsum RNN GRU LSTM GridSample
""".split())
FOLDERS = ["node", "pytorch-converted", "pytorch-operator", "simple"]


def ops_of(graph):
    ops = set()
    for n in graph.node:
        ops.add(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}")
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops |= ops_of(a.g)
            for g in a.graphs:
                ops |= ops_of(g)
    return ops


def main():
    kiln, data, out_md, out_expected = sys.argv[1:5]
    dirs = [os.path.join(data, f) for f in FOLDERS]
    run = subprocess.run([kiln, "test-onnx", *dirs], capture_output=True, text=True)
    failures = {}
    for line in run.stdout.splitlines():
        if line.startswith("FAIL "):
            name, _, why = line[5:].partition(": ")
            failures[name] = why
    summary = run.stdout.strip().splitlines()[-1]

    in_scope, out_scope = [], []
    passed = []
    for folder in FOLDERS:
        for t in sorted(os.listdir(os.path.join(data, folder))):
            path = os.path.join(data, folder, t, "model.onnx")
            if not os.path.exists(path):
                continue
            name = f"{folder}/{t}"
            ops = ops_of(onnx.load(path, load_external_data=False).graph)
            outside = sorted(ops - SCOPE)
            ok = name not in failures
            if ok:
                passed.append(name)
            (out_scope if outside else in_scope).append((name, ok, outside))

    n_in = len(in_scope)
    n_in_pass = sum(ok for _, ok, _ in in_scope)
    with open(out_expected, "w") as f:
        f.write("# ONNX backend tests kiln passes; tests/onnx/run_conformance.sh fails on any regression.\n")
        f.write("# Regenerate with: make conformance-report\n")
        for p in passed:
            f.write(p + "\n")

    lines = []
    w = lines.append
    w("# ONNX conformance")
    w("")
    w("kiln's reference executor against the ONNX backend test data of Debian's `libonnx-testdata`")
    w("(ONNX 1.12: folders `node`, `pytorch-converted`, `pytorch-operator`, `simple`).")
    w("")
    w("Produced by `make conformance-report`, which runs")
    w("`build/kiln test-onnx /usr/share/libonnx-testdata/data/{node,pytorch-converted,pytorch-operator,simple}`")
    w("and classifies each test by the ops its model uses (`tests/onnx/conformance_report.py`).")
    w("CI (`make test`) re-runs all tests and fails when any test listed in")
    w("`tests/onnx/expected_pass.txt` stops passing.")
    w("")
    w("Tolerances: |got − want| ≤ atol + rtol·|want| with float32/float64 rtol 1e-3, atol 1e-7 (the ONNX")
    w("backend runner's defaults); float16/bfloat16 rtol 1e-2, atol 1e-3; integers and bool exact; NaN")
    w("matches NaN.")
    w("")
    w("## Summary")
    w("")
    w(f"- all tests: {summary}")
    w(f"- **in scope** (every op in the foundation issue's list, and GridSample): **{n_in_pass} of {n_in} pass "
      f"({100.0 * n_in_pass / max(n_in, 1):.1f} %)**")
    w(f"- out of scope: {len(out_scope)} tests ({sum(ok for _, ok, _ in out_scope)} of them pass anyway)")
    w("")
    w("## In-scope tests that fail")
    w("")
    fails = [(n, failures.get(n, "")) for n, ok, _ in in_scope if not ok]
    if not fails:
        w("None.")
    for n, why in fails:
        w(f"- `{n}`: {why.replace(data + '/', '')}")
    w("")
    w("## Out-of-scope tests (ops outside the list)")
    w("")
    by_ops = collections.defaultdict(list)
    for n, ok, outside in out_scope:
        by_ops[", ".join(outside)].append(n.split("/", 1)[1] + (" (passes)" if ok else ""))
    w("| unsupported ops | tests |")
    w("|---|---|")
    for ops, names in sorted(by_ops.items()):
        w(f"| {ops} | {', '.join(names)} |")
    w("")
    with open(out_md, "w") as f:
        f.write("\n".join(lines))
    print(f"in scope: {n_in_pass}/{n_in} pass; all: {summary}")


if __name__ == "__main__":
    main()
