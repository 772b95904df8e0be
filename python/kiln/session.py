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


class ExecutionMode(enum.IntEnum):
    """ORT's execution modes. Kiln runs the nodes of a model one after another, each kernel on
    intra_op_num_threads threads: ORT_SEQUENTIAL. ORT_PARALLEL is accepted so ORT code runs, and
    warns when a session is made that it runs sequentially."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


def _enum_value(enum_type):
    def check(name, value):
        # ORT's own enums (pybind11) convert with int() too: code that imports both still works.
        try:
            member = enum_type(int(value))
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a kiln.{enum_type.__name__} "
                f"({', '.join(enum_type.__members__)}), got {value!r}"
            ) from None
        return member

    return check


def _typed(*types, what):
    def check(name, value):
        if isinstance(value, bool) and bool not in types:
            raise TypeError(f"{name} must be {what}, got {value!r}")
        if not isinstance(value, types):
            raise TypeError(f"{name} must be {what}, got {value!r}")
        return value

    return check


def _path_or_empty(name, value):
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {value!r}")
    return os.fspath(value)


_INT = _typed(int, what="an int")
_BOOL = _typed(bool, np.bool_, what="a bool")
_STR = _typed(str, what="a str")


class _Options:
    """Attributes from a fixed table: a name the table lacks raises AttributeError naming the
    valid ones and the closest, instead of being kept and doing nothing (a typo in an option
    name would otherwise go unnoticed)."""

    _TABLE = {}  # name -> (default, check(name, value) -> stored value)

    def __init__(self):
        object.__setattr__(self, "_values", {k: d for k, (d, _) in self._TABLE.items()})

    def _unknown(self, name):
        valid = sorted(self._TABLE)
        hint = _kiln.closest_name(name, valid)
        tail = f"; did you mean '{hint}'?" if hint else ""
        return AttributeError(
            f"{type(self).__name__} has no option '{name}'{tail} "
            f"(its options: {', '.join(valid)})"
        )

    def __getattr__(self, name):  # only called when normal lookup fails
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise self._unknown(name)

    def __setattr__(self, name, value):
        if name not in self._TABLE:
            raise self._unknown(name)
        self._values[name] = self._TABLE[name][1](f"{type(self).__name__}.{name}", value)

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} options cannot be deleted")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._TABLE))


class SessionOptions(_Options):
    """Options for InferenceSession, named as in onnxruntime.SessionOptions. Each option either
    does what ORT's does or, for a value Kiln cannot honour, warns when a session is made:

    - intra_op_num_threads (0: one per core), enable_profiling, profile_file_prefix,
      graph_optimization_level (ORT_DISABLE_ALL: no passes; any other level: all of them) as in
      ORT.
    - optimized_model_filepath: the session writes the graph it runs (optimized unless
      ORT_DISABLE_ALL) to this path as ONNX when it is made. Kiln's fused nodes are in the
      ai.kiln domain: the file opens in Kiln, not in ORT. `kiln compile` writes engines.
    - execution_mode: Kiln runs ORT_SEQUENTIAL; ORT_PARALLEL warns and runs sequentially.
      inter_op_num_threads sizes ORT_PARALLEL's pool, so it is unused, as in ORT's sequential
      mode.
    - enable_cpu_mem_arena, enable_mem_pattern, enable_mem_reuse: Kiln always plans activations
      into one arena ahead of the first run (True); False warns. use_deterministic_compute: True
      warns (Kiln makes no such promise).
    - log_severity_level, log_verbosity_level, logid: checked and kept; the session writes no
      log (Kiln's rare warnings go to stderr or Python's warnings whatever the level).
    """

    _TABLE = {
        "intra_op_num_threads": (0, _INT),
        "inter_op_num_threads": (0, _INT),
        "execution_mode": (ExecutionMode.ORT_SEQUENTIAL, _enum_value(ExecutionMode)),
        "graph_optimization_level": (GraphOptimizationLevel.ORT_ENABLE_ALL,
                                     _enum_value(GraphOptimizationLevel)),
        "enable_profiling": (False, _BOOL),
        "profile_file_prefix": ("kiln_profile", _STR),
        "optimized_model_filepath": ("", _path_or_empty),
        "enable_cpu_mem_arena": (True, _BOOL),
        "enable_mem_pattern": (True, _BOOL),
        "enable_mem_reuse": (True, _BOOL),
        "use_deterministic_compute": (False, _BOOL),
        "log_severity_level": (2, _INT),
        "log_verbosity_level": (0, _INT),
        "logid": ("", _STR),
    }

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_config", {})

    def add_session_config_entry(self, key, value):
        """Sets a rare knob by name (Kiln's SessionOptions.config)."""
        if not isinstance(key, str) or not key:
            raise TypeError("session config keys are non-empty strings")
        self._config[key] = str(value)

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise KeyError(f"no session config entry '{key}'")
        return self._config[key]

    def _warnings(self):
        """What this session cannot do as asked, one sentence each."""
        out = []
        if self.execution_mode == ExecutionMode.ORT_PARALLEL:
            out.append(
                "SessionOptions.execution_mode is ORT_PARALLEL: Kiln runs the nodes one after "
                "another (ORT_SEQUENTIAL), each kernel on intra_op_num_threads threads; "
                "inter_op_num_threads is not used"
            )
        for name in ("enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse"):
            if not getattr(self, name):
                out.append(
                    f"SessionOptions.{name} is False: Kiln always plans activation memory into "
                    "one arena before the first run; the option has no effect"
                )
        if self.use_deterministic_compute:
            out.append(
                "SessionOptions.use_deterministic_compute is True: Kiln does not promise "
                "bitwise-equal results across thread counts or machines; the option has no effect"
            )
        return out

    def _native(self, device):
        for attr in ("intra_op_num_threads", "inter_op_num_threads"):
            value = getattr(self, attr)
            if value < 0:
                raise _kiln.InvalidArgument(f"SessionOptions.{attr} must be an int >= 0, got {value!r}")
        if not 0 <= self.log_severity_level <= 4:
            raise _kiln.InvalidArgument(
                f"SessionOptions.log_severity_level must be 0 (verbose) to 4 (fatal), "
                f"got {self.log_severity_level}"
            )
        path = self.optimized_model_filepath
        if path and os.path.splitext(path)[1].lower() in (".ort", ".kiln"):
            raise _kiln.InvalidArgument(
                f"SessionOptions.optimized_model_filepath '{path}': Kiln writes the optimized "
                "model as ONNX (name it .onnx); `kiln compile` writes .kiln engines, checked by "
                "its precision gate"
            )
        return {
            "threads": self.intra_op_num_threads,
            "profiling": bool(self.enable_profiling),
            "optimize": self.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL,
            "device": device,
            "config": dict(self._config),
        }


class RunOptions(_Options):
    """Per-run options (onnxruntime.RunOptions): the logging fields and run_tag are checked and
    kept; Kiln has no per-run knob yet. Other names raise AttributeError."""

    _TABLE = {
        "log_severity_level": (2, _INT),
        "log_verbosity_level": (0, _INT),
        "logid": ("", _STR),
        "run_tag": ("", _STR),
    }


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
        for message in self._options._warnings():
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        if self._options.optimized_model_filepath:
            # As ORT does: the graph the session runs, written when the session is made.
            self._sess.save_model(self._options.optimized_model_filepath)
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
