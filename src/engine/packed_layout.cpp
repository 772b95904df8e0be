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
  std::vector<std::string_view> w = split(format, ' ');
  // int8 weights may carry " extra FLAGS MASK ASYMMETRIC_MASK": per-channel compensations
  // after the blocked elements, which decoding the elements does not read.
  // A shifted plain form: " plain u8|s8 shift EVERY V[,V...]" after the rest.
  std::vector<std::string_view> plain_words;
  if (w.size() == 20 || w.size() == 24) {
    plain_words.assign(w.end() - 5, w.end());
    w.resize(w.size() - 5);
  }
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
  if (!plain_words.empty()) {
    const std::vector<std::string_view>& p = plain_words;
    auto every = number(p[3]);
    if (p[0] != "plain" || (p[1] != "u8" && p[1] != "s8") || p[2] != "shift" || !every ||
        l.dtype != DataType::Int8 || *every < 1 || *every > numel)
      return std::nullopt;
    l.plain = p[1] == "u8" ? DataType::UInt8 : DataType::Int8;
    l.shift_every = *every;
    for (std::string_view v : split(p[4], ',')) {
      auto value = number(v);
      if (!value || *value < -255 || *value > 255) return std::nullopt;
      l.shift.push_back(*value);
    }
    if (static_cast<int64_t>(l.shift.size()) > numel) return std::nullopt;
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

void unpack_plain(const BlockedLayout& l, const Tensor& packed, void* out, size_t out_bytes) {
  if (l.shift.empty()) {
    unpack_blocked(l, packed, out, out_bytes);
    return;
  }
  int64_t n = 1;
  for (int64_t d : l.dims) n *= d;
  KILN_CHECK_ARG(out_bytes == static_cast<size_t>(n),
                 "packed weight: {} bytes asked of a shifted 8-bit layout of {} elements",
                 out_bytes, n);
  // The packed int8 elements into `out` (one byte each, as the plain form), then shifted there.
  unpack_blocked(l, packed, out, out_bytes);
  const auto count = static_cast<int64_t>(l.shift.size());
  const int lo = l.plain == DataType::UInt8 ? 0 : -128, hi = l.plain == DataType::UInt8 ? 255 : 127;
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t m = (i / l.shift_every) % count;
    const int64_t v = static_cast<int8_t>(dst[i]) + l.shift[static_cast<size_t>(m)];
    KILN_CHECK_ARG(v >= lo && v <= hi, "packed weight: element {} plus its shift is {}, outside {}",
                   i, v, dtype_name(l.plain));
    dst[i] = static_cast<uint8_t>(v & 0xff);  // the byte of an int8 or a uint8
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
  if (!l || plain.dtype() != l->plain_type() || numel != plain.numel() ||
      plain.nbytes() > packed.nbytes()) {
    return false;
  }
  std::unique_ptr<uint8_t[]> buf(new uint8_t[plain.nbytes()]);
  try {
    unpack_plain(*l, packed, buf.get(), plain.nbytes());
  } catch (const Error&) {
    return false;
  }
  return std::memcmp(buf.get(), plain.raw_data(), plain.nbytes()) == 0;
}

}  // namespace kiln::engine
