"""docs/python.md's example runs as written (in a folder holding the demo model as demo.onnx),
and the README's Python section points at it."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import python_env

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")


def example():
    with open(DOCS) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    if not blocks:
        pytest.fail("docs/python.md has no ```python example")
    return blocks[0]


def test_example_is_short():
    lines = [l for l in example().splitlines() if l.strip()]
    assert len(lines) <= 10, f"the example has {len(lines)} lines"


def test_example_runs(models_dir, tmp_path):
    shutil.copy(os.path.join(models_dir, "demo.onnx"), tmp_path / "demo.onnx")
    (tmp_path / "example.py").write_text(example())
    p = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True,
                       env=python_env())
    assert p.returncode == 0, p.stderr
    m = re.search(r"max difference from onnxruntime: (\S+)", p.stdout)
    assert m and float(m.group(1)) < 1e-4, p.stdout
