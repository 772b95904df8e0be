"""Kiln: compile and run ONNX models. ``kiln.InferenceSession`` mirrors onnxruntime's.

    import kiln, numpy as np
    sess = kiln.InferenceSession("model.onnx")          # or a compiled .kiln engine
    [y] = sess.run(None, {"x": np.zeros((1, 3), np.float32)})
"""
from ._kiln import (  # noqa: F401  (the native module; errors carry Kiln's messages)
    Internal,
    InvalidArgument,
    KilnError,
    NotFound,
    Unavailable,
    Unsupported,
    __version__,
)
from .session import (  # noqa: F401
    GraphOptimizationLevel,
    InferenceSession,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_available_providers,
    get_device,
)

__all__ = [
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "NodeArg",
    "GraphOptimizationLevel",
    "get_available_providers",
    "get_device",
    "KilnError",
    "InvalidArgument",
    "NotFound",
    "Unsupported",
    "Unavailable",
    "Internal",
    "__version__",
]
