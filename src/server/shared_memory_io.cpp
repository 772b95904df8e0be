#include "server/shared_memory_io.hpp"

#include <cstring>

#include "core/shape.hpp"
#include "server/request_errors.hpp"
#include "server/tensor_wire.hpp"

namespace kiln::server {
namespace {

// Whether the runtime may use the region's bytes as they are: fixed-size elements whose memory
// form is their wire form (BOOL is normalized to 0 / 1 on the way in), at the alignment of the
// runtime's own buffers. The runtime reads its inputs and never writes into them (the memory
// planner gives in-place outputs arena space only).
bool viewable(DataType dtype, const void* data) {
  return dtype != DataType::String && dtype != DataType::Bool &&
         datatype_wire_size(dtype) == dtype_size(dtype) &&
         reinterpret_cast<uintptr_t>(data) % kTensorAlignment == 0;
}

std::string size_error(const std::string& output, uint64_t given, uint64_t needed) {
  return fmt::format(
      "shared memory size specified with the request for output '{}' ({} bytes) should be at "
      "least {} bytes to hold the results",
      output, given, needed);
}

}  // namespace

void read_shared_memory_inputs(InferRequest& request, const SharedMemoryRegistry& registry) {
  for (InferInput& input : request.inputs) {
    if (!input.shm) continue;
    std::shared_ptr<SharedMemoryRegion> region = registry.get(input.shm->region);
    std::span<std::byte> bytes = region->range(input.shm->offset, input.shm->byte_size);
    const std::string_view view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (viewable(input.datatype, bytes.data())) {
      // The size check decode_raw_tensor makes, in the same words, without its copy.
      const uint64_t needed =
          static_cast<uint64_t>(shape_numel(input.shape)) * datatype_wire_size(input.datatype);
      KILN_CHECK_ARG(
          needed == bytes.size(),
          "{}input byte size mismatch for input '{}' for model '{}'. Expected {}, got {}",
          request_id_prefix(request), input.name, request.model_name, needed, bytes.size());
      input.data = Tensor::view(input.datatype, input.shape, bytes.data(), region);
    } else {
      input.data = decode_raw_tensor(view, input.datatype, input.shape, input.name, request);
    }
  }
}

std::vector<SharedMemoryOutput> plan_shared_memory_outputs(const InferRequest& request,
                                                           const ModelVersion& version,
                                                           const SharedMemoryRegistry& registry) {
  std::vector<SharedMemoryOutput> planned;
  for (const RequestedOutput& out : request.outputs) {
    if (!out.shm) continue;
    SharedMemoryOutput p;
    p.name = out.name;
    p.region = registry.get(out.shm->region);
    p.bytes = p.region->range(out.shm->offset, out.shm->byte_size);
    // The size the config fixes: every dim known, the batch dim from the request's first input.
    for (const TensorMetadata& m : version.output_metadata()) {
      if (m.name != out.name) continue;
      const std::optional<DataType> dtype = datatype_from_name(m.datatype);
      if (!dtype || datatype_wire_size(*dtype) == 0) break;
      std::vector<int64_t> dims = m.shape;
      if (version.max_batch_size() > 0 && !dims.empty() && !request.inputs.empty() &&
          !request.inputs[0].shape.empty()) {
        dims[0] = request.inputs[0].shape[0];
      }
      bool known = true;
      for (int64_t d : dims) known = known && d >= 0;
      if (!known) break;
      const uint64_t needed = static_cast<uint64_t>(shape_numel(dims)) * datatype_wire_size(*dtype);
      KILN_CHECK_ARG(needed <= p.bytes.size(), "{}", size_error(out.name, p.bytes.size(), needed));
    }
    planned.push_back(std::move(p));
  }
  return planned;
}

void write_shared_memory_outputs(InferResponse& response,
                                 const std::vector<SharedMemoryOutput>& outputs) {
  for (InferOutput& out : response.outputs) {
    const SharedMemoryOutput* target = nullptr;
    for (const SharedMemoryOutput& o : outputs) {
      if (o.name == out.name) target = &o;
    }
    if (!target) continue;
    const size_t size = raw_tensor_size(out.data);
    KILN_CHECK_ARG(size <= target->bytes.size(), "{}",
                   size_error(out.name, target->bytes.size(), size));
    std::byte* dst = target->bytes.data();
    if (out.data.dtype() == DataType::String) {
      for (const std::string& s : out.data.values<std::string>()) {
        KILN_CHECK_ARG(s.size() <= UINT32_MAX,
                       "a BYTES element of {} bytes does not fit its 4-byte length prefix",
                       s.size());
        const uint32_t len = static_cast<uint32_t>(s.size());
        std::memcpy(dst, &len, 4);
        std::memcpy(dst + 4, s.data(), s.size());
        dst += 4 + s.size();
      }
    } else if (size > 0) {
      // memmove: an output may be a view of an input in the same region.
      std::memmove(dst, out.data.raw_data(), size);
    }
    out.data = Tensor();
    out.in_shared_memory = true;
  }
}

}  // namespace kiln::server
