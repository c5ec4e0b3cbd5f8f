"""Inputs are read in place when they are C-contiguous (and aligned, native-order) arrays of the
model's dtype, and copied exactly once otherwise. The session records the addresses its last run
handed to the kernels (kiln._kiln, Model.last_input_addresses) and the Python layer counts the
copies it made (kiln._model._input_copies)."""

import os

import numpy as np

import kiln
from kiln import _model
from conftest import model_input


def address(a):
    return a.__array_interface__["data"][0]


def test_contiguous_float32_is_not_copied(models_dir):
    sess = kiln.InferenceSession(os.path.join(models_dir, "demo.onnx"))
    x = model_input(models_dir, "demo")
    assert x.dtype == np.float32 and x.flags.c_contiguous
    copies = _model._input_copies
    y = sess.run(None, {"input": x})[0]
    assert sess.model._core.last_input_addresses == [address(x)]
    assert _model._input_copies == copies
    # The kernels read the caller's buffer itself: changing it changes the next result.
    x *= 2.0
    y2 = sess.run(None, {"input": x})[0]
    assert sess.model._core.last_input_addresses == [address(x)]
    assert not np.array_equal(y, y2)


def test_view_with_an_offset_is_read_in_place(two_in_two_out):
    sess = kiln.InferenceSession(two_in_two_out)
    big = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = big[2].reshape(2, 3)           # row 2 of a larger array: contiguous, not its start
    y = np.full((2, 3), 0.5, np.float32)
    assert view.base is not None and view.flags.c_contiguous and address(view) != address(big)
    copies = _model._input_copies
    s, _ = sess.run(None, {"x": view, "y": y})
    assert sess.model._core.last_input_addresses == [address(view), address(y)]
    assert _model._input_copies == copies
    np.testing.assert_array_equal(s, view + y)


def test_non_contiguous_input_is_copied_once(models_dir):
    sess = kiln.InferenceSession(os.path.join(models_dir, "demo.onnx"))
    x = model_input(models_dir, "demo")
    want = sess.run(None, {"input": x})[0]
    fortran = np.asfortranarray(x)
    assert not fortran.flags.c_contiguous
    copies = _model._input_copies
    got = sess.run(None, {"input": fortran})[0]
    assert _model._input_copies == copies + 1
    assert sess.model._core.last_input_addresses != [address(fortran)]
    np.testing.assert_array_equal(got, want)
    # A strided view (every other element of a wider array) is copied once too.
    wide = np.zeros(x.shape[:-1] + (x.shape[-1] * 2,), np.float32)
    wide[..., ::2] = x
    strided = wide[..., ::2]
    got = sess.run(None, {"input": strided})[0]
    assert _model._input_copies == copies + 2
    np.testing.assert_array_equal(got, want)
    # So is a big-endian array of the right values.
    got = sess.run(None, {"input": x.astype(">f4")})[0]
    assert _model._input_copies == copies + 3
    np.testing.assert_array_equal(got, want)


def test_outputs_are_fresh_arrays(models_dir):
    sess = kiln.InferenceSession(os.path.join(models_dir, "demo.onnx"))
    x = model_input(models_dir, "demo")
    a = sess.run(None, {"input": x})[0]
    b = sess.run(None, {"input": x})[0]
    assert address(a) != address(b) and a.flags.owndata and a.flags.writeable
    np.testing.assert_array_equal(a, b)
