#pragma once
// The inference side of system shared memory: inputs a request places in registered regions
// become its tensors (one copy of exactly the declared bytes, read through the region's
// descriptor: see SharedMemoryRegion), and outputs it asks for in regions are checked before the
// model runs and written there when it has.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "server/infer_types.hpp"
#include "server/model.hpp"
#include "server/shared_memory.hpp"

namespace kiln::server {

// Gives every input with a SharedMemoryRef its data from its region. Throws as
// SharedMemoryRegistry::get and SharedMemoryRegion::range do, and InvalidArgument in
// tritonserver's words when the byte size is not the tensor's ("input byte size mismatch ...").
void read_shared_memory_inputs(InferRequest& request, const SharedMemoryRegistry& registry);

// One output the request asks to be written into shared memory.
struct SharedMemoryOutput {
  std::string name;
  std::shared_ptr<SharedMemoryRegion> region;  // held until the response is written
  uint64_t offset = 0, byte_size = 0;          // where it goes in the region
};

// The requested outputs in shared memory, each range checked, and, where the model's config
// fixes the output's size (every dim known once the batch size is), that size checked against
// the byte size given, so a region too small is refused before the model runs.
std::vector<SharedMemoryOutput> plan_shared_memory_outputs(const InferRequest& request,
                                                           const ModelVersion& version,
                                                           const SharedMemoryRegistry& registry);

// Writes each planned output of `response` into its region and drops its data (the frontends
// then send its name, datatype and shape only). InvalidArgument in tritonserver's words when an
// output is larger than its byte size (outputs whose size the config does not fix).
void write_shared_memory_outputs(InferResponse& response,
                                 const std::vector<SharedMemoryOutput>& outputs);

}  // namespace kiln::server
