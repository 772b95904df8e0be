"""The onnxruntime-shaped Python API over Kiln's native session (kiln._kiln).

Feeds are prepared here, where numpy does the work: numeric and bool arrays are made C-contiguous,
aligned and native-endian (a copy only when they are not already), string arrays (object, str or
bytes) become lists, and lists fed to sequence inputs become sequences.
"""
import concurrent.futures
import enum
import json
import os
import threading
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


# --- Errors named as onnxruntime's -----------------------------------------------------------
# ORT code catches onnxruntime.capi.onnxruntime_pybind11_state.{Fail, InvalidArgument, NoSuchFile,
# InvalidGraph, NotImplemented, RuntimeException}. Kiln's own classes (kiln.NotFound, ...) stay what
# the package raises; an error leaving a session is also an instance of the ORT-named class that
# fits, through a class deriving from both (made once per pair), so old and ORT-style handlers
# both catch it. kiln.InvalidArgument already has ORT's name and is used as is.


class Fail(_kiln.KilnError):
    """ORT's FAIL: a failure with no more specific class (here: a resource that is missing)."""


class NoSuchFile(_kiln.KilnError):
    """ORT's NO_SUCHFILE: the model file does not exist."""


class InvalidGraph(_kiln.KilnError):
    """ORT's INVALID_GRAPH: the model could not be loaded (malformed or inconsistent)."""


class NotImplemented(_kiln.KilnError):  # noqa: A001 (ORT's name)
    """ORT's NOT_IMPLEMENTED: a valid request Kiln cannot do (an op, a type, a device)."""


class RuntimeException(_kiln.KilnError):
    """ORT's RUNTIME_EXCEPTION: a failure while running the model."""


InvalidArgument = _kiln.InvalidArgument

# (stage, Kiln class) -> ORT-named class. Stage "load": making a session; "run": running one.
_ORT_CLASS = {
    ("load", _kiln.NotFound): NoSuchFile,
    ("load", _kiln.InvalidArgument): InvalidGraph,
    ("load", _kiln.Unsupported): NotImplemented,
    ("load", _kiln.Unavailable): Fail,
    ("load", _kiln.Internal): RuntimeException,
    ("run", _kiln.NotFound): InvalidArgument,  # ORT: an unknown output name is INVALID_ARGUMENT
    ("run", _kiln.Unsupported): NotImplemented,
    ("run", _kiln.Unavailable): RuntimeException,
    ("run", _kiln.Internal): RuntimeException,
}
_BOTH = {}
_BOTH_LOCK = threading.Lock()


def _both(kiln_class, ort_class):
    """The class deriving from kiln_class and ort_class, named as the ORT one."""
    if issubclass(kiln_class, ort_class):
        return kiln_class
    with _BOTH_LOCK:
        cls = _BOTH.get((kiln_class, ort_class))
        if cls is None:
            cls = type(ort_class.__name__, (kiln_class, ort_class),
                       {"__module__": "kiln", "__doc__": ort_class.__doc__})
            _BOTH[(kiln_class, ort_class)] = cls
        return cls


def _ort_error(stage, error):
    """error re-made as an instance of its Kiln class and of the ORT class for stage."""
    kiln_class = type(error)
    ort_class = next((o for (st, k), o in _ORT_CLASS.items() if st == stage and k is kiln_class), None)
    if ort_class is None or isinstance(error, ort_class):
        return error
    return _both(kiln_class, ort_class)(*error.args)


def _unsupported(message):
    return _both(_kiln.Unsupported, NotImplemented)(message)


# ORT's element type strings and numpy's dtypes, both ways (tensor(float) <-> float32).
_NUMPY_OF = {
    "float": np.float32, "double": np.float64, "float16": np.float16, "int8": np.int8,
    "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
    "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_,
    "string": np.object_,
}
_TYPE_OF = {np.dtype(v).str[1:]: k for k, v in _NUMPY_OF.items() if k != "string"}


def _type_string(arr):
    if arr.dtype.kind in "OUS":
        return "tensor(string)"
    name = _TYPE_OF.get(arr.dtype.newbyteorder("=").str[1:])
    if name is None:
        raise _unsupported(f"numpy arrays of dtype {arr.dtype} are not supported")
    return f"tensor({name})"


def _cpu_device(what, device_type, device_id=0):
    """Refuses memory Kiln's Python API cannot read: only host memory is supported here."""
    if not isinstance(device_type, str) or device_type.lower() != "cpu":
        raise _unsupported(
            f"{what}: device_type {device_type!r} is not supported; Kiln's Python API takes and "
            "returns CPU memory only (device_type 'cpu')"
        )
    if device_id != 0:
        raise _kiln.InvalidArgument(f"{what}: device_id {device_id!r}: the CPU is device 0")


class OrtValue:
    """A tensor in CPU memory, like onnxruntime.OrtValue: feed it to run() or bind it to an
    IOBinding. ortvalue_from_numpy keeps the array (no copy when it is already C-contiguous,
    aligned and native-endian), so, as in ORT, changing the array changes the value."""

    __slots__ = ("_array",)

    def __init__(self, array):
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        _cpu_device("OrtValue.ortvalue_from_numpy", device_type, device_id)
        arr = np.asarray(numpy_obj)
        _type_string(arr)  # refuses dtypes Kiln cannot hold
        if arr.dtype.kind not in "OUS":
            arr = np.require(arr, requirements=["C", "A"])
        return OrtValue(arr)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        """A zero-filled tensor, e.g. to bind as an output Kiln writes into."""
        _cpu_device("OrtValue.ortvalue_from_shape_and_type", device_type, device_id)
        arr = np.zeros([int(d) for d in shape], dtype=element_type)
        _type_string(arr)
        return OrtValue(arr)

    def numpy(self):
        """The value as a numpy array (the one this value holds, not a copy)."""
        return self._array

    def shape(self):
        return list(self._array.shape)

    def data_type(self):
        return _type_string(self._array)

    def element_type(self):
        return self._array.dtype.type

    def device_name(self):
        return "cpu"

    def is_tensor(self):
        return True

    def has_value(self):
        return True

    def is_sparse_tensor(self):
        return False

    def is_tensor_sequence(self):
        return False

    def data_ptr(self):
        if self._array.dtype.kind == "O":
            raise _kiln.InvalidArgument("OrtValue.data_ptr: a string tensor has no flat buffer")
        return self._array.ctypes.data

    def __repr__(self):
        return f"OrtValue({self.data_type()}, shape={self.shape()}, device='cpu')"


def _array_at(what, buffer_ptr, element_type, shape):
    """A numpy view of host memory at buffer_ptr (ORT's bind_input/bind_output with a pointer).
    The caller keeps the memory alive while it is bound, as with ORT."""
    dtype = np.dtype(element_type)
    if dtype.kind in "OUS":
        raise _unsupported(f"{what}: string tensors cannot be bound by pointer")
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise _kiln.InvalidArgument(f"{what}: shape {dims} has a negative dim")
    if not isinstance(buffer_ptr, int) or buffer_ptr == 0:
        raise _kiln.InvalidArgument(f"{what}: buffer_ptr must be a non-null address (an int)")
    import ctypes

    count = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_uint8 * max(count, 1)).from_address(buffer_ptr)
    return np.frombuffer(raw, dtype=np.uint8, count=count).view(dtype).reshape(dims)


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
        object.__setattr__(self, "_dim_overrides", {})

    def add_free_dimension_override_by_name(self, dim_name, dim_value):
        """Fixes the symbolic dim dim_name to dim_value, as ORT does: get_inputs/get_outputs
        show the value and a feed of another size is refused. Kiln already plans for the shapes
        fed, so this checks and documents; it does not make the session faster."""
        if not isinstance(dim_name, str) or not dim_name:
            raise TypeError("dim_name must be a non-empty str")
        if isinstance(dim_value, bool) or not isinstance(dim_value, int) or dim_value < 0:
            raise TypeError(f"dim_value must be an int >= 0, got {dim_value!r}")
        self._dim_overrides[dim_name] = dim_value

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


def _provider_names(providers):
    """The provider names in providers that Kiln knows, then the CPU (as in ORT, the fallback of
    last resort). A name Kiln does not know warns and is skipped, as ORT does with a provider its
    build lacks."""
    names = []
    for entry in [_CPU] if providers is None else providers:
        name = entry[0] if isinstance(entry, (tuple, list)) else entry
        if not isinstance(name, str):
            raise TypeError(f"providers are names or (name, options) pairs, got {entry!r}")
        if name not in _PROVIDER_DEVICES:
            warnings.warn(
                f"unknown provider '{name}' skipped; Kiln knows {sorted(_PROVIDER_DEVICES)} "
                f"and this build runs {get_available_providers()}",
                RuntimeWarning, stacklevel=3,
            )
            continue
        names.append(name)
    if _CPU not in names:
        names.append(_CPU)
    return names


class ModelMetadata:
    """The model's metadata (onnxruntime.ModelMetadata), from its ONNX ModelProto fields (an
    engine keeps its source model's, with the compiler's own keys added to the map)."""

    __slots__ = ("producer_name", "producer_version", "graph_name", "graph_description",
                 "domain", "description", "version", "custom_metadata_map")

    def __init__(self, d):
        for key in self.__slots__:
            setattr(self, key, d.get(key, ""))
        self.graph_description = ""  # Kiln does not keep the graph's doc_string
        self.custom_metadata_map = dict(d.get("custom_metadata_map", {}))

    def __repr__(self):
        return (f"ModelMetadata(producer_name={self.producer_name!r}, "
                f"graph_name={self.graph_name!r}, version={self.version!r})")


class IOBinding:
    """Inputs and outputs bound ahead of a run (onnxruntime.IOBinding), in CPU memory only:
    session.io_binding() makes one, session.run_with_iobinding(binding) runs it. Bound inputs
    are read when the run starts; an output bound to memory (buffer_ptr or an OrtValue) is
    written there, others are allocated by the run. Any device_type but 'cpu' is refused."""

    def __init__(self, session):
        if not isinstance(session, InferenceSession):
            raise TypeError("IOBinding needs a kiln.InferenceSession")
        self._session = session
        self._inputs = {}   # name -> numpy array (a view of bound memory, or the array itself)
        self._outputs = {}  # name -> OrtValue to write into, or None to allocate
        self._results = []  # OrtValues of the last run, in bind order

    def _input_name(self, name):
        if name not in self._session._input_types:
            raise _kiln.InvalidArgument(
                f"IOBinding: the model has no input named '{name}' "
                f"(its inputs: {', '.join(self._session._input_types)})"
            )
        return name

    def _output_name(self, name):
        if name not in self._session._output_names:
            raise _kiln.InvalidArgument(
                f"IOBinding: the model has no output named '{name}' "
                f"(its outputs: {', '.join(self._session._output_names)})"
            )
        return name

    def bind_cpu_input(self, name, arr_on_cpu):
        """Binds a numpy array (or anything np.asarray takes, cast to the input's type)."""
        self._inputs[self._input_name(name)] = self._session._cast(name, arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        """Binds memory at buffer_ptr holding a C-order tensor of element_type and shape."""
        _cpu_device(f"IOBinding.bind_input('{name}')", device_type, device_id)
        self._inputs[self._input_name(name)] = _array_at(
            f"IOBinding.bind_input('{name}')", buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input('{name}') takes a kiln.OrtValue")
        self._inputs[self._input_name(name)] = ortvalue.numpy()

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None):
        """Binds an output: to memory at buffer_ptr (element_type and shape given, the run's
        result must have them) or, without buffer_ptr, to memory the run allocates."""
        what = f"IOBinding.bind_output('{name}')"
        _cpu_device(what, device_type, device_id)
        self._output_name(name)
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise _kiln.InvalidArgument(f"{what}: a buffer_ptr needs element_type and shape")
        self._outputs[name] = OrtValue(_array_at(what, buffer_ptr, element_type, shape))

    def bind_ortvalue_output(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_output('{name}') takes a kiln.OrtValue")
        self._outputs[self._output_name(name)] = ortvalue

    def clear_binding_inputs(self):
        self._inputs.clear()

    def clear_binding_outputs(self):
        self._outputs.clear()
        self._results = []

    def synchronize_inputs(self):
        """Nothing to wait for: bound memory is host memory, read synchronously by the run."""

    def synchronize_outputs(self):
        """Nothing to wait for: run_with_iobinding returns once outputs are in host memory."""

    def get_outputs(self):
        """The last run's outputs as OrtValues, in the order they were bound."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self):
        return self.get_outputs()

    def copy_outputs_to_cpu(self):
        """The last run's outputs as numpy arrays (copies), in the order they were bound."""
        return [v.numpy().copy() for v in self._results]

    def _run(self, run_options):
        if not self._outputs:
            raise _kiln.InvalidArgument("IOBinding: bind at least one output before running")
        names = list(self._outputs)
        results = self._session.run(names, dict(self._inputs), run_options)
        out = []
        for name, result in zip(names, results):
            target = self._outputs[name]
            if target is None:
                out.append(OrtValue(np.asarray(result)))
                continue
            dest = target.numpy()
            if dest.shape != result.shape or dest.dtype != result.dtype:
                raise _kiln.InvalidArgument(
                    f"IOBinding: output '{name}' is {result.dtype}{list(result.shape)} but the "
                    f"memory bound to it is {dest.dtype}{list(dest.shape)}"
                )
            # Kiln's executor allocates its outputs: one copy into the bound memory.
            np.copyto(dest, result)
            out.append(target)
        self._results = out


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


# run_async calls one session may have queued or running at once.
_RUN_ASYNC_PENDING_LIMIT = 64


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
        # run_async: one worker (a session's runs are serialized anyway) and a bounded queue, so a
        # caller cannot make the session hold unbounded threads or pending calls.
        self._async_lock = threading.Lock()
        self._async_pool = None
        self._async_slots = threading.BoundedSemaphore(_RUN_ASYNC_PENDING_LIMIT)
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            source = bytes(path_or_bytes)
            self._model_path = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            source = os.fspath(path_or_bytes)
            self._model_path = source
        else:
            raise TypeError(f"expected a path or bytes, got {type(path_or_bytes).__name__}")
        self._source = source
        self._enable_fallback = True
        self._create(providers)
        for message in self._options._warnings():
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        if self._options.optimized_model_filepath:
            # As ORT does: the graph the session runs, written when the session is made.
            self._sess.save_model(self._options.optimized_model_filepath)
        self._inputs = [NodeArg(*d) for d in self._sess.inputs()]
        self._outputs = [NodeArg(*d) for d in self._sess.outputs()]
        self._input_types = {a.name: a.type for a in self._inputs}
        self._output_names = [a.name for a in self._outputs]
        self._fixed_dims = self._apply_dim_overrides()
        self._profile_start = time.time()

    def _create(self, providers):
        """Opens the native session on the first of providers that works (then the CPU)."""
        names = _provider_names(providers)
        for i, provider in enumerate(names):
            try:
                sess = _kiln._Session(self._source, self._options._native(_PROVIDER_DEVICES[provider]))
            except (_kiln.Unsupported, _kiln.Unavailable) as e:
                if provider == _CPU or i + 1 == len(names):
                    raise _ort_error("load", e) from None
                warnings.warn(f"{provider} is not available ({e}); trying {names[i + 1]}")
                continue
            except _kiln.KilnError as e:
                raise _ort_error("load", e) from None
            self._sess = sess
            self._provider = provider
            return

    def _apply_dim_overrides(self):
        """Puts SessionOptions' free-dimension overrides into the NodeArgs' shapes; returns
        {input name: [(axis, dim name, value)]} for run() to check feeds against."""
        overrides = self._options._dim_overrides
        fixed, used = {}, set()
        for arg in self._inputs + self._outputs:
            for axis, dim in enumerate(arg.shape):
                if isinstance(dim, str) and dim in overrides:
                    arg.shape = arg.shape[:axis] + [overrides[dim]] + arg.shape[axis + 1:]
                    used.add(dim)
                    if arg.name in self._input_types:
                        fixed.setdefault(arg.name, []).append((axis, dim, overrides[dim]))
        for name in sorted(set(overrides) - used):
            # ORT ignores such a name; a typo should not pass unnoticed.
            warnings.warn(f"add_free_dimension_override_by_name('{name}'): no input or output "
                          "of this model has a dim of that name", RuntimeWarning, stacklevel=3)
        return fixed

    def set_providers(self, providers=None, provider_options=None):
        """Re-opens the session on providers (as ORT does): the first that works is used, then
        the CPU. provider_options are checked for shape; Kiln's providers take none."""
        if provider_options is not None:
            if not isinstance(provider_options, (list, tuple)) or (
                providers is not None and len(provider_options) != len(providers)
            ):
                raise ValueError("provider_options must be a list with one dict per provider")
            for o in provider_options:
                if not isinstance(o, dict):
                    raise ValueError("provider_options must be a list with one dict per provider")
        self._create(providers)

    def disable_fallback(self):
        """A run that fails on a non-CPU provider raises instead of retrying on the CPU."""
        self._enable_fallback = False

    def enable_fallback(self):
        """A run that fails on a non-CPU provider re-opens the session on the CPU, warns, and
        runs again there (the default, as in ORT)."""
        self._enable_fallback = True

    def get_modelmeta(self):
        return ModelMetadata(self._sess.modelmeta())

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        """Runs with iobinding's inputs and writes its outputs (see IOBinding)."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise TypeError("run_with_iobinding takes an IOBinding made by this session's io_binding()")
        iobinding._run(run_options)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs on another thread and returns at once; then calls
        callback(results, user_data, err): results as run() returns them and err "" on success,
        or results None and err the error's message (as ORT, which passes a string)."""
        if not callable(callback):
            raise TypeError("run_async: callback must be callable")
        if not self._async_slots.acquire(blocking=False):
            raise RuntimeException(
                f"run_async: {_RUN_ASYNC_PENDING_LIMIT} calls are already pending on this "
                "session; wait for their callbacks before queueing more")

        def work():
            try:
                try:
                    results = self.run(output_names, input_feed, run_options)
                except Exception as e:  # reported to the callback, as ORT reports a failed status
                    callback(None, user_data, f"{type(e).__name__}: {e}")
                    return
                callback(results, user_data, "")
            except Exception as e:  # a callback that raises must not end the worker silently
                warnings.warn(f"run_async: the callback raised {type(e).__name__}: {e}")
            finally:
                self._async_slots.release()

        with self._async_lock:
            if self._async_pool is None:
                self._async_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="kiln-run-async")
            self._async_pool.submit(work)

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
            return ("q", [_prepare_tensor(name, item.numpy() if isinstance(item, OrtValue) else item)
                          for item in value])
        return _prepare_tensor(name, self._cast(name, value))

    def _cast(self, name, value):
        """value as a tensor feed: an OrtValue's array; a list, tuple or Python scalar made an
        array of the input's element type (as ORT does: [[1, 2]] feeds a float input);
        arrays as they are (a wrong dtype is an error, not a silent cast)."""
        if isinstance(value, OrtValue):
            return value.numpy()
        if isinstance(value, (list, tuple, int, float, bool)):
            declared = self._input_types.get(name, "")
            if declared.startswith("optional("):
                declared = declared[len("optional("):-1]
            dtype = _NUMPY_OF.get(declared[len("tensor("):-1]) if declared.startswith("tensor(") else None
            try:
                return np.asarray(value, dtype=dtype)
            except (TypeError, ValueError) as e:
                raise _kiln.InvalidArgument(f"input '{name}': cannot make a {declared} of {value!r}: {e}") from None
        return value

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
            prepared = self._prepare(name, value)
            for axis, dim, fixed in self._fixed_dims.get(name, ()):
                shape = prepared[1].shape if prepared[0] == "t" else None
                if shape is not None and len(shape) > axis and shape[axis] != fixed:
                    raise _kiln.InvalidArgument(
                        f"input '{name}': dim {axis} ('{dim}') is {shape[axis]}, but "
                        f"add_free_dimension_override_by_name fixed it to {fixed}"
                    )
            feeds.append((name, prepared))
        try:
            return self._sess.run(names, feeds)
        except (_kiln.Unavailable, _kiln.Internal) as e:
            if self._provider == _CPU or not self._enable_fallback:
                raise _ort_error("run", e) from None
            failed = e
        except _kiln.KilnError as e:
            raise _ort_error("run", e) from None
        # As ORT: a run that failed on a device provider is retried on the CPU once.
        warnings.warn(f"run on {self._provider} failed ({failed}); falling back to {_CPU}",
                      RuntimeWarning, stacklevel=2)
        self._create([_CPU])
        try:
            return self._sess.run(names, feeds)
        except _kiln.KilnError as e:
            raise _ort_error("run", e) from None

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
