#pragma once
// The compile pipeline as a library: ONNX in, a checked .kiln engine file out. import -> shapes
// -> passes -> fp16 -> plan -> pack -> write -> read back -> precision gate. `kiln compile`, the
// C ABI (kiln_compile) and Python (kiln.compile) are thin layers over compile_model, so the same
// model and options give the same engine whichever way it is called.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/events.hpp"
#include "compiler/fp16.hpp"
#include "compiler/plan_report.hpp"
#include "compiler/precision_gate.hpp"
#include "engine/engine_file.hpp"
#include "runtime/precision.hpp"

namespace kiln::compiler {

struct CompileOptions {
  // The model: the ONNX file at `model_path`, or the ONNX bytes in `model_bytes` (then
  // `model_path` only names the model in messages and in the engine's stamp, and may be empty;
  // external data is looked up beside it).
  std::string model_path;
  std::optional<std::string> model_bytes;
  // The engine file to write; default: `model_path` with the extension .kiln.
  std::string output_path;

  // Input dims, fixed or as ranges: "NAME:1x3x224x224" or "NAME:1..64x3x224x224" (shape_spec.hpp).
  std::vector<std::string> shapes;
  bool optimize = true;       // run the graph passes
  std::string dump_after;     // pass name: send the graph after it as a Trace message
  bool trace_passes = false;  // one Trace line per pass run
  Fp16Options fp16;
  // Store the weights in the layouts this CPU's kernels compute with, so that opening an engine
  // maps them (a weight only those kernels read is stored once, packed); without, kernels pack
  // them when the engine opens.
  bool prepack = true;
  // The target stamped into the engine, DEVICE[:FEATURE,...]; default the portable CPU baseline.
  std::string target;
  // The devices the engine is made for, as SessionOptions::device names them ("cpu", "gpu",
  // "gpu,cpu"): their fusions run (passes::add_device_passes), the kernels and memory are
  // planned on them, and the precision gate runs there. A device absent here leaves the plan
  // to the engine's first open, which says so.
  std::string device = "cpu";

  // The precision gate.
  bool verify = true;        // false: the engine is written unchecked
  bool allow_drift = false;  // keep a drifting engine, with a Warning
  // Largest relative L2 error per output; unset: 1e-4 (1e-2 with fp16), at least 1e-3 for
  // float16 and 1e-2 for bfloat16 outputs. Set: taken as it is for every element type.
  std::optional<double> max_rel_l2;
  std::optional<double> rtol, atol;    // an element rule |a-e| <= atol + rtol*|e| besides
  double verify_timeout_seconds = 60;  // 0: no limit
  // Compare the top of the dim ranges with the reference whatever it costs; by default a top
  // whose reference run would cost more than the gate's budget runs on the engine alone
  // (gate_sizes.hpp).
  bool verify_full = false;
  // The gate's inputs (precision_gate.hpp, GateInputs): calibration sets of named tensors or .npz
  // files (what the quantizer will calibrate on too), a directory of them, per-input files, dims,
  // a seed.
  GateInputs inputs;
  int threads = 0;  // intra-op threads of the gate's runs; 0: one per core

  // Report lines, traces and warnings; without a callback they go to Kiln's log (report and
  // trace lines at info level, warnings as warnings).
  MessageCallback on_message;
  // Progress of the long steps (optimizing, precision gate); none when empty.
  ProgressCallback on_progress;
};

struct CompileTimings {  // milliseconds
  double import = 0, optimize = 0, fp16 = 0, plan = 0, tune = 0, pack = 0, write = 0, read_back = 0,
         gate = 0, total = 0;
};

struct CompileResult {
  std::string engine_path;
  uint64_t engine_bytes = 0, weight_bytes = 0;
  engine::EngineInfo info;  // the stamp, as read back
  size_t nodes_before = 0, nodes_after = 0;
  PlanSummary plan;  // kernels chosen, nodes left on reference kernels with their FLOPs
  size_t packed_weights = 0;
  size_t tactics = 0;      // kernels whose timed choices the engine stores (device engines)
  size_t stored_once = 0;  // packed weights whose plain copy the engine does not store
  uint64_t packed_bytes = 0;
  std::string fp16_summary;  // empty without fp16
  GateReport gate;           // gate.ran false when verify was off
  CompileTimings timings;
  std::string report;  // every Report message, in order: what `kiln compile` prints

  // The share of the model's FLOPs left on reference kernels, 0..1.
  double fallback_flop_share() const {
    return plan.total_flops > 0 ? plan.fallback_flops / plan.total_flops : 0.0;
  }
};

// Compiles, writes and checks the engine. Throws kiln::Error: InvalidArgument for bad options
// (OptionError for values that parse but do not fit the model) and for an engine that drifts
// past the tolerance (unless allow_drift; no file is left then), NotFound for a missing model,
// Unavailable when the gate runs out of time.
CompileResult compile_model(const CompileOptions& options);

}  // namespace kiln::compiler
