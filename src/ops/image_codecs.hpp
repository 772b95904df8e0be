#pragma once
// Small dependency-free image decoders used by ImageDecoder: PNG (non-interlaced, 8-bit and
// paletted, with its own inflate), baseline JPEG and uncompressed TIFF. Each returns nullopt for a
// stream it cannot read; when that is because the stream uses a variant the decoder does not
// implement (rather than being corrupt), *unsupported names it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::ops::image {

struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major, top row first
};

// Inflates a zlib stream; nullopt when corrupt or longer than max_out bytes.
std::optional<std::vector<uint8_t>> zlib_inflate(const uint8_t* data, size_t size, size_t max_out);
std::optional<Image> decode_png(const uint8_t* data, size_t size, const char** unsupported);
// Baseline JPEG, bit-exact with libjpeg-turbo's default decoding.
std::optional<Image> decode_jpeg(const uint8_t* data, size_t size, const char** unsupported);
std::optional<Image> decode_tiff(const uint8_t* data, size_t size, const char** unsupported);

}  // namespace kiln::ops::image
