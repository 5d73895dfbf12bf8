// Which x86 vector extensions the CPU and OS support, and which kernel path (ISA) the CPU
// backend runs. Detection uses CPUID plus XGETBV (the OS must save ymm/zmm state). The
// environment variable DELTASERVE_CPU_ISA=scalar|avx2|avx512 caps the path, so tests and
// benchmarks can force the slower ones; a request above what the CPU has falls back to the
// best supported path.
#pragma once

#include <optional>
#include <string_view>

namespace deltaserve::kernels {

// Extensions the kernels care about (false everywhere on non-x86 builds).
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
};

// Kernel paths, ordered: a higher one needs everything a lower one needs.
enum class CpuIsa {
  kScalar = 0,  // portable C++ (baseline x86-64: SSE2)
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL + FMA + F16C (VNNI/BF16 reported, not required)
};

// The CPU's features, detected once.
const CpuFeatures& DetectedCpuFeatures();

// True when this build has the kernels for `isa` and the CPU can run them.
bool IsaSupported(CpuIsa isa);

// The best supported path, ignoring the environment.
CpuIsa BestSupportedIsa();

// The path the CPU backend uses: min(DELTASERVE_CPU_ISA, best supported), read once. An
// unparsable value is ignored.
CpuIsa ActiveIsa();

// `requested` lowered to the best supported path when the CPU lacks it.
CpuIsa ClampIsa(CpuIsa requested);

// "scalar", "avx2", "avx512".
std::string_view CpuIsaName(CpuIsa isa);
// Inverse of CpuIsaName; nullopt for anything else.
std::optional<CpuIsa> ParseCpuIsa(std::string_view name);

}  // namespace deltaserve::kernels
