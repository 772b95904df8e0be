// Every fast kernel against the reference kernel, over one table of cases (shapes, groups,
// strides, pads, dilations, activations, broadcasting), like ggml's test-backend-ops. Each case
// builds a one-node graph, checks the executor picked the kernel the case is about (so a case
// never silently tests the reference against itself), runs it on random inputs and compares
// with the reference interpreter. A case about a GPU kernel also names it (Case::gpu); where the
// CPU has no fast kernel for it, its CPU run names "reference" and only checks the case itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "backend_ops_case.hpp"
#include "backends/backend_registry.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/onednn_common.hpp"
#include "core/half.hpp"
#include "ops/registry.hpp"
#include "passes/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

using namespace backend_ops;

// Fused activation attributes of the ai.kiln ops.
std::vector<Attr> act(const char* name, std::vector<float> params = {}) {
  std::vector<Attr> a = {s("activation", name)};
  if (!params.empty()) a.push_back(floats("activation_params", std::move(params)));
  return a;
}
std::vector<Attr> operator+(std::vector<Attr> a, const std::vector<Attr>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Case> cases() {
  const char* conv = "onednn.conv";
  const char* dw = "cpu.depthwise_conv";
  const std::vector<Attr> pad1 = {ints("pads", {1, 1, 1, 1})};
  std::vector<Case> c = {
      // Conv: plain, strided, padded (asymmetric), dilated, grouped, 1-D and 3-D, auto_pad.
      {"conv_3x3_pad_bias", "Conv", {x({1, 3, 8, 8}), w({4, 3, 3, 3}), w({4})}, pad1, conv},
      {"conv_stride2_asym_pads",
       "Conv",
       {x({2, 3, 9, 7}), w({5, 3, 3, 2})},
       {ints("strides", {2, 2}), ints("pads", {0, 1, 1, 0})},
       conv},
      {"conv_dilated",
       "Conv",
       {x({1, 2, 10, 10}), w({3, 2, 3, 3}), w({3})},
       {ints("dilations", {2, 2}), ints("pads", {2, 2, 2, 2})},
       conv},
      {"conv_groups2",
       "Conv",
       {x({1, 4, 6, 6}), w({6, 2, 3, 3}), w({6})},
       pad1 + std::vector<Attr>{i("group", 2)},
       conv},
      {"conv_1x1_batch3", "Conv", {x({3, 16, 5, 5}), w({8, 16, 1, 1}), w({8})}, {}, conv},
      {"conv_1d",
       "Conv",
       {x({2, 3, 11}), w({4, 3, 3}), w({4})},
       {ints("pads", {1, 0}), ints("strides", {2})},
       conv},
      {"conv_3d", "Conv", {x({1, 2, 4, 5, 6}), w({3, 2, 2, 3, 3})}, {}, conv},
      {"conv_same_upper",
       "Conv",
       {x({1, 2, 7, 7}), w({3, 2, 4, 4})},
       {s("auto_pad", "SAME_UPPER"), ints("strides", {2, 2})},
       conv},
      {"conv_same_lower",
       "Conv",
       {x({1, 2, 7, 7}), w({3, 2, 4, 4})},
       {s("auto_pad", "SAME_LOWER")},
       conv},
      {"conv_valid", "Conv", {x({1, 2, 7, 6}), w({3, 2, 3, 3})}, {s("auto_pad", "VALID")}, conv},
      {"conv_weights_as_input", "Conv", {x({1, 3, 6, 6}), x({2, 3, 3, 3}), x({2})}, pad1, conv},
      // Few input channels (a network's stem: the GPU's own stem kernel), strided and dilated.
      {"conv_stem_3x3_s2",
       "Conv",
       {x({2, 3, 17, 16}), w({16, 3, 3, 3}), w({16})},
       pad1 + std::vector<Attr>{ints("strides", {2, 2})},
       conv},
      {"conv_stem_1ch_dilated",
       "Conv",
       {x({1, 1, 12, 11}), w({8, 1, 3, 3})},
       {ints("dilations", {2, 2}), ints("pads", {2, 1, 1, 2})},
       conv},
      // Depthwise: Kiln's own loop.
      {"depthwise_3x3",
       "Conv",
       {x({1, 6, 9, 9}), w({6, 1, 3, 3}), w({6})},
       pad1 + std::vector<Attr>{i("group", 6)},
       dw},
      {"depthwise_stride2_dilated_5x5",
       "Conv",
       {x({2, 4, 13, 11}), w({4, 1, 5, 5})},
       {i("group", 4), ints("strides", {2, 2}), ints("dilations", {2, 1}),
        ints("pads", {3, 1, 2, 2})},
       dw},
      {"depthwise_stride3_no_pad",
       "Conv",
       {x({1, 3, 10, 10}), w({3, 1, 3, 3}), w({3})},
       {i("group", 3), ints("strides", {3, 3})},
       dw},
      // MatMul: 2-D, batched, numpy batch broadcast, 1-D operands.
      {"matmul_2d", "MatMul", {x({5, 7}), w({7, 3})}, {}, "onednn.matmul"},
      {"matmul_batched", "MatMul", {x({2, 4, 6}), x({2, 6, 5})}, {}, "onednn.matmul"},
      {"matmul_broadcast_weights", "MatMul", {x({2, 3, 4, 5}), w({5, 6})}, {}, "onednn.matmul"},
      {"matmul_broadcast_batch", "MatMul", {x({1, 4, 5}), x({3, 5, 2})}, {}, "onednn.matmul"},
      {"matmul_vector_left", "MatMul", {x({6}), w({6, 4})}, {}, "onednn.matmul"},
      {"matmul_vector_right", "MatMul", {x({3, 6}), w({6})}, {}, "onednn.matmul"},
      // Gemm: transposes, alpha, beta, every shape of C.
      {"gemm_plain", "Gemm", {x({4, 6}), w({6, 5}), w({5})}, {}, "onednn.gemm"},
      {"gemm_transB_fc",
       "Gemm",
       {x({2, 16}), w({10, 16}), w({10})},
       {i("transB", 1)},
       "onednn.gemm"},
      {"gemm_transA_alpha_beta",
       "Gemm",
       {x({6, 4}), w({6, 5}), w({4, 5})},
       {i("transA", 1), f("alpha", 0.5f), f("beta", 2.0f)},
       "onednn.gemm"},
      {"gemm_column_c",
       "Gemm",
       {x({4, 3}), w({3, 5}), w({4, 1})},
       {f("alpha", 1.5f)},
       "onednn.gemm"},
      {"gemm_scalar_c", "Gemm", {x({3, 3}), w({3, 2}), w({})}, {f("beta", 0.25f)}, "onednn.gemm"},
      {"gemm_no_c", "Gemm", {x({3, 4}), x({5, 4})}, {i("transB", 1)}, "onednn.gemm"},
      {"gemm_c_as_input", "Gemm", {x({3, 4}), w({4, 2}), x({3, 2})}, {}, "onednn.gemm"},
      // Pooling.
      {"maxpool_3x3_s2_p1",
       "MaxPool",
       {x({1, 4, 9, 9})},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})},
       "onednn.pool"},
      {"maxpool_ceil_mode",
       "MaxPool",
       {x({2, 3, 8, 7})},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), i("ceil_mode", 1)},
       "onednn.pool"},
      {"maxpool_dilated",
       "MaxPool",
       {x({1, 2, 9, 9})},
       {ints("kernel_shape", {2, 2}), ints("dilations", {2, 2})},
       "onednn.pool"},
      {"maxpool_1d",
       "MaxPool",
       {x({2, 3, 10})},
       {ints("kernel_shape", {3}), ints("strides", {2})},
       "onednn.pool"},
      {"avgpool_exclude_pad",
       "AveragePool",
       {x({1, 3, 7, 7})},
       {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1})},
       "onednn.pool"},
      {"avgpool_include_pad",
       "AveragePool",
       {x({1, 3, 7, 7})},
       {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}), i("count_include_pad", 1),
        ints("strides", {2, 2})},
       "onednn.pool"},
      {"global_avg_pool", "GlobalAveragePool", {x({2, 5, 7, 7})}, {}, "cpu.global_pool"},
      {"global_max_pool", "GlobalMaxPool", {x({2, 5, 3, 4})}, {}, "cpu.global_pool"},
      // Element-wise, unary.
      {"relu", "Relu", {x({2, 3, 4, 5})}, {}, "cpu.eltwise"},
      {"leaky_relu", "LeakyRelu", {x({70000})}, {f("alpha", 0.2f)}, "cpu.eltwise"},
      {"clip_inputs", "Clip", {x({3, 4}), w({}), w({})}, {}, "cpu.eltwise"},
      {"clip_max_only", "Clip", {x({3, 4}), none(), w({})}, {}, "cpu.eltwise"},
      {"clip_opset6",
       "Clip",
       {x({3, 4})},
       {f("min", -0.5f), f("max", 0.25f)},
       "cpu.eltwise",
       "",
       6},
      {"hard_sigmoid",
       "HardSigmoid",
       {x({4, 5})},
       {f("alpha", 0.3f), f("beta", 0.4f)},
       "cpu.eltwise"},
      {"hard_swish", "HardSwish", {x({4, 5})}, {}, "cpu.eltwise"},
      {"sigmoid", "Sigmoid", {x({4, 5})}, {}, "cpu.eltwise"},
      {"tanh", "Tanh", {x({4, 5})}, {}, "cpu.eltwise"},
      {"elu", "Elu", {x({4, 5})}, {f("alpha", 0.7f)}, "cpu.eltwise"},
      {"gelu", "Gelu", {x({4, 5})}, {}, "cpu.eltwise", "", 20},
      {"gelu_tanh", "Gelu", {x({4, 5})}, {s("approximate", "tanh")}, "cpu.eltwise", "", 20},
      {"gelu_kiln", "Gelu", {x({4, 5})}, {}, "cpu.eltwise", "ai.kiln", 1},
      {"gelu_kiln_tanh",
       "Gelu",
       {x({4, 5})},
       {s("approximate", "tanh")},
       "cpu.eltwise",
       "ai.kiln",
       1},
      {"exp", "Exp", {x({4, 5})}, {}, "cpu.eltwise"},
      {"sqrt", "Sqrt", {x({4, 5})}, {}, "cpu.eltwise", "", 17, true},
      {"abs", "Abs", {x({4, 5})}, {}, "cpu.eltwise"},
      {"neg", "Neg", {x({4, 5})}, {}, "cpu.eltwise"},
      {"mish", "Mish", {x({4, 5})}, {}, "cpu.eltwise", "", 18},
      // Its point function in a loop (point_loop): bit-identical to the reference kernel.
      {"softsign", "Softsign", {x({4, 5})}, {}, "cpu.eltwise"},
      // Element-wise, binary: same shape, scalar, channel broadcast, both sides broadcast.
      {"add_same", "Add", {x({2, 3, 4}), x({2, 3, 4})}, {}, "cpu.binary"},
      {"add_big_same", "Add", {x({3, 70000}), x({3, 70000})}, {}, "cpu.binary"},
      {"mul_scalar", "Mul", {x({2, 3, 4}), w({})}, {}, "cpu.binary"},
      {"mul_scalar_left", "Mul", {w({1}), x({2, 3, 4})}, {}, "cpu.binary"},
      {"add_channel", "Add", {x({2, 3, 4, 4}), w({1, 3, 1, 1})}, {}, "cpu.binary"},
      {"add_channel_left", "Add", {w({3, 1, 1}), x({2, 3, 4, 4})}, {}, "cpu.binary"},
      {"sub_row", "Sub", {x({4, 5}), w({5})}, {}, "cpu.binary"},
      {"sub_broadcast_left", "Sub", {w({5}), x({4, 5})}, {}, "cpu.binary"},
      {"div_column", "Div", {x({4, 5}), x({4, 1})}, {}, "cpu.binary", "", 17, true},
      {"add_both_broadcast", "Add", {x({3, 1}), x({1, 4})}, {}, "cpu.binary"},
  };
  // Kiln's fused ops: the fused-activation contract on each of them.
  const std::vector<std::vector<Attr>> activations = {act("None"),
                                                      act("Relu"),
                                                      act("Clip", {0.f, 0.5f}),
                                                      act("LeakyRelu", {0.1f}),
                                                      act("HardSigmoid", {0.2f, 0.5f}),
                                                      act("Sigmoid"),
                                                      act("Silu"),
                                                      act("HardSwish"),
                                                      act("Tanh"),
                                                      act("Gelu"),
                                                      act("GeluTanh")};
  for (const auto& a : activations) {
    std::string name = std::get<std::string>(a[0].second.storage());
    c.push_back({"fused_conv_" + name,
                 "FusedConv",
                 {x({1, 3, 7, 7}), w({4, 3, 3, 3}), w({4})},
                 pad1 + a,
                 conv,
                 kKiln,
                 1});
    c.push_back({"fused_matmul_" + name,
                 "FusedMatMul",
                 {x({2, 3, 6}), w({6, 5}), w({5})},
                 a,
                 "onednn.matmul",
                 kKiln,
                 1});
    c.push_back({"fused_gemm_" + name,
                 "FusedGemm",
                 {x({3, 6}), w({4, 6}), w({4})},
                 std::vector<Attr>{i("transB", 1)} + a,
                 "onednn.gemm",
                 kKiln,
                 1});
  }
  c.push_back({"fused_conv_stem_clip6",
               "FusedConv",
               {x({2, 3, 15, 15}), w({32, 3, 3, 3}), w({32})},
               pad1 + std::vector<Attr>{ints("strides", {2, 2})} + act("Clip", {0.f, 6.f}),
               conv,
               kKiln,
               1});
  c.push_back({"fused_depthwise_clip6",
               "FusedConv",
               {x({1, 8, 6, 6}), w({8, 1, 3, 3}), w({8})},
               pad1 + std::vector<Attr>{i("group", 8)} + act("Clip", {0.f, 6.f}),
               dw,
               kKiln,
               1});
  c.push_back({"fused_conv_no_bias_grouped",
               "FusedConv",
               {x({1, 4, 6, 6}), w({4, 2, 3, 3})},
               std::vector<Attr>{i("group", 2)} + act("Relu"),
               conv,
               kKiln,
               1});
  c.push_back({"fused_matmul_no_bias",
               "FusedMatMul",
               {x({4, 6}), w({6, 5})},
               act("Relu"),
               "onednn.matmul",
               kKiln,
               1});
  // Attention: heads as batch dims, a BERT-style padding mask [N, 1, 1, Sk], a causal-style
  // [Sq, Sk] one, none; a scale attribute; more keys than queries and Dv != D.
  const std::string sdpa = "ScaledDotProductAttention";
  c.push_back({"attention",
               sdpa,
               {x({2, 3, 5, 8}), x({2, 3, 5, 8}), x({2, 3, 5, 8})},
               {},
               "cpu.attention",
               kKiln,
               1});
  c.push_back({"attention_padding_mask",
               sdpa,
               {x({2, 3, 4, 8}), x({2, 3, 7, 8}), x({2, 3, 7, 6}), x({2, 1, 1, 7})},
               {f("scale", 0.3f)},
               "cpu.attention",
               kKiln,
               1});
  c.push_back({"attention_square_mask",
               sdpa,
               {x({3, 4, 8}), x({3, 4, 8}), x({3, 4, 8}), w({4, 4})},
               {},
               "cpu.attention",
               kKiln,
               1});
  // Rows longer than one vector with a tail (Sk 70: two 32-score steps and a masked 6), a mask
  // with every dim of its own, and a row of one key.
  c.push_back({"attention_long_rows",
               sdpa,
               {x({1, 2, 3, 40}), x({1, 2, 70, 40}), x({1, 2, 70, 16}), x({1, 2, 3, 70})},
               {},
               "cpu.attention",
               kKiln,
               1});
  c.push_back({"attention_one_key",
               sdpa,
               {x({2, 5, 8}), x({2, 1, 8}), x({2, 1, 8}), x({2, 5, 1})},
               {},
               "cpu.attention",
               kKiln,
               1});
  // bfloat16 (a `--bf16` engine's attention): both products in bfloat16, the probabilities
  // rounded to it before P V (a second rounding the reference does not make). The padding-mask
  // case in bfloat16 is gpu_attention_padding_mask_bf16.
  Case long_bf16{"attention_long_rows_bf16",
                 sdpa,
                 {x({1, 2, 3, 40}), x({1, 2, 70, 40}), x({1, 2, 70, 16}), x({1, 2, 3, 70})},
                 {},
                 "cpu.attention",
                 kKiln,
                 1};
  long_bf16.dtype = DataType::BFloat16;
  long_bf16.reference_roundings = 2;
  if (!backends::cpu::cpu_has_bf16()) long_bf16.cpu_skip = "this CPU has no bfloat16 instructions";
  c.push_back(std::move(long_bf16));
  c.push_back({"softmax_last", "Softmax", {x({3, 4, 5})}, {}, "cpu.softmax"});
  c.push_back({"softmax_middle", "Softmax", {x({3, 4, 5})}, {i("axis", 1)}, "cpu.softmax"});
  c.push_back({"softmax_opset11_flattens",
               "Softmax",
               {x({3, 4, 5})},
               {i("axis", 1)},
               "cpu.softmax",
               "",
               11});
  c.push_back({"log_softmax", "LogSoftmax", {x({2, 7})}, {}, "cpu.softmax"});
  c.push_back({"transpose_channel_shuffle",
               "Transpose",
               {x({1, 4, 3, 5, 6})},
               {ints("perm", {0, 2, 1, 3, 4})},
               "cpu.transpose"});
  c.push_back({"transpose_last_two",
               "Transpose",
               {x({2, 3, 40, 50})},
               {ints("perm", {0, 1, 3, 2})},
               "cpu.transpose"});
  c.push_back({"transpose_reverse", "Transpose", {x({3, 4, 5})}, {}, "cpu.transpose"});
  c.push_back({"concat_channels",
               "Concat",
               {x({2, 3, 4, 4}), w({2, 5, 4, 4}), x({2, 1, 4, 4})},
               {i("axis", 1)},
               "cpu.concat"});
  c.push_back(
      {"concat_last_negative", "Concat", {x({3, 2}), x({3, 7})}, {i("axis", -1)}, "cpu.concat"});
  c.push_back({"sum_three", "Sum", {x({2, 3, 4}), x({2, 3, 4}), w({2, 3, 4})}, {}, "cpu.sum"});
  c.push_back({"layer_norm_last",
               "LayerNormalization",
               {x({3, 5, 40}), w({40}), w({40})},
               {f("epsilon", 1e-3f)},
               "cpu.layer_norm"});
  c.push_back({"layer_norm_two_dims_no_bias",
               "LayerNormalization",
               {x({3, 5, 7}), w({5, 7})},
               {i("axis", 1)},
               "cpu.layer_norm"});
  c.push_back({"skip_layer_norm",
               "SkipLayerNormalization",
               {x({2, 4, 48}), x({2, 4, 48}), w({48}), w({48}), w({48})},
               {f("epsilon", 1e-5f)},
               "cpu.layer_norm",
               kKiln,
               1});
  // bfloat16 (a `--bf16` engine's): each row widened, normalized in float32 and rounded once
  // (Skip's sum too, which the reference rounds to bfloat16 first: a second rounding); rows of
  // BERT's width and a LayerNormalization without a bias.
  for (Case bf : {Case{"skip_layer_norm_bf16",
                       "SkipLayerNormalization",
                       {x({2, 3, 768}), x({2, 3, 768}), w({768}), w({768}), w({768})},
                       {f("epsilon", 1e-12f)},
                       "cpu.layer_norm",
                       kKiln,
                       1},
                  Case{"layer_norm_two_dims_no_bias_bf16",
                       "LayerNormalization",
                       {x({3, 5, 7}), w({5, 7})},
                       {i("axis", 1)},
                       "cpu.layer_norm"}}) {
    bf.dtype = DataType::BFloat16;
    bf.reference_roundings = 2;
    c.push_back(std::move(bf));
  }
  // bfloat16 convolutions wider than 1x1 with 64 channels and a 7x7 output take oneDNN's
  // brgemm convolution on channels-last copies (conv_kernels.cpp channels_last_fits): plain,
  // strided, and with the residual Z its sum post-op reads in that layout.
  for (Case bf : {Case{"conv_3x3_64ch_7x7_bf16",
                       "Conv",
                       {x({1, 64, 7, 7}), w({64, 64, 3, 3}), w({64})},
                       pad1,
                       conv},
                  Case{"conv_3x3_s2_64ch_to_7x7_bf16",
                       "Conv",
                       {x({1, 64, 14, 14}), w({80, 64, 3, 3})},
                       pad1 + std::vector<Attr>{ints("strides", {2, 2})},
                       conv},
                  Case{"fused_conv_residual_relu_64ch_7x7_bf16",
                       "FusedConv",
                       {x({2, 64, 7, 7}), w({64, 64, 3, 3}), w({64}), x({2, 64, 7, 7})},
                       pad1 + act("Relu"),
                       conv,
                       kKiln,
                       1}}) {
    bf.dtype = DataType::BFloat16;
    bf.reference_roundings = 2;
    c.push_back(std::move(bf));
  }
  // LSTM: forward with both initial states and biases, reverse without, bidirectional; all three
  // outputs compared.
  c.push_back(
      {"lstm_forward",
       "LSTM",
       {x({5, 2, 6}), w({1, 16, 6}), w({1, 16, 4}), w({1, 32}), none(), x({1, 2, 4}), x({1, 2, 4})},
       {i("hidden_size", 4)},
       "cpu.lstm",
       "",
       17,
       false,
       3});
  c.push_back({"lstm_reverse_no_bias",
               "LSTM",
               {x({3, 1, 5}), w({1, 12, 5}), w({1, 12, 3})},
               {i("hidden_size", 3), s("direction", "reverse")},
               "cpu.lstm",
               "",
               17,
               false,
               3});
  c.push_back({"lstm_bidirectional",
               "LSTM",
               {x({4, 3, 6}), w({2, 20, 6}), w({2, 20, 5}), w({2, 40})},
               {i("hidden_size", 5), s("direction", "bidirectional")},
               "cpu.lstm",
               "",
               17,
               false,
               3});
  c.push_back({"batchnorm",
               "BatchNormalization",
               {x({2, 5, 3, 4}), w({5}), w({5}), w({5}), w({5})},
               {f("epsilon", 1e-3f)},
               "cpu.batchnorm",
               "",
               15,
               true});
  // The edges of static INT8 regions: per-tensor QuantizeLinear (NaN, infinities, saturation,
  // ties to even; lengths off the 16-lane vectors) and DequantizeLinear, exact.
  std::vector<double> ties;
  for (int k = -40; k < 40; ++k) ties.push_back(0.25 * k + 0.125);  // x / 0.25 = k + 0.5
  ties.insert(ties.end(), {1e9, -1e9, 31.9, -32.1, 0.0, -0.0});
  c.push_back({.name = "quantize_linear_u8",
               .op = "QuantizeLinear",
               .inputs = {x({3, 37}), reals_in({}, {0.05}), ints_in({}, {128}, DataType::UInt8)},
               .kernel = "cpu.quantize_linear",
               .special = true});
  c.push_back({.name = "quantize_linear_s8",
               .op = "QuantizeLinear",
               .inputs = {x({5, 19}), reals_in({}, {0.01}), ints_in({}, {9}, DataType::Int8)},
               .kernel = "cpu.quantize_linear",
               .special = true});
  c.push_back(
      {.name = "quantize_linear_s8_ties",
       .op = "QuantizeLinear",
       .inputs = {reals_in({2, 43}, ties), reals_in({}, {0.25}), ints_in({}, {-3}, DataType::Int8)},
       .kernel = "cpu.quantize_linear"});
  // A half-precision engine's QuantizeLinear reads bfloat16 / float16 (widened exactly) with its
  // float32 scale.
  c.push_back({.name = "quantize_linear_u8_from_bf16",
               .op = "QuantizeLinear",
               .inputs = {x({3, 37}), reals_in({}, {0.05}), ints_in({}, {128}, DataType::UInt8)},
               .kernel = "cpu.quantize_linear",
               .dtype = DataType::BFloat16,
               .special = true});
  c.push_back({.name = "quantize_linear_s8_from_f16",
               .op = "QuantizeLinear",
               .inputs = {x({5, 19}), reals_in({}, {0.01}), ints_in({}, {9}, DataType::Int8)},
               .kernel = "cpu.quantize_linear",
               .dtype = DataType::Float16,
               .special = true});
  c.push_back({.name = "dequantize_linear_u8",
               .op = "DequantizeLinear",
               .inputs = {typed({3, 37}, DataType::UInt8), reals_in({}, {0.05}),
                          ints_in({}, {7}, DataType::UInt8)},
               .kernel = "cpu.dequantize_linear"});
  c.push_back({.name = "dequantize_linear_s8",
               .op = "DequantizeLinear",
               .inputs = {typed({2, 41}, DataType::Int8), reals_in({}, {0.125}),
                          ints_in({}, {-5}, DataType::Int8)},
               .kernel = "cpu.dequantize_linear"});
  // ConvInteger (onnxruntime's dynamic INT8 convolutions) on the int8 convolution: uint8
  // weights around 128 and int8 weights with per-channel zero points, both folded into int8;
  // int32 results, exact.
  std::vector<int64_t> w_u8, w_s8;
  for (int64_t k = 0; k < 6 * 4 * 9; ++k) {
    w_u8.push_back(k * 37 % 200 + 28);
    w_s8.push_back(k * 13 % 150 - 75);
  }
  c.push_back({.name = "conv_integer_u8_weights",
               .op = "ConvInteger",
               .inputs = {typed({2, 4, 7, 6}, DataType::UInt8),
                          ints_in({6, 4, 3, 3}, w_u8, DataType::UInt8),
                          ints_in({}, {3}, DataType::UInt8), ints_in({}, {128}, DataType::UInt8)},
               .attrs = {ints("pads", {1, 1, 1, 1})},
               .kernel = "onednn.qlinear_conv",
               .opset = 10});
  c.push_back(
      {.name = "conv_integer_s8_channel_zero_points",
       .op = "ConvInteger",
       .inputs = {typed({1, 4, 9, 9}, DataType::UInt8), ints_in({6, 4, 3, 3}, w_s8, DataType::Int8),
                  ints_in({}, {7}, DataType::UInt8),
                  ints_in({6}, {1, -2, 3, 0, 5, -4}, DataType::Int8)},
       .attrs = {ints("strides", {2, 2})},
       .kernel = "onednn.qlinear_conv",
       .opset = 10});
  // Zero points that leave int8 (uint8 weights over 0..255, per-channel zero points far from
  // 128): the product with w - 128, corrected by the window sums of x - x_zero (per group).
  std::vector<int64_t> w_wide;
  for (int64_t k = 0; k < 6 * 2 * 9; ++k) w_wide.push_back(k * 53 % 256);
  c.push_back(
      {.name = "conv_integer_wide_u8_weights_grouped",
       .op = "ConvInteger",
       .inputs = {typed({2, 4, 7, 6}, DataType::UInt8),
                  ints_in({6, 2, 3, 3}, w_wide, DataType::UInt8), ints_in({}, {9}, DataType::UInt8),
                  ints_in({6}, {250, 3, 128, 0, 255, 77}, DataType::UInt8)},
       .attrs = {ints("pads", {1, 1, 1, 1}), i("group", 2)},
       .kernel = "onednn.qlinear_conv",
       .opset = 10});
  // uint8 weights over 0..255 without zero points (0): corrected too.
  c.push_back({.name = "conv_integer_u8_weights_no_zero_points",
               .op = "ConvInteger",
               .inputs = {typed({1, 2, 5, 5}, DataType::UInt8),
                          ints_in({6, 2, 3, 3}, w_wide, DataType::UInt8)},
               .kernel = "onednn.qlinear_conv",
               .opset = 10});
  // The dynamic INT8 path (kiln quantize --dynamic): DynamicQuantizeLinear, and MatMulInteger of
  // a uint8 activation (with its zero point) and a constant int8 weight; integer results, exact.
  c.push_back({.name = "dynamic_quantize_linear",
               .op = "DynamicQuantizeLinear",
               .inputs = {x({3, 37})},
               .kernel = "cpu.dynamic_quantize",
               .outputs = 3});
  // All positive (the range still holds 0), a length of whole vectors and a tail.
  c.push_back({.name = "dynamic_quantize_linear_positive_long",
               .op = "DynamicQuantizeLinear",
               .inputs = {x({5, 301})},
               .kernel = "cpu.dynamic_quantize",
               .positive = true,
               .outputs = 3});
  std::vector<int64_t> weight(24 * 9);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<int64_t>(i * 37 % 255) - 127;
  c.push_back(
      {.name = "matmul_integer_zero_point",
       .op = "MatMulInteger",
       .inputs = {typed({2, 5, 24}, DataType::UInt8), ints_in({24, 9}, weight, DataType::Int8),
                  ints_fed({}, {131}, DataType::UInt8),
                  ints_in({9}, std::vector<int64_t>(9, 0), DataType::Int8)},
       .kernel = "onednn.matmul_integer"});
  // uint8 B over 0..255 with per-column zero points (onnxruntime's QUInt8 weights), int8 B
  // with a scalar one: the zero points taken out after the product.
  std::vector<int64_t> wide_b, zb(9);
  for (int64_t k = 0; k < 24 * 9; ++k) wide_b.push_back(k * 71 % 256);
  for (int64_t k = 0; k < 9; ++k) zb[static_cast<size_t>(k)] = k * 29 % 256;
  c.push_back(
      {.name = "matmul_integer_u8_weights_column_zero_points",
       .op = "MatMulInteger",
       .inputs = {typed({2, 5, 24}, DataType::UInt8), ints_in({24, 9}, wide_b, DataType::UInt8),
                  ints_fed({}, {17}, DataType::UInt8), ints_in({9}, zb, DataType::UInt8)},
       .kernel = "onednn.matmul_integer"});
  c.push_back({.name = "matmul_integer_s8_weights_zero_point",
               .op = "MatMulInteger",
               .inputs = {typed({4, 24}, DataType::UInt8), ints_in({24, 9}, weight, DataType::Int8),
                          ints_fed({}, {200}, DataType::UInt8), ints_in({}, {-7}, DataType::Int8)},
               .kernel = "onednn.matmul_integer"});
  c.push_back(
      {.name = "matmul_integer_2d",
       .op = "MatMulInteger",
       .inputs = {typed({7, 24}, DataType::UInt8), ints_in({24, 9}, weight, DataType::Int8)},
       .kernel = "onednn.matmul_integer"});
  // com.microsoft MatMulNBits (kiln quantize --int4, onnxruntime's MatMulNBitsQuantizer): 4-bit
  // codes over every byte value, float scales, packed or float zero points, none (8), a bias; K
  // not a multiple of the block (a padded last block, at block sizes 32 and 128).
  auto nbits = [](const char* name, std::vector<int64_t> a, int64_t k, int64_t n, int64_t block,
                  const char* zp, bool bias) {
    const int64_t blocks = (k + block - 1) / block;
    std::vector<int64_t> codes(static_cast<size_t>(n * blocks * block / 2));
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<int64_t>(i * 73 % 256);
    std::vector<In> in = {x(std::move(a)), ints_in({n, blocks, block / 2}, codes, DataType::UInt8),
                          w({n * blocks})};
    const std::string z = zp;
    if (z == "packed") {
      std::vector<int64_t> zps(static_cast<size_t>(n * ((blocks + 1) / 2)));
      for (size_t i = 0; i < zps.size(); ++i) zps[i] = static_cast<int64_t>(i * 29 % 256);
      in.push_back(ints_in({static_cast<int64_t>(zps.size())}, zps, DataType::UInt8));
    } else if (z == "float") {
      in.push_back(w({n * blocks}));
    } else if (bias) {
      in.push_back(none());
    }
    if (bias) {
      in.push_back(none());  // g_idx
      in.push_back(w({n}));
    }
    return Case{.name = name,
                .op = "MatMulNBits",
                .inputs = std::move(in),
                .attrs = {i("K", k), i("N", n), i("bits", 4), i("block_size", block)},
                .kernel = "cpu.matmul_nbits",
                .domain = "com.microsoft",
                .opset = 1};
  };
  c.push_back(nbits("matmul_nbits_3d_padded_block", {2, 3, 100}, 100, 24, 32, "packed", false));
  c.push_back(nbits("matmul_nbits_symmetric_bias", {5, 64}, 64, 17, 16, "", true));
  c.push_back(nbits("matmul_nbits_float_zero_points", {4, 96}, 96, 9, 64, "float", true));
  c.push_back(nbits("matmul_nbits_block128_padded", {3, 260}, 260, 40, 128, "packed", false));
  // ai.kiln FusedMatMulNBits (passes/fuse_bias_activation): the activation as a post-op.
  for (const char* a : {"Gelu", "Relu"}) {
    Case f = nbits("", {2, 4, 64}, 64, 24, 32, "packed", true);
    f.name = std::string("fused_matmul_nbits_") + a;
    f.op = "FusedMatMulNBits";
    f.domain = "ai.kiln";
    f.attrs.push_back(s("activation", a));
    c.push_back(std::move(f));
  }
  for (Case& d : dynamic_lstm_cases()) c.push_back(std::move(d));
  for (Case& g : gpu_cases()) c.push_back(std::move(g));
  return c;
}

// Random contents of `dtype`: floats uniform in (-2, 2) (or (0.1, 2)), rounded to the type, so
// the reference and the fast kernel read the same values; integers in [-3, 3]; bools 0 or 1.
// With `special`, some floats are NaN, +inf and -inf (every 5th, 7th and 11th element).
Tensor random_tensor(const std::vector<int64_t>& dims, DataType dtype, std::mt19937& rng,
                     bool positive, const std::vector<int64_t>& values = {}, bool special = false,
                     const std::vector<double>& reals = {}) {
  Tensor t(dtype, dims);
  if (!reals.empty()) {
    EXPECT_EQ(dtype, DataType::Float32) << "given float contents are float32";
    EXPECT_EQ(static_cast<int64_t>(reals.size()), t.numel());
    for (int64_t k = 0; k < t.numel() && k < static_cast<int64_t>(reals.size()); ++k) {
      t.data<float>()[k] = static_cast<float>(reals[static_cast<size_t>(k)]);
    }
    return t;
  }
  std::uniform_real_distribution<float> dist(positive ? 0.1f : -2.f, 2.f);
  std::uniform_int_distribution<int64_t> small(-3, 3), bit(0, 1), byte(0, 255);
  auto next_float = [&](int64_t k) {
    const float v = dist(rng);
    if (!special) return v;
    if (k % 5 == 0) return std::numeric_limits<float>::quiet_NaN();
    if (k % 7 == 0) return std::numeric_limits<float>::infinity();
    if (k % 11 == 0) return -std::numeric_limits<float>::infinity();
    return v;
  };
  for (int64_t k = 0; k < t.numel(); ++k) {
    const bool given = !values.empty();
    const int64_t v = given ? values[static_cast<size_t>(k)] : 0;
    switch (dtype) {
      case DataType::Float32:
        t.data<float>()[k] = next_float(k);
        break;
      case DataType::Float16:
        static_cast<uint16_t*>(t.raw_data())[k] = float_to_half_bits(next_float(k));
        break;
      case DataType::BFloat16:
        static_cast<uint16_t*>(t.raw_data())[k] = float_to_bfloat16_bits(next_float(k));
        break;
      case DataType::Int32:
        t.data<int32_t>()[k] = static_cast<int32_t>(given ? v : small(rng));
        break;
      case DataType::Int64:
        t.data<int64_t>()[k] = given ? v : small(rng);
        break;
      case DataType::UInt8:  // quantized activations: the whole range
        t.data<uint8_t>()[k] = static_cast<uint8_t>(given ? v : byte(rng));
        break;
      case DataType::Int8:
        t.data<int8_t>()[k] = static_cast<int8_t>(given ? v : byte(rng) - 128);
        break;
      case DataType::Bool:
        t.data<bool>()[k] = (given ? v : bit(rng)) != 0;
        break;
      default:
        ADD_FAILURE() << "no random " << dtype_name(dtype) << " inputs in the harness";
    }
  }
  return t;
}

// A case's one-node graph and its random feeds.
struct Built {
  std::shared_ptr<ir::Graph> g;
  ir::Node* node = nullptr;
  std::vector<RtValue> feeds;
};

Built build(const Case& c) {
  Built b;
  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(c.name)));
  b.g = std::make_shared<ir::Graph>();
  ir::Graph& g = *b.g;
  g.opsets()[""] = c.domain.empty() ? c.opset : 17;
  if (!c.domain.empty()) g.opsets()[c.domain] = c.opset;
  std::vector<ir::Value*> inputs;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const In& in = c.inputs[k];
    std::string name = fmt::format("in{}", k);
    const DataType dtype = in.dtype == DataType::Undefined ? c.dtype : in.dtype;
    if (in.absent) {
      inputs.push_back(nullptr);
    } else if (in.constant) {
      inputs.push_back(g.add_initializer(
          name, random_tensor(in.dims, dtype, rng, c.positive, in.values, false, in.reals)));
    } else {
      inputs.push_back(g.add_input(name, TypeInfo::tensor(dtype, Shape::from_values(in.dims))));
      b.feeds.push_back(random_tensor(in.dims, dtype, rng, c.positive, in.values, c.special));
    }
  }
  if (c.op == "Clip" && c.inputs.size() > 1) {
    // Bounds in order, so the case means what it says.
    for (size_t k = 1; k < inputs.size(); ++k) {
      if (!inputs[k]) continue;
      Tensor bound(c.dtype, {});
      std::vector<float> v = {k == 1 ? -0.5f : 0.75f};
      if (c.dtype == DataType::Float16) {
        *static_cast<uint16_t*>(bound.raw_data()) = float_to_half_bits(v[0]);
      } else {
        bound.data<float>()[0] = v[0];
      }
      inputs[k]->set_constant(std::move(bound));
    }
  }
  std::vector<ir::Value*> ys;
  for (int k = 0; k < c.outputs; ++k) ys.push_back(g.add_value(fmt::format("y{}", k)));
  b.node = g.add_node(c.op, c.domain, c.name, inputs, ys);
  b.node->set_opset(c.opset);
  for (const auto& [name, value] : c.attrs) b.node->set_attribute(name, value);
  passes::InferShapes{}.apply(g);
  for (ir::Value* y : ys) g.add_output(y);
  return b;
}

// How far a fast result may be from the reference's, per element: |fast - ref| <= tol(ref).
//   float32: 1e-5 + 1e-4 |ref| (kernels compute in float32, the reference in double).
//   float16 / bfloat16: eps (|ref| + 1), eps = 2^-10 (float16) or 2^-7 (bfloat16), the type's
//     spacing just above 1. Both sides compute in a wider type (float32 on a device, double in
//     the reference) and round once, so they may land on neighbouring values: one unit in the
//     last place, at most eps |ref|. The + eps term covers the wide intermediates' own error
//     where a result near 0 comes from cancelling operands of magnitude ~1 (the inputs are in
//     (-2, 2)), whose rounding step there is far below eps.
//   integers and bool: exact.
double tolerance(DataType t, double ref) {
  switch (t) {
    case DataType::Float32:
      return 1e-5 + 1e-4 * std::abs(ref);
    case DataType::Float16:
      return 0x1p-10 * (std::abs(ref) + 1);
    case DataType::BFloat16:
      return 0x1p-7 * (std::abs(ref) + 1);
    default:
      return 0;
  }
}

double element(const Tensor& t, int64_t k) {
  return dtype_is_float(t.dtype()) ? t.double_at(k) : static_cast<double>(t.int_at(k));
}

void expect_matches_reference(const Case& c, const Built& b, const std::vector<RtValue>& fast) {
  std::vector<RtValue> ref = runtime::Interpreter(b.g).run(b.feeds);
  ASSERT_EQ(fast.size(), static_cast<size_t>(c.outputs));
  for (int o = 0; o < c.outputs; ++o) {
    const Tensor& a = fast.at(o).tensor();
    const Tensor& r = ref.at(o).tensor();
    ASSERT_EQ(a.dtype(), r.dtype()) << "output " << o;
    ASSERT_EQ(a.dims(), r.dims()) << "output " << o;
    ASSERT_GT(a.numel(), 0) << "output " << o;
    double worst = 0;
    int64_t worst_at = 0;
    for (int64_t k = 0; k < a.numel(); ++k) {
      const double va = element(a, k), vb = element(r, k);
      // NaN where the reference has NaN is a match (a fully masked attention row).
      if (std::isnan(va) && std::isnan(vb)) continue;
      const double tol =
          tolerance(a.dtype(), vb) * (a.dtype() == DataType::Float32 ? 1 : c.reference_roundings);
      const double excess = tol > 0 ? std::abs(va - vb) / tol : (va == vb ? 0.0 : INFINITY);
      if (!(excess <= worst)) {
        worst = excess;
        worst_at = k;
      }
    }
    EXPECT_LE(worst, 1.0) << "output " << o << " (" << dtype_name(a.dtype())
                          << "): fast and reference results differ beyond the tolerance; worst at "
                          << worst_at << ": " << element(a, worst_at) << " vs "
                          << element(r, worst_at);
  }
}

class BackendOps : public ::testing::TestWithParam<Case> {};

// The CPU: each case names the kernel it is about, and the executor must pick it.
TEST_P(BackendOps, FastKernelMatchesReference) {
  const Case& c = GetParam();
  if (!ops::OpRegistry::instance().find(c.domain, c.op, c.opset)) {
    GTEST_SKIP() << c.domain << "::" << c.op << " has no reference kernel in this build";
  }
  if (!c.cpu_skip.empty()) GTEST_SKIP() << c.cpu_skip;
  Built b = build(c);
  runtime::Executor ex(b.g);
  ASSERT_EQ(ex.kernel_choices().size(), 1u);
  EXPECT_EQ(ex.kernel_choices()[0].kernel, c.kernel)
      << "the case must run the fast kernel it is about; cpu backend says: "
      << backends::CpuBackend::instance().supports(*b.node).reason;
  expect_matches_reference(c, b, ex.run(b.feeds));
}

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// Every other registered device, over the same cases: a case the device says it supports must
// run there (a kernel that then falls back to the CPU fails the case) and match the reference;
// one it does not support is skipped with the device's reason. A device that cannot open here
// (no GPU) is skipped, unless KILN_EXPECT_DEVICES names it (the GPU machine's script does).
class DeviceBackendOps : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(DeviceBackendOps, SupportedCasesRunThereAndMatchReference) {
  const auto& [device, c] = GetParam();
  if (!ops::OpRegistry::instance().find(c.domain, c.op, c.opset)) {
    GTEST_SKIP() << c.domain << "::" << c.op << " has no reference kernel in this build";
  }
  backends::Backend* dev = nullptr;
  try {
    dev = &backends::BackendRegistry::instance().get(device);
  } catch (const Error& e) {
    const char* expect = std::getenv("KILN_EXPECT_DEVICES");
    if (expect && std::string(expect).find(device) != std::string::npos) {
      FAIL() << device << " was expected here: " << e.message();
    }
    GTEST_SKIP() << e.message();
  }
  // Kiln's own kernels preferred for the case (Case::gpu_own), the device's preference restored
  // after it.
  struct Preference {
    backends::Backend* dev;
    backends::KernelPreference saved;
    ~Preference() { dev->set_kernel_preference(saved); }
  } preference{dev, dev->kernel_preference()};
  if (c.gpu_own) dev->set_kernel_preference(backends::KernelPreference::Own);
  Built b = build(c);
  backends::Support s = dev->supports(*b.node);
  // A case about a GPU kernel must run there with it: a check that starts refusing it fails
  // the case instead of skipping it.
  if (device == "gpu" && !c.gpu.empty()) {
    ASSERT_TRUE(s.ok()) << "the case is about " << c.gpu << ", but " << device
                        << " does not run it: " << s.reason;
    EXPECT_EQ(s.kernel, c.gpu);
  }
  if (!s.ok()) GTEST_SKIP() << device << " does not run it: " << s.reason;
  runtime::ExecutorOptions options;
  options.backends = {dev};
  runtime::Executor ex(b.g, options);
  ASSERT_EQ(ex.kernel_choices().size(), 1u);
  EXPECT_EQ(ex.kernel_choices()[0].backend, dev->name())
      << device << " said it runs the case with " << s.kernel << ", but it fell back to "
      << ex.kernel_choices()[0].backend << ":" << ex.kernel_choices()[0].kernel;
  expect_matches_reference(c, b, ex.run(b.feeds));
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceBackendOps,
                         ::testing::Combine(::testing::Values("fake-device", "gpu"),
                                            ::testing::ValuesIn(cases())),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, Case>>& info) {
                           std::string device = std::get<0>(info.param);
                           for (char& ch : device) {
                             if (ch == '-') ch = '_';
                           }
                           return device + "_" + std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace kiln
