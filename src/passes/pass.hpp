#pragma once
// A graph pass: any type with `std::string_view name() const` and `bool apply(ir::Graph&) const`
// (true when it changed the graph). Pass holds one by value, so pipelines are plain vectors.
#include <functional>
#include <memory>
#include <string_view>

#include "ir/graph.hpp"

namespace kiln::passes {

class Pass {
 public:
  template <typename T>
  Pass(T impl) : self_(std::make_shared<Holder<T>>(std::move(impl))) {}  // NOLINT
  std::string_view name() const { return self_->name(); }
  bool apply(ir::Graph& graph) const { return self_->apply(graph); }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual std::string_view name() const = 0;
    virtual bool apply(ir::Graph& graph) const = 0;
  };
  template <typename T>
  struct Holder final : Concept {
    explicit Holder(T v) : impl(std::move(v)) {}
    std::string_view name() const override { return impl.name(); }
    bool apply(ir::Graph& graph) const override { return impl.apply(graph); }
    T impl;
  };
  std::shared_ptr<const Concept> self_;
};

// Applies fn to `graph` and, depth first, to every subgraph nested in its nodes; true if any
// call returned true.
bool apply_recursively(ir::Graph& graph, const std::function<bool(ir::Graph&)>& fn);

}  // namespace kiln::passes
