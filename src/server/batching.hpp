#pragma once
// Tensor plumbing of the dynamic batcher: merge requests along the batch dim, split results back,
// and apply a config's `reshape` between the protocol shape and the model's shape.
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "server/request_check.hpp"

namespace kiln::server {

// Concatenates tensors along dim 0 (one part is returned as is, without a copy). All parts share
// dtype and non-batch dims (the scheduler only merges such requests).
Tensor concat_rows(const std::vector<const Tensor*>& parts);
// Rows [offset, offset + rows) of `t` along dim 0, copied.
Tensor slice_rows(const Tensor& t, int64_t offset, int64_t rows);
// A request input (protocol shape) as the model wants it: the config's `reshape` applied behind
// the batch dim. Unchanged without a reshape.
Tensor to_model_shape(const Tensor& t, const TensorSpec& spec, bool batched,
                      const std::string& model);
// A model output in protocol shape: checks the batch dim equals `rows` and undoes a `reshape`.
Tensor from_model_shape(const Tensor& t, const TensorSpec& spec, bool batched, int64_t rows,
                        const std::string& model);

}  // namespace kiln::server
