// libFuzzer target: arbitrary bytes as a model configuration, the text of a config.pbtxt or
// (first byte '{') the JSON a client may send with the repository load API, through the
// checks every config passes at load: validate_config, and for an ensemble its plan (steps,
// maps, data flow, cycles) and the checks against its composing models, here each step's model
// taken to be a fixed two-input, two-output one; for a sequence model, its plan against a model
// that has every control and state tensor the config names, with the types the config gives
// them (so the checks reach the initial states). Any crash, leak, hang or sanitizer report is a
// bug; a kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/ensemble_config.hpp"
#include "server/infer_types.hpp"
#include "server/model_config.hpp"
#include "server/sequence_config.hpp"

namespace {

kiln::server::ModelConfig composing_model() {
  return kiln::server::parse_config_text(R"(
name: "step"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] optional: true } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 4 ] } ]
)",
                                         "composing model");
}

// The model tensors a sequence config names, typed as the config types them (rank unknown).
void sequence_model(const kiln::server::ModelConfig& config, std::vector<kiln::IoInfo>& inputs,
                    std::vector<kiln::IoInfo>& outputs) {
  using kiln::DataType;
  using kiln::TypeInfo;
  for (const auto& c : config.sequence_batching().control_input()) {
    DataType dtype = DataType::Bool;
    if (c.control_size() > 0) {
      const auto& control = c.control(0);
      if (control.int32_false_true_size() > 0) dtype = DataType::Int32;
      if (control.fp32_false_true_size() > 0) dtype = DataType::Float32;
      if (control.kind() == inference::ModelSequenceBatching::Control::CONTROL_SEQUENCE_CORRID) {
        dtype = kiln::server::datatype_from_config(control.data_type());
      }
    }
    inputs.push_back({c.name(), TypeInfo::tensor(dtype)});
  }
  for (const auto& st : config.sequence_batching().state()) {
    const DataType dtype = kiln::server::datatype_from_config(st.data_type());
    inputs.push_back({st.input_name(), TypeInfo::tensor(dtype)});
    outputs.push_back({st.output_name(), TypeInfo::tensor(dtype)});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::server::ModelConfig step = composing_model();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::server::ModelConfig config = !text.empty() && text.front() == '{'
                                           ? kiln::server::parse_config_json(text, "fuzz")
                                           : kiln::server::parse_config_text(text, "fuzz");
    if (config.name().empty()) config.set_name("fuzz");
    if (!kiln::server::is_ensemble(config)) {
      kiln::server::complete_sequence_config(config);
      kiln::server::validate_config(config);
      if (config.has_sequence_batching()) {
        std::vector<kiln::IoInfo> inputs, outputs;
        sequence_model(config, inputs, outputs);
        // No initial_state file can be read from here; 1 MiB bounds each state.
        kiln::server::plan_sequence(config, inputs, outputs, "/nonexistent-kiln-fuzz", 2,
                                    size_t{1} << 20);
      }
      return 0;
    }
    kiln::server::complete_ensemble_config(config);
    kiln::server::validate_config(config);
    const kiln::server::EnsemblePlan plan = kiln::server::plan_ensemble(config);
    std::vector<const kiln::server::ModelConfig*> steps(plan.steps.size(), &step);
    kiln::server::check_ensemble_steps(config, plan, steps);
    kiln::server::config_to_json(config);
  } catch (const kiln::Error&) {
  }
  return 0;
}
