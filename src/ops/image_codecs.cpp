// JPEG, PNG and TIFF decoding for ImageDecoder through libjpeg-turbo, libpng and libtiff. The
// ONNX reference decodes with PIL, which sits on the same libraries, so the settings here follow
// PIL's: libjpeg-turbo's defaults (islow IDCT, fancy upsampling), PNG samples taken as stored
// (no gAMA correction, alpha dropped rather than composited, 16-bit reduced to the high byte).
//
// libjpeg and libpng report fatal errors through a callback that must not return; both are
// C libraries, so the callbacks longjmp back to the decode function (an exception could not
// cross their frames). Those functions hold only trivially destructible locals across setjmp.
#include "ops/image_codecs.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// jpeglib.h needs <cstdio> first, and jerror.h reads best after it.
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>
#include <tiffio.h>

namespace kiln::ops::image {
namespace {

bool too_many_pixels(uint64_t width, uint64_t height, uint64_t max_ratio, size_t size) {
  // A genuine stream cannot compress better than max_ratio pixels per byte, so a header
  // promising more is corrupt; this keeps a tiny bogus file from allocating gigabytes.
  const uint64_t pixels = width * height;
  return pixels > kMaxPixels || pixels > max_ratio * size + (uint64_t{1} << 20);
}

// ---- JPEG ----

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  int code;  // message code of the fatal error, or JWRN_JPEG_EOF for a truncated stream
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  err->code = err->mgr.msg_code;
  std::longjmp(err->jump, 1);
}

void jpeg_emit_message(j_common_ptr cinfo, int level) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  // PIL refuses a truncated JPEG ("image file is truncated") but decodes through other
  // warnings (bad Huffman codes, junk before a marker), so only running out of data aborts.
  if (level < 0 && err->mgr.msg_code == JWRN_JPEG_EOF) {
    err->code = JWRN_JPEG_EOF;
    std::longjmp(err->jump, 1);
  }
}

void jpeg_no_output(j_common_ptr) {}

enum class Outcome { kOk, kCorrupt, kUnsupported };

Outcome run_jpeg(jpeg_decompress_struct* cinfo, JpegError* err, Image* img,
                 std::string* unsupported, const uint8_t* data, size_t size) {
  if (setjmp(err->jump)) {
    // A precision byte other than 12 or 16 (real JPEG variants) is just a corrupt header.
    const int precision = err->mgr.msg_parm.i[0];
    if (err->code == JERR_BAD_PRECISION && precision != 12 && precision != 16)
      return Outcome::kCorrupt;
    switch (err->code) {
      case JERR_BAD_PRECISION:
      case JERR_ARITH_NOTIMPL:
      case JERR_SOF_UNSUPPORTED:  // lossless and hierarchical JPEG
      case JERR_NOT_COMPILED:
      case JERR_CONVERSION_NOTIMPL: {
        char text[JMSG_LENGTH_MAX];
        err->mgr.format_message(reinterpret_cast<j_common_ptr>(cinfo), text);
        *unsupported = std::string("JPEG variant (libjpeg-turbo: ") + text + ")";
        return Outcome::kUnsupported;
      }
      default:
        return Outcome::kCorrupt;
    }
  }
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK) return Outcome::kCorrupt;
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    *unsupported = "CMYK/YCCK JPEG";
    return Outcome::kUnsupported;
  }
  if (too_many_pixels(cinfo->image_width, cinfo->image_height, 1024, size))
    return Outcome::kCorrupt;
  cinfo->out_color_space = JCS_RGB;  // grey sources are replicated, as PIL's convert("RGB")
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != 3) return Outcome::kCorrupt;
  img->width = cinfo->output_width, img->height = cinfo->output_height;
  img->rgb.resize(static_cast<size_t>(img->width * img->height * 3));
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = img->rgb.data() + static_cast<size_t>(cinfo->output_scanline) * img->width * 3;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) return Outcome::kCorrupt;
  }
  // No jpeg_finish_decompress: all rows are in, and a missing EOI after them is harmless.
  return Outcome::kOk;
}

// ---- PNG ----

struct PngSource {
  const uint8_t* data;
  size_t size, pos;
};

void png_read_memory(png_structp png, png_bytep out, size_t len) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (len > src->size - src->pos) png_error(png, "truncated PNG stream");
  std::memcpy(out, src->data + src->pos, len);
  src->pos += len;
}

void png_fail(png_structp png, png_const_charp) {
  png_longjmp(png, 1);
}
void png_quiet(png_structp, png_const_charp) {}

bool run_png(png_structp png, png_infop info, PngSource* src, Image* img,
             std::vector<png_bytep>* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, src, png_read_memory);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  // 1-bit pixels deflated at most 1032:1.
  if (too_many_pixels(width, height, 8 * 1032, src->size)) return false;
  png_set_expand(png);       // palette -> RGB, sub-byte grey -> 8 bit, tRNS -> alpha
  png_set_strip_16(png);     // PIL keeps the high byte of 16-bit samples
  png_set_strip_alpha(png);  // PIL's convert("RGB") drops alpha without compositing
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) return false;
  img->width = width, img->height = height;
  img->rgb.resize(static_cast<size_t>(width) * height * 3);
  rows->resize(height);
  for (size_t y = 0; y < height; ++y) (*rows)[y] = img->rgb.data() + y * width * 3;
  png_read_image(png, rows->data());
  return true;
}

// ---- TIFF ----

struct TiffSource {
  const uint8_t* data;
  uint64_t size, pos;
};

tmsize_t tiff_read(thandle_t h, void* out, tmsize_t len) {
  auto* src = static_cast<TiffSource*>(h);
  if (len < 0 || src->pos >= src->size) return 0;
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(len), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
  return static_cast<tmsize_t>(n);
}

tmsize_t tiff_write(thandle_t, void*, tmsize_t) {
  return -1;
}

toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  auto* src = static_cast<TiffSource*>(h);
  const uint64_t base = whence == SEEK_CUR ? src->pos : whence == SEEK_END ? src->size : 0;
  if (off > UINT64_MAX - base) return static_cast<toff_t>(-1);
  src->pos = base + off;  // past the end is allowed; reads there return nothing
  return src->pos;
}

int tiff_close(thandle_t) {
  return 0;
}
toff_t tiff_size(thandle_t h) {
  return static_cast<TiffSource*>(h)->size;
}
int tiff_map(thandle_t, void**, toff_t*) {
  return 0;
}
void tiff_unmap(thandle_t, void*, toff_t) {}
int tiff_quiet(TIFF*, void*, const char*, const char*, va_list) {
  return 1;
}

}  // namespace

std::optional<Image> decode_jpeg(const uint8_t* data, size_t size, std::string* unsupported) {
  jpeg_decompress_struct cinfo{};
  JpegError err{};
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  err.mgr.output_message = jpeg_no_output;
  Image img;
  const Outcome outcome = run_jpeg(&cinfo, &err, &img, unsupported, data, size);
  jpeg_destroy_decompress(&cinfo);
  if (outcome != Outcome::kOk) return std::nullopt;
  return img;
}

std::optional<Image> decode_png(const uint8_t* data, size_t size, std::string*) {
  // Every PNG variant is readable by libpng, so failures are corrupt streams.
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, png_fail, png_quiet);
  if (!png) return std::nullopt;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return std::nullopt;
  }
  PngSource src{data, size, 0};
  Image img;
  std::vector<png_bytep> rows;
  const bool ok = run_png(png, info, &src, &img, &rows);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) return std::nullopt;
  return img;
}

std::optional<Image> decode_tiff(const uint8_t* data, size_t size, std::string* unsupported) {
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (!opts) return std::nullopt;
  TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_quiet, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_quiet, nullptr);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, static_cast<tmsize_t>(kMaxPixels * 4));
  TiffSource src{data, size, 0};
  // "m": no memory mapping, everything goes through the read callback.
  TIFF* tif = TIFFClientOpenExt("ImageDecoder input", "rm", &src, tiff_read, tiff_write, tiff_seek,
                                tiff_close, tiff_size, tiff_map, tiff_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (!tif) return std::nullopt;
  std::optional<Image> result;
  uint32_t width = 0, height = 0;
  uint16_t compression = COMPRESSION_NONE;
  char message[1024] = "";
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &width) ||
      !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &height) || width == 0 || height == 0 ||
      too_many_pixels(width, height, 1 << 16, size)) {
    // corrupt: result stays empty
  } else if (!TIFFFindCODEC(compression)) {
    // not a compression scheme libtiff knows of at all: a corrupt tag, result stays empty
  } else if (!TIFFIsCODECConfigured(compression)) {
    *unsupported = "TIFF compression scheme " + std::to_string(compression);
  } else if (!TIFFRGBAImageOK(tif, message)) {
    *unsupported = std::string("TIFF variant (libtiff: ") + message + ")";
  } else {
    std::vector<uint32_t> raster(static_cast<size_t>(width) * height);
    if (TIFFReadRGBAImageOriented(tif, width, height, raster.data(), ORIENTATION_TOPLEFT, 1)) {
      Image img;
      img.width = width, img.height = height;
      img.rgb.resize(raster.size() * 3);
      for (size_t i = 0; i < raster.size(); ++i) {
        img.rgb[i * 3] = static_cast<uint8_t>(TIFFGetR(raster[i]));
        img.rgb[i * 3 + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
        img.rgb[i * 3 + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
      }
      result = std::move(img);
    }
  }
  TIFFClose(tif);
  return result;
}

}  // namespace kiln::ops::image
