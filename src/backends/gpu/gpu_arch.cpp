#include "backends/gpu/gpu_arch.hpp"

#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace kiln::backends {
namespace {

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

bool all_alnum(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// sm_90 -> 90; -1 when `arch` is not "sm_<digits>[a]".
int sm_number(std::string_view arch) {
  if (arch.substr(0, 3) != "sm_") return -1;
  std::string_view digits = arch.substr(3);
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.remove_suffix(1);
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) return -1;
  return value;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string GpuTarget::to_string() const {
  std::string s = vendor + ":" + arch;
  for (const std::string& f : features) s += ":" + f;
  return s;
}

GpuTarget parse_gpu_target(std::string_view text) {
  std::vector<std::string_view> parts = split(text, ':');
  KILN_CHECK_ARG(parts.size() >= 2,
                 "GPU target '{}' is not vendor:arch (\"cuda:sm_90\", \"hip:gfx90a\")", text);
  GpuTarget t;
  t.vendor = std::string(parts[0]);
  t.arch = std::string(parts[1]);
  if (t.vendor == "cuda") {
    KILN_CHECK_ARG(sm_number(t.arch) > 0, "GPU target '{}': a CUDA arch is sm_<number>, not '{}'",
                   text, t.arch);
    KILN_CHECK_ARG(parts.size() == 2, "GPU target '{}': CUDA targets take no features", text);
  } else if (t.vendor == "hip") {
    KILN_CHECK_ARG(starts_with(t.arch, "gfx") && all_alnum(t.arch.substr(3)),
                   "GPU target '{}': an AMD arch is gfx<id>, not '{}'", text, t.arch);
    for (size_t i = 2; i < parts.size(); ++i) {
      std::string_view f = parts[i];
      KILN_CHECK_ARG(f.size() >= 2 && (f.back() == '+' || f.back() == '-') &&
                         all_alnum(f.substr(0, f.size() - 1)),
                     "GPU target '{}': feature '{}' is not name+ or name-", text, f);
      t.features.emplace_back(f);
    }
  } else {
    fail(ErrorCode::InvalidArgument, "GPU target '{}': unknown vendor '{}' (cuda or hip)", text,
         t.vendor);
  }
  return t;
}

GpuTarget cuda_target(int major, int minor) {
  return {"cuda", "sm_" + std::to_string(major * 10 + minor), {}};
}

GpuTarget hip_target(std::string_view gcn_arch_name) {
  std::vector<std::string_view> parts = split(gcn_arch_name, ':');
  GpuTarget t{"hip", std::string(parts[0]), {}};
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!parts[i].empty()) t.features.emplace_back(parts[i]);
  }
  return t;
}

std::vector<std::string> matrix_instructions(const GpuTarget& target) {
  if (target.vendor == "cuda") {
    int sm = sm_number(target.arch);
    std::vector<std::string> out;
    if (sm >= 70) out.push_back("mma.sync.f16");
    if (sm >= 75) out.push_back("mma.sync.s8");
    if (sm >= 80) {
      out.push_back("mma.sync.bf16");
      out.push_back("mma.sync.tf32");
    }
    if (sm >= 89) out.push_back("mma.sync.e4m3");
    // wgmma is Hopper's alone (sm_90/sm_90a); Blackwell replaced it with tcgen05.
    if (sm == 90) out.push_back("wgmma");
    if (sm >= 100) out.push_back("tcgen05");
    return out;
  }
  const std::string& a = target.arch;
  if (a == "gfx908") return {"mfma.f32", "mfma.f16", "mfma.bf16", "mfma.i8"};
  if (a == "gfx90a") return {"mfma.f32", "mfma.f16", "mfma.bf16_1k", "mfma.i8", "mfma.f64"};
  if (a == "gfx940" || a == "gfx941" || a == "gfx942")
    return {"mfma.f32", "mfma.f16", "mfma.bf16_1k", "mfma.i8", "mfma.f64", "mfma.xf32", "mfma.fp8"};
  // RDNA 3 and 4 have WMMA; RDNA 1 and 2 (gfx10) have none.
  if (starts_with(a, "gfx11") || starts_with(a, "gfx12")) return {"wmma.f16", "wmma.bf16"};
  return {};
}

int default_wavefront_size(const GpuTarget& target) {
  if (target.vendor == "cuda") return 32;
  // gfx10 and later (RDNA) run wave32 by default; GCN and CDNA (gfx9 and earlier) wave64.
  const std::string& a = target.arch;
  if (a.size() >= 5 && starts_with(a, "gfx1") && std::isdigit(static_cast<unsigned char>(a[4])))
    return 32;
  return 64;
}

}  // namespace kiln::backends
