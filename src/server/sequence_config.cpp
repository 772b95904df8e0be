#include "server/sequence_config.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "server/infer_types.hpp"

namespace kiln::server {
namespace {

using Batching = inference::ModelSequenceBatching;
using ControlKind = Batching::Control::Kind;

std::string kind_name(ControlKind kind) {
  return Batching::Control::Kind_Name(kind);
}

bool is_boolean(ControlKind kind) {
  return kind != Batching::Control::CONTROL_SEQUENCE_CORRID;
}

// Kiln's own bound on the slots a config may ask for: every slot can hold a sequence's state.
constexpr int kMaxCandidateSequences = 65536;
// Sequences waiting for a slot, per slot (at least kMinBacklog in all): a bound Triton lacks.
constexpr size_t kBacklogPerSlot = 4;
constexpr size_t kMinBacklog = 64;

// The one control of a control input; Triton's checks on the false / true values.
void check_control(const Batching::ControlInput& input, const std::string& model) {
  KILN_CHECK_ARG(!input.name().empty(), "sequence batching control tensor must have a name for {}",
                 model);
  KILN_CHECK_ARG(input.control_size() == 1,
                 "sequence batching control tensor '{}' must have exactly one control for {} "
                 "(it has {})",
                 input.name(), model, input.control_size());
  const Batching::Control& c = input.control(0);
  const std::string kind = kind_name(c.kind());
  const int lists = (c.int32_false_true_size() > 0) + (c.fp32_false_true_size() > 0) +
                    (c.bool_false_true_size() > 0);
  if (!is_boolean(c.kind())) {
    KILN_CHECK_ARG(lists == 0,
                   "sequence batching must not specify either 'int32_false_true', "
                   "'fp32_false_true' nor 'bool_false_true' for {} for {}",
                   kind, model);
    const inference::DataType t = c.data_type();
    KILN_CHECK_ARG(t == inference::TYPE_UINT64 || t == inference::TYPE_INT64 ||
                       t == inference::TYPE_UINT32 || t == inference::TYPE_INT32 ||
                       t == inference::TYPE_STRING,
                   "sequence batching control '{}' for {} must have data_type TYPE_UINT64, "
                   "TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING, not {}",
                   kind, model, inference::DataType_Name(t));
    return;
  }
  KILN_CHECK_ARG(lists == 1,
                 "sequence batching must specify exactly one of 'int32_false_true', "
                 "'fp32_false_true' and 'bool_false_true' for {} for {}",
                 kind, model);
  const int size = c.int32_false_true_size() + c.fp32_false_true_size() + c.bool_false_true_size();
  const char* list = c.int32_false_true_size() > 0  ? "int32_false_true"
                     : c.fp32_false_true_size() > 0 ? "fp32_false_true"
                                                    : "bool_false_true";
  KILN_CHECK_ARG(size == 2,
                 "sequence batching control '{}' must have exactly 2 entries for {} for {}", list,
                 kind, model);
}

SequenceControl make_control(const Batching::ControlInput& input) {
  const Batching::Control& c = input.control(0);
  SequenceControl out;
  out.input = input.name();
  switch (c.kind()) {
    case Batching::Control::CONTROL_SEQUENCE_START:
      out.kind = SequenceControl::Kind::Start;
      break;
    case Batching::Control::CONTROL_SEQUENCE_END:
      out.kind = SequenceControl::Kind::End;
      break;
    case Batching::Control::CONTROL_SEQUENCE_READY:
      out.kind = SequenceControl::Kind::Ready;
      break;
    default:
      out.kind = SequenceControl::Kind::CorrId;
      out.dtype = datatype_from_config(c.data_type());
      return out;
  }
  if (c.int32_false_true_size() == 2) {
    out.dtype = DataType::Int32;
    out.false_value = Tensor::from_vector<int32_t>({1}, {c.int32_false_true(0)});
    out.true_value = Tensor::from_vector<int32_t>({1}, {c.int32_false_true(1)});
  } else if (c.fp32_false_true_size() == 2) {
    out.dtype = DataType::Float32;
    out.false_value = Tensor::from_vector<float>({1}, {c.fp32_false_true(0)});
    out.true_value = Tensor::from_vector<float>({1}, {c.fp32_false_true(1)});
  } else {
    out.dtype = DataType::Bool;
    out.false_value = Tensor(DataType::Bool, {1});
    out.true_value = Tensor(DataType::Bool, {1});
    *static_cast<uint8_t*>(out.false_value.raw_data()) = c.bool_false_true(0) ? 1 : 0;
    *static_cast<uint8_t*>(out.true_value.raw_data()) = c.bool_false_true(1) ? 1 : 0;
  }
  return out;
}

void check_state(const Batching::State& s, const std::string& model) {
  KILN_CHECK_ARG(!s.input_name().empty() && !s.output_name().empty(),
                 "sequence batching state of model '{}' must name both input_name and output_name",
                 model);
  datatype_from_config(s.data_type());
  KILN_CHECK(s.data_type() != inference::TYPE_STRING, ErrorCode::Unsupported,
             "model '{}': state '{}' is TYPE_STRING; Kiln carries numeric and bool states only",
             model, s.input_name());
  for (int64_t d : s.dims()) {
    KILN_CHECK_ARG(d >= -1, "model '{}': state '{}' has dim {}; dims are -1 (any) or >= 0", model,
                   s.input_name(), d);
  }
  KILN_CHECK_ARG(s.initial_state_size() <= 1,
                 "initial_state field for state input '{}' must contain exactly one or zero "
                 "element. Found '{}' elements.",
                 s.input_name(), s.initial_state_size());
  if (s.initial_state_size() == 0) return;
  const Batching::InitialState& init = s.initial_state(0);
  KILN_CHECK_ARG(init.data_type() == s.data_type(),
                 "The data type used for 'initial_state' field of state '{}' does not match the "
                 "state data type.",
                 s.input_name());
  KILN_CHECK_ARG(!init.name().empty(),
                 "Field 'name' must be set when using initial_state for state input '{}'.",
                 s.input_name());
  KILN_CHECK_ARG(init.dims_size() == s.dims_size(),
                 "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
                 "dimensions for state input '{}'. {} != {}",
                 s.input_name(), init.dims_size(), s.dims_size());
  for (int i = 0; i < init.dims_size(); ++i) {
    KILN_CHECK_ARG(init.dims(i) != -1,
                   "'initial_state' field for state input name '{}' contains variable dimensions.",
                   s.input_name());
    KILN_CHECK_ARG(init.dims(i) >= 0, "model '{}': initial_state of '{}' has dim {}", model,
                   s.input_name(), init.dims(i));
    KILN_CHECK_ARG(s.dims(i) == -1 || s.dims(i) == init.dims(i),
                   "'initial_state' dim for input name '{}' doesn't match 'state' dim "
                   "description. {} != {}",
                   s.input_name(), init.dims(i), s.dims(i));
  }
  KILN_CHECK_ARG(init.state_data_case() != Batching::InitialState::STATE_DATA_NOT_SET,
                 "initial_state setting expects state '{}' to have state_data set", s.input_name());
}

// The tensor a sequence starts from: initial_state (zeros or a file's raw bytes) or, without
// one, zeros with every variable dim empty. Its size is checked against `max_bytes` (what one
// sequence's state may lease) before anything is allocated.
Tensor initial_state(const Batching::State& s, const std::string& model_dir,
                     const std::string& model, size_t max_bytes) {
  const DataType dtype = datatype_from_config(s.data_type());
  std::vector<int64_t> dims;
  if (s.initial_state_size() == 0) {
    for (int64_t d : s.dims()) dims.push_back(d < 0 ? 0 : d);
  } else {
    dims.assign(s.initial_state(0).dims().begin(), s.initial_state(0).dims().end());
  }
  size_t bytes = dtype_size(dtype);
  for (int64_t d : dims) {
    const auto n = static_cast<size_t>(d);
    KILN_CHECK_ARG(n == 0 || bytes <= max_bytes / n,
                   "model '{}': the initial state of '{}' (dims {}) is larger than the server's "
                   "request memory budget ({} bytes)",
                   model, s.input_name(), dims_to_string(dims), max_bytes);
    bytes *= n;
  }
  KILN_CHECK_ARG(bytes <= max_bytes,
                 "model '{}': the initial state of '{}' is {} bytes, larger than the server's "
                 "request memory budget ({} bytes)",
                 model, s.input_name(), bytes, max_bytes);
  Tensor t(dtype, dims);
  if (s.initial_state_size() == 0) return t;
  const Batching::InitialState& init = s.initial_state(0);
  if (init.has_zero_data()) return t;
  // The file is named inside <model_dir>/initial_state/, as Triton reads it; nothing outside.
  const std::string& file = init.data_file();
  KILN_CHECK_ARG(!file.empty() && file.find('/') == std::string::npos && file != "." &&
                     file != ".." && file.find('\\') == std::string::npos,
                 "model '{}': initial_state data_file '{}' must be a file name inside the "
                 "model's initial_state folder",
                 model, file);
  const std::filesystem::path path = std::filesystem::path(model_dir) / "initial_state" / file;
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK_ARG(in.good(), "model '{}': cannot read initial_state data_file '{}'", model,
                 path.string());
  in.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
  const size_t got = static_cast<size_t>(in.gcount());
  KILN_CHECK_ARG(got == t.nbytes(),
                 "initial_state setting expects {} bytes, but the data provided from {} only has "
                 "{} bytes.",
                 t.nbytes(), file, got);
  return t;
}

const IoInfo* find_io(const std::vector<IoInfo>& ios, const std::string& name) {
  for (const IoInfo& io : ios) {
    if (io.name == name) return &io;
  }
  return nullptr;
}

// A tensor the server feeds or reads back must be a model tensor of `dtype` and `rank` (batch dim
// included when batching).
void check_model_tensor(const IoInfo* io, const char* what, const std::string& name, DataType dtype,
                        size_t rank, const std::string& model) {
  KILN_CHECK_ARG(io != nullptr, "model '{}': {} '{}' is not a tensor of the model", model, what,
                 name);
  KILN_CHECK_ARG(io->type.is_tensor() && io->type.dtype == dtype,
                 "model '{}': {} '{}' is {} in the model but {} in the sequence_batching config",
                 model, what, name, io->type.to_string(), datatype_name(dtype));
  if (io->type.shape) {
    KILN_CHECK_ARG(io->type.shape->rank() == rank,
                   "model '{}': {} '{}' has rank {} in the model; the sequence batcher feeds rank "
                   "{}",
                   model, what, name, io->type.shape->rank(), rank);
  }
}

}  // namespace

std::set<std::string> sequence_server_inputs(const ModelConfig& config) {
  std::set<std::string> names;
  if (!config.has_sequence_batching()) return names;
  for (const auto& c : config.sequence_batching().control_input()) names.insert(c.name());
  for (const auto& s : config.sequence_batching().state()) names.insert(s.input_name());
  return names;
}

std::set<std::string> sequence_state_outputs(const ModelConfig& config) {
  std::set<std::string> names;
  if (!config.has_sequence_batching()) return names;
  for (const auto& s : config.sequence_batching().state()) names.insert(s.output_name());
  return names;
}

void complete_sequence_config(ModelConfig& config) {
  if (!config.has_sequence_batching()) return;
  Batching* sb = config.mutable_sequence_batching();
  if (sb->max_sequence_idle_microseconds() == 0) sb->set_max_sequence_idle_microseconds(1000000);
  if (sb->has_oldest() && sb->oldest().preferred_batch_size_size() == 0 &&
      config.max_batch_size() > 0) {
    sb->mutable_oldest()->add_preferred_batch_size(config.max_batch_size());
  }
}

void validate_sequence_config(const ModelConfig& config) {
  const std::string& model = config.name();
  const Batching& sb = config.sequence_batching();
  KILN_CHECK(!sb.iterative_sequence(), ErrorCode::Unsupported,
             "model '{}': sequence_batching iterative_sequence is not supported", model);
  std::set<std::string> tensors;
  std::set<int> kinds;
  for (const Batching::ControlInput& input : sb.control_input()) {
    check_control(input, model);
    KILN_CHECK_ARG(tensors.insert(input.name()).second,
                   "sequence batching control tensor '{}' is specified for multiple control kinds "
                   "for {}",
                   input.name(), model);
    KILN_CHECK_ARG(kinds.insert(input.control(0).kind()).second,
                   "sequence batching specifies multiple {} tensors for {}",
                   kind_name(input.control(0).kind()), model);
  }
  std::set<std::string> state_inputs, state_outputs;
  for (const Batching::State& s : sb.state()) {
    check_state(s, model);
    KILN_CHECK_ARG(state_inputs.insert(s.input_name()).second,
                   "State input name '{}' specified more than once.", s.input_name());
    KILN_CHECK_ARG(state_outputs.insert(s.output_name()).second,
                   "model '{}': state output '{}' is specified more than once", model,
                   s.output_name());
    KILN_CHECK_ARG(!tensors.count(s.input_name()),
                   "model '{}': '{}' is both a control input and a state input", model,
                   s.input_name());
  }
  // The server fills these inputs; a client-visible input of the same name would be ambiguous.
  for (const inference::ModelInput& in : config.input()) {
    KILN_CHECK_ARG(!tensors.count(in.name()) && !state_inputs.count(in.name()),
                   "model '{}': input '{}' is a sequence batching control or state input, which "
                   "the server fills; remove it from 'input'",
                   model, in.name());
  }
  if (sb.has_oldest()) {
    const Batching::StrategyOldest& o = sb.oldest();
    KILN_CHECK_ARG(
        o.max_candidate_sequences() >= 0 && o.max_candidate_sequences() <= kMaxCandidateSequences,
        "model '{}': oldest max_candidate_sequences {} must be in 0..{}", model,
        o.max_candidate_sequences(), kMaxCandidateSequences);
    for (int size : o.preferred_batch_size()) {
      KILN_CHECK_ARG(size >= 1 && size <= std::max(1, config.max_batch_size()),
                     "model '{}': preferred batch size {} must be in 1..max_batch_size ({})", model,
                     size, config.max_batch_size());
    }
  }
  if (sb.has_direct()) {
    const float u = sb.direct().minimum_slot_utilization();
    KILN_CHECK_ARG(u >= 0.0f && u <= 1.0f,
                   "model '{}': direct minimum_slot_utilization {} must be in 0..1", model, u);
  }
  KILN_CHECK(!config.response_cache().enable(), ErrorCode::Unsupported,
             "model '{}': the response cache is not supported for a sequence batching model (its "
             "responses depend on the sequence's state)",
             model);
}

SequenceOptions plan_sequence(const ModelConfig& config, const std::vector<IoInfo>& inputs,
                              const std::vector<IoInfo>& outputs, const std::string& model_dir,
                              size_t instances, size_t max_state_bytes) {
  const std::string& model = config.name();
  const Batching& sb = config.sequence_batching();
  const bool batched = config.max_batch_size() > 0;
  SequenceOptions o;
  o.max_idle_us =
      sb.max_sequence_idle_microseconds() > 0 ? sb.max_sequence_idle_microseconds() : 1000000;
  o.max_rows = static_cast<size_t>(std::max(1, config.max_batch_size()));
  o.slots_per_instance = o.max_rows;
  if (sb.has_oldest()) {
    o.strategy = SequenceOptions::Strategy::Oldest;
    const Batching::StrategyOldest& old = sb.oldest();
    if (old.max_candidate_sequences() > 0) {
      o.slots_per_instance = static_cast<size_t>(old.max_candidate_sequences());
    }
    o.max_queue_delay_us = old.max_queue_delay_microseconds();
    o.preferred_batch_sizes.assign(old.preferred_batch_size().begin(),
                                   old.preferred_batch_size().end());
    std::sort(o.preferred_batch_sizes.begin(), o.preferred_batch_sizes.end());
  } else if (sb.has_direct()) {
    o.max_queue_delay_us = sb.direct().max_queue_delay_microseconds();
    o.minimum_slot_utilization = sb.direct().minimum_slot_utilization();
  }
  o.max_backlog = std::max(kMinBacklog, kBacklogPerSlot * o.slots_per_instance * instances);
  for (const Batching::ControlInput& input : sb.control_input()) {
    SequenceControl c = make_control(input);
    check_model_tensor(find_io(inputs, c.input), "control input", c.input, c.dtype, batched ? 2 : 1,
                       model);
    o.controls.push_back(std::move(c));
  }
  for (const Batching::State& s : sb.state()) {
    SequenceState st;
    st.input = s.input_name();
    st.output = s.output_name();
    st.dtype = datatype_from_config(s.data_type());
    st.dims.assign(s.dims().begin(), s.dims().end());
    const size_t rank = st.dims.size() + (batched ? 1 : 0);
    check_model_tensor(find_io(inputs, st.input), "state input", st.input, st.dtype, rank, model);
    check_model_tensor(find_io(outputs, st.output), "state output", st.output, st.dtype, rank,
                       model);
    st.initial = initial_state(s, model_dir, model, max_state_bytes);
    o.states.push_back(std::move(st));
  }
  return o;
}

}  // namespace kiln::server
