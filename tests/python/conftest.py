"""Shared fixtures of the Python package's tests (tests/python, docs/testing.md).

Environment (set by tests/CMakeLists.txt): KILN_MODELS, the folder of the exported public models
(build/models); KILN_BIN, the kiln CLI, whose messages and outputs the package must reproduce.
The package under test is whatever `import kiln` finds: the in-tree build (PYTHONPATH) or an
installed wheel (tests/python/run_wheel_test.py)."""

import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

PUBLIC_MODELS = ["demo", "mlp_ln", "encoder", "resnet18", "mobilenet_v2"]


def _env_path(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set (tests/CMakeLists.txt sets it; see tests/python/conftest.py)")
    return value


@pytest.fixture(scope="session")
def models_dir():
    d = _env_path("KILN_MODELS")
    missing = [m for m in PUBLIC_MODELS if not os.path.exists(os.path.join(d, m + ".onnx"))]
    if missing:
        pytest.fail(f"public models missing from {d}: {missing} (the models_end_to_end test exports them)")
    return d


@pytest.fixture(scope="session")
def kiln_cli():
    return _env_path("KILN_BIN")


def model_input(models_dir, name):
    return np.load(os.path.join(models_dir, name + ".input.npy"))


def run_cli(kiln_cli, *args, env=None):
    """Runs the kiln CLI; returns (exit status, stderr's error line without the 'kiln: error: ' prefix)."""
    p = subprocess.run([kiln_cli, *args], capture_output=True, text=True, env=env)
    err = p.stderr.strip().splitlines()
    line = err[0] if err else ""
    for prefix in ("kiln: error: ", "kiln: "):
        if line.startswith(prefix):
            line = line[len(prefix):]
            break
    return p.returncode, line


def make_model(path, nodes, inputs, outputs, initializers=(), opset=13, domains=()):
    """Writes a small ONNX model. inputs/outputs: (name, elem_type, dims) with dims of ints or
    strings (symbolic)."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8  # what the system's libonnx (Debian 12) reads
    onnx.save(m, str(path))
    return str(path)


@pytest.fixture
def two_in_two_out(tmp_path):
    """x, y: f32[2,3] -> (x + y, relu(x) * y)."""
    f = TensorProto.FLOAT
    return make_model(tmp_path / "two.onnx",
                      [helper.make_node("Add", ["x", "y"], ["sum"]),
                       helper.make_node("Relu", ["x"], ["r"]),
                       helper.make_node("Mul", ["r", "y"], ["prod"])],
                      [("x", f, [2, 3]), ("y", f, [2, 3])], [("sum", f, [2, 3]), ("prod", f, [2, 3])])


def python_env():
    """The environment for a child Python that must import the same kiln as this process."""
    import kiln
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def pytest_configure(config):
    # Under run_wheel_test.py the package must come from the virtual environment's wheel.
    venv = os.environ.get("KILN_EXPECT_INSTALLED")
    if venv:
        import kiln
        where = os.path.realpath(kiln.__file__)
        if not where.startswith(os.path.realpath(venv) + os.sep):
            raise pytest.UsageError(f"kiln was imported from {where}, not from the wheel installed in {venv}")
