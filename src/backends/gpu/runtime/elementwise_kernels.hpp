#pragma once
// The GPU backend's element-wise kernels as backends::Kernel: which nodes they take
// (decided from declared types and shapes) and the Kernel that launches them.
#include <memory>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"

namespace kiln::backends::gpu {

// Support::yes("gpu.relu") and the like, or why not.
Support elementwise_support(const ir::Node& node);
// Inputs an element-wise kernel may overwrite with its output (each element is read before the
// output element at its index is written): every input. Empty for other kernels.
std::vector<size_t> elementwise_in_place_inputs(const ir::Node& node, std::string_view kernel_name);
// nullptr when `kernel_name` is not an element-wise kernel of the GPU backend.
std::unique_ptr<Kernel> create_elementwise_kernel(const ir::Node& node,
                                                  std::string_view kernel_name);

}  // namespace kiln::backends::gpu
