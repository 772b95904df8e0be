#include "compiler/npz.hpp"

#include <zlib.h>

#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/regular_file.hpp"

namespace kiln::compiler {
namespace {

constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint64_t kDeflateMaxRatio = 1032;

// Bounds-checked little-endian reads over the file's bytes.
class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  uint64_t read(size_t offset, size_t width) const {
    check(offset, width);
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i)
      v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[offset + i])) << (8 * i);
    return v;
  }
  uint32_t u32(size_t offset) const { return static_cast<uint32_t>(read(offset, 4)); }
  uint16_t u16(size_t offset) const { return static_cast<uint16_t>(read(offset, 2)); }
  uint64_t u64(size_t offset) const { return read(offset, 8); }
  std::string_view slice(uint64_t offset, uint64_t size) const {
    check(offset, size);
    return std::string_view(bytes_).substr(offset, size);
  }
  size_t size() const { return bytes_.size(); }
  [[noreturn]] void bad(std::string_view why) const {
    fail(ErrorCode::InvalidArgument, "{}: not a readable .npz file: {}", path_, why);
  }

 private:
  void check(uint64_t offset, uint64_t width) const {
    if (offset > bytes_.size() || width > bytes_.size() - offset) bad("a record runs past its end");
  }
  const std::string& bytes_;
  const std::string& path_;
};

struct Member {
  std::string name;
  uint16_t method = 0;
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

// Sizes and offset that do not fit 32 bits live in the zip64 extra field, in this order.
void read_zip64_extra(const Reader& r, size_t extra, size_t extra_len, Member& m) {
  for (size_t at = extra; at + 4 <= extra + extra_len;) {
    uint16_t id = r.u16(at), len = r.u16(at + 2);
    if (id == 0x0001) {
      size_t field = at + 4;
      if (m.size == 0xFFFFFFFF) m.size = r.u64(field), field += 8;
      if (m.compressed == 0xFFFFFFFF) m.compressed = r.u64(field), field += 8;
      if (m.local_offset == 0xFFFFFFFF) m.local_offset = r.u64(field);
      return;
    }
    at += 4 + len;
  }
  r.bad(fmt::format("member '{}' has 32-bit overflow sizes but no zip64 field", m.name));
}

std::vector<Member> central_directory(const Reader& r) {
  // The end record is in the last 64 KiB + 22 bytes (its comment is at most 65535 bytes).
  if (r.size() < 22) r.bad("too short for a zip file");
  size_t end = std::string::npos;
  size_t lowest = r.size() > 65557 ? r.size() - 65557 : 0;
  for (size_t at = r.size() - 22;; --at) {
    if (r.u32(at) == kEndOfCentralDirectory) {
      end = at;
      break;
    }
    if (at == lowest) break;
  }
  if (end == std::string::npos) r.bad("no zip end-of-central-directory record");
  uint64_t count = r.u16(end + 10);
  uint64_t offset = r.u32(end + 16);
  if ((count == 0xFFFF || offset == 0xFFFFFFFF) && end >= 20 && r.u32(end - 20) == kZip64Locator) {
    uint64_t end64 = r.u64(end - 20 + 8);
    if (r.u32(end64) != kZip64End) r.bad("a broken zip64 end record");
    count = r.u64(end64 + 32);
    offset = r.u64(end64 + 48);
  }
  std::vector<Member> members;
  size_t at = offset;
  for (uint64_t i = 0; i < count; ++i) {
    if (r.u32(at) != kCentralHeader) r.bad("a broken central directory");
    Member m;
    m.method = r.u16(at + 10);
    m.compressed = r.u32(at + 20);
    m.size = r.u32(at + 24);
    uint16_t name_len = r.u16(at + 28), extra_len = r.u16(at + 30), comment_len = r.u16(at + 32);
    m.local_offset = r.u32(at + 42);
    m.name = std::string(r.slice(at + 46, name_len));
    if (m.size == 0xFFFFFFFF || m.compressed == 0xFFFFFFFF || m.local_offset == 0xFFFFFFFF)
      read_zip64_extra(r, at + 46 + name_len, extra_len, m);
    members.push_back(std::move(m));
    at += 46 + name_len + extra_len + comment_len;
  }
  return members;
}

std::string member_bytes(const Reader& r, const Member& m) {
  size_t at = m.local_offset;
  if (r.u32(at) != kLocalHeader) r.bad(fmt::format("member '{}' has no local header", m.name));
  size_t data = at + 30 + r.u16(at + 26) + r.u16(at + 28);
  std::string_view packed = r.slice(data, m.compressed);
  if (m.method == 0) {
    if (m.compressed != m.size) r.bad(fmt::format("stored member '{}' changes size", m.name));
    return std::string(packed);
  }
  if (m.method != 8)
    r.bad(fmt::format("member '{}' uses zip compression method {} (only stored and deflate)",
                      m.name, m.method));
  // Deflate expands at most 1032:1: a member claiming more is refused before its memory is
  // allocated (a 1 KiB file could otherwise ask for a terabyte).
  if (m.size / kDeflateMaxRatio > m.compressed + 1)
    r.bad(fmt::format("member '{}' claims {} bytes from {} compressed", m.name, m.size,
                      m.compressed));
  std::string out(m.size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(ErrorCode::Unavailable, "zlib: inflateInit2");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data()));
  z.avail_in = static_cast<uInt>(std::min<uint64_t>(packed.size(), UINT32_MAX));
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size(), UINT32_MAX));
  int rc = inflate(&z, Z_FINISH);
  uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != m.size)
    r.bad(fmt::format("member '{}' does not inflate to its {} bytes", m.name, m.size));
  return out;
}

DataType dtype_of_descr(const std::string& descr, const std::string& what) {
  KILN_CHECK(descr.size() >= 3 && (descr[0] == '<' || descr[0] == '|'), ErrorCode::Unsupported,
             "{}: numpy dtype '{}' is not little-endian bool, integer or float", what, descr);
  std::string code = descr.substr(1);
  static const std::map<std::string, DataType> types = {
      {"b1", DataType::Bool},    {"i1", DataType::Int8},    {"i2", DataType::Int16},
      {"i4", DataType::Int32},   {"i8", DataType::Int64},   {"u1", DataType::UInt8},
      {"u2", DataType::UInt16},  {"u4", DataType::UInt32},  {"u8", DataType::UInt64},
      {"f2", DataType::Float16}, {"f4", DataType::Float32}, {"f8", DataType::Float64}};
  auto it = types.find(code);
  KILN_CHECK(it != types.end(), ErrorCode::Unsupported,
             "{}: numpy dtype '{}' is not a bool, integer or float type Kiln reads", what, descr);
  return it->second;
}

// The value of `key` in the .npy header's dict, e.g. "'<f4'" or "(2, 3)".
std::string header_field(const std::string& header, const std::string& key,
                         const std::string& what) {
  size_t k = header.find("'" + key + "'");
  KILN_CHECK_ARG(k != std::string::npos, "{}: the .npy header has no '{}'", what, key);
  size_t v = header.find(':', k);
  KILN_CHECK_ARG(v != std::string::npos, "{}: a malformed .npy header", what);
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t end = header[v] == '(' ? header.find(')', v) + 1 : header.find(',', v);
  KILN_CHECK_ARG(end != std::string::npos && end > v, "{}: a malformed .npy header", what);
  return header.substr(v, end - v);
}

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  KILN_CHECK_ARG(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0,
                 "{}: not a .npy array", what);
  const unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t len_width = major == 1 ? 2 : 4;
  KILN_CHECK_ARG(major >= 1 && major <= 3 && bytes.size() >= 8 + len_width,
                 "{}: .npy format version {} is not known", what, major);
  size_t header_len = 0;
  for (size_t i = 0; i < len_width; ++i)
    header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  size_t data = 8 + len_width + header_len;
  KILN_CHECK_ARG(data <= bytes.size(), "{}: the .npy header runs past the array", what);
  std::string header = bytes.substr(8 + len_width, header_len);

  std::string descr = header_field(header, "descr", what);
  KILN_CHECK(descr.size() >= 2 && descr.front() == '\'' && descr.back() == '\'',
             ErrorCode::Unsupported, "{}: numpy dtype {} (structured or object) is not supported",
             what, descr);
  DataType dtype = dtype_of_descr(descr.substr(1, descr.size() - 2), what);
  KILN_CHECK(header_field(header, "fortran_order", what) == "False", ErrorCode::Unsupported,
             "{}: a Fortran-order array; save it C-contiguous (np.ascontiguousarray)", what);
  std::string shape_text = header_field(header, "shape", what);
  std::vector<int64_t> dims;
  for (size_t i = 1; i + 1 < shape_text.size();) {
    while (i < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i + 1 >= shape_text.size()) break;
    int64_t d = -1;
    const char* first = shape_text.data() + i;
    const auto [end, ec] = std::from_chars(first, shape_text.data() + shape_text.size(), d);
    KILN_CHECK_ARG(ec == std::errc() && end != first && d >= 0, "{}: a malformed shape {}", what,
                   shape_text);
    dims.push_back(d);
    i += static_cast<size_t>(end - first);
  }
  // The data present must match the shape before the array's memory is allocated.
  uint64_t want = dtype_size(dtype);
  for (int64_t d : dims) {
    KILN_CHECK_ARG(!__builtin_mul_overflow(want, static_cast<uint64_t>(d), &want),
                   "{}: shape {} overflows", what, shape_text);
  }
  KILN_CHECK_ARG(bytes.size() - data == want, "{}: {} bytes of data for shape {} of {}", what,
                 bytes.size() - data, shape_text, dtype_name(dtype));
  Tensor t(dtype, dims);
  std::memcpy(t.raw_data(), bytes.data() + data, t.nbytes());
  return t;
}

}  // namespace

runtime::Feeds read_npz(const std::string& path) {
  RegularFile file(path, "calibration .npz file");
  return parse_npz(file.read_all(std::numeric_limits<uint64_t>::max()), path);
}

runtime::Feeds parse_npz(const std::string& bytes, const std::string& path) {
  Reader r(bytes, path);
  runtime::Feeds out;
  for (const Member& m : central_directory(r)) {
    if (m.name.size() < 4 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0) continue;
    std::string name = m.name.substr(0, m.name.size() - 4);
    std::string what = fmt::format("{}: array '{}'", path, name);
    out[name] = parse_npy(member_bytes(r, m), what);
  }
  KILN_CHECK_ARG(!out.empty(), "{}: the .npz file holds no arrays", path);
  return out;
}

}  // namespace kiln::compiler
