// LSTM on the CPU, float32, with ONNX's default cell (sigmoid gates, tanh cell and output):
// per direction, the input projection of every time step as one oneDNN matmul (X W^T plus both
// biases), then per step the recurrent product H R^T plus that step's projection (a matmul with
// batch rows and an add post-op, R packed once into the layout oneDNN reads fastest), the gate
// activations with oneDNN's vector eltwise kernels, and the cell. Gates are laid out i,
// o, f, c as in ONNX. Peepholes, sequence_lens, clip, input_forget, other activations and layout 1
// stay on the reference kernel.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "backends/kernel_table.hpp"
#include "ops/kernel_context.hpp"

namespace kiln::backends::cpu {
namespace {

using dnnl::memory;

// R's declared last dim when static, else 0.
int64_t declared_hidden(const ir::Node& node) {
  const ir::Value* r = node.inputs().size() > 2 ? node.input(2) : nullptr;
  if (!r || !r->type().is_tensor() || !r->type().shape || r->type().shape->rank() != 3) return 0;
  const Dim& d = r->type().shape->dims()[2];
  return d.is_static() ? d.value() : 0;
}

std::string check_lstm(const ir::Node& node) {
  if (node.opset() < 7) return "opset < 7 (output_sequence semantics)";
  ops::AttrReader attrs(node);
  if (attrs.attr_int("layout", 0) != 0) return "layout 1";
  if (attrs.attr_int("input_forget", 0) != 0) return "input_forget";
  if (attrs.has_attr("clip")) return "clip";
  if (attrs.attr_int("hidden_size", declared_hidden(node)) <= 0) {
    return "hidden_size unknown (no attribute and R's last dim not static)";
  }
  if (attrs.has_attr("activation_alpha") || attrs.has_attr("activation_beta")) {
    return "activation parameters";
  }
  if (attrs.has_attr("activations")) {
    const std::vector<std::string> acts = attrs.attr_strings("activations");
    for (size_t i = 0; i < acts.size(); ++i) {
      std::string a = acts[i];
      std::transform(a.begin(), a.end(), a.begin(),
                     [](unsigned char ch) { return std::tolower(ch); });
      if (a != (i % 3 == 0 ? "sigmoid" : "tanh")) return "activations other than the defaults";
    }
  }
  if (node.inputs().size() > 4 && node.input(4)) return "sequence_lens";
  if (node.inputs().size() > 7 && node.input(7)) return "peepholes";
  if (std::string why = check_f32_input(node, 0, 3, 3); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 1, 3, 3); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 2, 3, 3); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 3, 2, 2, true); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 5, 3, 3, true); !why.empty()) return why;
  if (std::string why = check_f32_input(node, 6, 3, 3, true); !why.empty()) return why;
  return check_f32_outputs(node);
}

class LstmKernel final : public Kernel {
 public:
  explicit LstmKernel(const ir::Node& node) : node_(node) {
    ops::AttrReader attrs(node);
    // hidden_size may be left out: R's last dim says it (as the reference reads it).
    hidden_ = attrs.attr_int("hidden_size", declared_hidden(node));
    const std::string dir = attrs.attr_string("direction", "forward");
    attrs.check(dir == "forward" || dir == "reverse" || dir == "bidirectional",
                "unknown direction '{}'", dir);
    reverse_ = dir == "reverse";
    directions_ = dir == "bidirectional" ? 2 : 1;
  }
  std::string_view name() const override { return "cpu.lstm"; }

  void run(std::span<const DeviceTensor> in, KernelOutputs& out, Stream& stream) override {
    auto input = [&](size_t i) -> const DeviceTensor* {
      return in.size() > i && in[i].defined() ? &in[i] : nullptr;
    };
    const DeviceTensor& x = in[0];
    const DeviceTensor& w = in[1];
    const DeviceTensor& r = in[2];
    const DeviceTensor* b = input(3);
    const DeviceTensor* h0 = input(5);
    const DeviceTensor* c0 = input(6);
    const int64_t steps = x.dims[0], batch = x.dims[1], in_size = x.dims[2];
    const int64_t hs = hidden_, dirs = directions_, g4 = 4 * hidden_;
    ops::AttrReader attrs(node_);
    auto expect = [&](const DeviceTensor* t, std::vector<int64_t> dims, const char* what) {
      attrs.check(!t || t->dims == dims, "{} is {}, expected {}", what,
                  t ? dims_to_string(t->dims) : "", dims_to_string(dims));
    };
    expect(&w, {dirs, g4, in_size}, "W");
    expect(&r, {dirs, g4, hs}, "R");
    expect(b, {dirs, 2 * g4}, "B");
    expect(h0, {dirs, batch, hs}, "initial_h");
    expect(c0, {dirs, batch, hs}, "initial_c");
    attrs.check(hs > 0, "hidden_size must be positive");

    DeviceTensor y, yh, yc;
    const bool want_y = node_.outputs().size() > 0 && node_.output(0);
    if (want_y) y = out.allocate(0, DataType::Float32, {steps, dirs, batch, hs});
    if (node_.outputs().size() > 1 && node_.output(1)) {
      yh = out.allocate(1, DataType::Float32, {dirs, batch, hs});
    }
    if (node_.outputs().size() > 2 && node_.output(2)) {
      yc = out.allocate(2, DataType::Float32, {dirs, batch, hs});
    }
    if (batch == 0) return;  // every output is empty
    prepare(steps, batch, in_size);
    dnnl::stream& s = dnnl_stream(stream);
    if (r.data != packed_from_) {
      // R in the layout the recurrent product reads fastest, once (R is a constant in every
      // exported model; a fed R is packed again when its buffer changes).
      for (int64_t d = 0; d < dirs; ++d) {
        memory plain = wrap(rt_md_, static_cast<const float*>(r.data) + d * g4 * hs);
        dnnl::reorder(plain, r_packed_[d]).execute(s, plain, r_packed_[d]);
      }
      s.wait();
      packed_from_ = r.data;
    }
    const auto* px = static_cast<const float*>(x.data);
    for (int64_t d = 0; d < dirs; ++d) {
      // Both biases, summed once per run (they may be inputs).
      std::fill(bias_.begin(), bias_.end(), 0.f);
      if (b) {
        const auto* pb = static_cast<const float*>(b->data) + d * 2 * g4;
        for (int64_t k = 0; k < g4; ++k) bias_[k] = pb[k] + pb[g4 + k];
      }
      const auto* pw = static_cast<const float*>(w.data) + d * g4 * in_size;
      if (steps * batch > 0) {
        xw_prim_.execute(s, {{DNNL_ARG_SRC, wrap(xw_pd_.src_desc(), px)},
                             {DNNL_ARG_WEIGHTS, wrap(xw_pd_.weights_desc(), pw)},
                             {DNNL_ARG_BIAS, wrap(xw_pd_.bias_desc(), bias_.data())},
                             {DNNL_ARG_DST, wrap(xw_pd_.dst_desc(), xw_.data())},
                             {DNNL_ARG_SCRATCHPAD, xw_scratch_}});
      }
      float* h = h_.data();
      float* c = c_.data();
      if (h0) {
        std::copy_n(static_cast<const float*>(h0->data) + d * batch * hs, batch * hs, h);
      } else {
        std::fill_n(h, batch * hs, 0.f);
      }
      if (c0) {
        std::copy_n(static_cast<const float*>(c0->data) + d * batch * hs, batch * hs, c);
      } else {
        std::fill_n(c, batch * hs, 0.f);
      }
      const bool backwards = reverse_ || d == 1;
      for (int64_t step = 0; step < steps; ++step) {
        const int64_t t = backwards ? steps - 1 - step : step;
        // gates = H R^T + (X W^T + biases)[t], then sigmoid on i, o, f and tanh on c, both
        // with oneDNN's vector eltwise kernels, then the cell.
        float* gates = hr_.data();
        hr_prim_.execute(s, {{DNNL_ARG_SRC, wrap(hr_pd_.src_desc(), h)},
                             {DNNL_ARG_WEIGHTS, r_packed_[d]},
                             {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                              wrap(step_md_, xw_.data() + t * batch * g4)},
                             {DNNL_ARG_DST, wrap(hr_pd_.dst_desc(), gates)},
                             {DNNL_ARG_SCRATCHPAD, hr_scratch_}});
        for (int64_t n = 0; n < batch; ++n) {
          float* gn = gates + n * g4;
          sigmoid_.execute(
              s, {{DNNL_ARG_SRC, wrap(gates3_md_, gn)}, {DNNL_ARG_DST, wrap(gates3_md_, gn)}});
          tanh_.execute(s, {{DNNL_ARG_SRC, wrap(hidden_md_, gn + 3 * hs)},
                            {DNNL_ARG_DST, wrap(hidden_md_, gn + 3 * hs)}});
          float* cn = c + n * hs;
          for (int64_t k = 0; k < hs; ++k) cn[k] = gn[2 * hs + k] * cn[k] + gn[k] * gn[3 * hs + k];
          // tanh(C) into H, then times the output gate.
          float* hn = h + n * hs;
          tanh_.execute(
              s, {{DNNL_ARG_SRC, wrap(hidden_md_, cn)}, {DNNL_ARG_DST, wrap(hidden_md_, hn)}});
          for (int64_t k = 0; k < hs; ++k) hn[k] *= gn[hs + k];
        }
        if (want_y) {
          std::copy_n(h, batch * hs, static_cast<float*>(y.data) + (t * dirs + d) * batch * hs);
        }
      }
      if (yh.data) std::copy_n(h, batch * hs, static_cast<float*>(yh.data) + d * batch * hs);
      if (yc.data) std::copy_n(c, batch * hs, static_cast<float*>(yc.data) + d * batch * hs);
    }
  }

 private:
  // The two matmuls for these sizes, and the buffers they write.
  void prepare(int64_t steps, int64_t batch, int64_t in_size) {
    if (steps == steps_ && batch == batch_ && in_size == in_size_) return;
    const int64_t hs = hidden_, g4 = 4 * hidden_;
    const memory::data_type f32 = memory::data_type::f32;
    // W and R are [4H, K] row-major: as K x 4H matrices, transposed through their strides.
    const memory::desc wt({in_size, g4}, f32, memory::dims{1, in_size});
    rt_md_ = memory::desc({hs, g4}, f32, memory::dims{1, hs});
    // Both products own their scratchpads (scratchpad_mode::user): oneDNN 2.6's per-thread
    // library scratchpad breaks a primitive run on another thread than its first.
    dnnl::primitive_attr xw_attr;
    xw_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      if (steps * batch > 0) {
        xw_pd_ = dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(plain_desc({steps * batch, in_size}), wt, plain_desc({1, g4}),
                               plain_desc({steps * batch, g4})),
            xw_attr, engine());
        xw_prim_ = dnnl::matmul(xw_pd_);
        xw_scratch_ = memory(xw_pd_.scratchpad_desc(), engine());
      }
      step_md_ = plain_desc({batch, g4});
      dnnl::post_ops add_step;
      add_step.append_binary(dnnl::algorithm::binary_add, step_md_);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      attr.set_post_ops(add_step);
      hr_pd_ = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(plain_desc({batch, hs}),
                             memory::desc({hs, g4}, f32, memory::format_tag::any), step_md_),
          attr, engine());
      gates3_md_ = plain_desc({3 * hs});
      hidden_md_ = plain_desc({hs});
      sigmoid_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::eltwise_logistic, gates3_md_),
          engine()));
      tanh_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                      dnnl::algorithm::eltwise_tanh, hidden_md_),
          engine()));
      hr_prim_ = dnnl::matmul(hr_pd_);
      hr_scratch_ = memory(hr_pd_.scratchpad_desc(), engine());
      r_packed_.clear();
      r_owners_.clear();
      for (int64_t d = 0; d < directions_; ++d) {
        r_packed_.push_back(owned_memory(hr_pd_.weights_desc(), r_owners_.emplace_back()));
      }
      packed_from_ = nullptr;
    } catch (const dnnl::error& err) {
      fail(ErrorCode::Unsupported, "node {}: oneDNN has no matmul for this LSTM: {}", node_.label(),
           err.what());
    }
    xw_.assign(static_cast<size_t>(steps * batch * g4), 0.f);
    hr_.assign(static_cast<size_t>(batch * g4), 0.f);
    h_.assign(static_cast<size_t>(batch * hs), 0.f);
    c_.assign(static_cast<size_t>(batch * hs), 0.f);
    bias_.assign(static_cast<size_t>(g4), 0.f);
    steps_ = steps;
    batch_ = batch;
    in_size_ = in_size;
  }

  const ir::Node& node_;
  int64_t hidden_ = 0;
  bool reverse_ = false;
  int64_t directions_ = 1;
  int64_t steps_ = -1, batch_ = -1, in_size_ = -1;
  dnnl::matmul::primitive_desc xw_pd_, hr_pd_;
  dnnl::matmul xw_prim_, hr_prim_;
  memory xw_scratch_, hr_scratch_;
  memory::desc rt_md_;                            // R^T as a view of R
  memory::desc step_md_, gates3_md_, hidden_md_;  // one step's gates; i, o, f of a row; H values
  dnnl::eltwise_forward sigmoid_, tanh_;
  std::vector<memory> r_packed_;  // per direction, in hr_pd_'s weights layout
  std::vector<std::shared_ptr<void>> r_owners_;
  const void* packed_from_ = nullptr;  // the R buffer r_packed_ was made from
  std::vector<float> xw_, hr_, h_, c_, bias_;
};

std::unique_ptr<Kernel> create_lstm(const ir::Node& node) {
  return std::make_unique<LstmKernel>(node);
}

}  // namespace

KILN_REGISTER_KERNEL({.backend = "cpu",
                      .op_type = "LSTM",
                      .name = "cpu.lstm",
                      .check = check_lstm,
                      .create = create_lstm});

}  // namespace kiln::backends::cpu
