// ImageDecoder on streams made here with the codec libraries themselves: intact streams decode to
// their pixels, and every truncation or byte corruption ends in an image, the spec's empty
// (0, 0, C) result or an Unsupported error, never a crash or a process exit inside a codec.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

// clang-format off
#include <jpeglib.h>
// clang-format on
#include <png.h>
#include <tiffio.h>

#include "runtime/interpreter.hpp"

namespace kiln {
namespace {

constexpr int kW = 13, kH = 11;  // odd sizes exercise partial JPEG blocks and row padding

std::vector<uint8_t> source_pixels() {
  std::vector<uint8_t> rgb(kW * kH * 3);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      uint8_t* p = &rgb[(y * kW + x) * 3];
      p[0] = static_cast<uint8_t>(x * 19), p[1] = static_cast<uint8_t>(y * 23);
      p[2] = static_cast<uint8_t>(200 - (x + y) * 8);  // smooth: JPEG stays close
    }
  return rgb;
}

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = kW, image.height = kH, image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  EXPECT_TRUE(png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr));
  std::vector<uint8_t> out(size);
  EXPECT_TRUE(png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr));
  out.resize(size);
  return out;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = kW, cinfo.image_height = kH;
  cinfo.input_components = 3, cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data()) + cinfo.next_scanline * kW * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buf);
  return out;
}

std::vector<uint8_t> encode_tiff(const std::vector<uint8_t>& rgb) {
  char path[] = "/tmp/kiln_image_test_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  TIFF* tif = TIFFOpen(path, "w");
  EXPECT_NE(tif, nullptr);
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, kW);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, kH);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 3);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
  TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 4);
  for (int y = 0; y < kH; ++y)
    TIFFWriteScanline(tif, const_cast<uint8_t*>(rgb.data()) + y * kW * 3, y, 0);
  TIFFClose(tif);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return out;
}

class Decoder {
 public:
  explicit Decoder(const std::string& pixel_format) {
    auto g = std::make_shared<ir::Graph>();
    ir::Value* in = g->add_input("data", TypeInfo::tensor(DataType::UInt8, Shape({Dim()})));
    ir::Value* out = g->add_value("image");
    ir::Node* n = g->add_node("ImageDecoder", "", "", {in}, {out});
    n->set_opset(20);
    n->set_attribute("pixel_format", ir::Attribute(pixel_format));
    g->add_output(out);
    interp_ = std::make_unique<runtime::Interpreter>(g);
  }
  Tensor run(const std::vector<uint8_t>& bytes) {
    auto data = Tensor::from_vector<uint8_t>({static_cast<int64_t>(bytes.size())}, bytes);
    return interp_->run(std::vector<RtValue>{data})[0].tensor();
  }

 private:
  std::unique_ptr<runtime::Interpreter> interp_;
};

std::vector<uint8_t> values(const Tensor& t) {
  auto v = t.values<uint8_t>();
  return {v.begin(), v.end()};
}

TEST(ImageDecoder, LosslessStreamsDecodeToTheirPixels) {
  const auto rgb = source_pixels();
  Decoder rgb_dec("RGB"), bgr_dec("BGR"), grey_dec("Grayscale");
  for (const auto& stream : {encode_png(rgb), encode_tiff(rgb)}) {
    const Tensor t = rgb_dec.run(stream);
    EXPECT_EQ(t.dims(), (std::vector<int64_t>{kH, kW, 3}));
    EXPECT_EQ(values(t), rgb);
    const auto bgr = values(bgr_dec.run(stream));
    const auto grey = values(grey_dec.run(stream));
    ASSERT_EQ(grey.size(), static_cast<size_t>(kW * kH));
    for (size_t i = 0; i < grey.size(); ++i) {
      const uint8_t* p = &rgb[i * 3];
      EXPECT_EQ(bgr[i * 3], p[2]);
      EXPECT_EQ(bgr[i * 3 + 2], p[0]);
      EXPECT_EQ(grey[i], (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
    }
  }
}

TEST(ImageDecoder, JpegDecodesCloseToItsSource) {
  const auto rgb = source_pixels();
  const Tensor t = Decoder("RGB").run(encode_jpeg(rgb));
  ASSERT_EQ(t.dims(), (std::vector<int64_t>{kH, kW, 3}));
  const auto got = values(t);
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - rgb[i]));
  EXPECT_LT(worst, 24);  // lossy, with 4:2:0 chroma
}

// Every strict prefix and every single-byte corruption: an image of some size, the empty
// result, or an Unsupported error; short prefixes are certainly corrupt.
TEST(ImageDecoder, TruncatedAndCorruptStreamsFailCleanly) {
  const auto rgb = source_pixels();
  Decoder dec("RGB");
  const std::vector<std::pair<const char*, std::vector<uint8_t>>> streams = {
      {"png", encode_png(rgb)}, {"jpeg", encode_jpeg(rgb)}, {"tiff", encode_tiff(rgb)}};
  for (const auto& [name, stream] : streams) {
    for (size_t len = 0; len < stream.size(); ++len) {
      const Tensor t = dec.run(std::vector<uint8_t>(stream.begin(), stream.begin() + len));
      ASSERT_EQ(t.rank(), 3u) << name << " prefix " << len;
      if (len <= stream.size() / 2)
        EXPECT_EQ(t.dims(), (std::vector<int64_t>{0, 0, 3})) << name << " prefix " << len;
      else
        EXPECT_TRUE(t.numel() == 0 || t.dims() == (std::vector<int64_t>{kH, kW, 3}))
            << name << " prefix " << len;
    }
    size_t empty = 0;
    for (size_t pos = 0; pos < stream.size(); ++pos) {
      auto bad = stream;
      bad[pos] ^= 0xA5;
      try {
        const Tensor t = dec.run(bad);
        ASSERT_EQ(t.rank(), 3u) << name << " corrupt byte " << pos;
        EXPECT_EQ(t.dim(2), 3) << name << " corrupt byte " << pos;
        empty += t.numel() == 0;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::Unsupported)
            << name << " corrupt byte " << pos << ": " << e.what();
      }
    }
    EXPECT_GT(empty, 0u) << name;
  }
}

TEST(ImageDecoder, WebpJpeg2000AndLosslessJpegAreUnsupported) {
  Decoder dec("RGB");
  for (std::vector<uint8_t> stream :
       {std::vector<uint8_t>{'R', 'I', 'F', 'F', 0, 0, 0, 0, 'W', 'E', 'B', 'P'},
        std::vector<uint8_t>{0, 0, 0, 12, 'j', 'P', ' ', ' ', 13, 10, 0x87, 10},
        // SOF3 (lossless), which libjpeg-turbo 2.1 does not decode
        std::vector<uint8_t>{0xFF, 0xD8, 0xFF, 0xC3, 0, 11, 8, 0, 16, 0, 16, 1, 1, 0x11, 0, 0xFF,
                             0xD9}}) {
    try {
      dec.run(stream);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    }
  }
}

}  // namespace
}  // namespace kiln
