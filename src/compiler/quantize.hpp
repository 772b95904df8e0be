#pragma once
// `kiln quantize`: static INT8 quantization of an ONNX model into a standard QDQ model (one that
// onnxruntime opens too), calibrated on real inputs and held to a task metric.
//
// What it writes: every Conv, MatMul and Gemm whose weight is a float32 constant reads it as
// int8 through a DequantizeLinear (per output channel, symmetric, zero point 0; per tensor with
// `per_channel` off), and reads its activation input through a QuantizeLinear / DequantizeLinear
// pair (uint8, asymmetric, per tensor; one pair per value, shared by its quantized readers).
// Activation ranges come from the calibration sets: the smallest and largest value seen
// (minmax), those with a tail of `percentile` cut on each side of a per-value histogram of 2048
// bins, or the range whose uint8 codes lose least information (entropy: KL divergence;
// compiler/calibration.hpp). Memory: 16 KiB a value whatever the model and the number of sets,
// the histograms streamed set by set. Biases stay float32.
//
// The gate: the quantized model and the float one run on the same calibration sets (on the CPU);
// each output's cosine similarity (over every set) must reach `min_cosine`, and for outputs of
// shape [N, classes] the top-1 agreement must reach `min_top1` when given. A model that misses
// them is not written (allow_drift writes it with a warning); the report names the quantized
// nodes whose outputs drift most (cosine of each node's output against the float model's).
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/precision_gate.hpp"
#include "compiler/task_metric.hpp"

namespace kiln::compiler {

enum class CalibrationMethod { MinMax, Percentile, Entropy };
// INT4 weight-only: round to nearest, or GPTQ on the calibration sets' activations.
enum class Int4Method { Rtn, Gptq };

struct QuantizeOptions {
  std::string model_path;   // ONNX model (float32)
  std::string output_path;  // the QDQ ONNX model to write
  GateInputs calibration;   // the calibration sets (precision_gate.hpp's sources)
  CalibrationMethod method = CalibrationMethod::MinMax;
  double percentile = 99.999;  // kept in each tail's side (Percentile)
  // The calibration cache (static INT8): when the file holds the histograms of this very model
  // and calibration data, the calibration's model runs are skipped; else (or when it does not
  // exist) they run and the file is (re)written. A malformed file is an error. "": none.
  std::string calibration_cache;
  bool per_channel = true;  // weights per output channel (else per tensor)
  // Static INT8: a residual Add of a quantized convolution's result reads its skip connection
  // through a QuantizeLinear / DequantizeLinear pair (the one its other reader has, else one of
  // its own from its calibrated range), as onnxruntime's and NNCF's quantizers write it, so that
  // the CPU's int8 convolution adds an 8-bit residual and writes the block's quantized result;
  // false keeps the skip connections float32.
  bool quantized_residuals = true;
  // Dynamic INT8 instead: MatMul and Gemm as MatMulInteger of DynamicQuantizeLinear's output
  // (the activation's range measured at run time, so no calibration ranges; the input sets only
  // feed the gate) and the int8 weight, scaled back to float32; LSTM as com.microsoft
  // DynamicQuantizeLSTM with int8 W and R (compiler/quantize_lstm.hpp). onnxruntime's
  // quantize_dynamic form.
  bool dynamic = false;
  // INT4 weight-only instead (compiler/quantize_int4.hpp): MatMul and Gemm with a constant 2-D
  // weight as com.microsoft MatMulNBits (onnxruntime's contrib op), the weight in blocks of
  // `block_size` values along K, 4 bits each with a float scale a block and (asymmetric) a 4-bit
  // zero point; activations stay float. Conv is left alone. The input sets feed the gate (and
  // GPTQ's Gram matrices).
  bool int4 = false;
  int64_t block_size = 32;  // a power of two in [16, 256]
  bool symmetric = false;   // default asymmetric, as onnxruntime's MatMulNBitsQuantizer
  Int4Method int4_method = Int4Method::Rtn;
  double gptq_damp = 0.01;  // times H's mean diagonal, added to it
  // Bytes the Gram matrices (K x K doubles, one per distinct activation) may take; layers past
  // it are quantized with RTN, and the report says which.
  size_t gptq_memory = size_t{1} << 30;
  std::vector<std::string> op_types = {"Conv", "MatMul", "Gemm", "LSTM"};
  std::vector<std::string> exclude_nodes;  // node names (or "Conv #2": the third) left float32
  // When the gate refuses, keep the node whose output drifts most float32 and try again, up to
  // this many times (each try runs the gate again).
  int fallback_nodes = 4;
  // The trap of naive INT8 (static): an activation whose range is set by a few large values (a
  // detection head's box coordinates beside its scores, one outlier channel) leaves most of its
  // values under half a step, all quantized to the zero point. Where more than this share of an
  // activation's nonzero calibration values would be, the nodes reading it stay float32 (and the
  // report says so). 1: never.
  double max_collapsed = 0.5;
  double min_cosine = 0.99;
  std::optional<double> min_top1;
  // The task metric (compiler/task_metric.hpp) and the drop from the float model's score it may
  // show: with max_drop the gate also requires that, and when it refuses the fallback keeps the
  // most sensitive nodes float32 first (each node's drop when it alone is quantized, measured
  // once: one run of the model a node).
  TaskMetric metric;
  std::optional<double> max_drop;
  // A JSON file of each node's drop when it alone is quantized (measured for it when asked).
  std::string sensitivity_report;
  bool allow_drift = false;
  int threads = 0;
  // Seconds one run of a model (calibration or gate) may take before it stops with an error
  // (0: no limit): a model can ask for unbounded work (a Loop of 2^62 trips).
  double run_timeout_seconds = 600;
  std::function<void(std::string_view)> on_report;  // each report line (default: none)
};

struct OutputScore {
  std::string name;
  double cosine = 1;           // over every set, the whole output
  std::optional<double> top1;  // [N, classes] outputs: share of rows whose argmax agrees
};

struct QuantizeResult {
  size_t quantized_nodes = 0;
  size_t activations = 0;          // QuantizeLinear / DequantizeLinear pairs
  size_t weights = 0;              // int8 weights
  size_t quantized_residuals = 0;  // residual Adds reading an 8-bit skip connection
  size_t calibration_sets = 0;
  bool calibration_cached = false;  // the ranges came from calibration_cache
  std::vector<OutputScore> outputs;
  std::vector<std::pair<std::string, double>> worst_nodes;  // node name, output cosine
  bool pass = true;
  std::string failure;                  // why the gate refused
  std::vector<std::string> kept_float;  // nodes the fallback kept float32, in the order it did
  // Nodes kept float32 because their activation would collapse (max_collapsed), with the share
  // of its nonzero values that would quantize to zero.
  std::vector<std::pair<std::string, double>> collapsed;
  // The task metric, when one other than the default cosine, max_drop or the sensitivity report
  // asked for it: the float model's score, the quantized one's and the drop between.
  std::optional<double> metric_reference, metric_score, metric_drop;
  // Each node's drop when it alone is quantized, most sensitive first (when measured).
  std::vector<std::pair<std::string, double>> sensitivity;
  size_t float_weight_bytes = 0, int8_weight_bytes = 0;
  size_t int4_weight_bytes = 0;  // --int4: packed codes, scales and zero points
  size_t gptq_weights = 0;       // --int4 GPTQ: weights GPTQ quantized (the others RTN)
};

// Throws kiln::Error (InvalidArgument) for a model it cannot quantize (opset below 13, nothing
// to quantize) and when the gate refuses without allow_drift.
QuantizeResult quantize_model(const QuantizeOptions& options);

}  // namespace kiln::compiler
