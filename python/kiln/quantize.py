"""``kiln.quantize``: static INT8 into a QDQ ONNX model, as ``kiln quantize`` does (or dynamic
INT8, or INT4 weight-only as com.microsoft MatMulNBits with ``int4=True``).

    import kiln
    r = kiln.quantize("model.onnx", "model.int8.onnx", calibration=[{"image": x0}, {"image": x1}],
                      method="percentile", min_top1=0.97)
    print(r.report)                    # the lines `kiln quantize` prints
    print(r.outputs)                   # [OutputScore(name, cosine, top1)]

The file opens in onnxruntime as in Kiln. docs/QUANTIZATION.md explains the choices.
"""
import os
from dataclasses import dataclass

from . import _kiln
from .compiler import _calibration, _fail


@dataclass(frozen=True)
class OutputScore:
    """One output of the quantized model against the float one, over the calibration sets."""

    name: str
    cosine: float
    top1: float  # share of [N, classes] rows whose top-1 class agrees; None for other shapes


@dataclass(frozen=True)
class QuantizeResult:
    quantized_nodes: int
    activations: int  # QuantizeLinear / DequantizeLinear pairs
    weights: int  # int8 weights
    quantized_residuals: int  # residual Adds reading their skip connection quantized
    calibration_sets: int
    calibration_cached: bool  # the ranges came from calibration_cache (no calibration runs)
    metric_reference: float  # the task metric's score of the float model (None: not measured)
    metric_score: float  # the quantized model's
    metric_drop: float  # how much worse (a rise for max-abs-steps)
    sensitivity: list  # [(node, drop when it alone is quantized)], most sensitive first
    outputs: list  # [OutputScore], in the model's output order
    worst_nodes: list  # [(node, cosine of its output)], most drifting first
    passed: bool
    failure: str
    kept_float: list  # nodes the fallback kept float32, in the order it did
    collapsed: list  # [(node, share of its input's nonzero values at zero)] kept float32 by the trap
    float_weight_bytes: int
    int8_weight_bytes: int
    int4_weight_bytes: int  # int4=True: packed codes, scales and zero points
    gptq_weights: int  # int4_method="gptq": weights GPTQ quantized (the others RTN)
    report: str


def quantize(model, output, *, calibration=None, method="minmax", percentile=99.999,
             calibration_cache=None, per_channel=True, quantized_residuals=True, dynamic=False, int4=False, block_size=32, symmetric=False,
             int4_method="rtn", gptq_damp=0.01, op_types=("Conv", "MatMul", "Gemm", "LSTM"), exclude_nodes=(),
             min_cosine=None, min_top1=None, fallback_nodes=4, max_collapsed=0.5,
             allow_drift=False, seed=0,
             threads=0, metric="cosine", max_drop=None, metric_timeout=120,
             sensitivity_report=None, log=None):
    """Quantizes an ONNX model (a path) to INT8 and writes the QDQ model to `output`.

    calibration: as kiln.compile's: a dict of input name -> array (one set), an .npz file, a list
        of such sets, or a directory of NAME.pb files; None: one set of random data (for speed
        measurements only).
    method: "minmax", "percentile" (with `percentile`, the share of each tail kept) or
        "entropy" (the range whose uint8 codes lose least information: least KL divergence).
    calibration_cache: a file path: the calibration's histograms are kept there, and a later
        call on the same model and calibration data reads them instead of running the model
        (static INT8 only; a malformed file raises kiln.InvalidArgument).
    quantized_residuals: a residual Add of a quantized convolution reads its skip connection
        through the DequantizeLinear the skip has for its other reader (as onnxruntime's and
        NNCF's quantizers write it): the int8 convolution adds the uint8 residual and writes the
        block's quantized result. False keeps the skip connections float32.
    dynamic: MatMul / Gemm as MatMulInteger on activations quantized at run time instead, LSTM
        as com.microsoft DynamicQuantizeLSTM (int8 W and R; it quantizes X and h itself).
    int4: INT4 weight-only instead: MatMul / Gemm with a constant 2-D weight as com.microsoft
        MatMulNBits (onnxruntime runs it too), blocks of `block_size` (16-256) values along K,
        asymmetric unless `symmetric`; int4_method "rtn" (round to nearest) or "gptq" (the
        calibration sets' activations weigh the rounding; `gptq_damp` its damping).
    min_cosine / min_top1: the gate (docs/QUANTIZATION.md); while it refuses, the node whose
    output drifts most is kept float32 and the model quantized again, up to fallback_nodes times.
    min_cosine defaults to 0.99, and to none when max_drop is given.
    max_collapsed: static INT8 keeps a node float32 where more than this share of its input's
        nonzero calibration values would quantize to zero (a detection head's scores beside its
        coordinates, an outlier channel); 1: never. The result's "collapsed" lists them.
    metric / max_drop: the task metric ("cosine", "top1", "max-abs-steps" or "script:PATH": a
        program given REFERENCE.npz CANDIDATE.npz that prints the candidate's score) and the drop
        from the float model's score the quantized model may show; while it shows more, the most
        sensitive nodes (each one's drop when alone quantized) are kept float32 first.
        metric_timeout: seconds one run of a script may take.
    sensitivity_report: a JSON file path: each node's drop when it alone is quantized.
    Raises kiln.InvalidArgument when the quantized model still misses it (nothing is written)
    unless allow_drift.
    log: callable(kind, text) for each report line as it comes.
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model is a path to an ONNX file, got {type(model).__name__}")
    if method not in ("minmax", "percentile", "entropy"):
        _fail(f"method is 'minmax', 'percentile' or 'entropy', got {method!r}")
    if calibration_cache is not None and not isinstance(calibration_cache, (str, os.PathLike)):
        raise TypeError("calibration_cache is a path, got "
                        f"{type(calibration_cache).__name__}")
    if min_cosine is None:
        min_cosine = -1.0 if max_drop is not None else 0.99
    if not isinstance(metric, str):
        raise TypeError(f"metric is a str, got {type(metric).__name__}")
    for name, value in (("max_drop", max_drop), ("metric_timeout", metric_timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value >= 0):
            _fail(f"{name} must be a number >= 0, got {value!r}")
    for name, value, low, high in (("percentile", percentile, 50, 100),
                                   ("min_cosine", min_cosine, -1, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            _fail(f"{name} must be a number in [{low}, {high}], got {value!r}")
    if min_top1 is not None and (isinstance(min_top1, bool) or
                                 not isinstance(min_top1, (int, float)) or not 0 <= min_top1 <= 1):
        _fail(f"min_top1 must be a number in [0, 1], got {min_top1!r}")
    if block_size not in (16, 32, 64, 128, 256) or isinstance(block_size, bool):
        _fail(f"block_size must be 16, 32, 64, 128 or 256, got {block_size!r}")
    if int4_method not in ("rtn", "gptq"):
        _fail(f"int4_method is 'rtn' or 'gptq', got {int4_method!r}")
    if isinstance(gptq_damp, bool) or not isinstance(gptq_damp, (int, float)) or \
            not 0 < gptq_damp <= 1:
        _fail(f"gptq_damp must be a number in (0, 1], got {gptq_damp!r}")
    if isinstance(op_types, str):
        op_types = [op_types]
    if isinstance(exclude_nodes, str):
        exclude_nodes = [exclude_nodes]
    for name, value in (("threads", threads), ("seed", seed), ("fallback_nodes", fallback_nodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            _fail(f"{name} must be an int >= 0, got {value!r}")
    if isinstance(max_collapsed, bool) or not isinstance(max_collapsed, (int, float)) or \
            not 0 <= max_collapsed <= 1:
        _fail(f"max_collapsed must be a number in [0, 1], got {max_collapsed!r}")
    if log is not None and not callable(log):
        raise TypeError(f"log is a callable(kind, text), got {type(log).__name__}")
    options = {"model_path": os.fspath(model), "output_path": os.fspath(output), "method": method,
               "percentile": float(percentile), "per_channel": bool(per_channel),
               "quantized_residuals": bool(quantized_residuals),
               "dynamic": bool(dynamic), "int4": bool(int4), "block_size": int(block_size),
               "symmetric": bool(symmetric), "int4_method": int4_method,
               "gptq_damp": float(gptq_damp),
               "op_types": [str(o) for o in op_types],
               "exclude_nodes": [str(n) for n in exclude_nodes], "min_cosine": float(min_cosine),
               "min_top1": None if min_top1 is None else float(min_top1),
               "allow_drift": bool(allow_drift), "seed": seed, "threads": threads,
               "fallback_nodes": fallback_nodes, "max_collapsed": float(max_collapsed),
               "calibration_cache": "" if calibration_cache is None else os.fspath(calibration_cache),
               "metric": metric, "metric_timeout": float(metric_timeout),
               "sensitivity_report": "" if sensitivity_report is None else
               os.fspath(sensitivity_report)}
    if max_drop is not None:
        options["max_drop"] = float(max_drop)
    _calibration(calibration, options)
    r = _kiln._quantize(options, log)
    r["outputs"] = [OutputScore(*o) for o in r["outputs"]]
    r["worst_nodes"] = [tuple(w) for w in r["worst_nodes"]]
    r["sensitivity"] = [tuple(s) for s in r["sensitivity"]]
    r["collapsed"] = [tuple(c) for c in r["collapsed"]]
    return QuantizeResult(**r)
