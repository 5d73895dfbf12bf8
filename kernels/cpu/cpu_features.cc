#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace deltaserve::kernels {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0 via XGETBV (inline asm: the intrinsic would need -mxsave on this baseline file).
uint64_t ReadXcr0() {
  uint32_t eax;
  uint32_t edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

bool Bit(unsigned reg, int bit) { return (reg >> bit) & 1; }

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const unsigned ecx1 = ecx;
  bool lahf = false;
  if (__get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) != 0) {
    lahf = Bit(ecx, 0);
    f.lzcnt = Bit(ecx, 5);
  }
  f.x86_64_v2 = Bit(ecx1, 0) && Bit(ecx1, 9) && Bit(ecx1, 13) && Bit(ecx1, 19) && Bit(ecx1, 20) &&
                Bit(ecx1, 23) && lahf;  // SSE3 SSSE3 CX16 SSE4.1 SSE4.2 POPCNT
  f.movbe = Bit(ecx1, 22);
  const bool osxsave = Bit(ecx1, 27);
  const bool avx = Bit(ecx1, 28);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return f;
  const unsigned max_subleaf = eax;
  const unsigned ebx7 = ebx;
  const unsigned ecx7 = ecx;
  f.bmi1 = Bit(ebx7, 3);
  f.bmi2 = Bit(ebx7, 8);
  // The vector extensions only where the OS saves their registers.
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state) return f;
  unsigned eax71 = 0;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) eax71 = eax;
  f.fma = Bit(ecx1, 12);
  f.f16c = Bit(ecx1, 29);
  f.avx2 = Bit(ebx7, 5);
  f.avx_vnni = Bit(eax71, 4);
  if (zmm_state) {
    f.avx512f = Bit(ebx7, 16);
    f.avx512dq = Bit(ebx7, 17);
    f.avx512cd = Bit(ebx7, 28);
    f.avx512bw = Bit(ebx7, 30);
    f.avx512vl = Bit(ebx7, 31);
    f.avx512vnni = Bit(ecx7, 11);
    f.avx512bf16 = Bit(eax71, 5);
  }
  return f;
}
#else
CpuFeatures Detect() { return {}; }
#endif

// Every feature by name, in the order CpuFeatureList and the refusals list them.
std::vector<std::pair<std::string_view, bool>> NamedFeatures(const CpuFeatures& f) {
  return {{"x86-64-v2", f.x86_64_v2},
          {"avx2", f.avx2},
          {"fma", f.fma},
          {"f16c", f.f16c},
          {"bmi1", f.bmi1},
          {"bmi2", f.bmi2},
          {"lzcnt", f.lzcnt},
          {"movbe", f.movbe},
          {"avx_vnni", f.avx_vnni},
          {"avx512f", f.avx512f},
          {"avx512bw", f.avx512bw},
          {"avx512cd", f.avx512cd},
          {"avx512dq", f.avx512dq},
          {"avx512vl", f.avx512vl},
          {"avx512vnni", f.avx512vnni},
          {"avx512bf16", f.avx512bf16}};
}

// The features `isa` needs that `f` lacks, by name (empty: the CPU can run it).
std::vector<std::string_view> MissingFeatures(CpuIsa isa, const CpuFeatures& f) {
  std::vector<std::pair<std::string_view, bool>> needed;
  if (isa != CpuIsa::kScalar) {
    needed = {{"x86-64-v2", f.x86_64_v2}, {"avx2", f.avx2}, {"fma", f.fma},     {"f16c", f.f16c},
              {"bmi1", f.bmi1},           {"bmi2", f.bmi2}, {"lzcnt", f.lzcnt}, {"movbe", f.movbe}};
  }
  if (isa == CpuIsa::kAvxVnni) needed.push_back({"avx_vnni", f.avx_vnni});
  if (isa == CpuIsa::kAvx512) {
    needed.insert(needed.end(), {{"avx512f", f.avx512f},
                                 {"avx512bw", f.avx512bw},
                                 {"avx512cd", f.avx512cd},
                                 {"avx512dq", f.avx512dq},
                                 {"avx512vl", f.avx512vl}});
  }
  std::vector<std::string_view> missing;
  for (const auto& [name, present] : needed) {
    if (!present) missing.push_back(name);
  }
  return missing;
}

// Whether this build compiled the SIMD kernels (x86-64 builds; see quants.cmake).
constexpr bool kBuildHasSimd =
#if defined(DELTASERVE_HAVE_X86_SIMD)
    true;
#else
    false;
#endif

std::vector<CpuIsa> SupportedIsasOn(const CpuFeatures& f) {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kAllCpuIsas) {
    if (IsaSupportedOn(isa, f)) out.push_back(isa);
  }
  return out;
}

// The names joined by `sep` (this build's absl::StrJoin and StrCat take no std::string_view).
std::string Joined(const std::vector<std::string_view>& names, std::string_view sep) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += sep;
    out += name;
  }
  return out;
}

std::string IsaNames(const std::vector<CpuIsa>& isas) {
  std::vector<std::string_view> names;
  for (CpuIsa isa : isas) names.push_back(CpuIsaName(isa));
  return Joined(names, ", ");
}

}  // namespace

const CpuFeatures& DetectedCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

bool IsaSupportedOn(CpuIsa isa, const CpuFeatures& features) {
  if (isa == CpuIsa::kScalar) return true;
  return kBuildHasSimd && MissingFeatures(isa, features).empty();
}

bool IsaSupported(CpuIsa isa) {
  static const std::vector<CpuIsa> supported = SupportedIsasOn(DetectedCpuFeatures());
  for (CpuIsa s : supported) {
    if (s == isa) return true;
  }
  return false;
}

std::vector<CpuIsa> SupportedIsas() { return SupportedIsasOn(DetectedCpuFeatures()); }

CpuIsa BestSupportedIsa() { return SupportedIsas().back(); }

absl::StatusOr<CpuIsa> ResolveCpuIsa(std::string_view requested, const CpuFeatures& features) {
  const std::vector<CpuIsa> supported = SupportedIsasOn(features);
  if (requested.empty()) return supported.back();
  const std::string prefix = std::string(kCpuIsaEnvVar) + "=" + std::string(requested) + ": ";
  const std::string here = "this machine supports " + IsaNames(supported) + " (unset: the best, " +
                           std::string(CpuIsaName(supported.back())) + ")";
  const std::optional<CpuIsa> isa = ParseCpuIsa(requested);
  if (!isa) {
    return absl::InvalidArgumentError(prefix + "unknown CPU kernel level (the levels: " +
                                      IsaNames({std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}) +
                                      "); " + here);
  }
  if (IsaSupportedOn(*isa, features)) return *isa;
  const std::string why = kBuildHasSimd
                              ? "this CPU lacks " + Joined(MissingFeatures(*isa, features), " ")
                              : "this build has no SIMD kernels (not an x86-64 build)";
  return absl::InvalidArgumentError(prefix + why + "; " + here);
}

absl::StatusOr<CpuIsa> ResolveCpuIsaFromEnv() {
  const char* env = std::getenv(std::string(kCpuIsaEnvVar).c_str());
  return ResolveCpuIsa(env == nullptr ? "" : env, DetectedCpuFeatures());
}

CpuIsa ActiveIsa() {
  static const CpuIsa isa = [] {
    absl::StatusOr<CpuIsa> resolved = ResolveCpuIsaFromEnv();
    if (!resolved.ok()) {
      // A program that runs kernels checks the variable at start-up and exits 2; reaching this
      // means one did not (a test binary, say), and running another level would hide that.
      std::fprintf(stderr, "deltaserve: %s\n", std::string(resolved.status().message()).c_str());
      std::abort();
    }
    return *resolved;
  }();
  return isa;
}

CpuIsa ClampIsa(CpuIsa requested) {
  for (int level = static_cast<int>(requested); level > 0; --level) {
    if (IsaSupported(static_cast<CpuIsa>(level))) return static_cast<CpuIsa>(level);
  }
  return CpuIsa::kScalar;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvxVnni:
      return "avx_vnni";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<CpuIsa> ParseCpuIsa(std::string_view name) {
  for (CpuIsa isa : kAllCpuIsas) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return std::nullopt;
}

std::string CpuFeatureList(const CpuFeatures& features) {
  std::vector<std::string_view> present;
  for (const auto& [name, has] : NamedFeatures(features)) {
    if (has) present.push_back(name);
  }
  return present.empty() ? "none" : Joined(present, " ");
}

}  // namespace deltaserve::kernels
