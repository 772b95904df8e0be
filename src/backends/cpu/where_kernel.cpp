// Where on the CPU: Y = cond ? X : Y2 with the three broadcast together (numpy's rules). The
// output walks rows of its innermost dim; each operand steps by its own strides (0 along the
// dims it is broadcast over), so a mask row broadcast over heads and queries costs no copy.
// Rows are split over the threads. Any element type of X and Y2 but strings.
#include <algorithm>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/element_bits.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"
#include "ops/op_utils.hpp"

namespace kiln::backends::cpu {
namespace {

std::string check_where(const ir::Node& node) {
  if (node.inputs().size() != 3) return "not three inputs";
  for (const ir::Value* v : node.inputs()) {
    if (!v || v->type().kind != TypeInfo::Kind::Tensor) return "an input that is not a tensor";
  }
  if (node.input(0)->type().dtype != DataType::Bool) return "a condition that is not bool";
  if (node.input(1)->type().dtype == DataType::String) return "string tensors";
  return "";
}

template <typename T>
void select_row(const bool* c, int64_t cs, const T* x, int64_t xs, const T* y, int64_t ys,
                int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = c[i * cs] ? x[i * xs] : y[i * ys];
}

class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(const ir::Node& node) : node_(node) {}
  std::string_view name() const override { return "cpu.where"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream&) override {
    ops::AttrReader attrs(node_);
    const DeviceTensor &c = in[0], &x = in[1], &y = in[2];
    attrs.check(x.dtype == y.dtype, "X is {} but Y is {}", dtype_name(x.dtype),
                dtype_name(y.dtype));
    const std::vector<int64_t> dims = ops::broadcast_dims(attrs, {c.dims, x.dims, y.dims});
    const size_t rank = dims.size();
    DeviceTensor result = out.allocate(0, x.dtype, dims);
    const int64_t total = result.numel();
    if (total == 0) return;
    const std::vector<int64_t> cs = ops::broadcast_strides(c.dims, dims),
                               xs = ops::broadcast_strides(x.dims, dims),
                               ys = ops::broadcast_strides(y.dims, dims);
    const int64_t inner = rank == 0 ? 1 : dims.back();
    const int64_t rows = total / inner;
    const size_t esize = dtype_size(x.dtype);
    const auto* pc = static_cast<const bool*>(c.data);
    const auto* px = static_cast<const char*>(x.data);
    const auto* py = static_cast<const char*>(y.data);
    auto* po = static_cast<char*>(result.data);
    const size_t last = rank == 0 ? 0 : rank - 1;
    const int64_t ci = rank ? cs[last] : 0, xi = rank ? xs[last] : 0, yi = rank ? ys[last] : 0;
#pragma omp parallel for schedule(static) if (rows > 1 && total > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      // Each operand's offset of row r: its index in every outer dim times that dim's stride.
      int64_t oc = 0, ox = 0, oy = 0;
      for (size_t k = last, rest = static_cast<size_t>(r); k-- > 0;) {
        const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(dims[k]));
        rest /= static_cast<size_t>(dims[k]);
        oc += i * cs[k], ox += i * xs[k], oy += i * ys[k];
      }
      char* dst = po + static_cast<size_t>(r * inner) * esize;
      const bool* crow = pc + oc;
      const char* xrow = px + ox * static_cast<int64_t>(esize);
      const char* yrow = py + oy * static_cast<int64_t>(esize);
      with_element_bits(esize, [&](auto tag) {
        using T = decltype(tag);
        select_row(crow, ci, reinterpret_cast<const T*>(xrow), xi, reinterpret_cast<const T*>(yrow),
                   yi, inner, reinterpret_cast<T*>(dst));
      });
    }
  }

 private:
  const ir::Node& node_;
};

std::unique_ptr<Kernel> create_where(const ir::Node& node) {
  return std::make_unique<WhereKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "Where",
                      .name = "cpu.where",
                      .check = check_where,
                      .create = create_where});

}  // namespace kiln::backends::cpu
