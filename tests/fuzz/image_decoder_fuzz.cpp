// libFuzzer target: arbitrary bytes through ImageDecoder's decoding (ops/image_codecs.hpp
// `image::decode`): a served model with an ImageDecoder node decodes what a client sends. BMP and
// PNM are parsed by Kiln, JPEG, PNG and TIFF by the system libraries behind Kiln's adapters (their
// error callbacks, the pixel-count guard). Any crash, leak or sanitizer report is a bug; nullopt
// (corrupt) or a named unsupported variant is the expected outcome for bad input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/image_codecs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string unsupported;
  const auto img = kiln::ops::image::decode(data, size, &unsupported);
  if (img) {
    // Every decoded image holds exactly its pixels.
    if (img->rgb.size() != static_cast<size_t>(img->height * img->width * 3)) __builtin_trap();
  }
  return 0;
}
