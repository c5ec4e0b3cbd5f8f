#!/usr/bin/python3
"""Tests of the fuzzing tools themselves, so a fuzzer that stopped seeing failures fails:
the comparison (tolerance, NaN, infinities, exact integers, shapes), the exit classification, a
planted kiln-vs-reference disagreement caught end to end, the known-failure and manifest
readers, and the generator's self-test (validity, shapes, determinism) on a few seeds.

    test_fuzz_tools.py KILN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fuzz_check  # noqa: E402
import gen_graph  # noqa: E402
import run_fuzz  # noqa: E402

KILN = os.path.abspath(sys.argv[1])
failures = []


def expect(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + detail if detail and not cond else ''}")
    if not cond:
        failures.append(name)


def cmp(got, ref, rtol=1e-4):
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "g.npy"), np.asarray(got))
        np.save(os.path.join(d, "r.npy"), np.asarray(ref))
        return fuzz_check.compare(os.path.join(d, "g.npy"), os.path.join(d, "r.npy"), rtol, fuzz_check.ATOL)


ref = np.array([1.0, -2.0, 4.0], np.float32)
expect("equal floats agree", cmp(ref, ref) is None)
expect("within 1e-4 of max|ref| agrees", cmp(ref + np.float32(3e-4), ref) is None)
expect("beyond 1e-4 of max|ref| differs", cmp(ref + np.float32(5e-4), ref) is not None)
expect("NaN against a number differs", cmp(np.array([np.nan, -2, 4], np.float32), ref) is not None)
expect("NaN against NaN agrees", cmp(np.array([np.nan], np.float32), np.array([np.nan], np.float32)) is None)
expect("inf against a large number differs", cmp(np.array([np.inf], np.float32), np.array([3e38], np.float32)) is not None)
expect("ints compare exactly", cmp(np.array([1, 2], np.int64), np.array([1, 3], np.int64)) is not None)
expect("bools compare exactly", cmp(np.array([True]), np.array([False])) is not None)

# TopK indices at a near tie: values 1 ulp apart sorted the other way are the same answer; an
# index that points elsewhere (or at a value beyond the tolerance) is not.
_rv = np.array([[1.2055743, 1.2055742, 0.5], [3.0, 2.0, 1.0]], np.float32)
_ri = np.array([[6, 4, 9], [0, 1, 2]], np.int64)
_ties = fuzz_check.tie_mask(np.array([[4, 6, 9], [0, 1, 2]], np.int64), _ri, _rv, -1, 1e-4, fuzz_check.ATOL)
expect("TopK near-tie swap explained", _ties.tolist() == [[True, True, False], [False, False, False]], str(_ties))
_ties = fuzz_check.tie_mask(np.array([[6, 4, 9], [1, 0, 2]], np.int64), _ri, _rv, -1, 1e-4, fuzz_check.ATOL)
expect("TopK swap of distinct values not explained", not _ties.any(), str(_ties))
_ties = fuzz_check.tie_mask(np.array([[6, 4, 7], [0, 1, 2]], np.int64), _ri, _rv, -1, 1e-4, fuzz_check.ATOL)
expect("TopK index outside the row's picks not explained", not _ties.any(), str(_ties))
with tempfile.TemporaryDirectory() as _d:
    np.save(os.path.join(_d, "g.npy"), np.array([4, 6, 9], np.int64))
    np.save(os.path.join(_d, "r.npy"), np.array([6, 4, 9], np.int64))
    _g, _r = os.path.join(_d, "g.npy"), os.path.join(_d, "r.npy")
    expect("ints: allowed elements pass", fuzz_check.compare(_g, _r, 1e-4, 0, np.array([np.inf, np.inf, 0])) is None)
    expect("ints: others still compare exactly", fuzz_check.compare(_g, _r, 1e-4, 0, np.array([np.inf, 0, 0])) is not None)
expect("shape differs", cmp(ref.reshape(1, 3), ref) is not None)
expect("dtype differs", cmp(ref.astype(np.float64), ref) is not None)

expect("signal is a crash", fuzz_check.classify_exit("fused", -11, "", []).cls == "crash")
expect("exit 70 is an internal error",
       fuzz_check.classify_exit("fused", 70, "kiln: internal error at x.cc:1: 'a' overlap\n", []).cls == "internal-error")
expect("a C compiler failure is a compile error",
       fuzz_check.classify_exit("fused", 1, "kiln: error: m.onnx: C compiler failed (exit 1) on k.c\n", []).cls
       == "compile-error")
expect("exit 1 is a user error", fuzz_check.classify_exit("fused", 1, "kiln: error: bad\n", []).cls == "user-error")
expect("views are not library kernels", fuzz_check.library_kernels(
    "kiln profile: view_3   view  0.001 ms\nkiln profile: fused_resize_1  lib  0.1 ms\n"
    "kiln profile: fused_concat_2  in-place  0.0 ms\nkiln profile: fused_relu_0  gen  0.1 ms\n") == ["fused_resize_1"])
expect("signatures blank names and numbers",
       fuzz_check.signature("memory plan: 'a_1' and 'b_22' overlap at 12") == "memory plan: '' and '' overlap at N")

# End to end: kiln wrapped so that its fused run's outputs come out shifted by 1 must be reported
# as a mismatch of the fused path and nothing else.
WRAP = """#!/usr/bin/python3
import os, subprocess, sys
import numpy as np
r = subprocess.run([%r] + sys.argv[1:])
if r.returncode == 0 and "--reference" not in sys.argv and "--no-fusion" not in sys.argv:
    d = sys.argv[sys.argv.index("--output-dir") + 1]
    for f in os.listdir(d):
        np.save(os.path.join(d, f), np.load(os.path.join(d, f)) + 1)
sys.exit(r.returncode)
"""
with tempfile.TemporaryDirectory() as d:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "x.npy"), np.random.RandomState(0).standard_normal((3, 5)).astype(np.float32))
    got, _ = fuzz_check.check_case(KILN, d, None, os.path.join(d, "jit"))
    expect("a correct Relu passes every path", got == [], repr(got))
    wrapped = os.path.join(d, "wrapped_kiln")
    with open(wrapped, "w") as f:
        f.write(WRAP % KILN)
    os.chmod(wrapped, 0o755)
    got, _ = fuzz_check.check_case(wrapped, d, None, os.path.join(d, "jit"))
    expect("a wrong fused result is a mismatch of the fused path only",
           [(f.cls, f.path) for f in got] == [("mismatch", "fused")], repr(got))
    # Sums that cancel to rounding noise (rows of +-1000s summing to ~0): kiln's lane order and the
    # reference's running sum disagree far beyond 1e-4 of the tiny result, and the perturbed
    # reference moves as much: a note, not a failure.
    xs = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    ys = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    g = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "g", [xs], [ys], [axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))
    v = np.random.RandomState(1).standard_normal((4, 256)) * 1000
    v[:, -1] = -v[:, :-1].sum(axis=1)
    np.save(os.path.join(d, "x.npy"), v.astype(np.float32))
    notes = []
    got, _ = fuzz_check.check_case(KILN, d, None, os.path.join(d, "jit"), notes=notes)
    expect("a cancelling sum is ill-conditioned, not a failure", got == [] and len(notes) >= 1, repr(got) + repr(notes))
    # The same bound does not excuse a wrong result on a well-conditioned graph.
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(d, "model.onnx"))
    np.save(os.path.join(d, "x.npy"), np.random.RandomState(0).standard_normal((3, 5)).astype(np.float32))
    notes = []
    got, _ = fuzz_check.check_case(wrapped, d, None, os.path.join(d, "jit"), notes=notes)
    expect("a wrong result on a well-conditioned graph stays a mismatch",
           [(f.cls, f.path) for f in got] == [("mismatch", "fused")] and notes == [], repr(got) + repr(notes))
    # A model kiln rejects is a user error on every path.
    bad = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                            opset_imports=[helper.make_opsetid("", 17)])
    bad.graph.node[0].op_type = "NoSuchOp"
    onnx.save(bad, os.path.join(d, "model.onnx"))
    got, _ = fuzz_check.check_case(KILN, d, None, os.path.join(d, "jit"))
    expect("an unknown op is a user error on all three paths",
           sorted(f.path for f in got if f.cls == "user-error") == ["fused", "no-fusion", "reference"], repr(got))

with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "known.txt")
    with open(p, "w") as f:
        f.write("# comment\n7 mismatch[fused] C1\n7 library-kernel[fused] C6\n9 crash[reference]\n")
    k = run_fuzz.read_known(p)
    expect("known failures read", k == {7: {"mismatch[fused]": "C1", "library-kernel[fused]": "C6"},
                                        9: {"crash[reference]": "?"}}, repr(k))
    with open(p, "w") as f:
        f.write("# comment\nname_a  mismatch[fused]  what it found  # note\n")
    expect("manifest read", run_fuzz.read_manifest(p) == [("name_a", "mismatch[fused]", "what it found")])

r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "gen_graph.py"), "--self-test", "60"],
                   capture_output=True, text=True)
expect("generator self-test (60 seeds valid, shapes as inferred, deterministic)", r.returncode == 0,
       r.stdout[-500:] + r.stderr[-500:])
a, _, _ = gen_graph.generate(12345)
b, _, _ = gen_graph.generate(12345)
c, _, _ = gen_graph.generate(12346)
expect("same seed, same bytes; another seed, another graph",
       a.SerializeToString() == b.SerializeToString() and a.SerializeToString() != c.SerializeToString())

# A family drawn only when asked (run_fuzz.py --weight): weighted, it shows up in valid graphs;
# at its default weight 0, at the end of the list, the seeds' graphs are the unweighted ones.
import gen_ops  # noqa: E402


def drawn_weighted(family, shows_up, seeds=20):
    """Of `seeds` graphs generated with `family` weighted heavily, how many `shows_up` (a predicate
    on the op types); each graph must still be valid."""
    gen_ops.FAMILY_WEIGHTS[family] = 1000.0
    n = 0
    for seed in range(seeds):
        m, _, builder = gen_graph.generate(seed)
        gen_graph.check_shapes(m, builder)
        n += bool(shows_up([node.op_type for node in m.graph.node]))
    gen_ops.FAMILY_WEIGHTS.clear()
    return n


se = drawn_weighted("fam_squeeze_excitation",
                    lambda ops: "GlobalAveragePool" in ops and "Mul" in ops and ops.count("Conv") >= 2)
expect("a weighted family is drawn (squeeze-excitation blocks in most of 20 seeds)", se >= 10, f"{se} of 20")
qkv = drawn_weighted("fam_fused_qkv_attention", lambda ops: ops.count("Slice") >= 3 and ops.count("MatMul") >= 3)
expect("fused-QKV attention is drawn when weighted (in most of 20 seeds)", qkv >= 6, f"{qkv} of 20")
c3d = drawn_weighted("fam_conv3d", lambda ops: "Conv" in ops)
expect("3-D convs are drawn when weighted (in most of 20 seeds)", c3d >= 6, f"{c3d} of 20")
gs = drawn_weighted("fam_grid_sample", lambda ops: "GridSample" in ops)
expect("GridSample is drawn when weighted (in most of 20 seeds)", gs >= 6, f"{gs} of 20")
a2, _, _ = gen_graph.generate(12345)
expect("weights cleared: the same graph as before", a2.SerializeToString() == a.SerializeToString())

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
