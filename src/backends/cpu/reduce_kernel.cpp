// ReduceSum / Mean / Max / Min / Prod / SumSquare / L1 / L2 / LogSum / LogSumExp on the CPU,
// float32. The input's dims are merged into alternating runs kept / reduced; the common layouts,
// one reduced run ([outer, R] or [outer, R, inner]: a row sum, or sums of rows along the inner
// dim), are loops the compiler vectorizes; any other layout walks the reduced elements of each
// output through the reference's walk (ops/reduce_utils.hpp). Accumulated in float32 (double for
// the products and logarithms' sums), NaN propagated by Max / Min, the empty reductions as the
// reference (Sum 0, Prod 1, Max -inf, Min +inf, Mean NaN). Axes, keepdims and noop_with_empty_axes
// are read as the reference reads them (ops/reduce_axes.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/movement_inputs.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/reduce_axes.hpp"
#include "ops/reduce_utils.hpp"

namespace kiln::backends::cpu {
namespace {

enum class Kind { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

struct Op {
  const char* type;
  Kind kind;
};
constexpr Op kOps[] = {{"ReduceSum", Kind::Sum},       {"ReduceMean", Kind::Mean},
                       {"ReduceMax", Kind::Max},       {"ReduceMin", Kind::Min},
                       {"ReduceProd", Kind::Prod},     {"ReduceSumSquare", Kind::SumSquare},
                       {"ReduceL1", Kind::L1},         {"ReduceL2", Kind::L2},
                       {"ReduceLogSum", Kind::LogSum}, {"ReduceLogSumExp", Kind::LogSumExp}};

Kind kind_of(const std::string& op) {
  for (const Op& o : kOps) {
    if (op == o.type) return o.kind;
  }
  return Kind::Sum;
}

std::string check_reduce(const ir::Node& node) {
  if (std::string why = check_data_input(node); !why.empty()) return why;
  if (node.input(0)->type().dtype != DataType::Float32) {
    return "not float32 (the reference takes the rest)";
  }
  return "";
}

// What one element adds to an accumulator, and the accumulator's start.
struct Sum {
  static float init() { return 0.f; }
  static float add(float a, float v) { return a + v; }
};
struct Square {
  static float init() { return 0.f; }
  static float add(float a, float v) { return a + v * v; }
};
struct Abs {
  static float init() { return 0.f; }
  static float add(float a, float v) { return a + std::fabs(v); }
};
struct Product {
  static double init() { return 1.0; }
  static double add(double a, float v) { return a * v; }
};
struct Max {
  static float init() { return -std::numeric_limits<float>::infinity(); }
  static float add(float a, float v) { return std::isnan(a) || v <= a ? a : v; }
};
struct Min {
  static float init() { return std::numeric_limits<float>::infinity(); }
  static float add(float a, float v) { return std::isnan(a) || v >= a ? a : v; }
};
// The input as [outer, reduced, inner] when the reduced dims form one run, else nothing.
struct Block {
  int64_t outer = 1, reduced = 1, inner = 1;
};

std::optional<Block> one_run(const std::vector<int64_t>& dims, const std::vector<bool>& r) {
  Block b;
  int phase = 0;  // 0: before the run, 1: in it, 2: after it
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (r[i]) {
      if (phase == 2) return std::nullopt;
      phase = 1;
      b.reduced *= dims[i];
    } else {
      (phase == 0 ? b.outer : b.inner) *= dims[i];
      if (phase == 1) phase = 2;
    }
  }
  return b;
}

// acc[o] over every input element that reduces into output o, by Acc.
template <typename Acc, typename A>
void accumulate(const float* x, const std::vector<int64_t>& dims, const std::vector<bool>& r,
                std::vector<A>& acc) {
  if (const std::optional<Block> b = one_run(dims, r)) {
    const int64_t outer = b->outer, red = b->reduced, inner = b->inner;
#pragma omp parallel for schedule(static) if (outer * red * inner > 65536 && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      A* out = acc.data() + o * inner;
      const float* src = x + o * red * inner;
      for (int64_t k = 0; k < red; ++k) {
        const float* row = src + k * inner;
        for (int64_t i = 0; i < inner; ++i) out[i] = Acc::add(out[i], row[i]);
      }
    }
    return;
  }
  // Any layout: the reference's walk of every element with its output's offset.
  ops::reduction::for_each_reduced(dims, r, [&](int64_t i, int64_t o) {
    acc[static_cast<size_t>(o)] = Acc::add(acc[static_cast<size_t>(o)], x[i]);
  });
}

class ReduceKernel final : public Kernel {
 public:
  explicit ReduceKernel(const ir::Node& node) : node_(node), kind_(kind_of(node.op_type())) {}
  std::string_view name() const override { return "cpu.reduce"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& outputs, Stream&) override {
    const DeviceTensor& x = in[0];
    ops::AttrReader attrs(node_);
    const size_t rank = x.dims.size();
    ops::ReduceAxes r;
    if (attrs.opset() >= ops::axes_input_since(node_.op_type())) {
      attrs.check(!attrs.has_attr("axes"), "axes is an input since opset {}, not an attribute",
                  ops::axes_input_since(node_.op_type()));
      std::vector<int64_t> axes;
      if (in.size() > 1 && in[1].defined()) {
        attrs.check(in[1].dtype == DataType::Int64 && in[1].dims.size() <= 1,
                    "axes must be a 1-D int64 tensor");
        axes = index_values(attrs, in[1], "axes");
      }
      r = ops::resolve_axes(attrs, rank, axes, attrs.attr_int("noop_with_empty_axes", 0) != 0);
    } else {
      r = ops::resolve_axes(attrs, rank, attrs.attr_ints("axes", {}), false);
    }
    DeviceTensor y = outputs.allocate(0, DataType::Float32, ops::reduced_dims(x.dims, r));
    const int64_t n = y.numel();
    if (n == 0) return;
    int64_t count = 1;
    for (size_t i = 0; i < rank; ++i) {
      if (r.reduced[i]) count *= x.dims[i];
    }
    const auto* px = static_cast<const float*>(x.data);
    auto* py = static_cast<float*>(y.data);
    auto finish = [&](auto& acc, auto&& f) {
      for (int64_t o = 0; o < n; ++o) py[o] = static_cast<float>(f(acc[static_cast<size_t>(o)]));
    };
    switch (kind_) {
      case Kind::Sum:
      case Kind::Mean: {
        std::vector<float> acc(static_cast<size_t>(n), Sum::init());
        accumulate<Sum>(px, x.dims, r.reduced, acc);
        const float scale = kind_ == Kind::Mean ? 1.f / static_cast<float>(count) : 1.f;
        if (kind_ == Kind::Mean && count == 0) {
          finish(acc, [](float) { return std::numeric_limits<float>::quiet_NaN(); });
        } else {
          finish(acc, [&](float a) { return a * scale; });
        }
        break;
      }
      case Kind::SumSquare:
      case Kind::L2: {
        std::vector<float> acc(static_cast<size_t>(n), Square::init());
        accumulate<Square>(px, x.dims, r.reduced, acc);
        finish(acc, [&](float a) { return kind_ == Kind::L2 ? std::sqrt(a) : a; });
        break;
      }
      case Kind::L1: {
        std::vector<float> acc(static_cast<size_t>(n), Abs::init());
        accumulate<Abs>(px, x.dims, r.reduced, acc);
        finish(acc, [](float a) { return a; });
        break;
      }
      case Kind::Prod: {
        std::vector<double> acc(static_cast<size_t>(n), Product::init());
        accumulate<Product>(px, x.dims, r.reduced, acc);
        finish(acc, [](double a) { return a; });
        break;
      }
      case Kind::Max:
      case Kind::Min: {
        std::vector<float> acc(static_cast<size_t>(n),
                               kind_ == Kind::Max ? Max::init() : Min::init());
        if (kind_ == Kind::Max) {
          accumulate<Max>(px, x.dims, r.reduced, acc);
        } else {
          accumulate<Min>(px, x.dims, r.reduced, acc);
        }
        finish(acc, [](float a) { return a; });
        break;
      }
      case Kind::LogSum: {
        std::vector<double> acc(static_cast<size_t>(n), 0.0);
        struct DoubleSum {
          static double add(double a, float v) { return a + v; }
        };
        accumulate<DoubleSum>(px, x.dims, r.reduced, acc);
        finish(acc, [](double a) { return std::log(a); });
        break;
      }
      case Kind::LogSumExp: {
        // The per-output max first, so that large inputs do not overflow the exponentials.
        std::vector<float> shift(static_cast<size_t>(n), Max::init());
        accumulate<Max>(px, x.dims, r.reduced, shift);
        for (float& s : shift) {
          if (std::isinf(s)) s = 0.f;
        }
        // exp(v - shift[o]) needs each element's output.
        std::vector<double> acc(static_cast<size_t>(n), 0.0);
        ops::reduction::for_each_reduced(x.dims, r.reduced, [&](int64_t i, int64_t o) {
          acc[static_cast<size_t>(o)] +=
              std::exp(static_cast<double>(px[i]) - shift[static_cast<size_t>(o)]);
        });
        for (int64_t q = 0; q < n; ++q) {
          py[q] = static_cast<float>(std::log(acc[static_cast<size_t>(q)]) +
                                     shift[static_cast<size_t>(q)]);
        }
        break;
      }
    }
  }

 private:
  const ir::Node& node_;
  Kind kind_;
};

std::unique_ptr<Kernel> create_reduce(const ir::Node& node) {
  return std::make_unique<ReduceKernel>(node);
}

}  // namespace

#define KILN_CPU_REDUCE(OP)                    \
  KILN_REGISTER_KERNEL({.backend = "cpu",      \
                        .op_type = OP,         \
                        .name = "cpu.reduce",  \
                        .check = check_reduce, \
                        .create = create_reduce})
KILN_CPU_REDUCE("ReduceSum");
KILN_CPU_REDUCE("ReduceMean");
KILN_CPU_REDUCE("ReduceMax");
KILN_CPU_REDUCE("ReduceMin");
KILN_CPU_REDUCE("ReduceProd");
KILN_CPU_REDUCE("ReduceSumSquare");
KILN_CPU_REDUCE("ReduceL1");
KILN_CPU_REDUCE("ReduceL2");
KILN_CPU_REDUCE("ReduceLogSum");
KILN_CPU_REDUCE("ReduceLogSumExp");

}  // namespace kiln::backends::cpu
