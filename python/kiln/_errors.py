"""kiln's exceptions. Every error kiln raises is a ``kiln.Error``; which subclass says whose problem
it is. The C++ core raises these by ``kiln::Error::kind()`` (include/kiln/model.h); the messages
are the ones ``kiln`` (the CLI) prints after ``kiln: error:``."""


class Error(Exception):
    """Base class of every error kiln raises."""


class ModelError(Error, ValueError):
    """The model or an input is wrong: a malformed or truncated file, a symbolic dimension without
    ``input_shapes``, a feed with a wrong name, dtype or shape. Also a ``ValueError``, as
    onnxruntime's errors for bad feeds are."""


class UnsupportedOp(Error):
    """Valid ONNX that kiln does not implement: an op, or an op from another domain."""


class CompileError(Error, RuntimeError):
    """Code generation or the C compiler failed (or no C compiler could be run)."""


class UsageError(Error, ValueError):
    """kiln was called wrongly: an unknown device or option value, a bad bundle destination."""


class InternalError(Error, RuntimeError):
    """A bug in kiln (a broken invariant); the message says which. Please report it with the model."""


__all__ = ["Error", "ModelError", "UnsupportedOp", "CompileError", "UsageError", "InternalError"]
