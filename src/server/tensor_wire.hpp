#pragma once
// The raw tensor layout both protocols carry: the HTTP binary tensor data extension and gRPC's
// raw_input_contents / raw_output_contents. Elements are little-endian and row-major, BOOL is
// one byte per element, and BYTES elements are each prefixed by a 4-byte little-endian length.
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"
#include "server/infer_types.hpp"

namespace kiln::server {

// The datatype an input names on the wire ("FP32", ...); InvalidArgument naming `input` and the
// string otherwise.
DataType wire_datatype(std::string_view name, const std::string& input);
// Checks a shape an input gives on the wire before anything is sized by it: at most `max_rank`
// dims, none negative, and an element count that does not overflow; InvalidArgument naming
// `input` otherwise.
void check_wire_shape(const std::vector<int64_t>& shape, size_t max_rank, const std::string& input);

// A tensor of `dtype` and `shape` from its raw bytes. Untrusted input: the byte count must match
// the shape exactly (BYTES elements are counted before anything is allocated); InvalidArgument
// naming `input` otherwise (a fixed-size byte count in tritonserver's words, which name the
// model and the id of `request`).
Tensor decode_raw_tensor(std::string_view bytes, DataType dtype, const std::vector<int64_t>& shape,
                         const std::string& input, const InferRequest& request);

// Bytes the raw form of `t` takes.
size_t raw_tensor_size(const Tensor& t);
// Appends the raw form of `t` to `out`.
void append_raw_tensor(std::string& out, const Tensor& t);

}  // namespace kiln::server
