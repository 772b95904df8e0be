// ImageDecoder (opset 20). JPEG, PNG and TIFF go through libjpeg-turbo, libpng and libtiff
// (ops/image_codecs.cpp); BMP (uncompressed 24/32-bit and 8-bit paletted) and binary PNM (P5/P6,
// 8-bit) are simple enough containers, without a common Debian library, to read here.
// JPEG 2000 and WebP would need openjpeg/libwebp, which Kiln does not link: those are refused as
// Unsupported, as are the few variants the libraries or Kiln do not handle (CMYK or 12-bit JPEG,
// exotic TIFF photometrics, ...). A corrupt stream, or one that is not an image at all, decodes to
// an empty (0, 0, C) tensor, as the spec says.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "ops/image_codecs.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

using image::Image;

uint32_t le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::optional<Image> decode_bmp(const uint8_t* d, size_t n) {
  if (n < 54) return std::nullopt;
  const uint32_t offset = le(d + 10, 4);
  const uint32_t header = le(d + 14, 4);
  if (header < 40 || 14 + static_cast<size_t>(header) > n) return std::nullopt;
  const auto w = static_cast<int32_t>(le(d + 18, 4));
  const auto h = static_cast<int32_t>(le(d + 22, 4));
  const uint32_t bpp = le(d + 28, 2);
  const uint32_t compression = le(d + 30, 4);
  if (w <= 0 || h == 0 || h == INT32_MIN || w > (1 << 16) || std::abs(h) > (1 << 16))
    return std::nullopt;
  // BI_RGB only (BI_BITFIELDS with the default masks would also be common for 32-bit).
  if (compression != 0 || (bpp != 24 && bpp != 32 && bpp != 8)) return std::nullopt;
  Image img;
  img.width = w, img.height = std::abs(h);
  const size_t row_bytes = (static_cast<size_t>(w) * bpp / 8 + 3) & ~size_t{3};
  if (offset > n || row_bytes * static_cast<size_t>(img.height) > n - offset) return std::nullopt;
  const uint8_t* palette = d + 14 + header;
  uint32_t colors = le(d + 46, 4);
  if (bpp == 8) {
    if (colors == 0) colors = 256;
    if (colors > 256) return std::nullopt;
    if (palette + 4 * static_cast<size_t>(colors) > d + offset) return std::nullopt;
  }
  img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
  for (int64_t y = 0; y < img.height; ++y) {
    const int64_t src_row = h > 0 ? img.height - 1 - y : y;  // positive height: bottom-up
    const uint8_t* row = d + offset + static_cast<size_t>(src_row) * row_bytes;
    for (int64_t x = 0; x < img.width; ++x) {
      uint8_t* px = img.rgb.data() + (y * img.width + x) * 3;
      const uint8_t* bgr;
      if (bpp == 8) {
        if (row[x] >= colors) return std::nullopt;
        bgr = palette + 4 * row[x];
      } else {
        bgr = row + x * (bpp / 8);
      }
      px[0] = bgr[2], px[1] = bgr[1], px[2] = bgr[0];
    }
  }
  return img;
}

// Binary PNM: "P5"/"P6", whitespace-separated width, height, maxval (comments allowed), one
// whitespace byte, then the samples.
std::optional<Image> decode_pnm(const uint8_t* d, size_t n) {
  size_t pos = 2;
  auto read_int = [&]() -> std::optional<int64_t> {
    while (pos < n) {
      if (d[pos] == '#') {
        while (pos < n && d[pos] != '\n') ++pos;
      } else if (std::isspace(d[pos])) {
        ++pos;
      } else {
        break;
      }
    }
    if (pos >= n || !std::isdigit(d[pos])) return std::nullopt;
    int64_t v = 0;
    while (pos < n && std::isdigit(d[pos]) && v < (1 << 20)) v = v * 10 + (d[pos++] - '0');
    return v;
  };
  const bool color = d[1] == '6';
  auto w = read_int(), h = read_int(), maxval = read_int();
  if (!w || !h || !maxval || *w <= 0 || *h <= 0 || *w > (1 << 16) || *h > (1 << 16))
    return std::nullopt;
  if (*maxval != 255) return std::nullopt;  // 16-bit samples would need a wider output
  if (pos >= n || !std::isspace(d[pos])) return std::nullopt;
  ++pos;
  const size_t channels = color ? 3 : 1;
  const size_t need = static_cast<size_t>(*w * *h) * channels;
  if (n - pos < need) return std::nullopt;
  Image img;
  img.width = *w, img.height = *h;
  img.rgb.resize(static_cast<size_t>(*w * *h * 3));
  for (size_t i = 0; i < static_cast<size_t>(*w * *h); ++i)
    for (size_t c = 0; c < 3; ++c) img.rgb[i * 3 + c] = d[pos + i * channels + (color ? c : 0)];
  return img;
}

const char* unsupported_format(const uint8_t* d, size_t n) {
  auto starts = [&](const char* magic, size_t len) {
    return n >= len && std::memcmp(d, magic, len) == 0;
  };
  if (starts("\0\0\0\x0CjP  ", 8) || starts("\xFF\x4F\xFF\x51", 4)) return "JPEG 2000";
  if (n >= 12 && starts("RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0) return "WebP";
  if (starts("P1", 2) || starts("P2", 2) || starts("P3", 2) || starts("P4", 2))
    return "ASCII or 1-bit PNM";
  return nullptr;
}

void image_decoder(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  ctx.check(data.dtype() == DataType::UInt8 && data.rank() == 1,
            "encoded data must be a 1-D uint8 tensor, got {}", data.describe());
  const std::string format = ctx.attr_string("pixel_format", "RGB");
  if (format != "RGB" && format != "BGR" && format != "Grayscale")
    ctx.fail("unknown pixel_format '{}' (RGB, BGR or Grayscale)", format);
  const int64_t channels = format == "Grayscale" ? 1 : 3;
  std::string unsupported;
  const std::optional<Image> img =
      image::decode(data.data<uint8_t>(), static_cast<size_t>(data.numel()), &unsupported);
  if (!unsupported.empty()) ctx.unsupported("{}", unsupported);
  if (!img) {
    ctx.set_output(0, Tensor(DataType::UInt8, {0, 0, channels}));
    return;
  }
  Tensor out(DataType::UInt8, {img->height, img->width, channels});
  uint8_t* o = out.data<uint8_t>();
  const int64_t pixels = img->height * img->width;
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* p = img->rgb.data() + i * 3;
    if (channels == 1) {
      // ITU-R 601-2 luma with the fixed-point rounding image libraries use.
      o[i] = static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
    } else if (format == "BGR") {
      o[i * 3] = p[2], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[0];
    } else {
      o[i * 3] = p[0], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[2];
    }
  }
  ctx.set_output(0, std::move(out));
}

void infer_image_decoder(InferContext& ctx) {
  const int64_t channels = ctx.attr_string("pixel_format", "RGB") == "Grayscale" ? 1 : 3;
  ctx.set_output_type(0, TypeInfo::tensor(DataType::UInt8, Shape({Dim(), Dim(), Dim(channels)})));
}

KILN_REGISTER_OP({.op_type = "ImageDecoder",
                  .kernel = image_decoder,
                  .infer = infer_image_decoder,
                  .since_opset = 20});

}  // namespace

std::optional<Image> image::decode(const uint8_t* d, size_t n, std::string* unsupported) {
  std::optional<Image> img;
  std::string variant;  // set when a decoder meets a variant Kiln does not handle
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') {
    img = decode_bmp(d, n);
  } else if (n >= 2 && d[0] == 'P' && (d[1] == '5' || d[1] == '6')) {
    img = decode_pnm(d, n);
  } else if (n >= 3 && std::memcmp(d, "\xFF\xD8\xFF", 3) == 0) {
    img = image::decode_jpeg(d, n, &variant);
  } else if (n >= 4 && std::memcmp(d, "\x89PNG", 4) == 0) {
    img = image::decode_png(d, n, &variant);
  } else if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) {
    img = image::decode_tiff(d, n, &variant);
  } else if (const char* name = unsupported_format(d, n)) {
    *unsupported = fmt::format("decoding {} images needs a codec library Kiln does not link", name);
    return std::nullopt;
  }
  if (!variant.empty()) {
    *unsupported = fmt::format("{} is not supported", variant);
    return std::nullopt;
  }
  return img;
}

}  // namespace kiln::ops
