#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace kiln::cli {

bool Progress::enabled() {
  const char* env = std::getenv("KILN_PROGRESS");
  if (env && std::strcmp(env, "0") == 0) return false;
  return isatty(STDERR_FILENO) == 1;
}

Progress::Progress(std::string label, size_t total)
    : label_(std::move(label)), total_(total), on_(enabled()) {
  if (on_) draw({});
}

Progress::~Progress() {
  finish();
}

void Progress::update(size_t done, std::string_view detail) {
  done_ = done;
  if (!on_) return;
  // Redrawing more often than the eye can follow only costs time in the step being measured.
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_ < std::chrono::milliseconds(50) && done_ != total_) return;
  last_ = now;
  draw(detail);
}

void Progress::draw(std::string_view detail) {
  std::string line = label_;
  if (total_ > 0) {
    constexpr size_t kWidth = 30;
    size_t filled = std::min(kWidth, done_ * kWidth / total_);
    line += fmt::format(" [{}{}] {}/{}", std::string(filled, '#'),
                        std::string(kWidth - filled, '.'), done_, total_);
  } else if (done_ > 0) {
    line += fmt::format(" {}", done_);
  }
  if (!detail.empty()) line += fmt::format(" {}", detail);
  if (line.size() > 100) line.resize(100);
  std::fprintf(stderr, "\r\033[2K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void Progress::finish() {
  if (on_ && drawn_) {
    std::fprintf(stderr, "\r\033[2K");
    std::fflush(stderr);
  }
  drawn_ = false;
}

}  // namespace kiln::cli
