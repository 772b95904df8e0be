// String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch.
#include <algorithm>
#include <regex>

#include "ops/infer_utils.hpp"
#include "ops/op_utils.hpp"
#include "ops/registry.hpp"

namespace kiln::ops {
namespace {

const Tensor& string_input(const KernelContext& ctx, size_t i) {
  const Tensor& t = ctx.input(i);
  ctx.check(t.dtype() == DataType::String, "input {} must be a string tensor, got {}", i,
            t.describe());
  return t;
}

void string_concat(KernelContext& ctx) {
  const Tensor& a = string_input(ctx, 0);
  const Tensor& b = string_input(ctx, 1);
  ctx.set_output(0,
                 broadcast_binary<std::string, std::string, std::string>(
                     ctx, a, b, [](const std::string& x, const std::string& y) { return x + y; }));
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Python's str.split(None, maxsplit): runs of whitespace separate, the ends are trimmed, and the
// unsplit remainder keeps its trailing whitespace.
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = s.size();
  while (true) {
    while (i < n && is_space(s[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(s.substr(i));
      break;
    }
    size_t j = i;
    while (j < n && !is_space(s[j])) ++j;
    out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// Python's str.split(sep, maxsplit): every delimiter separates, empty pieces included.
std::vector<std::string> split_delimiter(const std::string& s, const std::string& sep,
                                         int64_t maxsplit) {
  std::vector<std::string> out;
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t pos = s.find(sep, start);
    if (pos == std::string::npos) break;
    out.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

void string_split(KernelContext& ctx) {
  const Tensor& x = string_input(ctx, 0);
  const std::string delim = ctx.attr_string("delimiter", "");
  const int64_t maxsplit = ctx.has_attr("maxsplit") ? ctx.attr_int("maxsplit") : -1;
  ctx.check(!ctx.has_attr("maxsplit") || maxsplit >= 0, "maxsplit must be non-negative");
  std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
  int64_t width = 0;
  const std::string* px = x.data<std::string>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[i] =
        delim.empty() ? split_whitespace(px[i], maxsplit) : split_delimiter(px[i], delim, maxsplit);
    width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
  }
  std::vector<int64_t> dims = x.dims();
  Tensor counts(DataType::Int64, dims);
  dims.push_back(width);
  Tensor y(DataType::String, dims);
  std::string* py = y.data<std::string>();
  int64_t* pc = counts.data<int64_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    pc[i] = static_cast<int64_t>(parts[i].size());
    for (size_t k = 0; k < parts[i].size(); ++k)
      py[i * width + static_cast<int64_t>(k)] = parts[i][k];
  }
  ctx.set_output(0, y);
  if (ctx.output_count() > 1) ctx.set_output(1, counts);
}

void infer_string_split(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> ys, zs;
  if (x && x->shape) {
    zs = x->shape;
    std::vector<Dim> d = x->shape->dims();
    d.push_back(Dim());
    ys = Shape(d);
  }
  ctx.set_output_type(0, TypeInfo::tensor(DataType::String, ys));
  if (ctx.output_count() > 1) ctx.set_output_type(1, TypeInfo::tensor(DataType::Int64, zs));
}

bool has_non_ascii(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

void string_normalizer(KernelContext& ctx) {
  const Tensor& x = string_input(ctx, 0);
  const std::string action = ctx.attr_string("case_change_action", "NONE");
  ctx.check(action == "NONE" || action == "LOWER" || action == "UPPER",
            "unknown case_change_action '{}'", action);
  const bool sensitive = ctx.attr_int("is_case_sensitive", 0) != 0;
  std::vector<std::string> stop = ctx.attr_strings("stopwords", {});
  const bool two_d = x.rank() == 2;
  ctx.check(x.rank() == 1 || (two_d && x.dim(0) == 1), "X must be [C] or [1, C], got {}",
            x.describe());
  auto needs_unicode = [&](const std::string& s) {
    return (action != "NONE" || (!sensitive && !stop.empty())) && has_non_ascii(s);
  };
  for (const std::string& s : stop) {
    if (!sensitive && has_non_ascii(s)) ctx.unsupported("case-insensitive non-ASCII stopwords");
  }
  std::vector<std::string> kept;
  for (const std::string& s : x.values<std::string>()) {
    if (needs_unicode(s)) ctx.unsupported("case handling of non-ASCII text");
    bool drop = false;
    for (const std::string& w : stop) {
      drop = drop || (sensitive ? s == w : ascii_case(s, false) == ascii_case(w, false));
    }
    if (drop) continue;
    kept.push_back(action == "NONE" ? s : ascii_case(s, action == "UPPER"));
  }
  if (kept.empty()) kept.push_back("");  // all dropped: one empty string
  const int64_t c = static_cast<int64_t>(kept.size());
  ctx.set_output(0, Tensor::from_vector<std::string>(
                        two_d ? std::vector<int64_t>{1, c} : std::vector<int64_t>{c}, kept));
}

void infer_string_normalizer(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  std::optional<Shape> s;
  if (x && x->shape) {
    s = x->shape->rank() == 2 ? Shape({Dim(1), Dim()}) : Shape({Dim()});
  }
  ctx.set_output_type(0, TypeInfo::tensor(DataType::String, s));
}

constexpr size_t kMaxRegexInput = 4096;

void regex_full_match(KernelContext& ctx) {
  const Tensor& x = string_input(ctx, 0);
  const std::string pattern = ctx.attr_string("pattern");
  // RE2-only syntax std::regex would misread rather than reject.
  // Lookarounds and backreferences are not RE2 at all: RE2 rejects such patterns.
  for (const char* bad :
       {"(?P<", "(?i", "(?s", "(?m", "(?U", "\\p{", "\\P{", "[[:", "\\z", "\\A", "\\C", "\\Q",
        "(?<",  "(?=", "(?!", "\\1", "\\2", "\\3",  "\\4",  "\\5", "\\6", "\\7", "\\8", "\\9"}) {
    if (pattern.find(bad) != std::string::npos) {
      ctx.unsupported("regex syntax '{}' in pattern '{}'", bad, pattern);
    }
  }
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    ctx.unsupported("pattern '{}' cannot be compiled: {}", pattern, e.what());
  }
  Tensor out(DataType::Bool, x.dims());
  bool* po = out.data<bool>();
  const std::string* px = x.data<std::string>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    // RE2 matches UTF-8 code points where std::regex sees bytes; and std::regex recurses per
    // input character, so very long inputs could exhaust the stack.
    if (has_non_ascii(px[i]) || has_non_ascii(pattern)) {
      ctx.unsupported("regex matching of non-ASCII text");
    }
    if (px[i].size() > kMaxRegexInput) {
      ctx.unsupported("regex input of {} bytes (limit {})", px[i].size(), kMaxRegexInput);
    }
    po[i] = std::regex_match(px[i], re);
  }
  ctx.set_output(0, out);
}

void infer_regex(InferContext& ctx) {
  const TypeInfo* x = ctx.input_type(0);
  ctx.set_output_type(0, TypeInfo::tensor(DataType::Bool, x ? x->shape : std::nullopt));
}

void infer_string_concat(InferContext& ctx) {
  infer_broadcast(ctx);
}

KILN_REGISTER_OP({.op_type = "StringConcat",
                  .kernel = string_concat,
                  .infer = infer_string_concat});
KILN_REGISTER_OP({.op_type = "StringSplit", .kernel = string_split, .infer = infer_string_split});
KILN_REGISTER_OP({.op_type = "StringNormalizer",
                  .kernel = string_normalizer,
                  .infer = infer_string_normalizer});
KILN_REGISTER_OP({.op_type = "RegexFullMatch", .kernel = regex_full_match, .infer = infer_regex});

}  // namespace
}  // namespace kiln::ops
