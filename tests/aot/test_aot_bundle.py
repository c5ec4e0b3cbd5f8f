#!/usr/bin/python3
"""`kiln compile`: ahead-of-time bundles that build with make and run without kiln.

Usage: test_aot_bundle.py KILN MODEL_DIR

For demo and mobilenet_v2 (every kernel generated today): compiles the bundle, copies it to another
temporary directory, builds it with make, runs kiln_model_run on the model's input .npy and compares
with the PyTorch output (relative 1e-4 of the max magnitude); checks the runner links nothing of kiln.
On demo also: raw input files, bad inputs and bad weights files are refused with a message, a
recompile replaces a previous bundle, a non-empty foreign directory is refused untouched. A small
generated model checks views and unusual outputs (the input itself, a constant, a name with '/'),
and one with a library kernel (an LSTM run backwards over sequence_lens that are data) must fail with one line and write nothing. A Gather with
run-time indices must refuse an index out of range with the node's name (KILN_MODEL_ERR_INDEX).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

kiln, model_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
BUNDLE_FILES = {"kiln_model.h", "kiln_model.c", "weights.bin", "main.c", "Makefile", "README.txt"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL " + what)
    return cond


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def compile_model(model, out):
    t0 = time.time()
    r = run([kiln, "compile", model, "-o", out])
    return r, time.time() - t0


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".kiln-tmp-" in n or ".kiln-old-" in n]


def check_links_no_kiln(runner, name):
    ldd = run(["ldd", runner])
    check(ldd.returncode == 0 and "kiln" not in ldd.stdout, f"{name}: ldd shows a kiln library: {ldd.stdout}")
    nm = run(["nm", runner])
    check(nm.returncode == 0, f"{name}: nm failed: {nm.stderr}")
    bad = []
    for line in nm.stdout.splitlines():
        parts = line.split()
        sym, kind = parts[-1], parts[-2]
        if "_ZN4kiln" in sym:  # anything from kiln's C++ namespace
            bad.append(sym)
        elif "kiln" in sym and kind.isupper() and not sym.startswith("kiln_model_"):
            bad.append(sym)  # a global kiln symbol that is not the model's API
        elif "kiln" in sym and kind == "U":
            bad.append(sym)
    check(not bad, f"{name}: runner has kiln symbols beyond the model's: {bad[:5]}")
    # Everything the model exports is its API.
    api = sorted(l.split()[-1] for l in nm.stdout.splitlines() if l.split()[-2] == "T" and "kiln" in l)
    check("kiln_model_run" in api and "kiln_model_init" in api, f"{name}: API symbols missing: {api}")


def model_roundtrip(name, work):
    model = os.path.join(model_dir, name + ".onnx")
    bundle = os.path.join(work, "bundles", name)
    r, t_compile = compile_model(model, bundle)
    if not check(r.returncode == 0, f"{name}: kiln compile failed: {r.stderr.strip()}"):
        return None
    check(set(os.listdir(bundle)) == BUNDLE_FILES, f"{name}: bundle files {sorted(os.listdir(bundle))}")
    check(not leftovers(os.path.dirname(bundle)), f"{name}: temporary directories left beside the bundle")
    sizes = {f: os.path.getsize(os.path.join(bundle, f)) for f in sorted(BUNDLE_FILES)}
    # Build a copy elsewhere: the bundle must not depend on where kiln wrote it.
    build = os.path.join(work, "build", name)
    shutil.copytree(bundle, build)
    t0 = time.time()
    mk = run(["make", "-C", build])
    t_make = time.time() - t0
    if not check(mk.returncode == 0, f"{name}: make failed: {mk.stderr.strip()[-2000:]}"):
        return None
    runner = os.path.join(build, "kiln_model_run")
    out = os.path.join(work, "out", name)
    rr = run([runner, "-o", out, os.path.join(model_dir, name + ".input.npy")])
    if not check(rr.returncode == 0, f"{name}: kiln_model_run failed: {rr.stderr.strip()}"):
        return None
    files = os.listdir(out)
    check(len(files) == 1, f"{name}: expected one output file, got {files}")
    got = np.load(os.path.join(out, files[0]))
    want = np.load(os.path.join(model_dir, name + ".output.npy"))
    check(got.shape == want.shape and got.dtype == want.dtype,
          f"{name}: output {got.dtype}{got.shape}, PyTorch {want.dtype}{want.shape}")
    rel = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
    check(rel <= 1e-4, f"{name}: max rel diff {rel:.3g} above 1e-4")
    check_links_no_kiln(runner, name)
    print(f"ok   {name}: kiln compile {t_compile:.1f} s, make {t_make:.1f} s, max rel diff {rel:.3g}; sizes "
          + ", ".join(f"{f} {s}" for f, s in sizes.items()))
    return bundle, build, runner, got


def demo_checks(work, bundle, build, runner, expected):
    model = os.path.join(model_dir, "demo.onnx")
    inp = np.load(os.path.join(model_dir, "demo.input.npy"))
    # Raw bytes give the same result as the .npy, bit for bit.
    raw = os.path.join(work, "input.bin")
    inp.tofile(raw)
    out = os.path.join(work, "out_raw")
    r = run([runner, "-o", out, raw])
    if check(r.returncode == 0, f"demo: raw input refused: {r.stderr.strip()}"):
        check(np.array_equal(np.load(os.path.join(out, "output.npy")), expected), "demo: raw input differs")
    # Bad inputs: another shape, another dtype, a raw file of the wrong size, a missing file, no file.
    bad = {"shape": inp[:, :, :16], "dtype": inp.astype(np.float64)}
    for what, arr in bad.items():
        p = os.path.join(work, f"bad_{what}.npy")
        np.save(p, arr)
        r = run([runner, "-o", out, p])
        check(r.returncode == 1 and what in r.stderr, f"demo: input of another {what}: rc {r.returncode} {r.stderr}")
    short = os.path.join(work, "short.bin")
    inp.tofile(short)
    with open(short, "r+b") as f:
        f.truncate(100)
    r = run([runner, "-o", out, short])
    check(r.returncode == 1 and "too short" in r.stderr, f"demo: short raw input: {r.stderr}")
    r = run([runner, "-o", out, os.path.join(work, "missing.npy")])
    check(r.returncode == 1 and "missing.npy" in r.stderr, f"demo: missing input: {r.stderr}")
    r = run([runner])
    check(r.returncode == 2 and "1 input" in r.stderr, f"demo: no input files: rc {r.returncode} {r.stderr}")
    # Bad weights: missing, not a weights file, truncated, one byte changed, another model's.
    good = os.path.join(build, "weights.bin")
    data = open(good, "rb").read()
    cases = {"missing": None, "not a kiln weights file": b"hello" * 20, "truncated": data[:-64],
             "corrupt": data[:100] + bytes([data[100] ^ 1]) + data[101:],
             "longer than": data + b"\0" * 8}
    for what, content in cases.items():
        w = os.path.join(work, "w.bin")
        if os.path.exists(w):
            os.remove(w)
        if content is not None:
            open(w, "wb").write(content)
        r = run([runner, "-w", w, "-o", out, os.path.join(model_dir, "demo.input.npy")])
        want = "cannot open" if what == "missing" else what
        check(r.returncode == 1 and want in r.stderr, f"demo: weights {what}: rc {r.returncode} {r.stderr.strip()}")
    other = os.path.join(work, "build", "mobilenet_v2", "weights.bin")
    if os.path.exists(other):
        r = run([runner, "-w", other, "-o", out, os.path.join(model_dir, "demo.input.npy")])
        check(r.returncode == 1 and "another model" in r.stderr, f"demo: mobilenet weights: {r.stderr.strip()}")
    # The header is valid C++ too.
    if shutil.which("c++"):
        r = run(["c++", "-fsyntax-only", "-x", "c++", os.path.join(bundle, "kiln_model.h")])
        check(r.returncode == 0, f"demo: kiln_model.h is not valid C++: {r.stderr}")

    # Recompiling over a previous bundle (here the built copy, with build outputs) replaces it.
    r, _ = compile_model(model, build)
    check(r.returncode == 0, f"demo: recompile over a bundle failed: {r.stderr.strip()}")
    check(set(os.listdir(build)) == BUNDLE_FILES, f"demo: recompile left {sorted(os.listdir(build))}")
    check(not leftovers(os.path.dirname(build)), "demo: recompile left temporary directories")
    # An empty directory is fine; a non-empty foreign one, or a file, is refused untouched.
    empty = os.path.join(work, "empty")
    os.mkdir(empty)
    r, _ = compile_model(model, empty + "/")
    check(r.returncode == 0 and set(os.listdir(empty)) == BUNDLE_FILES, f"demo: empty dir: {r.stderr.strip()}")
    foreign = os.path.join(work, "foreign")
    os.mkdir(foreign)
    open(os.path.join(foreign, "notes.txt"), "w").write("mine")
    r, _ = compile_model(model, foreign)
    check(r.returncode == 1 and "refusing to overwrite" in r.stderr and os.listdir(foreign) == ["notes.txt"],
          f"demo: foreign dir: rc {r.returncode} {r.stderr.strip()} {os.listdir(foreign)}")
    r, _ = compile_model(model, os.path.join(foreign, "notes.txt"))
    check(r.returncode == 1 and "not a directory" in r.stderr, f"demo: file as DIR: {r.stderr.strip()}")


def library_kernel_check(work):
    import onnx
    from onnx import TensorProto, helper
    # An LSTM run backwards over sequence_lens that are data, its weights graph inputs (the
    # recurrent emitter reads constant weights only; decompose_recurrent refuses a backwards run
    # over such lengths): a library kernel.
    import numpy as np
    from onnx import numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])
    lens = helper.make_tensor_value_info("lens", TensorProto.INT32, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1, 2])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 8, 3])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 8, 2)).astype(np.float32), "r")]
    nodes = [helper.make_node("Relu", ["x"], ["rx"], name="relu"),
             helper.make_node("LSTM", ["rx", "w", "r", "", "lens"], ["y"], name="reverselstm", hidden_size=2,
                              direction="reverse")]
    graph = helper.make_graph(nodes, "opaque", [x, lens, w], [y], inits)
    path = os.path.join(work, "reverselstm.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    parent = os.path.join(work, "lib")
    os.mkdir(parent)
    r, _ = compile_model(path, os.path.join(parent, "bundle"))
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "library kernel" in r.stderr and "reverselstm" in r.stderr,
          f"library kernel: rc {r.returncode}, stderr {r.stderr.strip()!r}")
    check(os.listdir(parent) == [], f"library kernel: left {os.listdir(parent)}")
    print("ok   library kernel refused: " + (lines[0] if lines else ""))


def views_check(work):
    """Views (copies of their input), several outputs, an output that is the input and one that is a
    constant: compared exactly with numpy."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    f32 = TensorProto.FLOAT
    outs = {"y_view": [6, 4], "y_relu": [2, 3, 4], "y_same": [2, 3, 4], "y_const": [3], "y/flat": [2, 12]}
    c3 = np.array([1.5, -2, 3], dtype=np.float32)
    c4 = np.array([1, 2, 3, 4], dtype=np.float32)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y_view"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "c4"], ["y_relu"]),
             helper.make_node("Identity", ["x"], ["y_same"]),
             helper.make_node("Identity", ["c3"], ["y_const"]),
             helper.make_node("Flatten", ["y_relu"], ["y/flat"], axis=1)]
    inits = [numpy_helper.from_array(np.array([6, 4], dtype=np.int64), "shape"),
             numpy_helper.from_array(c3, "c3"), numpy_helper.from_array(c4, "c4")]
    graph = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", f32, [2, 3, 4])],
                              [helper.make_tensor_value_info(n, f32, s) for n, s in outs.items()], initializer=inits)
    path = os.path.join(work, "views.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), path)
    x = np.random.RandomState(0).randn(2, 3, 4).astype(np.float32)
    np.save(os.path.join(work, "views_x.npy"), x)
    bundle = os.path.join(work, "views")
    r, _ = compile_model(path, bundle)
    if not check(r.returncode == 0, f"views: kiln compile failed: {r.stderr.strip()}"):
        return
    mk = run(["make", "-C", bundle])
    if not check(mk.returncode == 0, f"views: make failed: {mk.stderr.strip()[-2000:]}"):
        return
    out = os.path.join(work, "views_out")
    rr = run([os.path.join(bundle, "kiln_model_run"), "-o", out, os.path.join(work, "views_x.npy")])
    if not check(rr.returncode == 0, f"views: kiln_model_run failed: {rr.stderr.strip()}"):
        return
    relu = np.maximum(x, 0) + c4
    want = {"y_view": x.reshape(6, 4), "y_relu": relu, "y_same": x, "y_const": c3, "y_flat": relu.reshape(2, 12)}
    check(sorted(os.listdir(out)) == sorted(n + ".npy" for n in want), f"views: outputs {sorted(os.listdir(out))}")
    for n, w in want.items():
        p = os.path.join(out, n + ".npy")
        check(os.path.exists(p) and np.array_equal(np.load(p), w), f"views: {n} differs")
    print("ok   views: " + " ".join(sorted(want)) + " exact")


def gather_bounds_check(work):
    """Run-time Gather indices: in range (negatives count from the end) the bundle computes numpy's
    answer; out of range, kiln_model_run fails with the node's name (as `kiln run` does) and writes
    no output, instead of reading a clamped row."""
    import onnx
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], name="the_gather", axis=0),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [4, 3]),
                                                helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    path = os.path.join(work, "gather.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    data = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    np.save(os.path.join(work, "g_data.npy"), data)
    bundle = os.path.join(work, "gather")
    r, _ = compile_model(path, bundle)
    if not check(r.returncode == 0, f"gather: kiln compile failed: {r.stderr.strip()}"):
        return
    mk = run(["make", "-C", bundle])
    if not check(mk.returncode == 0, f"gather: make failed: {mk.stderr.strip()[-2000:]}"):
        return
    for name, idx, ok in (("in range", [3, -4, -1], True), ("past the end", [0, 4, 1], False),
                          ("before the start", [-5, 0, 0], False)):
        np.save(os.path.join(work, "g_idx.npy"), np.array(idx, np.int64))
        out = os.path.join(work, "gather_out_" + name.replace(" ", "_"))
        rr = run([os.path.join(bundle, "kiln_model_run"), "-o", out, os.path.join(work, "g_data.npy"),
                  os.path.join(work, "g_idx.npy")])
        if ok:
            if check(rr.returncode == 0, f"gather {name}: kiln_model_run failed: {rr.stderr.strip()}"):
                check(np.array_equal(np.load(os.path.join(out, "y.npy")), np.maximum(data[idx], 0)),
                      f"gather {name}: wrong rows")
        else:
            check(rr.returncode == 1 and "node 'the_gather' (Gather): an index is out of range" in rr.stderr,
                  f"gather {name}: exit {rr.returncode}, stderr {rr.stderr.strip()!r}")
            check(not os.path.exists(out) or not os.listdir(out), f"gather {name}: wrote {out}")
    print("ok   gather: run-time indices in range computed, out of range refused with the node's name")


def main():
    for tool in ("make", "cc", "nm", "ldd"):
        if not shutil.which(tool):
            print(f"FAIL {tool} is not installed")
            return 1
    with tempfile.TemporaryDirectory(prefix="kiln-aot-") as work:
        results = {name: model_roundtrip(name, work) for name in ("demo", "mobilenet_v2")}
        if results["demo"]:
            demo_checks(work, *results["demo"])
        views_check(work)
        gather_bounds_check(work)
        library_kernel_check(work)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


sys.exit(main())
