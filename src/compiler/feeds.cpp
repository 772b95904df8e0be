#include "compiler/feeds.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "compiler/option_error.hpp"
#include "core/closest_name.hpp"
#include "onnx/onnx-ml.pb.h"
#include "onnx/onnx_io.hpp"

namespace kiln::compiler {
namespace fs = std::filesystem;
namespace {

bool is_bounded(const Dim& d) {
  return d.is_symbolic() && d.max() != std::numeric_limits<int64_t>::max() && d.max() > d.min();
}

int64_t dim_value(const Dim& d, const std::map<std::string, int64_t>& dims, DimChoice choice) {
  if (d.is_static()) return d.value();
  if (d.is_symbolic()) {
    auto it = dims.find(d.symbol_name());
    if (it != dims.end()) return it->second;
    if (choice == DimChoice::Max && is_bounded(d)) return d.max();
  }
  return std::max<int64_t>(1, d.min());
}

// One input set from the .pb files directly in `dir`.
runtime::Feeds read_input_set(const fs::path& dir, const std::vector<IoInfo>& inputs,
                              uint64_t seed) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".pb") continue;
    std::string path = entry.path().string();
    std::string name = entry.path().stem().string();
    auto known = [&](const std::string& n) {
      return std::any_of(inputs.begin(), inputs.end(),
                         [&](const IoInfo& i) { return i.name == n; });
    };
    if (!known(name)) {
      // ONNX test data names files input_0.pb and keeps the tensor's name inside.
      onnx::TensorProto proto;
      std::ifstream in(path, std::ios::binary);
      if (proto.ParseFromIstream(&in) && known(proto.name())) name = proto.name();
    }
    KILN_CHECK(known(name), ErrorCode::NotFound,
               "input file '{}' names no input of the model (by its file name or the name "
               "inside the TensorProto)",
               path);
    KILN_CHECK_ARG(!files.count(name), "two files in '{}' give input '{}'", dir.string(), name);
    files[name] = path;
  }
  KILN_CHECK(!files.empty(), ErrorCode::NotFound, "no input .pb files in '{}'", dir.string());
  return make_feeds(inputs, files, {}, seed);
}

}  // namespace

namespace {

Tensor random_tensor(const TypeInfo& t, const std::string& name,
                     const std::map<std::string, int64_t>& dims, DimChoice choice,
                     std::mt19937_64& rng) {
  KILN_CHECK_ARG(t.is_tensor() && t.shape, "input '{}' has type {}: give it with --input", name,
                 t.to_string());
  std::vector<int64_t> shape;
  for (const Dim& d : t.shape->dims()) shape.push_back(dim_value(d, dims, choice));
  Tensor out(t.dtype, shape);
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int> small(0, 9);
  dispatch_dtype<DTypeSet::AllWithLowPrecision>(
      t.dtype, fmt::format("random input '{}'", name), [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = out.data<T>();
        for (int64_t i = 0; i < out.numel(); ++i) {
          if constexpr (std::is_same_v<T, std::string>) {
            p[i] = std::to_string(small(rng));
          } else if constexpr (std::is_same_v<T, bool>) {
            p[i] = small(rng) % 2;
          } else if constexpr (std::is_integral_v<T>) {
            // 0 or 1: valid as an index into any table of two rows or more, as a mask and as a
            // token type, which generated inputs for the precision gate must be (a BERT
            // token-type table has two rows).
            p[i] = static_cast<T>(small(rng) % 2);
          } else if constexpr (is_sub_byte_int_v<T>) {
            p[i] = T::from_field(static_cast<uint8_t>(small(rng) % 2));
          } else if constexpr (requires { T::from_double(0.0); }) {
            p[i] = T::from_double(real(rng));
          } else if constexpr (requires { T::from_float(0.0f); }) {
            p[i] = T::from_float(static_cast<float>(real(rng) + 1.5));  // E8M0: powers of two > 0
          } else {
            p[i] = T(static_cast<float>(real(rng)));
          }
        }
      });
  return out;
}

}  // namespace

RtValue random_input(const IoInfo& input, const std::map<std::string, int64_t>& dims,
                     DimChoice choice, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const TypeInfo& t = input.type;
  // An optional input is given; a sequence gets two tensors.
  if (t.kind == TypeInfo::Kind::Optional && t.elem) {
    return random_input({input.name, *t.elem}, dims, choice, seed);
  }
  if (t.kind == TypeInfo::Kind::Sequence && t.elem && t.elem->is_tensor()) {
    std::vector<Tensor> items;
    for (int k = 0; k < 2; ++k)
      items.push_back(random_tensor(*t.elem, input.name, dims, choice, rng));
    return RtValue::sequence(std::move(items));
  }
  return random_tensor(t, input.name, dims, choice, rng);
}

std::vector<std::string> symbolic_dim_names(const std::vector<IoInfo>& inputs) {
  std::vector<std::string> names;
  std::function<void(const TypeInfo&)> visit = [&](const TypeInfo& t) {
    if (t.shape) {
      for (const Dim& d : t.shape->dims()) {
        if (d.is_symbolic() &&
            std::find(names.begin(), names.end(), d.symbol_name()) == names.end())
          names.push_back(d.symbol_name());
      }
    }
    if (t.elem) visit(*t.elem);  // sequences and optionals: their element's dims
  };
  for (const IoInfo& in : inputs) visit(in.type);
  return names;
}

void check_dim_names(const std::map<std::string, int64_t>& dims,
                     const std::vector<std::string>& known) {
  for (const auto& [name, value] : dims) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (known.empty())
      throw OptionError(fmt::format(
          "--dim {}={}: the model has no symbolic dims (every input dim is fixed)", name, value));
    throw OptionError(fmt::format("--dim {}={}: the model has no dim named '{}'{} (its dims: {})",
                                  name, value, name, did_you_mean(name, known),
                                  quoted_list(known)));
  }
}

runtime::Feeds make_feeds(const std::vector<IoInfo>& inputs,
                          const std::map<std::string, std::string>& files,
                          const std::map<std::string, int64_t>& dims, uint64_t seed,
                          DimChoice choice, const runtime::Feeds& given) {
  check_dim_names(dims, symbolic_dim_names(inputs));
  auto known = [&](const std::string& name) {
    return std::any_of(inputs.begin(), inputs.end(),
                       [&](const IoInfo& i) { return i.name == name; });
  };
  for (const auto& entry : files)
    KILN_CHECK(known(entry.first), ErrorCode::NotFound, "the model has no input named '{}'",
               entry.first);
  for (const auto& entry : given)
    KILN_CHECK(known(entry.first), ErrorCode::NotFound, "the model has no input named '{}'",
               entry.first);
  runtime::Feeds feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const IoInfo& in = inputs[i];
    if (auto g = given.find(in.name); g != given.end()) {
      feeds[in.name] = g->second;
    } else if (auto f = files.find(in.name); f != files.end()) {
      feeds[in.name] = onnx_io::read_value_file(f->second, in.type);
    } else {
      feeds[in.name] = random_input(in, dims, choice, seed * 1000003 + i);
    }
  }
  return feeds;
}

bool has_bounded_range(const std::vector<IoInfo>& inputs) {
  for (const IoInfo& in : inputs) {
    if (!in.type.shape) continue;
    for (const Dim& d : in.type.shape->dims()) {
      if (is_bounded(d)) return true;
    }
  }
  return false;
}

std::vector<runtime::Feeds> read_input_sets(const std::string& dir,
                                            const std::vector<IoInfo>& inputs, uint64_t seed) {
  KILN_CHECK(fs::is_directory(dir), ErrorCode::NotFound, "input directory '{}' does not exist",
             dir);
  std::vector<fs::path> subdirs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) subdirs.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  std::vector<runtime::Feeds> sets;
  bool has_files = std::any_of(fs::directory_iterator(dir), fs::directory_iterator(),
                               [](const auto& e) { return e.path().extension() == ".pb"; });
  if (has_files || subdirs.empty()) sets.push_back(read_input_set(dir, inputs, seed));
  for (const fs::path& sub : subdirs) sets.push_back(read_input_set(sub, inputs, seed));
  return sets;
}

}  // namespace kiln::compiler
