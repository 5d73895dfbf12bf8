#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstdlib>

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

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  const bool fma = (ecx >> 12) & 1;
  const bool f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = ReadXcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return f;
  f.avx2 = (ebx >> 5) & 1;
  if (zmm_state) {
    f.avx512f = (ebx >> 16) & 1;
    f.avx512bw = (ebx >> 30) & 1;
    f.avx512vl = (ebx >> 31) & 1;
    f.avx512vnni = (ecx >> 11) & 1;
    const unsigned max_subleaf = eax;
    if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
      f.avx512bf16 = (eax >> 5) & 1;
    }
  }
  return f;
}
#else
CpuFeatures Detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& DetectedCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

bool IsaSupported(CpuIsa isa) {
  const CpuFeatures& f = DetectedCpuFeatures();
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
#if defined(DELTASERVE_HAVE_X86_SIMD)
      return f.avx2 && f.fma && f.f16c;
#else
      return false;
#endif
    case CpuIsa::kAvx512:
#if defined(DELTASERVE_HAVE_X86_SIMD)
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl;
#else
      return false;
#endif
  }
  return false;
}

CpuIsa BestSupportedIsa() {
  if (IsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (IsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

CpuIsa ClampIsa(CpuIsa requested) {
  const CpuIsa best = BestSupportedIsa();
  return static_cast<int>(requested) <= static_cast<int>(best) ? requested : best;
}

CpuIsa ActiveIsa() {
  static const CpuIsa isa = [] {
    const char* env = std::getenv("DELTASERVE_CPU_ISA");
    if (env != nullptr) {
      if (std::optional<CpuIsa> requested = ParseCpuIsa(env)) return ClampIsa(*requested);
    }
    return BestSupportedIsa();
  }();
  return isa;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<CpuIsa> ParseCpuIsa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return std::nullopt;
}

}  // namespace deltaserve::kernels
