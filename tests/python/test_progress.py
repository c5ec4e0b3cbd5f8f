"""The compile progress display: a tqdm bar when tqdm is importable, else a terminal line on
stderr; off with progress=False (and by default when stderr is not a terminal)."""

import os
import sys
import types

import pytest

import kiln


class FakeTqdm:
    instances = []

    def __init__(self, total=None, **kwargs):
        self.total, self.n, self.kwargs, self.postfix, self.closed = total, 0, kwargs, [], False
        FakeTqdm.instances.append(self)

    def update(self, k):
        self.n += k

    def set_postfix_str(self, s, refresh=True):
        self.postfix.append(s)

    def close(self):
        self.closed = True


@pytest.fixture
def demo(models_dir):
    return os.path.join(models_dir, "demo.onnx")


def test_tqdm_bar_when_installed(demo, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    FakeTqdm.instances.clear()
    model = kiln.compile(demo, progress=True, cache=False)
    bar, = FakeTqdm.instances
    # One step per planned group, then the C compiler; the bar is closed afterwards.
    assert bar.total >= model.kernel_count and bar.n == bar.total and bar.closed
    assert bar.postfix[0] == "lowering" and bar.postfix[-1] == "compiling"


def test_terminal_line_without_tqdm(demo, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `from tqdm import tqdm` raises ImportError
    kiln.compile(demo, progress=True, cache=False)
    err = capsys.readouterr().err
    assert "\rkiln: demo.onnx: lowering 1/" in err and "compiling" in err
    assert err.endswith("\r\033[K")  # the line is cleared at the end


def test_progress_off(demo, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    FakeTqdm.instances.clear()
    kiln.compile(demo, progress=False, cache=False)
    kiln.compile(demo, cache=False)  # default: stderr is not a terminal under pytest
    monkeypatch.setenv("KILN_PROGRESS", "0")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    kiln.compile(demo, cache=False)
    assert FakeTqdm.instances == [] and capsys.readouterr().err == ""
