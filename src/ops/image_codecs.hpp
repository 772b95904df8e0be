#pragma once
// ImageDecoder's adapters over the system codec libraries (libjpeg-turbo, libpng, libtiff).
// Each returns nullopt for a stream it cannot read; when that is because the stream uses a
// variant Kiln does not handle (rather than being corrupt), *unsupported says which.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::ops::image {

struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major, top row first
};

// A header promising more pixels than this is treated as corrupt rather than allocated.
constexpr uint64_t kMaxPixels = uint64_t{1} << 28;

std::optional<Image> decode_jpeg(const uint8_t* data, size_t size, std::string* unsupported);
std::optional<Image> decode_png(const uint8_t* data, size_t size, std::string* unsupported);
std::optional<Image> decode_tiff(const uint8_t* data, size_t size, std::string* unsupported);

// Any format ImageDecoder reads, told by its magic bytes (ops/image_decoder.cpp: BMP and PNM
// read there, the rest through the adapters above): nullopt for a corrupt stream or one that is
// not an image, and also when *unsupported is set (a format or variant Kiln does not decode,
// named there).
std::optional<Image> decode(const uint8_t* data, size_t size, std::string* unsupported);

}  // namespace kiln::ops::image
