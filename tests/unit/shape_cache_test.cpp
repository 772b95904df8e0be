// The kernels' cache of prepared primitives by shape (backends/shape_cache.hpp): bounded,
// oldest out first, and an entry found or added stays where it is while the others change.
#include <gtest/gtest.h>

#include <vector>

#include "backends/shape_cache.hpp"

namespace kiln {
namespace {

using backends::ShapeCache;

struct Entry {
  std::vector<int64_t> dims;
  int id = 0;
};

const Entry* lookup(const ShapeCache<Entry>& cache, const std::vector<int64_t>& dims) {
  return cache.find([&](const Entry& e) { return e.dims == dims; });
}

TEST(ShapeCache, KeepsTheNewestEntriesUpToItsBound) {
  ShapeCache<Entry> cache;
  constexpr int kMax = static_cast<int>(ShapeCache<Entry>::kMaxEntries);
  const Entry& first = cache.add({{1, 3, 8, 8}, 0});
  EXPECT_EQ(lookup(cache, {1, 3, 8, 8}), &first);
  EXPECT_EQ(lookup(cache, {2, 3, 8, 8}), nullptr);
  // A client sending a new batch size each time: only the last kMax shapes stay.
  std::vector<const Entry*> added = {&first};
  for (int i = 1; i < kMax + 5; ++i) added.push_back(&cache.add({{i + 1, 3, 8, 8}, i}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(lookup(cache, {i + 1, 3, 8, 8}), nullptr) << i;
  for (int i = 5; i < kMax + 5; ++i) {
    const Entry* e = lookup(cache, {i + 1, 3, 8, 8});
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e, added[static_cast<size_t>(i)]);  // not moved by the adds and evictions
    EXPECT_EQ(e->id, i);
  }
  cache.clear();
  EXPECT_TRUE(cache.empty());
}

}  // namespace
}  // namespace kiln
