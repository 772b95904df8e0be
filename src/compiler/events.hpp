#pragma once
// How the compile pipeline talks while it works: report lines (what `kiln compile` prints),
// warnings, and progress of its long steps. The library never prints; a caller that gives no
// callback gets the lines in Kiln's log (compile.hpp).
#include <cstddef>
#include <functional>
#include <string_view>

namespace kiln::compiler {

enum class MessageKind {
  Report,  // a line of the compile report (the CLI's standard output)
  Trace,   // --trace-passes lines and --dump-after graphs, asked for explicitly
  Note,    // a remark for the operator, not part of the report (a test hook at work)
  Warning  // something the caller should know: an engine written despite drift
};

// `text` is one or more whole lines, each ending in '\n'.
using MessageCallback = std::function<void(MessageKind kind, std::string_view text)>;

struct ProgressEvent {
  std::string_view stage;  // "optimizing", "precision gate"
  size_t done = 0;
  size_t total = 0;  // 0: unknown
  std::string_view detail;
  bool finished = false;  // the stage ended (or stopped): a progress bar is erased
};

using ProgressCallback = std::function<void(const ProgressEvent& event)>;

}  // namespace kiln::compiler
