"""Kiln: compile and run ONNX models. ``kiln.InferenceSession`` mirrors onnxruntime's;
``kiln.compile`` is ``kiln compile``, ``kiln.quantize`` is ``kiln quantize``, ``kiln.prune`` is
``kiln prune``; ``kiln.distill`` (imported on first use; it needs PyTorch) fine-tunes a PyTorch
student against a model Kiln runs.

    import kiln, numpy as np
    kiln.compile("model.onnx", "model.kiln", shapes={"x": "1..8x3"})
    sess = kiln.InferenceSession("model.kiln")          # or the ONNX model itself
    [y] = sess.run(None, {"x": np.zeros((1, 3), np.float32)})
"""
import os as _os

# Kiln's CPU kernels run on GNU OpenMP (oneDNN's runtime), which reads its wait policy once, when
# it is loaded. Its default keeps idle threads spinning for milliseconds (300000 spins) after each
# parallel region, which on a machine shared with other work made 2-thread runs 4-12x slower
# (bench/results/2026-11-30-cpu-speed.md). Sleeping at once (OMP_WAIT_POLICY=PASSIVE, the
# previous choice) wakes the threads between the back-to-back regions of one run: a small MLP
# ran 2.7x slower on two threads than on one. 10000 spins (tens of microseconds) keep a run's
# threads awake between its regions and let them sleep soon after it ends. ACTIVE with that
# count keeps the same bounded spin when libgomp manages more threads than CPUs (each Python
# thread that runs a session is an OpenMP master with a pool of its own); unset, libgomp then
# cuts the spin to 1000 and a run from a second thread took 3x as long
# (bench/results/2026-12-03-cpu-wait-policy.md). Set before the native module loads OpenMP, and
# only when the user has not chosen.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "ACTIVE"
    _os.environ["GOMP_SPINCOUNT"] = "10000"

from ._kiln import (  # noqa: F401, E402  (the native module; errors carry Kiln's messages)
    Internal,
    InvalidArgument,
    KilnError,
    NotFound,
    Unavailable,
    Unsupported,
    __version__,
)
from .compiler import CompileResult, FallbackNode, GateReport, compile  # noqa: F401, E402
from .quantize import OutputScore, QuantizeResult, quantize  # noqa: F401, E402
from .prune import PruneResult, prune  # noqa: F401, E402
from .session import (  # noqa: F401, E402
    ExecutionMode,
    Fail,
    GraphOptimizationLevel,
    InferenceSession,
    InvalidGraph,
    IOBinding,
    ModelMetadata,
    NodeArg,
    NoSuchFile,
    NotImplemented,
    OrtValue,
    RuntimeException,
    RunOptions,
    SessionOptions,
    get_available_providers,
    get_device,
)


def __getattr__(name):
    # kiln.distill needs PyTorch: imported when first used, so that `import kiln` never imports
    # torch (and raises its ImportError, naming the package to install, only then).
    if name == "distill":
        import importlib

        return importlib.import_module(".distill", __name__)
    raise AttributeError(f"module 'kiln' has no attribute '{name}'")


__all__ = [
    "compile",
    "quantize",
    "prune",
    "PruneResult",
    "QuantizeResult",
    "OutputScore",
    "CompileResult",
    "GateReport",
    "FallbackNode",
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "NodeArg",
    "OrtValue",
    "IOBinding",
    "ModelMetadata",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "get_available_providers",
    "get_device",
    "KilnError",
    "InvalidArgument",
    "NotFound",
    "Unsupported",
    "Unavailable",
    "Internal",
    "Fail",
    "NoSuchFile",
    "InvalidGraph",
    "NotImplemented",
    "RuntimeException",
    "__version__",
]
