// `kiln quantize`: the flags of the compiler library's quantize_model (compiler/quantize.hpp):
// an ONNX model in, a QDQ INT8 (or, --dynamic, MatMulInteger; --int4, MatMulNBits) ONNX model
// out, calibrated on the given inputs and kept only when it passes the task metric.
#include <iostream>
#include <memory>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "compiler/quantize.hpp"

namespace kiln::cli {
namespace {

struct QuantizeFlags {
  std::string model;
  std::string output;
  std::string calibration_dir;
  std::vector<std::string> calibration_npz;
  std::string method = "minmax";
  double percentile = 99.999;
  std::string calibration_cache;
  bool per_tensor = false;
  bool float_residuals = false;
  bool dynamic = false;
  bool int4 = false;
  int64_t block_size = 32;
  bool symmetric = false;
  std::string int4_method = "rtn";
  double gptq_damp = 0.01;
  size_t gptq_memory_mib = 1024;
  std::vector<std::string> ops = {"Conv", "MatMul", "Gemm", "LSTM"};
  std::vector<std::string> exclude;
  int fallback_nodes = 4;
  double max_collapsed = 0.5;
  double min_cosine = 0.99;
  bool min_cosine_given = false;
  double min_top1 = -1;
  std::string metric = "cosine";
  double max_drop = -1;
  double metric_timeout = 120;
  std::string sensitivity_report;
  bool allow_drift = false;
  int threads = 0;
  double run_timeout = 600;
  InputOptions inputs;
};

int quantize(const QuantizeFlags& f) {
  compiler::QuantizeOptions o;
  o.model_path = f.model;
  o.output_path = f.output;
  o.calibration.calibration_dir = f.calibration_dir;
  o.calibration.calibration_npz = f.calibration_npz;
  o.calibration.files = f.inputs.file_map();
  o.calibration.dims = f.inputs.dims();
  o.calibration.seed = f.inputs.seed;
  o.method = f.method == "percentile" ? compiler::CalibrationMethod::Percentile
             : f.method == "entropy"  ? compiler::CalibrationMethod::Entropy
                                      : compiler::CalibrationMethod::MinMax;
  o.calibration_cache = f.calibration_cache;
  o.percentile = f.percentile;
  o.per_channel = !f.per_tensor;
  o.quantized_residuals = !f.float_residuals;
  o.dynamic = f.dynamic;
  o.int4 = f.int4;
  o.block_size = f.block_size;
  o.symmetric = f.symmetric;
  o.int4_method = f.int4_method == "gptq" ? compiler::Int4Method::Gptq : compiler::Int4Method::Rtn;
  o.gptq_damp = f.gptq_damp;
  o.gptq_memory = f.gptq_memory_mib << 20;
  o.op_types = f.ops;
  o.exclude_nodes = f.exclude;
  o.fallback_nodes = f.fallback_nodes;
  o.max_collapsed = f.max_collapsed;
  o.min_cosine = f.min_cosine;
  o.metric = compiler::parse_task_metric(f.metric);
  o.metric.timeout_seconds = f.metric_timeout;
  if (f.max_drop >= 0) {
    o.max_drop = f.max_drop;
    // --max-drop is the gate then, unless --min-cosine is given too.
    if (!f.min_cosine_given) o.min_cosine = -1;
  }
  o.sensitivity_report = f.sensitivity_report;
  if (f.min_top1 >= 0) o.min_top1 = f.min_top1;
  o.allow_drift = f.allow_drift;
  o.threads = f.threads;
  o.run_timeout_seconds = f.run_timeout;
  o.on_report = [](std::string_view line) { std::cout << line; };
  const compiler::QuantizeResult r = compiler::quantize_model(o);
  if (!r.pass) std::cerr << "kiln: warning: quantize gate: " << r.failure << " (--allow-drift)\n";
  return kExitOk;
}

}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "quantize",
      "Quantize an ONNX model to INT8 (QDQ ONNX: int8 weights per channel, uint8 activations) or "
      "INT4 weight-only (--int4: MatMulNBits), calibrated on real inputs and checked on a task "
      "metric (docs/QUANTIZATION.md)");
  cmd->add_option("model", o->model, "ONNX model file (float32)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->output, "QDQ ONNX model to write")->required();
  cmd->add_option("--calibration-inputs", o->calibration_dir,
                  "Calibrate on these inputs: a directory of NAME.pb files, or of subdirectories "
                  "of them (one input set each)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--calibration-npz", o->calibration_npz,
                  "Calibrate on a numpy .npz file of named inputs (one input set each; repeatable)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--method", o->method,
                  "Activation ranges: minmax, percentile or entropy (the range whose uint8 codes "
                  "keep most information: least KL divergence)")
      ->check(CLI::IsMember({"minmax", "percentile", "entropy"}))
      ->capture_default_str();
  cmd->add_option("--calibration-cache", o->calibration_cache,
                  "Keep the calibration's histograms in this file: a later run on the same model "
                  "and calibration data reads them and skips the calibration runs (another model "
                  "or data: calibrated again and rewritten)");
  cmd->add_option("--percentile", o->percentile,
                  "With --method percentile: the share of each tail's values kept, in percent")
      ->capture_default_str();
  cmd->add_flag("--per-tensor", o->per_tensor,
                "One weight scale per tensor (default: per channel)");
  cmd->add_flag("--float-residuals", o->float_residuals,
                "Keep residual blocks' skip connections float32 (default: a residual Add of a "
                "quantized convolution reads its skip through the DequantizeLinear the skip has "
                "anyway, so the int8 convolution adds it in uint8)");
  cmd->add_flag("--dynamic", o->dynamic,
                "Dynamic INT8: MatMul and Gemm as MatMulInteger on activations quantized at run "
                "time, LSTM as com.microsoft DynamicQuantizeLSTM (no calibration ranges; the "
                "input sets feed the gate)");
  cmd->add_flag("--int4", o->int4,
                "INT4 weight-only: MatMul and Gemm with a constant 2-D weight as com.microsoft "
                "MatMulNBits (4-bit blocks along K; onnxruntime runs it too); activations stay "
                "float32");
  cmd->add_option("--block-size", o->block_size, "With --int4: weights a block (one scale each)")
      ->check(CLI::IsMember({16, 32, 64, 128, 256}))
      ->capture_default_str();
  cmd->add_flag("--symmetric", o->symmetric,
                "With --int4: symmetric blocks (zero point 8; default asymmetric, a 4-bit zero "
                "point a block)");
  cmd->add_option("--int4-method", o->int4_method,
                  "With --int4: rtn (round to nearest) or gptq (spreads each column's rounding "
                  "error by the calibration activations' Gram matrix)")
      ->check(CLI::IsMember({"rtn", "gptq"}))
      ->capture_default_str();
  cmd->add_option("--gptq-damp", o->gptq_damp,
                  "With --int4-method gptq: damping added to the Gram matrix, times its mean "
                  "diagonal")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  cmd->add_option("--gptq-memory-mib", o->gptq_memory_mib,
                  "With --int4-method gptq: MiB the Gram matrices (K x K doubles each) may take; "
                  "layers past it get RTN")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30))
      ->capture_default_str();
  cmd->add_option("--ops", o->ops, "Op types to quantize (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--exclude-node", o->exclude, "Leave this node float32 (repeatable)");
  cmd->add_option("--fallback-nodes", o->fallback_nodes,
                  "When the gate refuses, keep the node whose output drifts most float32 and try "
                  "again, at most this many times (0: never)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option_function<double>(
         "--min-cosine",
         [o](double v) {
           o->min_cosine = v;
           o->min_cosine_given = true;
         },
         "The gate: each output's cosine similarity to the float model's, at least (default 0.99; "
         "off with --max-drop unless given)")
      ->check(CLI::Range(-1.0, 1.0));
  cmd->add_option("--max-collapsed", o->max_collapsed,
                  "Keep a node float32 where more than this share of its input's nonzero "
                  "calibration values would quantize to zero (a detection head's scores beside its "
                  "coordinates, an outlier channel); 1: never")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--metric", o->metric,
                  "The task metric: cosine, top1, max-abs-steps or script:PATH (PATH REFERENCE.npz "
                  "CANDIDATE.npz prints the candidate's score; docs/QUANTIZATION.md)")
      ->capture_default_str();
  cmd->add_option("--max-drop", o->max_drop,
                  "The gate: the metric may drop at most this much from the float model's score; "
                  "the fallback keeps the most sensitive nodes float32 until it does")
      ->check(CLI::Range(0.0, 1e30));
  cmd->add_option("--metric-timeout", o->metric_timeout,
                  "Seconds one run of a script metric may take before it is stopped")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  cmd->add_option("--sensitivity-report", o->sensitivity_report,
                  "Write each node's effect on the metric when it alone is quantized (JSON; one "
                  "run of the model a node)");
  cmd->add_option("--min-top1", o->min_top1,
                  "The gate: for [N, classes] outputs, the share of rows whose top-1 class agrees "
                  "with the float model's, at least")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--allow-drift", o->allow_drift,
                "Write the model even when it misses the gate (with a warning)");
  cmd->add_option("--run-timeout", o->run_timeout,
                  "Seconds one calibration or gate run of the model may take (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads,
                  "Intra-op threads of the calibration runs (0: one per core)");
  add_input_options(cmd, o->inputs);
  return {cmd, [o] { return quantize(*o); }};
}

}  // namespace kiln::cli
