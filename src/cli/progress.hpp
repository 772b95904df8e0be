#pragma once
// A one-line progress bar on stderr for long steps (compile passes, verify, bench). Drawn only
// when stderr is a terminal and KILN_PROGRESS is not "0", so logs, pipes and tests never see it;
// the line is erased when the step ends, leaving the command's own output clean.
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::cli {

class Progress {
 public:
  // `total` 0 means unknown: a count and the detail are shown instead of a bar.
  Progress(std::string label, size_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(size_t done, std::string_view detail = {});
  void step(std::string_view detail = {}) { update(done_ + 1, detail); }
  void set_total(size_t total) { total_ = total; }
  // Erases the line (also done by the destructor); a later update draws it again.
  void finish();

  static bool enabled();

 private:
  void draw(std::string_view detail);

  std::string label_;
  size_t total_;
  size_t done_ = 0;
  bool on_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace kiln::cli
