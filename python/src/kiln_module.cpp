// kiln._kiln: the native half of the Python package, over kiln::Session. The pure-Python half
// (kiln/session.py) gives it the onnxruntime-shaped API and prepares feeds: numeric arrays arrive
// here C-contiguous and aligned (read in place, never written), strings as lists, sequences as
// lists of prepared tensors. Runs release the GIL; outputs are copied into arrays Python owns.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/openmp_runtime.hpp"
#include "core/closest_name.hpp"
#include "feeds.hpp"
#include "onnx/onnx_io.hpp"
#include "runtime/model_loader.hpp"
#include "runtime/session.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kiln::python {
namespace {

using Array = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// The exception classes, one per ErrorCode (created in the module init, never freed).
PyObject* g_errors[5] = {};

PyObject* make_error(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("kiln.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  return cls;
}

DataType dtype_from_dlpack(nb::dlpack::dtype dt, const std::string& what) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    switch (code) {
      case Code::Float:
        if (dt.bits == 16) return DataType::Float16;
        if (dt.bits == 32) return DataType::Float32;
        if (dt.bits == 64) return DataType::Float64;
        break;
      case Code::Int:
        if (dt.bits == 8) return DataType::Int8;
        if (dt.bits == 16) return DataType::Int16;
        if (dt.bits == 32) return DataType::Int32;
        if (dt.bits == 64) return DataType::Int64;
        break;
      case Code::UInt:
        if (dt.bits == 8) return DataType::UInt8;
        if (dt.bits == 16) return DataType::UInt16;
        if (dt.bits == 32) return DataType::UInt32;
        if (dt.bits == 64) return DataType::UInt64;
        break;
      case Code::Bool:
        if (dt.bits == 8) return DataType::Bool;
        break;
      case Code::Bfloat:
        if (dt.bits == 16) return DataType::BFloat16;
        break;
      default:
        break;
    }
  }
  fail(ErrorCode::Unsupported,
       "{}: arrays of this element type (DLPack code {}, {} bits) are not supported", what,
       static_cast<int>(dt.code), static_cast<int>(dt.bits));
}

nb::dlpack::dtype dlpack_from_dtype(DataType t, const std::string& what) {
  switch (t) {
    case DataType::Float32:
      return nb::dtype<float>();
    case DataType::Float64:
      return nb::dtype<double>();
    case DataType::Float16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DataType::Int8:
      return nb::dtype<int8_t>();
    case DataType::Int16:
      return nb::dtype<int16_t>();
    case DataType::Int32:
      return nb::dtype<int32_t>();
    case DataType::Int64:
      return nb::dtype<int64_t>();
    case DataType::UInt8:
      return nb::dtype<uint8_t>();
    case DataType::UInt16:
      return nb::dtype<uint16_t>();
    case DataType::UInt32:
      return nb::dtype<uint32_t>();
    case DataType::UInt64:
      return nb::dtype<uint64_t>();
    case DataType::Bool:
      return nb::dtype<bool>();
    default:
      fail(ErrorCode::Unsupported, "{}: element type {} has no numpy equivalent", what,
           dtype_name(t));
  }
}

}  // namespace

Tensor tensor_from_feed(nb::handle feed, const std::string& what) {
  nb::tuple t = nb::cast<nb::tuple>(feed);
  std::string tag = nb::cast<std::string>(t[0]);
  if (tag == "t") {
    Array a = nb::cast<Array>(t[1]);
    DataType dtype = dtype_from_dlpack(a.dtype(), what);
    std::vector<int64_t> dims(a.ndim());
    for (size_t i = 0; i < a.ndim(); ++i) dims[i] = static_cast<int64_t>(a.shape(i));
    // Read in place: the caller's array stays referenced until the run returns, and outputs are
    // copied before that.
    return Tensor::view(dtype, std::move(dims), const_cast<void*>(a.data()), nullptr);
  }
  KILN_CHECK(tag == "s", ErrorCode::Internal, "{}: unknown feed tag '{}'", what, tag);
  std::vector<int64_t> dims = nb::cast<std::vector<int64_t>>(t[1]);
  nb::list items = nb::cast<nb::list>(t[2]);
  Tensor out(DataType::String, dims);
  KILN_CHECK(static_cast<int64_t>(items.size()) == out.numel(), ErrorCode::Internal,
             "{}: {} strings for {} elements", what, items.size(), out.numel());
  std::string* dst = out.data<std::string>();
  for (size_t i = 0; i < items.size(); ++i) {
    nb::handle item = items[i];
    if (nb::isinstance<nb::bytes>(item)) {
      nb::bytes b = nb::borrow<nb::bytes>(item);
      dst[i].assign(b.c_str(), b.size());
    } else {
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(item.ptr(), &size);
      if (!utf8) throw nb::python_error();
      dst[i].assign(utf8, static_cast<size_t>(size));
    }
  }
  return out;
}

RtValue value_from_feed(nb::handle feed, const std::string& what) {
  nb::tuple t = nb::cast<nb::tuple>(feed);
  std::string tag = nb::cast<std::string>(t[0]);
  if (tag == "n") return RtValue();
  if (tag == "q") {
    std::vector<Tensor> items;
    for (nb::handle item : nb::cast<nb::list>(t[1])) items.push_back(tensor_from_feed(item, what));
    return RtValue::sequence(std::move(items));
  }
  return tensor_from_feed(feed, what);
}

namespace {

nb::object numpy_from_tensor(const Tensor& t, const std::string& what) {
  if (t.dtype() == DataType::String) {
    nb::list items;
    for (const std::string& s : t.values<std::string>()) {
      // Strings are UTF-8 as in ONNX; anything else comes back as bytes rather than failing.
      PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
      if (u) {
        items.append(nb::steal(u));
      } else {
        PyErr_Clear();
        items.append(nb::bytes(s.data(), s.size()));
      }
    }
    nb::module_ np = nb::module_::import_("numpy");
    nb::object arr = np.attr("empty")(items.size(), "dtype"_a = "object");
    for (size_t i = 0; i < items.size(); ++i) arr[nb::int_(i)] = items[i];
    return arr.attr("reshape")(nb::cast(t.dims()));
  }
  nb::dlpack::dtype dt = dlpack_from_dtype(t.dtype(), what);
  // A copy Python owns: outputs may share memory with model constants or with the feeds.
  auto* owned = new Tensor(t.clone());
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(t.dims().begin(), t.dims().end());
  nb::ndarray<nb::numpy> arr(owned->raw_data(), shape.size(), shape.data(), owner, nullptr, dt);
  return arr.cast();
}

nb::object python_from_value(const RtValue& v, const std::string& what) {
  if (v.is_none()) return nb::none();
  if (v.is_sequence()) {
    nb::list items;
    for (const Tensor& t : v.sequence()) items.append(numpy_from_tensor(t, what));
    return items;
  }
  return numpy_from_tensor(v.tensor(), what);
}

// ORT's spelling of a type: tensor(float), seq(tensor(int64)), optional(tensor(float)).
std::string type_string(const TypeInfo* type) {
  if (!type) return "unknown";
  switch (type->kind) {
    case TypeInfo::Kind::Tensor:
      return fmt::format("tensor({})", dtype_name(type->dtype));
    case TypeInfo::Kind::Sequence:
      return fmt::format("seq({})", type_string(type->elem.get()));
    case TypeInfo::Kind::Optional:
      return fmt::format("optional({})", type_string(type->elem.get()));
    case TypeInfo::Kind::Unknown:
      break;
  }
  return "unknown";
}

// (name, type string, shape: [int | str | None], ranges: [(min, max)]) for each input or output.
nb::list describe(const std::vector<IoInfo>& list) {
  nb::list out;
  for (const IoInfo& io : list) {
    nb::list shape, ranges;
    if (io.type.is_tensor() && io.type.shape) {
      for (const Dim& d : io.type.shape->dims()) {
        if (d.is_static()) {
          shape.append(d.value());
        } else if (d.is_symbolic()) {
          shape.append(d.symbol_name());
        } else {
          shape.append(nb::none());
        }
        ranges.append(nb::make_tuple(d.min(), d.max()));
      }
    }
    out.append(nb::make_tuple(io.name, type_string(&io.type), shape, ranges));
  }
  return out;
}

SessionOptions options_from_dict(const nb::dict& d) {
  SessionOptions o;
  if (d.contains("threads")) o.threads = nb::cast<int>(d["threads"]);
  if (d.contains("profiling")) o.profiling = nb::cast<bool>(d["profiling"]);
  if (d.contains("device")) o.device = nb::cast<std::string>(d["device"]);
  if (d.contains("optimize")) o.optimize = nb::cast<bool>(d["optimize"]);
  if (d.contains("config")) o.config = nb::cast<std::map<std::string, std::string>>(d["config"]);
  return o;
}

class PySession {
 public:
  PySession(nb::object source, const nb::dict& options) {
    SessionOptions o = options_from_dict(options);
    if (nb::isinstance<nb::bytes>(source)) {
      nb::bytes b = nb::borrow<nb::bytes>(source);
      std::string_view bytes(b.c_str(), b.size());
      nb::gil_scoped_release release;
      session_ = std::make_unique<Session>(runtime::load_model_bytes(bytes), std::move(o));
    } else {
      std::string path = nb::cast<std::string>(source);
      nb::gil_scoped_release release;
      session_ = std::make_unique<Session>(path, std::move(o));
    }
  }

  nb::list inputs() const { return describe(session_->inputs()); }
  nb::list outputs() const { return describe(session_->outputs()); }

  // feeds: [(name, prepared feed)]; output_names: [] for all outputs.
  nb::list run(const std::vector<std::string>& output_names, const nb::list& feeds) {
    std::map<std::string, RtValue> values;
    for (nb::handle item : feeds) {
      nb::tuple pair = nb::cast<nb::tuple>(item);
      std::string name = nb::cast<std::string>(pair[0]);
      values[name] = value_from_feed(pair[1], fmt::format("input '{}'", name));
    }
    std::vector<RtValue> results;
    {
      nb::gil_scoped_release release;
      results = session_->run(output_names, values);
    }
    nb::list out;
    for (size_t i = 0; i < results.size(); ++i) {
      const std::string& name =
          output_names.empty() ? session_->outputs()[i].name : output_names[i];
      out.append(python_from_value(results[i], fmt::format("output '{}'", name)));
    }
    return out;
  }

  // The model's ONNX metadata, for InferenceSession.get_modelmeta (ORT's ModelMetadata).
  nb::dict modelmeta() const {
    const ir::Model& m = session_->model();
    nb::dict d;
    d["producer_name"] = m.producer_name;
    d["producer_version"] = m.producer_version;
    d["graph_name"] = m.graph ? m.graph->name() : std::string();
    d["domain"] = m.domain;
    d["description"] = m.doc_string;
    d["version"] = m.model_version;
    d["custom_metadata_map"] = m.metadata;
    return d;
  }

  // SessionOptions.optimized_model_filepath: the graph this session runs (optimized at open
  // unless the options turned the passes off; an engine's as compiled), as an ONNX file.
  void save_model(const std::string& path) const {
    nb::gil_scoped_release release;
    try {
      onnx_io::save_model_file(session_->model(), path);
    } catch (const Error& e) {
      throw Error(e.code(),
                  fmt::format("SessionOptions.optimized_model_filepath: {}", e.message()));
    }
  }

  // [(node name, op type, microseconds)] of the last run.
  nb::list profile() const {
    nb::list out;
    for (const runtime::NodeTiming& t : session_->last_profile()) {
      out.append(nb::make_tuple(t.node ? t.node->name() : std::string(),
                                t.node ? t.node->op_type() : std::string(), t.microseconds));
    }
    return out;
  }

 private:
  std::unique_ptr<Session> session_;
};

}  // namespace
}  // namespace kiln::python

NB_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's native runtime binding; use the kiln package's InferenceSession.";
  m.attr("__version__") = KILN_VERSION;

  PyObject* base = make_error(m, "KilnError", PyExc_RuntimeError, "Base class of Kiln's errors.");
  auto pair = [&](PyObject* other) { return nb::make_tuple(nb::handle(base), nb::handle(other)); };
  g_errors[static_cast<int>(kiln::ErrorCode::InvalidArgument)] =
      make_error(m, "InvalidArgument", pair(PyExc_ValueError).ptr(),
                 "A bad argument: a wrong input name, element type or shape.");
  g_errors[static_cast<int>(kiln::ErrorCode::NotFound)] = make_error(
      m, "NotFound", pair(PyExc_LookupError).ptr(), "A file or output name that does not exist.");
  g_errors[static_cast<int>(kiln::ErrorCode::Unsupported)] =
      make_error(m, "Unsupported", pair(PyExc_NotImplementedError).ptr(),
                 "A valid request this build cannot do (an op, element type or device).");
  g_errors[static_cast<int>(kiln::ErrorCode::Unavailable)] =
      make_error(m, "Unavailable", base, "A resource that is missing right now (memory, device).");
  g_errors[static_cast<int>(kiln::ErrorCode::Internal)] =
      make_error(m, "Internal", base, "A bug in Kiln.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const kiln::Error& e) {
      PyErr_SetString(g_errors[static_cast<int>(e.code())], e.message().c_str());
    }
  });

  nb::class_<PySession>(m, "_Session")
      .def(nb::init<nb::object, const nb::dict&>(), "source"_a, "options"_a)
      .def("inputs", &PySession::inputs)
      .def("outputs", &PySession::outputs)
      .def("run", &PySession::run, "output_names"_a, "feeds"_a)
      .def("profile", &PySession::profile)
      .def("modelmeta", &PySession::modelmeta)
      .def("save_model", &PySession::save_model, "path"_a);

  bind_compile(m);
  bind_quantize(m);
  bind_prune(m);

  // The CLI's "did you mean" (core/closest_name.hpp), for SessionOptions' attribute names.
  m.def(
      "closest_name",
      [](const std::string& word, const std::vector<std::string>& candidates) -> nb::object {
        std::optional<std::string> c = kiln::closest_name(word, candidates);
        return c ? nb::cast(*c) : nb::none();
      },
      "word"_a, "candidates"_a);

  // The OpenMP runtime the CPU kernels run on in this process and how its threads wait (the
  // `thread wait policy` line of `kiln bench`): tests check that the package's default is libomp.
  m.def("openmp_runtime", [] { return kiln::backends::cpu::openmp_kernels_runtime(); });
  m.def("openmp_wait_policy", [] { return kiln::backends::cpu::describe_openmp_wait_policy(); });
}
