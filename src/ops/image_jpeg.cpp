// Baseline (sequential Huffman, 8-bit) JPEG decoding for ImageDecoder, reproducing the
// arithmetic of libjpeg-turbo's defaults bit for bit: the "islow" integer IDCT, "fancy"
// (triangular) chroma upsampling as the ONNX spec describes, and its fixed-point YCbCr->RGB.
// Progressive, arithmetic-coded, 12-bit and CMYK streams are reported as unsupported variants.
#include <algorithm>
#include <array>
#include <cstring>

#include "ops/image_codecs.hpp"

namespace kiln::ops::image {
namespace {

constexpr std::array<uint8_t, 64> kZigzag = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

struct HuffTable {
  bool defined = false;
  std::array<int, 17> count{};  // codes of each length 1..16
  std::vector<uint8_t> symbols;
};

struct Component {
  int id = 0, h = 1, v = 1, tq = 0;
  int td = 0, ta = 0;         // Huffman tables of the current scan
  int width = 0, height = 0;  // downsampled size in samples
  int bw = 0, bh = 0;         // blocks allocated (whole MCUs)
  std::vector<int16_t> coef;  // bw * bh blocks of 64, natural order
  int pred = 0;
};

struct Decoder {
  const uint8_t* d;
  size_t n;
  size_t pos = 0;
  uint32_t bitbuf = 0;
  int bitcnt = 0;
  bool bad = false;

  // Entropy-coded bits: 0xFF00 is a stuffed 0xFF; a marker ends the data (zeros follow).
  int bit() {
    if (bitcnt == 0) {
      uint8_t b = 0;
      if (pos < n) {
        b = d[pos];
        if (b == 0xFF) {
          if (pos + 1 < n && d[pos + 1] == 0x00) {
            pos += 2;
          } else {
            b = 0;  // a marker: feed zeros, as libjpeg does
          }
        } else {
          ++pos;
        }
      } else {
        bad = true;
      }
      bitbuf = b;
      bitcnt = 8;
    }
    --bitcnt;
    return static_cast<int>((bitbuf >> bitcnt) & 1);
  }
  int bits(int k) {
    int v = 0;
    for (int i = 0; i < k; ++i) v = (v << 1) | bit();
    return v;
  }
  int decode(const HuffTable& t) {
    int code = 0, first = 0, index = 0;
    for (int len = 1; len <= 16; ++len) {
      code |= bit();
      const int count = t.count[static_cast<size_t>(len)];
      if (code - first < count) {
        const int k = index + code - first;
        if (k >= static_cast<int>(t.symbols.size())) break;
        return t.symbols[static_cast<size_t>(k)];
      }
      index += count;
      first = (first + count) << 1;
      code <<= 1;
    }
    bad = true;
    return 0;
  }
};

int extend(int v, int s) {
  return s == 0 ? 0 : (v < (1 << (s - 1)) ? v - (1 << s) + 1 : v);
}

// libjpeg's sample_range_limit seen through idct_table[x & RANGE_MASK].
uint8_t idct_limit(int x) {
  const int m = x & 1023;
  if (m < 128) return static_cast<uint8_t>(m + 128);
  if (m < 512) return 255;
  if (m < 896) return 0;
  return static_cast<uint8_t>(m - 896);
}

// jpeg_idct_islow: CONST_BITS 13, PASS1_BITS 2.
void idct_islow(const int16_t* in, const uint16_t* q, uint8_t* out, int stride) {
  constexpr int kConst = 13, kPass1 = 2;
  auto descale = [](int64_t x, int n) {
    return static_cast<int>((x + (int64_t{1} << (n - 1))) >> n);
  };
  int ws[64];
  for (int c = 0; c < 8; ++c) {
    auto dq = [&](int r) { return static_cast<int64_t>(in[r * 8 + c]) * q[r * 8 + c]; };
    bool ac_zero = true;
    for (int r = 1; r < 8; ++r) ac_zero = ac_zero && in[r * 8 + c] == 0;
    if (ac_zero) {
      const int dc = static_cast<int>(dq(0) * (1 << kPass1));
      for (int r = 0; r < 8; ++r) ws[r * 8 + c] = dc;
      continue;
    }
    int64_t z2 = dq(2), z3 = dq(6);
    int64_t z1 = (z2 + z3) * 4433;
    int64_t tmp2 = z1 + z3 * -15137, tmp3 = z1 + z2 * 6270;
    z2 = dq(0), z3 = dq(4);
    int64_t tmp0 = (z2 + z3) * (1 << kConst), tmp1 = (z2 - z3) * (1 << kConst);
    const int64_t t10 = tmp0 + tmp3, t13 = tmp0 - tmp3, t11 = tmp1 + tmp2, t12 = tmp1 - tmp2;
    tmp0 = dq(7), tmp1 = dq(5), tmp2 = dq(3), tmp3 = dq(1);
    z1 = tmp0 + tmp3, z2 = tmp1 + tmp2, z3 = tmp0 + tmp2;
    int64_t z4 = tmp1 + tmp3, z5 = (z3 + z4) * 9633;
    tmp0 *= 2446, tmp1 *= 16819, tmp2 *= 25172, tmp3 *= 12299;
    z1 *= -7373, z2 *= -20995, z3 *= -16069, z4 *= -3196;
    z3 += z5, z4 += z5;
    tmp0 += z1 + z3, tmp1 += z2 + z4, tmp2 += z2 + z3, tmp3 += z1 + z4;
    const int n = kConst - kPass1;
    ws[0 * 8 + c] = descale(t10 + tmp3, n), ws[7 * 8 + c] = descale(t10 - tmp3, n);
    ws[1 * 8 + c] = descale(t11 + tmp2, n), ws[6 * 8 + c] = descale(t11 - tmp2, n);
    ws[2 * 8 + c] = descale(t12 + tmp1, n), ws[5 * 8 + c] = descale(t12 - tmp1, n);
    ws[3 * 8 + c] = descale(t13 + tmp0, n), ws[4 * 8 + c] = descale(t13 - tmp0, n);
  }
  for (int r = 0; r < 8; ++r) {
    const int* w = ws + r * 8;
    uint8_t* o = out + r * stride;
    bool ac_zero = true;
    for (int c = 1; c < 8; ++c) ac_zero = ac_zero && w[c] == 0;
    if (ac_zero) {
      const uint8_t v = idct_limit(descale(w[0], kPass1 + 3));
      for (int c = 0; c < 8; ++c) o[c] = v;
      continue;
    }
    int64_t z2 = w[2], z3 = w[6];
    int64_t z1 = (z2 + z3) * 4433;
    int64_t tmp2 = z1 + z3 * -15137, tmp3 = z1 + z2 * 6270;
    int64_t tmp0 = (static_cast<int64_t>(w[0]) + w[4]) * (1 << kConst);
    int64_t tmp1 = (static_cast<int64_t>(w[0]) - w[4]) * (1 << kConst);
    const int64_t t10 = tmp0 + tmp3, t13 = tmp0 - tmp3, t11 = tmp1 + tmp2, t12 = tmp1 - tmp2;
    tmp0 = w[7], tmp1 = w[5], tmp2 = w[3], tmp3 = w[1];
    z1 = tmp0 + tmp3, z2 = tmp1 + tmp2, z3 = tmp0 + tmp2;
    int64_t z4 = tmp1 + tmp3, z5 = (z3 + z4) * 9633;
    tmp0 *= 2446, tmp1 *= 16819, tmp2 *= 25172, tmp3 *= 12299;
    z1 *= -7373, z2 *= -20995, z3 *= -16069, z4 *= -3196;
    z3 += z5, z4 += z5;
    tmp0 += z1 + z3, tmp1 += z2 + z4, tmp2 += z2 + z3, tmp3 += z1 + z4;
    const int n = kConst + kPass1 + 3;
    o[0] = idct_limit(descale(t10 + tmp3, n)), o[7] = idct_limit(descale(t10 - tmp3, n));
    o[1] = idct_limit(descale(t11 + tmp2, n)), o[6] = idct_limit(descale(t11 - tmp2, n));
    o[2] = idct_limit(descale(t12 + tmp1, n)), o[5] = idct_limit(descale(t12 - tmp1, n));
    o[3] = idct_limit(descale(t13 + tmp0, n)), o[4] = idct_limit(descale(t13 - tmp0, n));
  }
}

// One component plane upsampled to (out_w, out_h) by libjpeg-turbo's rules for the factor.
std::vector<uint8_t> upsample(const std::vector<uint8_t>& plane, int stride, int w, int h, int fx,
                              int fy, int out_w, int out_h) {
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h);
  auto at = [&](int x, int y) {
    return static_cast<int>(plane[static_cast<size_t>(y) * stride + x]);
  };
  auto put = [&](int x, int y, int v) {
    if (x < out_w && y < out_h) out[static_cast<size_t>(y) * out_w + x] = static_cast<uint8_t>(v);
  };
  const bool fancy_h = fx == 2 && w > 2;
  for (int y = 0; y < h * fy; ++y) {
    const int iy = y / fy;
    if (fy == 2 && (fx == 1 || fancy_h)) {
      // Blend with the nearer neighbour row (edge rows replicate).
      const int ny = (y % 2 == 0) ? std::max(iy - 1, 0) : std::min(iy + 1, h - 1);
      auto colsum = [&](int x) { return at(x, iy) * 3 + at(x, ny); };
      if (fx == 1) {
        const int bias = y % 2 == 0 ? 1 : 2;
        for (int x = 0; x < w; ++x) put(x, y, (colsum(x) + bias) >> 2);
        continue;
      }
      int this_sum = colsum(0), next_sum = colsum(1), last_sum;
      put(0, y, (this_sum * 4 + 8) >> 4);
      put(1, y, (this_sum * 3 + next_sum + 7) >> 4);
      for (int x = 1; x < w - 1; ++x) {
        last_sum = this_sum, this_sum = next_sum, next_sum = colsum(x + 1);
        put(2 * x, y, (this_sum * 3 + last_sum + 8) >> 4);
        put(2 * x + 1, y, (this_sum * 3 + next_sum + 7) >> 4);
      }
      last_sum = this_sum, this_sum = next_sum;
      put(2 * (w - 1), y, (this_sum * 3 + last_sum + 8) >> 4);
      put(2 * (w - 1) + 1, y, (this_sum * 4 + 7) >> 4);
    } else if (fy == 1 && fancy_h) {
      put(0, y, at(0, iy));
      put(1, y, (at(0, iy) * 3 + at(1, iy) + 2) >> 2);
      for (int x = 1; x < w - 1; ++x) {
        const int v = at(x, iy) * 3;
        put(2 * x, y, (v + at(x - 1, iy) + 1) >> 2);
        put(2 * x + 1, y, (v + at(x + 1, iy) + 2) >> 2);
      }
      put(2 * (w - 1), y, (at(w - 1, iy) * 3 + at(w - 2, iy) + 1) >> 2);
      put(2 * (w - 1) + 1, y, at(w - 1, iy));
    } else {  // box replication
      for (int x = 0; x < w * fx; ++x) put(x, y, at(x / fx, iy));
    }
  }
  return out;
}

uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

}  // namespace

std::optional<Image> decode_jpeg(const uint8_t* d, size_t n, const char** unsupported) {
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return std::nullopt;
  std::array<std::array<uint16_t, 64>, 4> qt{};  // natural order
  std::array<HuffTable, 4> dc_tables, ac_tables;
  std::vector<Component> comps;
  int width = 0, height = 0, hmax = 1, vmax = 1, restart = 0;
  bool adobe_rgb = false, have_frame = false, done = false;
  Decoder dec{d, n};
  size_t pos = 2;
  while (!done) {
    while (pos < n && d[pos] != 0xFF) ++pos;  // tolerate junk between segments
    while (pos < n && d[pos] == 0xFF) ++pos;
    if (pos >= n) return std::nullopt;
    const uint8_t marker = d[pos++];
    if (marker == 0xD9) break;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (pos + 2 > n) return std::nullopt;
    const size_t len = be16(d + pos);
    if (len < 2 || pos + len > n) return std::nullopt;
    const uint8_t* s = d + pos + 2;
    const size_t slen = len - 2;
    pos += len;
    switch (marker) {
      case 0xDB: {  // quantization tables
        for (size_t i = 0; i < slen;) {
          const int pq = s[i] >> 4, tq = s[i] & 15;
          if (tq > 3) return std::nullopt;
          if (pq != 0) return *unsupported = "JPEG with 16-bit quantization tables", std::nullopt;
          if (i + 65 > slen) return std::nullopt;
          for (int k = 0; k < 64; ++k) qt[static_cast<size_t>(tq)][kZigzag[k]] = s[i + 1 + k];
          i += 65;
        }
        break;
      }
      case 0xC4: {  // Huffman tables
        for (size_t i = 0; i < slen;) {
          if (i + 17 > slen) return std::nullopt;
          const int tc = s[i] >> 4, th = s[i] & 15;
          if (tc > 1 || th > 3) return std::nullopt;
          HuffTable& t = (tc == 0 ? dc_tables : ac_tables)[static_cast<size_t>(th)];
          t = HuffTable{};
          t.defined = true;
          size_t total = 0;
          for (int l = 1; l <= 16; ++l) total += t.count[static_cast<size_t>(l)] = s[i + l];
          if (i + 17 + total > slen) return std::nullopt;
          t.symbols.assign(s + i + 17, s + i + 17 + total);
          i += 17 + total;
        }
        break;
      }
      case 0xDD:
        if (slen < 2) return std::nullopt;
        restart = be16(s);
        break;
      case 0xEE:  // Adobe: transform 0 means the components are RGB, not YCbCr
        if (slen >= 12 && std::memcmp(s, "Adobe", 5) == 0) adobe_rgb = s[11] == 0;
        break;
      case 0xC0:
      case 0xC1: {
        if (slen < 6 || have_frame) return std::nullopt;
        if (s[0] != 8) return *unsupported = "JPEG with other than 8-bit samples", std::nullopt;
        height = be16(s + 1), width = be16(s + 3);
        const int nc = s[5];
        if (width == 0 || height == 0) return *unsupported = "JPEG with DNL height", std::nullopt;
        if (nc != 1 && nc != 3) return *unsupported = "JPEG with 2 or 4 components", std::nullopt;
        // Each 8x8 block costs at least two bits, which bounds a genuine stream's pixel count;
        // a larger header is corrupt (and would only exhaust memory).
        if (static_cast<uint64_t>(width) * height > 256 * static_cast<uint64_t>(n) + (1u << 16))
          return std::nullopt;
        if (slen < 6 + 3 * static_cast<size_t>(nc)) return std::nullopt;
        for (int c = 0; c < nc; ++c) {
          Component comp;
          comp.id = s[6 + 3 * c];
          comp.h = s[7 + 3 * c] >> 4, comp.v = s[7 + 3 * c] & 15;
          comp.tq = s[8 + 3 * c];
          if (comp.h < 1 || comp.h > 4 || comp.v < 1 || comp.v > 4 || comp.tq > 3)
            return std::nullopt;
          hmax = std::max(hmax, comp.h), vmax = std::max(vmax, comp.v);
          comps.push_back(comp);
        }
        const int mcux = (width + 8 * hmax - 1) / (8 * hmax);
        const int mcuy = (height + 8 * vmax - 1) / (8 * vmax);
        for (Component& c : comps) {
          c.width = (width * c.h + hmax - 1) / hmax;
          c.height = (height * c.v + vmax - 1) / vmax;
          c.bw = mcux * c.h, c.bh = mcuy * c.v;
          c.coef.assign(static_cast<size_t>(c.bw) * c.bh * 64, 0);
        }
        have_frame = true;
        break;
      }
      case 0xDA: {  // start of scan: decode the entropy-coded data that follows
        if (!have_frame || slen < 1) return std::nullopt;
        const int ns = s[0];
        if (ns < 1 || ns > 4 || slen < 1 + 2 * static_cast<size_t>(ns) + 3) return std::nullopt;
        std::vector<Component*> scan;
        for (int i = 0; i < ns; ++i) {
          Component* found = nullptr;
          for (Component& c : comps)
            if (c.id == s[1 + 2 * i]) found = &c;
          if (!found) return std::nullopt;
          found->td = s[2 + 2 * i] >> 4, found->ta = s[2 + 2 * i] & 15;
          if (found->td > 3 || found->ta > 3 ||
              !dc_tables[static_cast<size_t>(found->td)].defined ||
              !ac_tables[static_cast<size_t>(found->ta)].defined)
            return std::nullopt;
          found->pred = 0;
          scan.push_back(found);
        }
        dec.pos = pos, dec.bitcnt = 0;
        // A single-component scan covers that component's own blocks, not whole MCUs.
        const bool single = ns == 1;
        const int mx = single ? (scan[0]->width + 7) / 8 : (width + 8 * hmax - 1) / (8 * hmax);
        const int my = single ? (scan[0]->height + 7) / 8 : (height + 8 * vmax - 1) / (8 * vmax);
        int mcu_count = 0;
        for (int y = 0; y < my && !dec.bad; ++y) {
          for (int x = 0; x < mx && !dec.bad; ++x) {
            if (restart > 0 && mcu_count > 0 && mcu_count % restart == 0) {
              // Byte-align, skip the RSTn marker, reset DC predictions.
              dec.bitcnt = 0;
              while (dec.pos + 1 < n &&
                     !(d[dec.pos] == 0xFF && d[dec.pos + 1] >= 0xD0 && d[dec.pos + 1] <= 0xD7))
                ++dec.pos;
              dec.pos += 2;
              for (Component* c : scan) c->pred = 0;
            }
            ++mcu_count;
            for (Component* c : scan) {
              const int bh = single ? 1 : c->v, bw = single ? 1 : c->h;
              for (int by = 0; by < bh; ++by)
                for (int bx = 0; bx < bw; ++bx) {
                  const int row = single ? y : y * c->v + by;
                  const int col = single ? x : x * c->h + bx;
                  int16_t* blk = c->coef.data() + (static_cast<size_t>(row) * c->bw + col) * 64;
                  const int t = dec.decode(dc_tables[static_cast<size_t>(c->td)]);
                  if (t > 11) dec.bad = true;
                  if (dec.bad) break;
                  c->pred += extend(dec.bits(t), t);
                  blk[0] = static_cast<int16_t>(c->pred);
                  for (int k = 1; k < 64;) {
                    const int rs = dec.decode(ac_tables[static_cast<size_t>(c->ta)]);
                    const int r = rs >> 4, sz = rs & 15;
                    if (sz == 0) {
                      if (r != 15) break;  // end of block
                      k += 16;
                      continue;
                    }
                    k += r;
                    if (k > 63 || sz > 10) {
                      dec.bad = true;
                      break;
                    }
                    blk[kZigzag[static_cast<size_t>(k++)]] =
                        static_cast<int16_t>(extend(dec.bits(sz), sz));
                  }
                }
            }
          }
        }
        if (dec.bad) return std::nullopt;
        pos = dec.pos;
        done = true;  // baseline: one scan holds every component of interest
        for (const Component& c : comps) {
          bool seen = false;
          for (const Component* sc : scan) seen = seen || sc == &c;
          if (!seen) done = false;
        }
        break;
      }
      default:
        if (marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC)
          return *unsupported = "progressive, lossless or arithmetic-coded JPEG", std::nullopt;
        break;  // APPn, COM and others carry nothing the decoder needs
    }
  }
  if (!have_frame || !done) return std::nullopt;

  std::vector<std::vector<uint8_t>> planes;
  for (const Component& c : comps) {
    const int stride = c.bw * 8;
    std::vector<uint8_t> plane(static_cast<size_t>(stride) * c.bh * 8);
    const uint16_t* q = qt[static_cast<size_t>(c.tq)].data();
    for (int by = 0; by < c.bh; ++by)
      for (int bx = 0; bx < c.bw; ++bx)
        idct_islow(c.coef.data() + (static_cast<size_t>(by) * c.bw + bx) * 64, q,
                   plane.data() + static_cast<size_t>(by) * 8 * stride + bx * 8, stride);
    const int fx = hmax / c.h, fy = vmax / c.v;
    if (hmax % c.h != 0 || vmax % c.v != 0)
      return *unsupported = "JPEG with fractional sampling ratios", std::nullopt;
    planes.push_back(upsample(plane, stride, c.width, c.height, fx, fy, width, height));
  }
  Image img;
  img.width = width, img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < static_cast<size_t>(width) * height; ++i) {
    uint8_t* o = img.rgb.data() + i * 3;
    if (planes.size() == 1) {
      o[0] = o[1] = o[2] = planes[0][i];
    } else if (adobe_rgb) {
      o[0] = planes[0][i], o[1] = planes[1][i], o[2] = planes[2][i];
    } else {
      // jdcolor.c: 16-bit fixed point, FIX(x) = round(x * 65536).
      const int y = planes[0][i], cb = planes[1][i] - 128, cr = planes[2][i] - 128;
      const int r = y + ((91881 * cr + 32768) >> 16);
      const int g = y + ((-22554 * cb + 32768 - 46802 * cr) >> 16);
      const int b = y + ((116130 * cb + 32768) >> 16);
      o[0] = static_cast<uint8_t>(std::clamp(r, 0, 255));
      o[1] = static_cast<uint8_t>(std::clamp(g, 0, 255));
      o[2] = static_cast<uint8_t>(std::clamp(b, 0, 255));
    }
  }
  return img;
}

}  // namespace kiln::ops::image
