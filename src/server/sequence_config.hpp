#pragma once
// The `sequence_batching` section of a model config (Triton's stateful models): the checks at load
// (in Triton 2.51's words where Triton has a message) and what the sequence batcher needs from it:
// the control inputs the server fills per request, the implicit states it carries from one request
// of a sequence to the next, the strategy and the idle timeout.
#include <set>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "server/model_config.hpp"

namespace kiln::server {

// One model input the server fills for every request of a sequence (the client never sends it).
struct SequenceControl {
  enum class Kind { Start, End, Ready, CorrId };
  Kind kind = Kind::Start;
  std::string input;
  DataType dtype = DataType::Undefined;
  // Start / End / Ready: one-element tensors with the config's false and true values.
  Tensor false_value, true_value;
};

// An implicit state: the model's output `output` of one request is its input `input` on the next
// request of the same sequence; a sequence starts from `initial`.
struct SequenceState {
  std::string input, output;
  DataType dtype = DataType::Undefined;
  std::vector<int64_t> dims;  // config dims (no batch dim); -1: any
  Tensor initial;             // the starting value, without a batch dim
};

struct SequenceOptions {
  enum class Strategy { Direct, Oldest };
  Strategy strategy = Strategy::Direct;
  uint64_t max_idle_us = 1000000;  // Triton's default: 1 s
  size_t slots_per_instance = 1;   // sequences one instance holds at once
  size_t max_rows = 1;             // requests one execution takes (max_batch_size, at least 1)
  uint64_t max_queue_delay_us = 0;
  double minimum_slot_utilization = 0;     // direct: run once this share of slots is ready
  std::vector<int> preferred_batch_sizes;  // oldest: ascending
  size_t max_backlog = 0;                  // sequences waiting for a slot, at most
  std::vector<SequenceControl> controls;
  std::vector<SequenceState> states;
};

// Names the server feeds (control inputs and state inputs) and the state outputs: auto-completion
// leaves them out of the client-visible inputs and outputs.
std::set<std::string> sequence_server_inputs(const ModelConfig& config);
std::set<std::string> sequence_state_outputs(const ModelConfig& config);

// Triton's normalization: the idle timeout defaults to 1 s, oldest's preferred batch size to
// max_batch_size.
void complete_sequence_config(ModelConfig& config);

// The config-only checks (validate_config calls it when sequence_batching is set): controls,
// states, strategy settings; InvalidArgument in Triton's words, Unsupported naming a field Kiln
// does not implement.
void validate_sequence_config(const ModelConfig& config);

// Checks the section against the model's own inputs and outputs (each control and state input is
// a model input of the right type and rank, each state output a model output), reads initial
// state files from <model_dir>/initial_state/, and returns what the batcher needs. `instances` is
// the model's instance count (for the backlog bound); an initial state larger than
// `max_state_bytes` (the request memory budget) is refused before it is allocated.
SequenceOptions plan_sequence(const ModelConfig& config, const std::vector<IoInfo>& inputs,
                              const std::vector<IoInfo>& outputs, const std::string& model_dir,
                              size_t instances, size_t max_state_bytes);

}  // namespace kiln::server
