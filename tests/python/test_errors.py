"""Every error is a kiln.Error subclass with the CLI's message, never a crash: ModelError (also a
ValueError) for a malformed model or a wrong feed, UnsupportedOp, CompileError, UsageError."""

import os
import stat

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from conftest import make_model, model_input, run_cli


@pytest.fixture(scope="module")
def demo(models_dir):
    return os.path.join(models_dir, "demo.onnx")


@pytest.mark.parametrize("case", ["dtype", "shape", "name", "missing"])
def test_wrong_feed_is_value_error_with_the_cli_message(demo, models_dir, kiln_cli, tmp_path, case):
    x = model_input(models_dir, "demo")
    feeds = {
        "dtype": {"input": x.astype(np.float64)},
        "shape": {"input": x[:, :2].copy()},
        "name": {"input": x, "extra": x},
        "missing": {},
    }[case]
    sess = kiln.InferenceSession(demo)
    with pytest.raises(ValueError) as info:
        sess.run(None, feeds)
    assert isinstance(info.value, kiln.ModelError)
    # The same feeds through `kiln run` give the same line.
    args = ["run", demo, "--output-dir", str(tmp_path / "out")]
    for name, a in feeds.items():
        np.save(tmp_path / f"{name}.npy", a)
        args += ["--input", f"{name}={tmp_path / name}.npy"]
    rc, line = run_cli(kiln_cli, *args)
    assert rc == 1
    # The same words; the CLI names the .npy file it read the feed from where the session names
    # the model.
    where, _, what = line.partition(": ")
    assert where in (demo, str(tmp_path / f"{next(iter(feeds), '')}.npy")), line
    assert str(info.value) == f"{demo}: {what}"


def test_unusable_feed_types(demo):
    sess = kiln.InferenceSession(demo)
    with pytest.raises(kiln.ModelError, match="no type for"):
        sess.run(None, {"input": np.array([["a"]])})
    with pytest.raises(kiln.ModelError, match="must be a dict"):
        sess.run(None, [np.zeros((1, 3, 32, 32), np.float32)])


def test_malformed_models_are_model_errors(demo, tmp_path, kiln_cli):
    with open(demo, "rb") as f:
        data = f.read()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    for path in [str(truncated), str(tmp_path / "absent.onnx")]:
        with pytest.raises(kiln.ModelError) as info:
            kiln.InferenceSession(path)
        rc, line = run_cli(kiln_cli, "info", path)
        assert rc == 1 and str(info.value) == line
    with pytest.raises(kiln.ModelError) as info:
        kiln.InferenceSession(data[: len(data) // 2])
    assert str(info.value).startswith("<bytes>: ")


@pytest.mark.parametrize("op,domain", [("NoSuchOp", ""), ("Foo", "com.example")])
def test_unsupported_op(tmp_path, kiln_cli, op, domain):
    f = TensorProto.FLOAT
    path = make_model(tmp_path / "unsupported.onnx", [helper.make_node(op, ["x"], ["y"], domain=domain)],
                      [("x", f, [2])], [("y", f, [2])], domains=[domain] if domain else [])
    with pytest.raises(kiln.UnsupportedOp) as info:
        kiln.InferenceSession(path)
    assert not isinstance(info.value, kiln.ModelError)
    assert "unsupported op" in str(info.value) and op in str(info.value)
    rc, line = run_cli(kiln_cli, "info", path)
    assert rc == 1 and str(info.value) == line


def fake_compiler(directory, script):
    directory.mkdir()
    cc = directory / "cc"
    cc.write_text("#!/bin/sh\n" + script)
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(directory)


def test_compiler_failure_is_compile_error(demo, tmp_path, monkeypatch):
    # A C compiler that rejects everything: kiln's C is refused, a CompileError naming the source.
    bad = fake_compiler(tmp_path / "badcc", 'echo "kernel.c:1:1: error: planted failure" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", bad + os.pathsep + os.environ["PATH"])
    with pytest.raises(kiln.CompileError) as info:
        kiln.compile(demo, cache=False)
    assert "C compiler failed" in str(info.value) and "planted failure" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_missing_compiler_is_compile_error(demo, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(kiln.CompileError, match="C compiler 'cc' not found on PATH"):
        kiln.compile(demo, cache=False)


def test_usage_errors(demo, tmp_path):
    with pytest.raises(kiln.UsageError, match="device must be 'cpu', 'opencl' or 'cuda', got 'tpu'"):
        kiln.InferenceSession(demo, device="tpu")
    with pytest.raises(kiln.UsageError, match="strict_fp is CPU-only"):
        kiln.compile(demo, device="opencl", strict_fp=True)
    # No GPU and no CUDA driver on these machines: the build cannot get the device, in one line.
    with pytest.raises(kiln.CompileError, match="no CUDA driver"):
        kiln.InferenceSession(demo, device="cuda")
    with pytest.raises(kiln.UsageError, match="threads"):
        kiln.InferenceSession(demo, threads=0)
    with pytest.raises(kiln.UsageError, match="CUDAExecutionProvider"):
        kiln.InferenceSession(demo, providers=["CUDAExecutionProvider"])
    with pytest.raises(kiln.UsageError, match="unknown target"):
        kiln.compile(demo, target="no-such-target")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    with pytest.raises(kiln.UsageError):
        kiln.compile(demo).save_bundle(occupied)
    assert os.listdir(occupied) == ["notes.txt"]


def test_every_class_is_a_kiln_error():
    for cls in [kiln.ModelError, kiln.UnsupportedOp, kiln.CompileError, kiln.UsageError, kiln.InternalError]:
        assert issubclass(cls, kiln.Error)
    assert issubclass(kiln.ModelError, ValueError)


def test_exception_in_progress_callback_propagates(demo):
    class Stop(Exception):
        pass

    def callback(step, done, total):
        raise Stop()

    from kiln import _kiln
    with pytest.raises(Stop):
        _kiln.compile(demo, 0, {}, False, True, True, "", "cpu", callback)
