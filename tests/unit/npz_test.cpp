// The .npz reader (src/compiler/npz.hpp) on files built byte by byte: what it reads, and the
// malformed ones it refuses before allocating what they claim (the fuzz target's findings).
#include "compiler/npz.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "expect_error.hpp"

namespace kiln::compiler {
namespace {

void put(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct ZipMember {
  std::string name, data;
  uint16_t method = 0;        // 0 stored, 8 deflate
  uint64_t claimed_size = 0;  // 0: data.size()
};

// A zip of `members` (no CRCs: the reader does not check them).
std::string zip(const std::vector<ZipMember>& members) {
  std::string out, central;
  for (const ZipMember& m : members) {
    const uint64_t offset = out.size();
    const uint64_t size = m.claimed_size ? m.claimed_size : m.data.size();
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, m.method, 2);
    put(out, 0, 4), put(out, 0, 4), put(out, m.data.size(), 4), put(out, size, 4);
    put(out, m.name.size(), 2), put(out, 0, 2);
    out += m.name + m.data;
    put(central, 0x02014b50, 4), put(central, 20, 2), put(central, 20, 2), put(central, 0, 2);
    put(central, m.method, 2), put(central, 0, 4), put(central, 0, 4);
    put(central, m.data.size(), 4), put(central, size, 4), put(central, m.name.size(), 2);
    put(central, 0, 2), put(central, 0, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 4), put(central, offset, 4);
    central += m.name;
  }
  const uint64_t central_at = out.size();
  out += central;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, members.size(), 2);
  put(out, members.size(), 2), put(out, central.size(), 4), put(out, central_at, 4);
  put(out, 0, 2);
  return out;
}

// A version 1 .npy array with `header` as its dict and `data` after it.
std::string npy(const std::string& header, const std::string& data) {
  std::string out = "\x93NUMPY";
  out.push_back(1), out.push_back(0);
  put(out, header.size(), 2);
  return out + header + data;
}

TEST(Npz, ReadsStoredArrays) {
  std::string floats;
  for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) floats.append(reinterpret_cast<char*>(&f), 4);
  const std::string file =
      zip({{"x.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", floats)}});
  const runtime::Feeds arrays = parse_npz(file, "t.npz");
  const Tensor& x = arrays.at("x").tensor();
  EXPECT_EQ(x.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(x.data<float>()[5], 6.f);
}

TEST(Npz, RefusesAShapeLargerThanItsDataBeforeAllocating) {
  const std::string file = zip({{"x.npy", npy("{'descr': '<f4', 'fortran_order': False, "
                                              "'shape': (1000000000000, 1000), }",
                                              std::string(8, '\0'))}});
  expect_error([&] { parse_npz(file, "t.npz"); }, ErrorCode::InvalidArgument,
               "8 bytes of data for shape");
  const std::string overflow = zip({{"x.npy", npy("{'descr': '<f8', 'fortran_order': False, "
                                                  "'shape': (4294967296, 4294967296, 2), }",
                                                  "")}});
  expect_error([&] { parse_npz(overflow, "t.npz"); }, ErrorCode::InvalidArgument, "overflows");
}

TEST(Npz, RefusesAMalformedShapeAsBadInput) {
  const std::string file =
      zip({{"x.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (x, 3), }", "")}});
  expect_error([&] { parse_npz(file, "t.npz"); }, ErrorCode::InvalidArgument, "a malformed shape");
}

TEST(Npz, RefusesADeflatedMemberClaimingMoreThanDeflateCanExpand) {
  // 10 compressed bytes cannot inflate to 3 GB: refused before 3 GB are allocated.
  ZipMember m{"x.npy", std::string(10, '\0'), 8, 3000000000};
  expect_error([&] { parse_npz(zip({m}), "t.npz"); }, ErrorCode::InvalidArgument,
               "claims 3000000000 bytes from 10 compressed");
}

}  // namespace
}  // namespace kiln::compiler
