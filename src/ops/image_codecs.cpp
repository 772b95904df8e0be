// PNG and uncompressed TIFF decoding for ImageDecoder, without codec libraries. The inflate
// follows RFC 1951 with canonical Huffman decoding (as in zlib's puff.c).
#include "ops/image_codecs.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

namespace kiln::ops::image {
namespace {

// ---- inflate ----

struct BitReader {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;  // byte
  uint32_t bitbuf = 0;
  int bitcnt = 0;
  bool overrun = false;

  uint32_t bits(int need) {
    uint32_t v = bitbuf;
    while (bitcnt < need) {
      if (pos >= size) {
        overrun = true;
        return 0;
      }
      v |= static_cast<uint32_t>(data[pos++]) << bitcnt;
      bitcnt += 8;
    }
    bitbuf = need >= 32 ? 0 : v >> need;
    bitcnt -= need;
    return need >= 32 ? v : v & ((1u << need) - 1);
  }
};

constexpr int kMaxBits = 15;

struct Huffman {
  std::array<int16_t, kMaxBits + 1> count{};
  std::vector<int16_t> symbol;
};

// Builds the canonical code from code lengths; false when over-subscribed.
bool build_huffman(Huffman& h, const int16_t* lengths, int n) {
  h.count.fill(0);
  h.symbol.assign(static_cast<size_t>(n), 0);
  for (int s = 0; s < n; ++s) ++h.count[static_cast<size_t>(lengths[s])];
  if (h.count[0] == n) return true;  // no codes: only an error if used
  int left = 1;
  for (int len = 1; len <= kMaxBits; ++len) {
    left = (left << 1) - h.count[static_cast<size_t>(len)];
    if (left < 0) return false;
  }
  std::array<int16_t, kMaxBits + 1> offs{};
  for (int len = 1; len < kMaxBits; ++len)
    offs[static_cast<size_t>(len + 1)] =
        static_cast<int16_t>(offs[static_cast<size_t>(len)] + h.count[static_cast<size_t>(len)]);
  for (int s = 0; s < n; ++s)
    if (lengths[s] != 0)
      h.symbol[static_cast<size_t>(offs[static_cast<size_t>(lengths[s])]++)] =
          static_cast<int16_t>(s);
  return true;
}

// Next symbol, or -1 when the stream is corrupt.
int decode_symbol(BitReader& in, const Huffman& h) {
  int code = 0, first = 0, index = 0;
  for (int len = 1; len <= kMaxBits; ++len) {
    code |= static_cast<int>(in.bits(1));
    if (in.overrun) return -1;
    const int count = h.count[static_cast<size_t>(len)];
    if (code - count < first) return h.symbol[static_cast<size_t>(index + (code - first))];
    index += count;
    first += count;
    first <<= 1;
    code <<= 1;
  }
  return -1;
}

constexpr std::array<int16_t, 29> kLenBase = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                              15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                              67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr std::array<int16_t, 29> kLenExtra = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                               2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr std::array<int32_t, 30> kDistBase = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr std::array<int16_t, 30> kDistExtra = {0, 0, 0,  0,  1,  1,  2,  2,  3,  3,
                                                4, 4, 5,  5,  6,  6,  7,  7,  8,  8,
                                                9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

bool inflate_codes(BitReader& in, std::vector<uint8_t>& out, size_t max_out, const Huffman& lit,
                   const Huffman& dist) {
  for (;;) {
    const int sym = decode_symbol(in, lit);
    if (sym < 0) return false;
    if (sym < 256) {
      if (out.size() >= max_out) return false;
      out.push_back(static_cast<uint8_t>(sym));
      continue;
    }
    if (sym == 256) return true;
    const int li = sym - 257;
    if (li >= 29) return false;
    const size_t len = static_cast<size_t>(kLenBase[static_cast<size_t>(li)]) +
                       in.bits(kLenExtra[static_cast<size_t>(li)]);
    const int ds = decode_symbol(in, dist);
    if (ds < 0 || ds >= 30 || in.overrun) return false;
    const size_t d = static_cast<size_t>(kDistBase[static_cast<size_t>(ds)]) +
                     in.bits(kDistExtra[static_cast<size_t>(ds)]);
    if (in.overrun || d > out.size() || out.size() + len > max_out) return false;
    for (size_t i = 0; i < len; ++i) out.push_back(out[out.size() - d]);
  }
}

bool inflate_fixed(BitReader& in, std::vector<uint8_t>& out, size_t max_out) {
  std::array<int16_t, 288> l{};
  for (int s = 0; s < 288; ++s)
    l[static_cast<size_t>(s)] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
  std::array<int16_t, 30> d{};
  d.fill(5);
  Huffman lit, dist;
  build_huffman(lit, l.data(), 288);
  build_huffman(dist, d.data(), 30);
  return inflate_codes(in, out, max_out, lit, dist);
}

bool inflate_dynamic(BitReader& in, std::vector<uint8_t>& out, size_t max_out) {
  const int nlen = static_cast<int>(in.bits(5)) + 257;
  const int ndist = static_cast<int>(in.bits(5)) + 1;
  const int ncode = static_cast<int>(in.bits(4)) + 4;
  if (in.overrun || nlen > 286 || ndist > 30) return false;
  static constexpr std::array<int, 19> kOrder = {16, 17, 18, 0, 8,  7, 9,  6, 10, 5,
                                                 11, 4,  12, 3, 13, 2, 14, 1, 15};
  std::array<int16_t, 320> lengths{};
  for (int i = 0; i < ncode; ++i)
    lengths[static_cast<size_t>(kOrder[static_cast<size_t>(i)])] = static_cast<int16_t>(in.bits(3));
  Huffman lencode;
  if (in.overrun || !build_huffman(lencode, lengths.data(), 19)) return false;
  int index = 0;
  while (index < nlen + ndist) {
    int sym = decode_symbol(in, lencode);
    if (sym < 0) return false;
    if (sym < 16) {
      lengths[static_cast<size_t>(index++)] = static_cast<int16_t>(sym);
      continue;
    }
    int16_t value = 0;
    int repeat;
    if (sym == 16) {
      if (index == 0) return false;
      value = lengths[static_cast<size_t>(index - 1)];
      repeat = 3 + static_cast<int>(in.bits(2));
    } else if (sym == 17) {
      repeat = 3 + static_cast<int>(in.bits(3));
    } else {
      repeat = 11 + static_cast<int>(in.bits(7));
    }
    if (in.overrun || index + repeat > nlen + ndist) return false;
    while (repeat--) lengths[static_cast<size_t>(index++)] = value;
  }
  if (lengths[256] == 0) return false;  // no end-of-block code
  Huffman lit, dist;
  if (!build_huffman(lit, lengths.data(), nlen)) return false;
  if (!build_huffman(dist, lengths.data() + nlen, ndist)) return false;
  return inflate_codes(in, out, max_out, lit, dist);
}

}  // namespace

std::optional<std::vector<uint8_t>> zlib_inflate(const uint8_t* data, size_t size, size_t max_out) {
  if (size < 2 || (data[0] & 0x0F) != 8 || ((data[0] << 8) | data[1]) % 31 != 0 ||
      (data[1] & 0x20) != 0)  // deflate, valid check bits, no preset dictionary
    return std::nullopt;
  BitReader in{data + 2, size - 2};
  std::vector<uint8_t> out;
  for (;;) {
    const uint32_t last = in.bits(1);
    const uint32_t type = in.bits(2);
    if (in.overrun) return std::nullopt;
    bool ok;
    if (type == 0) {  // stored: byte-aligned LEN, NLEN, raw bytes
      in.bitbuf = 0, in.bitcnt = 0;
      if (in.size - in.pos < 4) return std::nullopt;
      const size_t len = in.data[in.pos] | (in.data[in.pos + 1] << 8);
      const size_t nlen = in.data[in.pos + 2] | (in.data[in.pos + 3] << 8);
      in.pos += 4;
      if (len != (~nlen & 0xFFFF) || in.size - in.pos < len || out.size() + len > max_out)
        return std::nullopt;
      out.insert(out.end(), in.data + in.pos, in.data + in.pos + len);
      in.pos += len;
      ok = true;
    } else if (type == 1) {
      ok = inflate_fixed(in, out, max_out);
    } else if (type == 2) {
      ok = inflate_dynamic(in, out, max_out);
    } else {
      return std::nullopt;
    }
    if (!ok) return std::nullopt;
    if (last) return out;
  }
}

namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

int paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

}  // namespace

std::optional<Image> decode_png(const uint8_t* d, size_t n, const char** unsupported) {
  if (n < 8 || std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) != 0) return std::nullopt;
  size_t pos = 8;
  uint32_t width = 0, height = 0;
  int depth = 0, color = -1;
  std::vector<uint8_t> palette, idat;
  bool have_header = false;
  while (pos + 12 <= n) {
    const uint32_t len = be32(d + pos);
    const uint8_t* type = d + pos + 4;
    const uint8_t* body = d + pos + 8;
    if (len > n - pos - 12) return std::nullopt;
    if (std::memcmp(type, "IHDR", 4) == 0) {
      if (len != 13) return std::nullopt;
      width = be32(body), height = be32(body + 4);
      depth = body[8], color = body[9];
      if (body[10] != 0 || body[11] != 0 || body[12] > 1) return std::nullopt;
      if (body[12] != 0) return *unsupported = "interlaced PNG", std::nullopt;
      have_header = true;
    } else if (std::memcmp(type, "PLTE", 4) == 0) {
      palette.assign(body, body + len);
    } else if (std::memcmp(type, "IDAT", 4) == 0) {
      idat.insert(idat.end(), body, body + len);
    } else if (std::memcmp(type, "IEND", 4) == 0) {
      break;
    }
    pos += 12 + len;
  }
  if (!have_header || width == 0 || height == 0) return std::nullopt;
  if (width > (1u << 16) || height > (1u << 16))
    return *unsupported = "PNG larger than 65536 pixels a side", std::nullopt;
  int channels;
  switch (color) {
    case 0:
      channels = 1;
      break;
    case 2:
      channels = 3;
      break;
    case 3:
      channels = 1;
      break;
    case 4:
      channels = 2;
      break;
    case 6:
      channels = 4;
      break;
    default:
      return std::nullopt;
  }
  // 8-bit samples everywhere; palette indices may also be 1, 2 or 4 bits.
  if (!(depth == 8 || (color == 3 && (depth == 1 || depth == 2 || depth == 4))))
    return *unsupported = "PNG with 16-bit or sub-byte samples", std::nullopt;
  const size_t bits_per_pixel = static_cast<size_t>(channels * depth);
  const size_t row_bytes = (width * bits_per_pixel + 7) / 8;
  const size_t bpp = std::max<size_t>(1, bits_per_pixel / 8);
  const size_t raw_size = height * (row_bytes + 1);
  // Deflate expands at most 1032:1; a header promising more is corrupt.
  if (raw_size > 1032 * idat.size() + 1024) return std::nullopt;
  auto raw = zlib_inflate(idat.data(), idat.size(), raw_size);
  if (!raw || raw->size() != raw_size) return std::nullopt;
  std::vector<uint8_t> prev(row_bytes, 0), cur(row_bytes);
  Image img;
  img.width = width, img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t y = 0; y < height; ++y) {
    const uint8_t* src = raw->data() + y * (row_bytes + 1);
    const uint8_t filter = src[0];
    for (size_t i = 0; i < row_bytes; ++i) {
      const int a = i >= bpp ? cur[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      int pred;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4:
          pred = paeth(a, b, c);
          break;
        default:
          return std::nullopt;
      }
      cur[i] = static_cast<uint8_t>(src[1 + i] + pred);
    }
    for (size_t x = 0; x < width; ++x) {
      uint8_t* px = img.rgb.data() + (y * width + x) * 3;
      if (color == 3) {
        const size_t bit = x * static_cast<size_t>(depth);
        const int shift = 8 - depth - static_cast<int>(bit % 8);
        const size_t idx = (cur[bit / 8] >> shift) & ((1u << depth) - 1);
        if (3 * idx + 2 >= palette.size()) return std::nullopt;
        std::memcpy(px, palette.data() + 3 * idx, 3);
      } else if (channels <= 2) {  // grey (+ alpha, dropped)
        px[0] = px[1] = px[2] = cur[x * static_cast<size_t>(channels)];
      } else {  // RGB (+ alpha, dropped)
        std::memcpy(px, cur.data() + x * static_cast<size_t>(channels), 3);
      }
    }
    std::swap(prev, cur);
  }
  return img;
}

// ---- TIFF (baseline, uncompressed, 8-bit, chunky) ----

std::optional<Image> decode_tiff(const uint8_t* d, size_t n, const char** unsupported) {
  if (n < 8) return std::nullopt;
  const bool little = d[0] == 'I';
  auto u16 = [&](size_t p) -> uint32_t {
    return little ? d[p] | (d[p + 1] << 8) : (d[p] << 8) | d[p + 1];
  };
  auto u32 = [&](size_t p) -> uint32_t {
    return little ? u16(p) | (u16(p + 2) << 16) : (u16(p) << 16) | u16(p + 2);
  };
  const size_t ifd = u32(4);
  if (ifd > n - 2) return std::nullopt;
  const size_t entries = u16(ifd);
  if (ifd + 2 + entries * 12 > n) return std::nullopt;
  uint32_t width = 0, height = 0, compression = 1, photometric = 2, spp = 1, planar = 1;
  uint32_t rows_per_strip = 0xFFFFFFFF;
  std::vector<uint32_t> bits, offsets, counts;
  // The values of one entry: inline when they fit in 4 bytes, else at an offset.
  auto values = [&](size_t e) -> std::optional<std::vector<uint32_t>> {
    const uint32_t type = u16(e + 2), count = u32(e + 4);
    const size_t size = type == 3 ? 2 : type == 4 ? 4 : 0;
    if (size == 0 || count > (1u << 20)) return std::nullopt;
    size_t at = e + 8;
    if (size * count > 4) at = u32(e + 8);
    if (at > n || size * count > n - at) return std::nullopt;
    std::vector<uint32_t> v(count);
    for (uint32_t i = 0; i < count; ++i) v[i] = size == 2 ? u16(at + 2 * i) : u32(at + 4 * i);
    return v;
  };
  for (size_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + i * 12;
    const uint32_t tag = u16(e);
    static constexpr std::array<uint32_t, 10> kUsed = {256, 257, 258, 259, 262,
                                                       273, 277, 278, 279, 284};
    if (std::find(kUsed.begin(), kUsed.end(), tag) == kUsed.end()) continue;
    auto v = values(e);
    if (!v || v->empty()) return std::nullopt;
    switch (tag) {
      case 256:
        width = (*v)[0];
        break;
      case 257:
        height = (*v)[0];
        break;
      case 258:
        bits = *v;
        break;
      case 259:
        compression = (*v)[0];
        break;
      case 262:
        photometric = (*v)[0];
        break;
      case 273:
        offsets = *v;
        break;
      case 277:
        spp = (*v)[0];
        break;
      case 278:
        rows_per_strip = (*v)[0];
        break;
      case 279:
        counts = *v;
        break;
      case 284:
        planar = (*v)[0];
        break;
    }
  }
  if (width == 0 || height == 0) return std::nullopt;
  if (width > (1u << 16) || height > (1u << 16))
    return *unsupported = "TIFF larger than 65536 pixels a side", std::nullopt;
  if (compression != 1 || planar != 1)
    return *unsupported = "compressed or planar TIFF", std::nullopt;
  if (offsets.empty() || offsets.size() != counts.size()) return std::nullopt;
  for (uint32_t b : bits)
    if (b != 8) return *unsupported = "TIFF with other than 8-bit samples", std::nullopt;
  const bool grey = (photometric == 0 || photometric == 1) && spp >= 1;
  if (!grey && !(photometric == 2 && spp >= 3))
    return *unsupported = "TIFF other than 8-bit grey or RGB", std::nullopt;
  std::vector<uint8_t> pixels;
  if (spp > 16) return std::nullopt;
  const size_t need = static_cast<size_t>(width) * height * spp;
  if (need > n) return std::nullopt;  // uncompressed samples must fit in the file
  for (size_t s = 0; s < offsets.size() && pixels.size() < need; ++s) {
    if (offsets[s] > n || counts[s] > n - offsets[s]) return std::nullopt;
    pixels.insert(pixels.end(), d + offsets[s], d + offsets[s] + counts[s]);
  }
  (void)rows_per_strip;  // strips are contiguous rows, so concatenating them is enough
  if (pixels.size() < need) return std::nullopt;
  Image img;
  img.width = width, img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < static_cast<size_t>(width) * height; ++i) {
    const uint8_t* p = pixels.data() + i * spp;
    uint8_t* o = img.rgb.data() + i * 3;
    if (grey) {
      const uint8_t g = photometric == 0 ? static_cast<uint8_t>(255 - p[0]) : p[0];
      o[0] = o[1] = o[2] = g;
    } else {
      o[0] = p[0], o[1] = p[1], o[2] = p[2];
    }
  }
  return img;
}

}  // namespace kiln::ops::image
