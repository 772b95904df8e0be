#pragma once
// A kernel's prepared primitives (and the buffers they own) by the shapes it ran, bounded: the
// CPU kernels' oneDNN primitives, the GPU Resize's uploaded taps, the GPU LSTM's scratch. Where a
// model's dims vary per request (a client picks them), a kernel would otherwise keep one entry
// per shape it ever saw; past kMaxEntries the oldest entry goes. Entries live in a deque, so the
// one find or add returns stays where it is until the kernel's next add (kernels use it within
// one run or one preparation).
#include <cstddef>
#include <deque>
#include <utility>

namespace kiln::backends {

template <typename Entry>
class ShapeCache {
 public:
  static constexpr size_t kMaxEntries = 16;

  // The first entry `match` accepts, or null.
  template <typename Match>
  const Entry* find(Match&& match) const {
    for (const Entry& e : entries_) {
      if (match(e)) return &e;
    }
    return nullptr;
  }
  const Entry& add(Entry e) {
    if (entries_.size() >= kMaxEntries) entries_.pop_front();
    entries_.push_back(std::move(e));
    return entries_.back();
  }
  bool empty() const { return entries_.empty(); }
  void clear() { entries_.clear(); }

 private:
  std::deque<Entry> entries_;
};

}  // namespace kiln::backends
