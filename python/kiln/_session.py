"""kiln.InferenceSession: onnxruntime.InferenceSession's interface over a compiled kiln model, so
that switching is one import line (docs/python.md lists what differs)."""

from ._errors import ModelError, UsageError
from ._model import compile

# onnxruntime's type strings (NodeArg.type) for kiln's dtypes.
_ORT_TYPES = {
    "f16": "tensor(float16)", "bf16": "tensor(bfloat16)", "f32": "tensor(float)", "f64": "tensor(double)",
    "i8": "tensor(int8)", "i16": "tensor(int16)", "i32": "tensor(int32)", "i64": "tensor(int64)",
    "u8": "tensor(uint8)", "u16": "tensor(uint16)", "u32": "tensor(uint32)", "u64": "tensor(uint64)",
    "bool": "tensor(bool)",
}


class NodeArg:
    """An input or output as onnxruntime describes it: name, shape (list of ints), type
    ("tensor(float)"), plus dtype (the numpy dtype)."""

    __slots__ = ("name", "shape", "type", "dtype")

    def __init__(self, spec):
        self.name = spec.name
        self.shape = list(spec.shape)
        self.type = _ORT_TYPES[spec.kiln_dtype]
        self.dtype = spec.dtype

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


class InferenceSession:
    """Compiles the model once; run() executes it.

    path_or_bytes: an .onnx path or the serialized model. threads: kernel threads (None: all).
    input_shapes: {name: dims} for symbolic input dimensions. strict_fp: outputs bit-identical to
    kiln's reference executor (no FMA, its summation order). device: "cpu", "opencl" or "cuda". providers: accepted
    for onnxruntime compatibility;
    only "CPUExecutionProvider" is available. Further keywords go to kiln.compile (fusion, cache,
    target, progress)."""

    def __init__(self, path_or_bytes, threads=None, input_shapes=None, strict_fp=False, device="cpu", *,
                 providers=None, **compile_options):
        for p in providers or []:
            name = p[0] if isinstance(p, tuple) else p
            if name != "CPUExecutionProvider":
                raise UsageError(f"execution provider {name!r} is not available: kiln runs on the CPU only")
        self._model = compile(path_or_bytes, threads, input_shapes, strict_fp, device, **compile_options)
        self._inputs = [NodeArg(s) for s in self._model.inputs]
        self._outputs = [NodeArg(s) for s in self._model.outputs]
        self._output_index = {o.name: i for i, o in enumerate(self._outputs)}

    @property
    def model(self):
        """The underlying kiln.Model (explain(), roofline(), save_bundle())."""
        return self._model

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_providers(self):
        return ["CPUExecutionProvider"]

    def run(self, output_names, input_feed, run_options=None):
        """output_names: the outputs to return, in that order (None or []: all of them);
        input_feed: {input name: numpy array}. Returns a list of numpy arrays."""
        if not isinstance(input_feed, dict):
            raise ModelError(f"{self._model.path}: input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        picks = []
        for name in output_names or []:
            if name not in self._output_index:
                raise ModelError(f"{self._model.path}: model has no output named '{name}'")
            picks.append(self._output_index[name])
        outs = self._model._run(input_feed)
        return [outs[i] for i in picks] if output_names else outs
