#include "engine/packed_layout.hpp"

#include <charconv>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

namespace kiln::engine {
namespace {

constexpr size_t kMaxRank = 12;

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::optional<int64_t> number(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::vector<int64_t>> numbers(std::string_view s) {
  std::vector<int64_t> out;
  for (std::string_view part : split(s, 'x')) {
    auto v = number(part);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

}  // namespace

std::optional<BlockedLayout> parse_blocked_layout(std::string_view format) {
  const std::vector<std::string_view> w = split(format, ' ');
  // int8 weights may carry " extra FLAGS MASK ASYMMETRIC_MASK": per-channel compensations
  // after the blocked elements, which decoding the elements does not read.
  if ((w.size() != 15 && w.size() != 19) || w[0] != "onednn" || w[1] != "blocked" ||
      (w[2] != "f32" && w[2] != "s8") || w[3] != "dims" || w[5] != "padded" || w[7] != "offsets" ||
      w[9] != "offset0" || w[11] != "strides" || w[13] != "inner") {
    return std::nullopt;
  }
  if (w.size() == 19 &&
      (w[2] != "s8" || w[15] != "extra" || !number(w[16]) || !number(w[17]) || !number(w[18]))) {
    return std::nullopt;
  }
  BlockedLayout l;
  l.dtype = w[2] == "s8" ? DataType::Int8 : DataType::Float32;
  auto dims = numbers(w[4]), padded = numbers(w[6]), offsets = numbers(w[8]),
       strides = numbers(w[12]);
  auto offset0 = number(w[10]);
  if (!dims || !padded || !offsets || !strides || !offset0 || dims->empty() ||
      dims->size() > kMaxRank || padded->size() != dims->size() ||
      offsets->size() != dims->size() || strides->size() != dims->size() || *offset0 < 0) {
    return std::nullopt;
  }
  l.dims = *dims;
  l.padded = *padded;
  l.offsets = *offsets;
  l.strides = *strides;
  l.offset0 = *offset0;
  // Every count and product in range, so decoding never overflows (an engine file is input).
  int64_t numel = 1;
  for (size_t d = 0; d < l.dims.size(); ++d) {
    if (l.dims[d] < 0 || l.padded[d] < l.dims[d] || l.offsets[d] < 0 || l.strides[d] < 0 ||
        l.offsets[d] > l.padded[d] - l.dims[d] || l.padded[d] > (int64_t{1} << 40) ||
        l.strides[d] > (int64_t{1} << 40) || __builtin_mul_overflow(numel, l.dims[d], &numel))
      return std::nullopt;
  }
  if (l.offset0 > (int64_t{1} << 40)) return std::nullopt;
  if (w[14] != "none") {
    for (std::string_view blk : split(w[14], ',')) {
      const size_t at = blk.find('@');
      if (at == std::string_view::npos) return std::nullopt;
      auto size = number(blk.substr(0, at));
      auto dim = number(blk.substr(at + 1));
      if (!size || !dim || *size < 1 || *dim < 0 || *dim >= static_cast<int64_t>(l.dims.size()))
        return std::nullopt;
      if (*size > (int64_t{1} << 20)) return std::nullopt;
      l.inner.emplace_back(*size, static_cast<int>(*dim));
    }
    if (l.inner.size() > kMaxRank) return std::nullopt;
  }
  return l;
}

void unpack_blocked(const BlockedLayout& l, const Tensor& packed, void* out, size_t out_bytes) {
  int64_t n = 1;
  for (int64_t d : l.dims) n *= d;
  KILN_CHECK_ARG((l.dtype == DataType::Float32 || l.dtype == DataType::Int8) &&
                     out_bytes == static_cast<size_t>(n) * dtype_size(l.dtype),
                 "packed weight: {} bytes asked of a {} layout of {} elements", out_bytes,
                 dtype_name(l.dtype), n);
  const size_t esize = dtype_size(l.dtype);
  const size_t available = packed.nbytes() / esize;
  const auto* src = static_cast<const uint8_t*>(packed.raw_data());
  auto* dst = static_cast<uint8_t*>(out);
  const size_t rank = l.dims.size();
  std::vector<int64_t> index(rank, 0), pos(rank);
  for (int64_t i = 0; i < n; ++i) {
    for (size_t d = 0; d < rank; ++d) pos[d] = index[d] + l.offsets[d];
    // Inner blocks innermost first, each taking its share of the dim's position.
    uint64_t offset = static_cast<uint64_t>(l.offset0), block_stride = 1;
    for (size_t k = l.inner.size(); k-- > 0;) {
      const auto [size, d] = l.inner[k];
      offset += static_cast<uint64_t>(pos[d] % size) * block_stride;
      pos[d] /= size;
      block_stride *= static_cast<uint64_t>(size);
    }
    // Unsigned: a hostile layout wraps instead of overflowing, and the bound below refuses it.
    for (size_t d = 0; d < rank; ++d)
      offset += static_cast<uint64_t>(pos[d]) * static_cast<uint64_t>(l.strides[d]);
    KILN_CHECK_ARG(offset < available,
                   "packed weight: element {} lies at {} of a {}-element packed buffer", i, offset,
                   available);
    std::memcpy(dst + static_cast<size_t>(i) * esize, src + offset * esize, esize);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < l.dims[d]) break;
      index[d] = 0;
    }
  }
}

bool unpacks_to(std::string_view format, const Tensor& packed, const Tensor& plain) {
  std::optional<BlockedLayout> l = parse_blocked_layout(format);
  // A grouped convolution's weights are 5-D to oneDNN and 4-D in the graph: the same row-major
  // elements, so the element count is what must agree.
  int64_t numel = 1;
  if (l) {
    for (int64_t d : l->dims) numel *= d;
  }
  if (!l || plain.dtype() != l->dtype || numel != plain.numel() ||
      plain.nbytes() > packed.nbytes()) {
    return false;
  }
  std::unique_ptr<uint8_t[]> buf(new uint8_t[plain.nbytes()]);
  try {
    unpack_blocked(*l, packed, buf.get(), plain.nbytes());
  } catch (const Error&) {
    return false;
  }
  return std::memcmp(buf.get(), plain.raw_data(), plain.nbytes()) == 0;
}

}  // namespace kiln::engine
