#pragma once
// The operator registry: one entry per (domain, op type) holding the reference kernel and the
// shape inference of that op. Op files register themselves with KILN_REGISTER_OP.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/kernel_context.hpp"
#include "ops/op_traits.hpp"

namespace kiln::ops {

// Highest ai.onnx opset Kiln knows; models importing a newer one are refused.
inline constexpr int kMaxOnnxOpset = 27;

using KernelFn = void (*)(KernelContext&);
using InferFn = void (*)(InferContext&);

struct OpDef {
  std::string domain;  // "" for ai.onnx
  std::string op_type;
  KernelFn kernel = nullptr;
  InferFn infer = nullptr;  // nullptr: output types come from the model or stay unknown
  int since_opset = 1;      // opset range this kernel implements, inclusive
  int until_opset = 1 << 20;
  OpTraits traits;  // see op_traits.hpp; every registration of one op should agree on them
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  void add(OpDef def);
  // nullptr when nothing is registered for (domain, op_type) at `opset`.
  const OpDef* find(const std::string& domain, const std::string& op_type, int opset) const;
  // Like find, but throws Unsupported naming the op, domain and opset.
  const OpDef& get(const std::string& domain, const std::string& op_type, int opset) const;
  // The registration with the highest since_opset; nullptr when the op is unknown.
  const OpDef* newest(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_names() const;
  // Registrations whose opset ranges overlap an earlier one for the same op ("domain.Op@since").
  // Static initializers cannot throw usefully, so this is checked by a unit test instead.
  const std::vector<std::string>& duplicates() const { return duplicates_; }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpDef>> defs_;
  std::vector<std::string> duplicates_;
};

struct OpRegistrar {
  explicit OpRegistrar(OpDef def) { OpRegistry::instance().add(std::move(def)); }
};

}  // namespace kiln::ops

#define KILN_OP_CONCAT_(a, b) a##b
#define KILN_OP_CONCAT(a, b) KILN_OP_CONCAT_(a, b)
// KILN_REGISTER_OP({.op_type = "Relu", .kernel = relu, .infer = infer_same_as_input});
#define KILN_REGISTER_OP(...)                                              \
  static const ::kiln::ops::OpRegistrar KILN_OP_CONCAT(kiln_op_registrar_, \
                                                       __LINE__)(::kiln::ops::OpDef __VA_ARGS__)
