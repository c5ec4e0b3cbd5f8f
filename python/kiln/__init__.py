"""kiln: an ONNX compiler built around operator fusion, from Python.

    import kiln
    sess = kiln.InferenceSession("model.onnx")          # as onnxruntime.InferenceSession
    y, = sess.run(None, {"input": x})

    model = kiln.compile("model.onnx", threads=2)
    y = model(x)
    model.explain()        # the fusion plan (kiln explain --json)
    model.roofline()       # the roofline report (kiln roofline --json)
    model.save_bundle("out/")   # the AOT C bundle (kiln compile -o out/)

docs/python.md has the details."""

from ._errors import CompileError, Error, InternalError, ModelError, UnsupportedOp, UsageError
from ._model import Model, TensorSpec, compile
from ._session import InferenceSession, NodeArg

__version__ = "0.1.0"

__all__ = ["InferenceSession", "NodeArg", "Model", "TensorSpec", "compile",
           "Error", "ModelError", "UnsupportedOp", "CompileError", "UsageError", "InternalError"]
