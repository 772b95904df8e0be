"""The onnxruntime-shaped Python API over Kiln's native session (kiln._kiln).

Feeds are prepared here, where numpy does the work: numeric and bool arrays are made C-contiguous,
aligned and native-endian (a copy only when they are not already), string arrays (object, str or
bytes) become lists, and lists fed to sequence inputs become sequences.
"""
import enum
import json
import os
import time
import warnings

import numpy as np

from . import _kiln

# Provider names users pass (ORT's), and the Kiln device each asks for.
_PROVIDER_DEVICES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "gpu",
    "ROCMExecutionProvider": "gpu",
    "MIGraphXExecutionProvider": "gpu",
}
_CPU = "CPUExecutionProvider"


def get_available_providers():
    """The providers this build can run (onnxruntime.get_available_providers)."""
    return [_CPU]


def get_device():
    """The device this build runs on (onnxruntime.get_device)."""
    return "CPU"


class GraphOptimizationLevel(enum.IntEnum):
    """ORT's levels. Kiln either runs its default passes or none: any level but ORT_DISABLE_ALL
    runs them all."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class SessionOptions:
    """Options for InferenceSession, named as in onnxruntime.SessionOptions.

    inter_op_num_threads and log_severity_level are accepted so ORT code runs unchanged; Kiln runs
    nodes one after another and logs through its own channels, so they change nothing.
    """

    def __init__(self):
        self.intra_op_num_threads = 0  # 0: one thread per core
        self.inter_op_num_threads = 0
        self.enable_profiling = False
        self.profile_file_prefix = "kiln_profile"
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.log_severity_level = 2
        self._config = {}

    def add_session_config_entry(self, key, value):
        """Sets a rare knob by name (Kiln's SessionOptions.config)."""
        if not isinstance(key, str) or not key:
            raise TypeError("session config keys are non-empty strings")
        self._config[key] = str(value)

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise KeyError(f"no session config entry '{key}'")
        return self._config[key]

    def _native(self, device):
        for attr in ("intra_op_num_threads", "inter_op_num_threads"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _kiln.InvalidArgument(f"SessionOptions.{attr} must be an int >= 0, got {value!r}")
        return {
            "threads": self.intra_op_num_threads,
            "profiling": bool(self.enable_profiling),
            "optimize": int(self.graph_optimization_level) != GraphOptimizationLevel.ORT_DISABLE_ALL,
            "device": device,
            "config": dict(self._config),
        }


class RunOptions:
    """Per-run options (onnxruntime.RunOptions). Kiln has no per-run knobs yet: these fields are
    accepted and kept, nothing more."""

    def __init__(self):
        self.log_severity_level = 2
        self.run_tag = ""


class NodeArg:
    """A model input or output: name, ORT-style type string and shape (ints for static dims, the
    symbol's name for symbolic ones, None for unknown ones). dim_ranges holds each dim's declared
    (min, max), which engines compiled with --shape-range narrow."""

    __slots__ = ("name", "type", "shape", "dim_ranges")

    def __init__(self, name, type, shape, dim_ranges):
        self.name = name
        self.type = type
        self.shape = shape
        self.dim_ranges = dim_ranges

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _provider_name(entry):
    name = entry[0] if isinstance(entry, (tuple, list)) else entry
    if not isinstance(name, str):
        raise TypeError(f"providers are names or (name, options) pairs, got {entry!r}")
    if name not in _PROVIDER_DEVICES:
        raise ValueError(
            f"unknown provider '{name}'; Kiln knows {sorted(_PROVIDER_DEVICES)} "
            f"and this build runs {get_available_providers()}"
        )
    return name


def _prepare_tensor(name, value):
    arr = np.asarray(value)
    if arr.dtype.kind in "OUS":
        flat = arr.ravel().tolist()
        for item in flat:
            if not isinstance(item, (str, bytes)):
                raise _kiln.InvalidArgument(
                    f"input '{name}': a string tensor holds str or bytes, got {type(item).__name__}"
                )
        return ("s", list(arr.shape), flat)
    if arr.dtype.kind not in "biuf":
        raise _kiln.Unsupported(f"input '{name}': numpy arrays of dtype {arr.dtype} are not supported")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # C order and alignment, copying only when needed (a slice, a transpose, a byte-offset view).
    return ("t", np.require(arr, requirements=["C", "A"]))


class InferenceSession:
    """Runs an ONNX model or a compiled .kiln engine, like onnxruntime.InferenceSession.

    path_or_bytes: a path (str or os.PathLike) or the model's bytes.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        if kwargs:
            raise TypeError(f"InferenceSession got unexpected arguments {sorted(kwargs)}")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError("sess_options must be a kiln.SessionOptions")
        self._options = sess_options if sess_options is not None else SessionOptions()
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            source = bytes(path_or_bytes)
            self._model_path = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            source = os.fspath(path_or_bytes)
            self._model_path = source
        else:
            raise TypeError(f"expected a path or bytes, got {type(path_or_bytes).__name__}")
        names = [_CPU] if providers is None else [_provider_name(p) for p in providers]
        if _CPU not in names:
            names.append(_CPU)  # as in ORT, the CPU is the fallback of last resort
        for i, provider in enumerate(names):
            try:
                self._sess = _kiln._Session(source, self._options._native(_PROVIDER_DEVICES[provider]))
            except (_kiln.Unsupported, _kiln.Unavailable) as e:
                if provider == _CPU or i + 1 == len(names):
                    raise
                warnings.warn(f"{provider} is not available ({e}); trying {names[i + 1]}")
                continue
            self._provider = provider
            break
        self._inputs = [NodeArg(*d) for d in self._sess.inputs()]
        self._outputs = [NodeArg(*d) for d in self._sess.outputs()]
        self._input_types = {a.name: a.type for a in self._inputs}
        self._profile_start = time.time()

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_providers(self):
        return [self._provider]

    def get_provider_options(self):
        return {self._provider: {}}

    def get_session_options(self):
        return self._options

    def _prepare(self, name, value):
        declared = self._input_types.get(name, "")
        if value is None:
            if declared.startswith("optional("):
                return ("n",)
            raise _kiln.InvalidArgument(f"input '{name}' is None")
        inner = declared[len("optional("):-1] if declared.startswith("optional(") else declared
        if inner.startswith("seq("):
            if not isinstance(value, (list, tuple)):
                raise _kiln.InvalidArgument(
                    f"input '{name}' is a sequence ({declared}): feed a list of arrays"
                )
            return ("q", [_prepare_tensor(name, item) for item in value])
        return _prepare_tensor(name, value)

    def run(self, output_names, input_feed, run_options=None):
        """Returns the outputs named in output_names (all of them when None or empty), in that
        order, as numpy arrays (lists of arrays for sequences, None for absent optionals)."""
        if run_options is not None and not isinstance(run_options, RunOptions):
            raise TypeError("run_options must be a kiln.RunOptions")
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of name -> array, got {type(input_feed).__name__}")
        names = [] if output_names is None else list(output_names)
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"output names are strings, got {n!r}")
        feeds = []
        for name, value in input_feed.items():
            if not isinstance(name, str):
                raise TypeError(f"input names are strings, got {name!r}")
            feeds.append((name, self._prepare(name, value)))
        return self._sess.run(names, feeds)

    def get_profile(self):
        """Kiln's per-node timings of the last run (enable_profiling must be set)."""
        return [
            {"node": node, "op_type": op, "microseconds": us}
            for node, op, us in self._sess.profile()
        ]

    def end_profiling(self):
        """Writes the last run's node timings as a Chrome trace (opens in Perfetto or
        chrome://tracing) and returns the file's name, like ORT; "" when profiling is off."""
        if not self._options.enable_profiling:
            return ""
        events, ts = [], 0.0
        for entry in self.get_profile():
            events.append({
                "name": entry["node"] or entry["op_type"],
                "cat": "Node",
                "ph": "X",
                "ts": ts,
                "dur": entry["microseconds"],
                "pid": os.getpid(),
                "tid": 0,
                "args": {"op_name": entry["op_type"]},
            })
            ts += entry["microseconds"]
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self._profile_start))
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with open(path, "w") as f:
            json.dump(events, f)
        return path
