// libFuzzer target: arbitrary bytes as a model configuration, the text of a config.pbtxt or
// (first byte '{') the JSON a client may send with the repository load API, through the
// checks every config passes at load: validate_config, and for an ensemble its plan (steps,
// maps, data flow, cycles) and the checks against its composing models, here each step's model
// taken to be a fixed two-input, two-output one. Any crash, leak, hang or sanitizer report is a
// bug; a kiln::Error is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/ensemble_config.hpp"
#include "server/model_config.hpp"

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
      kiln::server::validate_config(config);
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
