#include "ops/matmul_nbits_layout.hpp"

namespace kiln::ops {

NBitsLayout nbits_layout(const AttrReader& node) {
  NBitsLayout l;
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  for (const char* name : {"K", "N", "block_size"}) {
    node.check(node.has_attr(name), "attribute {} is required", name);
  }
  l.k = node.attr_int("K");
  l.n = node.attr_int("N");
  l.bits = node.attr_int("bits", 4);
  l.block_size = node.attr_int("block_size");
  node.check(l.k >= 1 && l.k < kMaxDim, "attribute K {} must be in [1, 2^31)", l.k);
  node.check(l.n >= 1 && l.n < kMaxDim, "attribute N {} must be in [1, 2^31)", l.n);
  if (l.bits != 4) {
    node.unsupported("MatMulNBits with bits={} is not implemented (only bits=4; 2 and 8 are not)",
                     l.bits);
  }
  node.check(
      l.block_size >= 16 && l.block_size <= (1 << 16) && (l.block_size & (l.block_size - 1)) == 0,
      "attribute block_size {} must be a power of two in [16, 65536]", l.block_size);
  const int64_t accuracy = node.attr_int("accuracy_level", 0);
  node.check(accuracy >= 0 && accuracy <= 4, "attribute accuracy_level {} must be in [0, 4]",
             accuracy);
  l.blocks = (l.k + l.block_size - 1) / l.block_size;
  l.blob = l.block_size * l.bits / 8;
  return l;
}

void check_nbits_operands(const AttrReader& node, const NBitsLayout& l, const Tensor& b,
                          const Tensor& scales, const Tensor* zero_points, DataType a_type) {
  node.check(a_type == DataType::Float32 || a_type == DataType::Float16,
             "A has type {}; MatMulNBits takes float or float16", dtype_name(a_type));
  const std::vector<int64_t> want_b = {l.n, l.blocks, l.blob};
  node.check(b.dtype() == DataType::UInt8 && b.dims() == want_b,
             "B is {}; K={} N={} block_size={} bits={} need uint8[{}, {}, {}] (N, blocks of K, "
             "bytes a block)",
             b.describe(), l.k, l.n, l.block_size, l.bits, l.n, l.blocks, l.blob);
  // n < 2^31 and blocks <= k < 2^31: the products below fit int64.
  const int64_t per_block = l.n * l.blocks;
  node.check(scales.dtype() == a_type && scales.numel() == per_block,
             "scales is {}; need {} {} values (N * blocks, the type of A)", scales.describe(),
             per_block, dtype_name(a_type));
  if (!zero_points) return;
  if (zero_points->dtype() == DataType::UInt8) {
    const int64_t want = l.n * l.packed_zero_point_bytes();
    node.check(zero_points->numel() == want,
               "zero_points is {}; packed uint8 zero points need {} bytes (N * ceil(blocks / 2))",
               zero_points->describe(), want);
  } else {
    node.check(zero_points->dtype() == a_type && zero_points->numel() == per_block,
               "zero_points is {}; need packed uint8 or {} {} values (N * blocks)",
               zero_points->describe(), per_block, dtype_name(a_type));
  }
}

NBitsBlockParams nbits_block_params(const NBitsLayout& l, const Tensor& scales,
                                    const Tensor* zero_points) {
  const int64_t count = l.n * l.blocks;
  NBitsBlockParams p;
  p.scale.resize(static_cast<size_t>(count));
  p.zero_point.assign(static_cast<size_t>(count), static_cast<float>(1 << (l.bits - 1)));
  for (int64_t i = 0; i < count; ++i) {
    p.scale[static_cast<size_t>(i)] = static_cast<float>(scales.double_at(i));
  }
  if (!zero_points) return p;
  if (zero_points->dtype() == DataType::UInt8) {
    const uint8_t* z = zero_points->data<uint8_t>();
    const int64_t row = l.packed_zero_point_bytes();
    for (int64_t c = 0; c < l.n; ++c) {
      for (int64_t j = 0; j < l.blocks; ++j) {
        p.zero_point[static_cast<size_t>(c * l.blocks + j)] =
            static_cast<float>(nbits_code(z + c * row, j));
      }
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      p.zero_point[static_cast<size_t>(i)] = static_cast<float>(zero_points->double_at(i));
    }
  }
  return p;
}

}  // namespace kiln::ops
