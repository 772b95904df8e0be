"""``kiln.prune``: magnitude / 2:4 masks or structured channel pruning, as ``kiln prune`` does.

    import kiln
    r = kiln.prune("model.onnx", "model.pruned.onnx", method="channels", ratio=0.25,
                   calibration=[{"image": x0}, {"image": x1}], min_top1=0.9)
    print(r.report)                        # the lines `kiln prune` prints
    print(r.before.flops, r.after.flops)   # FLOPs, parameters, zeros, file bytes before and after

docs/PRUNING.md explains the methods, the gate and what is left alone.
"""
import os
from dataclasses import dataclass

from . import _kiln
from .compiler import _calibration, _fail
from .quantize import OutputScore

_METHODS = ("channels", "magnitude", "2:4")
_CRITERIA = ("l1", "l2", "bn-gamma", "contribution")


@dataclass(frozen=True)
class ModelStats:
    parameters: int  # float initializer entries
    zeros: int
    flops: float  # dense count (the FLOPs counter of `kiln inspect --flops`)
    file_bytes: int  # 0 after: the model was not written


@dataclass(frozen=True)
class LayerPrune:
    name: str
    op_type: str
    joined: list  # channels: the layers pruned with it, whose channels meet its at residual Adds
    ratio: float
    parameters_before: int
    parameters_after: int
    zeros: int
    channels_before: int
    channels_after: int


@dataclass(frozen=True)
class PruneResult:
    layers: list  # [LayerPrune], the pruned layers in graph order
    left_alone: list  # [(layer, why)]
    before: ModelStats
    after: ModelStats
    outputs: list  # [OutputScore] of the pruned model against the float one
    worst_nodes: list  # [(layer, cosine)], most drifting first
    passed: bool
    failure: str
    input_sets: int
    report: str


def _number(name, value, low, high, high_open=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            low <= value < high if high_open else low <= value <= high):
        _fail(f"{name} must be a number in [{low}, {high}{')' if high_open else ']'}, "
              f"got {value!r}")


def prune(model, output, *, method="channels", ratio=0.5, global_threshold=False, criterion="l1",
          channel_multiple=1, bias_compensation=True, residual_groups=True,
          layer_ratios=None, op_types=("Conv", "MatMul", "Gemm"),
          exclude_nodes=(), search=False, search_steps=4, calibration=None, min_cosine=0.99,
          min_top1=None, allow_drift=False, seed=0, threads=0, log=None):
    """Prunes an ONNX model (a path) and writes the result to `output`.

    method: "channels" (whole output channels removed: a smaller dense model), "magnitude" (the
        smallest weights zeroed; per layer, or over every layer with global_threshold) or "2:4".
    ratio: the share of each layer's output channels (channels, < 1) or weights removed;
        layer_ratios: {layer: ratio} for single layers. With search, the largest ratio tried.
    criterion: channels ranked by their filter's "l1" or "l2" norm, "bn-gamma", or
        "contribution" (the channel's standard deviation on the input sets times its readers'
        weight norm).
    bias_compensation: the removed channels' mean contribution (on the input sets) goes into
        their readers' biases.
    residual_groups: layers whose channels meet at residual Adds are pruned together (False:
        left alone).
    calibration: the gate's input sets, as kiln.quantize's.
    Raises kiln.InvalidArgument when the pruned model misses the gate (nothing is written) unless
    allow_drift.
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model is a path to an ONNX file, got {type(model).__name__}")
    if method not in _METHODS:
        _fail(f"method is one of {', '.join(_METHODS)}, got {method!r}")
    if criterion not in _CRITERIA:
        _fail(f"criterion is one of {', '.join(_CRITERIA)}, got {criterion!r}")
    _number("ratio", ratio, 0, 1, high_open=method == "channels")
    _number("min_cosine", min_cosine, -1, 1)
    if min_top1 is not None:
        _number("min_top1", min_top1, 0, 1)
    layer_ratios = dict(layer_ratios or {})
    for name, value in layer_ratios.items():
        _number(f"the ratio of {name!r}", value, 0, 1, high_open=method == "channels")
    if isinstance(op_types, str):
        op_types = [op_types]
    if isinstance(exclude_nodes, str):
        exclude_nodes = [exclude_nodes]
    for name, value in (("threads", threads), ("seed", seed),
                        ("channel_multiple", channel_multiple), ("search_steps", search_steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            _fail(f"{name} must be an int >= 0, got {value!r}")
    if log is not None and not callable(log):
        raise TypeError(f"log is a callable(kind, text), got {type(log).__name__}")
    options = {"model_path": os.fspath(model), "output_path": os.fspath(output), "method": method,
               "ratio": float(ratio), "global": bool(global_threshold), "criterion": criterion,
               "channel_multiple": channel_multiple,
               "bias_compensation": bool(bias_compensation),
               "residual_groups": bool(residual_groups),
               "layer_ratios": {str(k): float(v) for k, v in layer_ratios.items()},
               "op_types": [str(o) for o in op_types],
               "exclude_nodes": [str(n) for n in exclude_nodes], "search": bool(search),
               "search_steps": search_steps, "min_cosine": float(min_cosine),
               "min_top1": None if min_top1 is None else float(min_top1),
               "allow_drift": bool(allow_drift), "seed": seed, "threads": threads}
    _calibration(calibration, options)
    r = _kiln._prune(options, log)
    r["layers"] = [LayerPrune(**layer) for layer in r["layers"]]
    r["left_alone"] = [tuple(x) for x in r["left_alone"]]
    r["before"] = ModelStats(**r["before"])
    r["after"] = ModelStats(**r["after"])
    r["outputs"] = [OutputScore(*o) for o in r["outputs"]]
    r["worst_nodes"] = [tuple(w) for w in r["worst_nodes"]]
    return PruneResult(**r)
