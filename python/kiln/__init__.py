"""Kiln: compile and run ONNX models. ``kiln.InferenceSession`` mirrors onnxruntime's;
``kiln.compile`` is ``kiln compile``, ``kiln.quantize`` is ``kiln quantize``, ``kiln.prune`` is
``kiln prune``; ``kiln.distill`` (imported on first use; it needs PyTorch) fine-tunes a PyTorch
student against a model Kiln runs.

    import kiln, numpy as np
    kiln.compile("model.onnx", "model.kiln", shapes={"x": "1..8x3"})
    sess = kiln.InferenceSession("model.kiln")          # or the ONNX model itself
    [y] = sess.run(None, {"x": np.zeros((1, 3), np.float32)})
"""
# Kiln's CPU kernels (oneDNN and Kiln's own loops) run on LLVM's OpenMP runtime, libomp, which the
# native module links: its idle threads spin a short while, yielding the core to any other
# runnable thread, and then sleep, so two threads scale on a quiet machine and do not collapse
# beside a busy process (bench/results/2026-12-06b-cpu-thread-pool.md). Until 2026-12-06 they ran
# on GNU OpenMP, whose spin never yields, and this module set OMP_WAIT_POLICY=ACTIVE
# GOMP_SPINCOUNT=10000 before loading it; on libomp OMP_WAIT_POLICY=ACTIVE would mean spinning
# forever, so nothing is set here now. KMP_BLOCKTIME (ms) and OMP_WAIT_POLICY still work when the
# user sets them; kiln._kiln.openmp_wait_policy() says what is in force.

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
