#include "server/shared_memory_io.hpp"

#include <cstring>

#include "core/shape.hpp"
#include "server/request_errors.hpp"
#include "server/tensor_wire.hpp"

namespace kiln::server {
namespace {

// Whether the region's bytes can be read straight into the tensor's storage: fixed-size
// elements whose memory form is their wire form (BOOL is normalized to 0 / 1 on the way in).
bool direct(DataType dtype) {
  return dtype != DataType::String && dtype != DataType::Bool &&
         datatype_wire_size(dtype) == dtype_size(dtype);
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
    region->check_range(input.shm->offset, input.shm->byte_size);
    if (direct(input.datatype)) {
      // The size check decode_raw_tensor makes, in the same words, before allocating.
      const uint64_t needed =
          static_cast<uint64_t>(shape_numel(input.shape)) * datatype_wire_size(input.datatype);
      KILN_CHECK_ARG(
          needed == input.shm->byte_size,
          "{}input byte size mismatch for input '{}' for model '{}'. Expected {}, got {}",
          request_id_prefix(request), input.name, request.model_name, needed, input.shm->byte_size);
      Tensor t(input.datatype, input.shape);
      region->read(input.shm->offset,
                   {static_cast<std::byte*>(t.raw_data()), static_cast<size_t>(needed)});
      input.data = std::move(t);
    } else {
      std::string bytes(static_cast<size_t>(input.shm->byte_size), '\0');
      region->read(input.shm->offset, std::as_writable_bytes(std::span(bytes)));
      input.data = decode_raw_tensor(bytes, input.datatype, input.shape, input.name, request);
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
    p.region->check_range(out.shm->offset, out.shm->byte_size);
    p.offset = out.shm->offset;
    p.byte_size = out.shm->byte_size;
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
      KILN_CHECK_ARG(needed <= p.byte_size, "{}", size_error(out.name, p.byte_size, needed));
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
    KILN_CHECK_ARG(size <= target->byte_size, "{}", size_error(out.name, target->byte_size, size));
    if (out.data.dtype() == DataType::String) {
      std::string wire;
      wire.reserve(size);
      for (const std::string& s : out.data.values<std::string>()) {
        KILN_CHECK_ARG(s.size() <= UINT32_MAX,
                       "a BYTES element of {} bytes does not fit its 4-byte length prefix",
                       s.size());
        const uint32_t len = static_cast<uint32_t>(s.size());
        wire.append(reinterpret_cast<const char*>(&len), 4);
        wire.append(s);
      }
      target->region->write(target->offset, std::as_bytes(std::span(wire)));
    } else if (size > 0) {
      target->region->write(target->offset,
                            {static_cast<const std::byte*>(out.data.raw_data()), size});
    }
    out.data = Tensor();
    out.in_shared_memory = true;
  }
}

}  // namespace kiln::server
