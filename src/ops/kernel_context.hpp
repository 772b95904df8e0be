#pragma once
// What a reference kernel and a shape-inference function see of their node: inputs, attributes
// (with opset-aware defaults supplied by the caller), outputs, and a way to run subgraphs.
#include <span>
#include <string>
#include <vector>

#include "core/rt_value.hpp"
#include "ir/graph.hpp"

namespace kiln::ops {

// Typed attribute access for one node; errors name the node and the attribute.
class AttrReader {
 public:
  // `opset` overrides the node's own when a fused op runs the kernel of the op it wraps
  // (src/ops/wrapped_kernel.hpp); -1 keeps the node's.
  explicit AttrReader(const ir::Node& node, int opset = -1)
      : node_(node), opset_(opset < 0 ? node.opset() : opset) {}
  const ir::Node& node() const { return node_; }
  int opset() const { return opset_; }

  bool has_attr(const std::string& name) const { return node_.attribute(name) != nullptr; }
  int64_t attr_int(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t fallback) const;
  float attr_float(const std::string& name) const;
  float attr_float(const std::string& name, float fallback) const;
  std::string attr_string(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback) const;
  std::vector<float> attr_floats(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name, std::vector<float> fallback) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name,
                                        std::vector<std::string> fallback) const;
  const Tensor& attr_tensor(const std::string& name) const;
  const ir::Graph& attr_graph(const std::string& name) const;
  const TypeInfo& attr_type(const std::string& name) const;

  // Throws InvalidArgument prefixed with the node's label.
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    fail_with(ErrorCode::InvalidArgument, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  [[noreturn]] void unsupported(fmt::format_string<Args...> format, Args&&... args) const {
    fail_with(ErrorCode::Unsupported, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void check(bool cond, fmt::format_string<Args...> format, Args&&... args) const {
    if (!cond)
      fail_with(ErrorCode::InvalidArgument, fmt::format(format, std::forward<Args>(args)...));
  }
  [[noreturn]] void fail_with(ErrorCode code, const std::string& message) const;

 private:
  const ir::Attribute& require(const std::string& name) const;
  const ir::Node& node_;
  int opset_;
};

// Runs a subgraph with the given inputs in the scope of the node being executed, so the body
// can read values captured from enclosing graphs.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  virtual std::vector<RtValue> run_subgraph(const ir::Graph& body,
                                            const std::vector<RtValue>& inputs) = 0;
};

class KernelContext : public AttrReader {
 public:
  KernelContext(const ir::Node& node, std::span<const RtValue* const> inputs,
                std::vector<RtValue>& outputs, SubgraphRunner* runner, int opset = -1)
      : AttrReader(node, opset), inputs_(inputs), outputs_(outputs), runner_(runner) {}

  // Declared input slots, including trailing optional ones the node left empty.
  size_t input_count() const { return inputs_.size(); }
  // True when slot i was given and holds a value (not an empty optional).
  bool has_input(size_t i) const {
    return i < inputs_.size() && inputs_[i] && !inputs_[i]->is_none();
  }
  // The tensor in slot i; InvalidArgument naming the node when absent or not a tensor.
  const Tensor& input(size_t i) const;
  // Whatever slot i holds (None when absent).
  const RtValue& input_value(size_t i) const;

  size_t output_count() const { return outputs_.size(); }
  // True when the node declares output i (optional outputs may be skipped).
  bool wants_output(size_t i) const { return i < outputs_.size() && node().output(i) != nullptr; }
  void set_output(size_t i, RtValue value);

  std::vector<RtValue> run_subgraph(const ir::Graph& body,
                                    const std::vector<RtValue>& inputs) const;

 private:
  std::span<const RtValue* const> inputs_;
  std::vector<RtValue>& outputs_;
  SubgraphRunner* runner_;
};

// Shape inference: reads input types (and constant inputs when known) and sets output types.
class InferContext : public AttrReader {
 public:
  InferContext(const ir::Node& node, int opset = -1) : AttrReader(node, opset) {}
  size_t input_count() const { return node().inputs().size(); }
  bool has_input(size_t i) const { return node().input(i) != nullptr; }
  // nullptr when the slot is empty.
  const TypeInfo* input_type(size_t i) const;
  // The input's data when it is an initializer; nullptr otherwise.
  const Tensor* input_constant(size_t i) const;
  size_t output_count() const { return node().outputs().size(); }
  void set_output_type(size_t i, TypeInfo type);
  const std::vector<std::pair<size_t, TypeInfo>>& inferred() const { return inferred_; }

 private:
  std::vector<std::pair<size_t, TypeInfo>> inferred_;
};

}  // namespace kiln::ops
