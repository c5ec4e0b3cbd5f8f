"""kiln.InferenceSession as a drop-in for onnxruntime.InferenceSession: the public models give
ONNX Runtime's outputs, and the session's surface (get_inputs/get_outputs, run's output_names,
bytes, input_shapes, the callable Model) behaves as onnxruntime's does."""

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln
from conftest import PUBLIC_MODELS, make_model, model_input


def rel_diff(got, want):
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


@pytest.mark.parametrize("name", PUBLIC_MODELS)
def test_public_model_matches_onnxruntime(models_dir, name):
    path = os.path.join(models_dir, name + ".onnx")
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = kiln.InferenceSession(path)
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == \
           [(i.name, i.shape, i.type) for i in ref.get_inputs()]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [(o.name, o.type) for o in ref.get_outputs()]
    feeds = {sess.get_inputs()[0].name: model_input(models_dir, name)}
    want = ref.run(None, feeds)
    got = sess.run(None, feeds)
    assert isinstance(got, list) and len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
        assert rel_diff(g, w) <= 1e-4, f"{name}: max|kiln - ort| / max|ort| = {rel_diff(g, w):.3g}"


@pytest.mark.parametrize("name", ["demo", "mlp_ln"])
def test_opencl_device_matches_onnxruntime(models_dir, name):
    # device="opencl": the same kernels as OpenCL C on the ICD loader's device (PoCL in CI).
    path = os.path.join(models_dir, name + ".onnx")
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    sess = kiln.InferenceSession(path, device="opencl")
    feeds = {sess.get_inputs()[0].name: model_input(models_dir, name)}
    for g, w in zip(sess.run(None, feeds), ref.run(None, feeds)):
        assert g.shape == w.shape and rel_diff(g, w) <= 1e-4, f"{name} on opencl: {rel_diff(g, w):.3g}"


def test_output_names_select_and_order(two_in_two_out):
    sess = kiln.InferenceSession(two_in_two_out)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 2.0, dtype=np.float32)
    s, p = sess.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(p, np.maximum(x, 0) * y)
    only, = sess.run(["prod"], {"x": x, "y": y})
    np.testing.assert_array_equal(only, p)
    p2, s2 = sess.run(["prod", "sum"], {"x": x, "y": y})
    np.testing.assert_array_equal(p2, p)
    np.testing.assert_array_equal(s2, s)
    with pytest.raises(kiln.ModelError, match="model has no output named 'nope'"):
        sess.run(["nope"], {"x": x, "y": y})
    assert [o.name for o in sess.get_outputs()] == ["sum", "prod"]
    assert sess.get_inputs()[0].dtype == np.float32
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_model_bytes_and_callable(models_dir):
    path = os.path.join(models_dir, "demo.onnx")
    x = model_input(models_dir, "demo")
    want = np.load(os.path.join(models_dir, "demo.output.npy"))
    with open(path, "rb") as f:
        sess = kiln.InferenceSession(f.read())
    assert rel_diff(sess.run(None, {"input": x})[0], want) <= 1e-4
    model = kiln.compile(path)
    y = model(x)
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(model(input=x), y)
    np.testing.assert_array_equal(model.run({"input": x})["output"], y)
    assert rel_diff(y, want) <= 1e-4


def test_callable_with_several_inputs_and_outputs(two_in_two_out):
    model = kiln.compile(two_in_two_out)
    x = np.ones((2, 3), np.float32)
    y = np.full((2, 3), 3.0, np.float32)
    s, p = model(x, y)                       # positional: in input order
    np.testing.assert_array_equal(s, x + y)
    s2, p2 = model(x, y=y)
    np.testing.assert_array_equal(p2, p)
    with pytest.raises(kiln.ModelError, match="given twice"):
        model(x, x=x)


def test_input_shapes_fix_symbolic_dims(tmp_path):
    f = TensorProto.FLOAT
    path = make_model(tmp_path / "sym.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                      [("x", f, ["batch", 4])], [("y", f, ["batch", 4])])
    with pytest.raises(kiln.ModelError, match="batch"):
        kiln.InferenceSession(path)
    sess = kiln.InferenceSession(path, input_shapes={"x": (3, 4)})
    assert sess.get_inputs()[0].shape == [3, 4]
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_non_float_inputs_and_outputs(tmp_path):
    i64 = TensorProto.INT64
    path = make_model(tmp_path / "int.onnx",
                      [helper.make_node("Add", ["a", "a"], ["s"]), helper.make_node("Greater", ["s", "a"], ["g"])],
                      [("a", i64, [5])], [("s", i64, [5]), ("g", TensorProto.BOOL, [5])])
    sess = kiln.InferenceSession(path)
    a = np.array([-2, -1, 0, 1, 2], np.int64)
    s, g = sess.run(None, {"a": a})
    assert s.dtype == np.int64 and g.dtype == np.bool_
    np.testing.assert_array_equal(s, a + a)
    np.testing.assert_array_equal(g, a + a > a)
    assert [i.type for i in sess.get_inputs()] == ["tensor(int64)"]


@pytest.mark.parametrize("name", ["demo", "mlp_ln"])
def test_strict_fp_gives_the_reference_bits(models_dir, kiln_cli, tmp_path, name):
    # strict_fp=True is `kiln run --strict-fp`: the reference executor's operations in its order,
    # so the output is bit-identical to `kiln run --reference`. The default (FMA, lane sums) is
    # within 1e-4 of ONNX Runtime (test_public_model_matches_onnxruntime).
    import subprocess
    path = os.path.join(models_dir, name + ".onnx")
    x = model_input(models_dir, name)
    np.save(tmp_path / "x.npy", x)
    subprocess.run([kiln_cli, "run", path, "--reference", "--input", f"input={tmp_path / 'x.npy'}",
                    "--output-dir", str(tmp_path / "ref")], check=True, capture_output=True)
    reference = np.load(tmp_path / "ref" / "output.npy")
    strict = kiln.compile(path, strict_fp=True)
    assert "-ffp-contract=off" in strict.compile_flags
    np.testing.assert_array_equal(strict(x), reference)
    default = kiln.compile(path)
    assert "-ffp-contract=fast" in default.compile_flags
    assert rel_diff(default(x), reference) <= 1e-4
