"""kiln.compile and kiln.Model: a compiled ONNX model, callable on numpy arrays.

The C++ core (kiln._kiln, python/_kiln.cc) compiles and runs; this module turns Python arguments
into its options and numpy arrays into buffers it reads in place."""

import json
import os
import shutil
import tempfile

import numpy as np

from . import _kiln
from ._errors import Error, ModelError, UsageError
from ._progress import make_progress

# kiln's dtype names (include/kiln/model.h) and numpy's. bf16 has no numpy dtype.
_NUMPY_DTYPES = {
    "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "bool": np.bool_,
}

# Inputs the Python layer copied before a run (not C-contiguous, misaligned or not in native byte
# order); every other input is read by the kernels in place. Tests read it through _input_copies().
_input_copies = 0


def _numpy_dtype(kiln_dtype, what):
    dt = _NUMPY_DTYPES.get(kiln_dtype)
    if dt is None:
        raise ModelError(f"{what} is {kiln_dtype}, which numpy has no dtype for")
    return np.dtype(dt)


class TensorSpec:
    """One input or output of a compiled model: name, shape (a list of ints, static after
    compilation) and dtype (a numpy dtype)."""

    __slots__ = ("name", "shape", "dtype", "kiln_dtype")

    def __init__(self, name, kiln_dtype, shape):
        self.name = name
        self.kiln_dtype = kiln_dtype
        self.shape = list(shape)
        self.dtype = np.dtype(_NUMPY_DTYPES[kiln_dtype]) if kiln_dtype in _NUMPY_DTYPES else None

    def __repr__(self):
        return f"TensorSpec(name={self.name!r}, shape={self.shape}, dtype={self.kiln_dtype})"


def _check_options(threads, device, input_shapes, strict_fp=False):
    if device not in ("cpu", "opencl", "cuda"):
        raise UsageError(f"device must be 'cpu', 'opencl' or 'cuda', got {device!r}")
    if device != "cpu" and strict_fp:
        raise UsageError("strict_fp is CPU-only: a device's math library is not the reference's")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"threads must be a positive integer or None (all hardware threads), got {threads!r}")
    shapes = {}
    for name, dims in (input_shapes or {}).items():
        try:
            shapes[str(name)] = [int(d) for d in dims]
        except (TypeError, ValueError):
            raise UsageError(f"input_shapes[{name!r}] must be a sequence of ints, got {dims!r}") from None
        if any(d < 0 for d in shapes[str(name)]):
            raise UsageError(f"input_shapes[{name!r}] has a negative dimension: {dims!r}")
    return shapes


def compile(path_or_bytes, threads=None, input_shapes=None, strict_fp=False, device="cpu", *,
            fusion=True, cache=True, target="", progress=None):
    """Compiles an ONNX model (a path, or the serialized model as bytes) into a :class:`Model`.

    threads: kernel threads (None: every hardware thread). input_shapes: {name: dims} fixing
    symbolic input dimensions (kiln compiles static shapes). strict_fp: the reference executor's
    exact float operations and order (outputs bit-identical to it; default: FMA and lane sums,
    within 1e-4). device: "cpu", "opencl" (an OpenCL device through the ICD loader, e.g. PoCL) or
    "cuda" (NVRTC and the CUDA driver); one that is not there raises at compile. fusion=False: one
    kernel per op.
    cache=False: do not use the compiled-kernel cache. progress: True/False/None (None: a bar on a
    terminal; KILN_PROGRESS=0 turns it off)."""
    shapes = _check_options(threads, device, input_shapes, strict_fp)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        # The importer reads files; the model goes through a private temporary one, and messages
        # name it "<bytes>" rather than the temporary path.
        tmpdir = tempfile.mkdtemp(prefix="kiln-")
        tmp = os.path.join(tmpdir, "model.onnx")
        try:
            with open(tmp, "wb") as f:
                f.write(bytes(path_or_bytes))
            try:
                return compile(tmp, threads, shapes, strict_fp, device, fusion=fusion, cache=cache,
                               target=target, progress=progress)
            except Error as e:
                raise type(e)(str(e).replace(tmp, "<bytes>")) from None
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
    path = os.fspath(path_or_bytes)
    bar = make_progress(progress, os.path.basename(path))
    try:
        core = _kiln.compile(path, threads or 0, shapes, bool(strict_fp), bool(fusion), bool(cache),
                             str(target), str(device), bar)
    finally:
        if bar is not None:
            bar.close()
    return Model(core, path)


class Model:
    """A compiled model. ``model(x)`` or ``model(input=x)`` runs it: the output array for a model
    with one output, else a tuple in output order. ``model.run(feeds)`` returns a dict.

    One model may be called from several Python threads; the calls take turns (the model's working
    memory is planned once, for one run at a time) and release the GIL while kernels run."""

    def __init__(self, core, path):
        self._core = core
        self.path = path
        self.inputs = [TensorSpec(*t) for t in core.inputs]
        self.outputs = [TensorSpec(*t) for t in core.outputs]
        self._input_names = [t.name for t in self.inputs]

    @property
    def threads(self):
        """The number of threads the kernels run with."""
        return self._core.threads

    @property
    def kernel_count(self):
        return self._core.kernel_count

    @property
    def compile_flags(self):
        """The C compiler flags the kernels were built with."""
        return list(self._core.compile_flags)

    def _run(self, feeds):
        """feeds: {name: array-like}; returns the output arrays in output order."""
        global _input_copies
        arrays = {}
        for name, value in feeds.items():
            a = np.asarray(value)
            if a.dtype.kind not in "biuf":
                raise ModelError(f"{self.path}: input '{name}' has numpy dtype {a.dtype}, which kiln has no type for")
            # Kernels read a C-contiguous, aligned, native-order buffer in place; anything else is
            # copied once here. A dtype that is not the model's is not converted: bind() reports it.
            if not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
                a = np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True)
                _input_copies += 1
            arrays[str(name)] = a
        outs = [np.empty(o.shape, dtype=_numpy_dtype(o.kiln_dtype, f"output '{o.name}'")) for o in self.outputs]
        self._core.run(arrays, outs)
        return outs

    def run(self, feeds):
        """Runs the model on {input name: array}; returns {output name: array}."""
        return dict(zip((o.name for o in self.outputs), self._run(feeds)))

    def __call__(self, *args, **kwargs):
        if len(args) > len(self._input_names):
            raise ModelError(f"{self.path}: the model has {len(self._input_names)} inputs, got {len(args)} positional arrays")
        feeds = dict(zip(self._input_names, args))
        for name, value in kwargs.items():
            if name in feeds:
                raise ModelError(f"{self.path}: input '{name}' is given twice")
            feeds[name] = value
        outs = self._run(feeds)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def explain(self):
        """The fusion plan as a dict: the object ``kiln explain --json`` prints (docs/fusion.md)."""
        return json.loads(self._core.explain_json())

    def roofline(self, runs=10, warmup=2, compare_unfused=True):
        """The roofline report as a dict, as ``kiln roofline --json`` prints it (docs/roofline.md):
        every kernel's FLOPs, bytes, time and percent of the machine's roof. Times ``runs`` runs
        on fixed-seed inputs; compare_unfused also builds and times the --no-fusion model. Probes
        the machine the first time (cached under $XDG_CACHE_HOME/kiln)."""
        return json.loads(self._core.roofline_json(int(runs), int(warmup), bool(compare_unfused)))

    def save_bundle(self, dir):
        """Writes the AOT C bundle ``kiln compile -o DIR`` writes (kiln_model.h/.c, weights.bin,
        Makefile): the model as C that builds with make and runs without kiln."""
        self._core.save_bundle(os.fspath(dir))

    def __repr__(self):
        return f"<kiln.Model {self.path!r}: {self.kernel_count} kernels, {self.threads} threads>"
