"""``kiln.compile``: an ONNX model in, a checked .kiln engine file out, as ``kiln compile`` does.

    import kiln
    result = kiln.compile("model.onnx", "model.kiln", shapes={"image": "1..16x3x224x224"},
                          fp16=True)
    print(result.report)                      # the text `kiln compile` prints
    sess = kiln.InferenceSession(result.engine_path)

The same model and options give the same engine file as the CLI and the C ABI's kiln_compile: all
three call Kiln's compiler library (src/compiler). docs/API.md lists the options.
"""
import os
from dataclasses import dataclass, field

import numpy as np

from . import _kiln
from .session import _prepare_tensor

_KINDS = ("report", "trace", "note", "warning")


@dataclass(frozen=True)
class FallbackNode:
    """A node no fast kernel took: it runs on the reference kernel."""

    op_type: str
    name: str
    flops: float
    reason: str


@dataclass(frozen=True)
class GateReport:
    """What the precision gate found (ran is False when verify=False)."""

    ran: bool
    passed: bool
    failure: str  # why not, naming the output and the first drifting node
    source: str  # which inputs it checked on
    input_sets: int
    worst_rel_l2: dict  # output -> largest relative L2 error, in the model's output order
    skipped: dict  # output -> why it was not checked


@dataclass(frozen=True)
class CompileResult:
    engine_path: str
    engine_bytes: int
    weight_bytes: int
    nodes_before: int
    nodes_after: int
    kernels: dict  # "cpu:onednn.conv" -> nodes
    fallbacks: list  # [FallbackNode], most FLOPs first
    total_flops: float
    fallback_flops: float
    packed_weights: int
    packed_bytes: int
    fp16_summary: str
    gate: GateReport
    timings_ms: dict  # stage -> milliseconds ("import", "optimize", ..., "total")
    report: str = field(repr=False)  # the text `kiln compile` prints

    @property
    def fallback_flop_share(self):
        """The share of the model's FLOPs left on reference kernels, 0..1."""
        return self.fallback_flops / self.total_flops if self.total_flops > 0 else 0.0


def _fail(message):
    raise _kiln.InvalidArgument(message)


def _dim_text(name, d):
    if isinstance(d, (bool, np.bool_)):
        _fail(f"shapes['{name}']: a dim is an int, a (min, max) pair or 'MIN..MAX', got {d!r}")
    if isinstance(d, (int, np.integer)):
        return str(int(d))
    if isinstance(d, str):
        return d
    if isinstance(d, (tuple, list)) and len(d) == 2:
        return f"{_dim_text(name, d[0])}..{_dim_text(name, d[1])}"
    _fail(f"shapes['{name}']: a dim is an int, a (min, max) pair or 'MIN..MAX', got {d!r}")


def _shape_specs(shapes):
    """{name: "1..8x3" | [1, (1, 8), "1..8"]} or ["name:1..8x3"] -> ["name:1..8x3"]."""
    if shapes is None:
        return []
    if isinstance(shapes, dict):
        specs = []
        for name, dims in shapes.items():
            if not isinstance(name, str):
                _fail(f"shapes: input names are strings, got {name!r}")
            if isinstance(dims, str):
                text = dims
            elif isinstance(dims, (list, tuple)):
                text = "x".join(_dim_text(name, d) for d in dims)
            else:
                _fail(f"shapes['{name}']: give dims as 'D1xD2x...' or a list, got {dims!r}")
            specs.append(f"{name}:{text}")
        return specs
    if isinstance(shapes, (list, tuple)) and all(isinstance(s, str) for s in shapes):
        return list(shapes)
    _fail(f"shapes: a dict of input name -> dims, or a list of 'NAME:DIMS', got {shapes!r}")


def _input_set(item, what):
    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        if not path.endswith(".npz"):
            _fail(f"{what}: '{path}' is not an .npz file (a directory of .pb files goes alone)")
        if not os.path.isfile(path):
            raise _kiln.NotFound(f"{what}: no file '{path}'")
        with np.load(path, allow_pickle=False) as npz:
            item = {name: npz[name] for name in npz.files}
    if not isinstance(item, dict) or not item:
        _fail(f"{what}: an input set is a non-empty dict of input name -> array, got {item!r}")
    return [(name, _prepare_tensor(name, value)) for name, value in item.items()]


def _calibration(calibration, options):
    """None | a directory of .pb files | an .npz file | {name: array} | a list of those sets."""
    if calibration is None:
        return
    if isinstance(calibration, (str, os.PathLike)) and os.path.isdir(calibration):
        options["calibration_dir"] = os.fspath(calibration)
        return
    sets = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    if not sets:
        _fail("calibration: the list of input sets is empty")
    options["calibration"] = [_input_set(s, f"calibration set {i}") for i, s in enumerate(sets)]


_PRECISIONS = {"fp32": "fp32", "float32": "fp32", "fp16": "fp16", "float16": "fp16",
               "bf16": "bf16", "bfloat16": "bf16"}


def compile(model, output=None, *, shapes=None, precision=None, fp16=False, fp16_io=False,
            fp16_keep_ops=(),
            fp16_range_check=True, optimize=True, prepack=True, target=None, device="cpu",
            verify=True, verify_full=False, allow_drift=False,
            max_rel_l2=None, rtol=None, atol=None, verify_timeout=60.0, calibration=None,
            inputs=None, dims=None, seed=0, threads=0, trace_passes=False, dump_after=None,
            log=None):
    """Compiles an ONNX model into a .kiln engine file and returns a CompileResult.

    model: a path (str or os.PathLike), the model's bytes, or an onnx.ModelProto.
    output: the engine file; default the model's path with .kiln (required for bytes).
    shapes: input dims, fixed or as ranges: {"x": "1..64x3x224x224"} or {"x": [(1, 64), 3, 224,
        224]} (the CLI's --shape).
    calibration: the precision gate's inputs (and the quantizer's calibration data): a dict of
        input name -> array (one set), an .npz file of them, a list of such sets, or a directory
        of NAME.pb files (the CLI's --calibration-inputs). Inputs a set lacks get random data.
    precision: "fp32" (default), "fp16" (the same as fp16=True) or "bf16" (`kiln compile
        --bf16`: bfloat16 compute, refused on CPUs without bfloat16 instructions); fp16_io and
        fp16_keep_ops apply to either 16-bit precision.
    log: callable(kind, text) for the report lines, traces, notes and warnings (kind is "report",
        "trace", "note" or "warning"); by default they go to Kiln's log, which prints warnings.
    The other keywords are `kiln compile`'s flags (docs/API.md). Raises kiln.InvalidArgument for
    bad options and for an engine the precision gate refuses (no file is written then),
    kiln.NotFound for a missing model.
    """
    options = {}
    if hasattr(model, "SerializeToString"):  # an onnx.ModelProto
        model = model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        options["model_bytes"] = bytes(model)
    elif isinstance(model, (str, os.PathLike)):
        options["model_path"] = os.fspath(model)
    else:
        raise TypeError(f"model is a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    if output is not None:
        options["output_path"] = os.fspath(output)
    options["shapes"] = _shape_specs(shapes)
    if isinstance(fp16_keep_ops, str):
        fp16_keep_ops = [fp16_keep_ops]
    if precision is not None:
        if not isinstance(precision, str) or precision.lower() not in _PRECISIONS:
            _fail(f"precision takes 'fp32', 'fp16' or 'bf16', got {precision!r}")
        precision = _PRECISIONS[precision.lower()]
        if fp16 and precision != "fp16":
            _fail(f"fp16=True contradicts precision={precision!r}")
        fp16 = precision == "fp16"
    bf16 = precision == "bf16"
    options.update(fp16=bool(fp16), bf16=bf16, fp16_io=bool(fp16_io), fp16_keep_ops=list(fp16_keep_ops),
                   fp16_range_check=bool(fp16_range_check),
                   optimize=bool(optimize), prepack=bool(prepack), verify=bool(verify),
                   verify_full=bool(verify_full), allow_drift=bool(allow_drift),
                   trace_passes=bool(trace_passes))
    if not isinstance(device, str) or not device:
        raise TypeError(f"device is a device name such as 'cpu' or 'gpu', got {device!r}")
    options["device"] = device
    if verify_full and not verify:
        _fail("verify_full needs the precision gate: drop verify=False")
    if fp16_io and not (fp16 or bf16):
        _fail("fp16_io needs fp16=True or precision='bf16'")
    if fp16_keep_ops and not (fp16 or bf16):
        _fail("fp16_keep_ops needs fp16=True or precision='bf16'")
    for name, value in (("max_rel_l2", max_rel_l2), ("rtol", rtol), ("atol", atol),
                        ("verify_timeout", verify_timeout)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            _fail(f"{name} must be a number >= 0, got {value!r}")
        options[name] = float(value)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        _fail(f"threads must be an int >= 0 (0: one per core), got {threads!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        _fail(f"seed must be an int >= 0, got {seed!r}")
    options.update(threads=threads, seed=seed)
    if target is not None:
        options["target"] = str(target)
    if dump_after is not None:
        options["dump_after"] = str(dump_after)
    if inputs:
        options["inputs"] = {str(k): os.fspath(v) for k, v in inputs.items()}
    if dims:
        for k, v in dims.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                _fail(f"dims['{k}'] must be an int >= 0, got {v!r}")
        options["dims"] = {str(k): int(v) for k, v in dims.items()}
    _calibration(calibration, options)
    if log is not None and not callable(log):
        raise TypeError(f"log is a callable(kind, text), got {type(log).__name__}")
    r = _kiln._compile(options, log)
    gate = GateReport(**r.pop("gate"))
    fallbacks = [FallbackNode(*f) for f in r.pop("fallbacks")]
    return CompileResult(gate=gate, fallbacks=fallbacks, **r)
