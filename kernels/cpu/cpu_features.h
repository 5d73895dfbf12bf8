// Which x86 vector extensions the CPU and OS support, and which kernel level (ISA) the CPU
// kernels run. Detection uses CPUID plus XGETBV (the OS must save ymm/zmm state).
//
// The environment variable DELTASERVE_CPU_ISA=scalar|avx2|avx_vnni|avx512 caps the level, so
// that tests, CI and benchmarks can run the slower paths on a fast CPU; unset or empty means the
// best level this CPU supports. A level this CPU (or this build) cannot run, or an unknown name,
// is refused, never lowered quietly: programs that run kernels call ResolveCpuIsaFromEnv() at
// start-up and exit 2 with its message; ActiveIsa() stops the process when nobody did, so a
// test run asked for a level the machine lacks fails instead of testing another level.
//
// Every dispatch decision of the CPU kernels (matrix products, the activation quantizer,
// attention, the target-specific copies of the op loops in vec_math.h) and of the worker's
// sampler follows ActiveIsa(). The explicit-ISA entry points of matmul_internal.h take the level
// as an argument (tests and benchmarks compare the paths against each other); they run a level
// only where IsaSupported() says so, whatever the cap.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace deltaserve::kernels {

// The environment variable that caps the kernel level.
inline constexpr std::string_view kCpuIsaEnvVar = "DELTASERVE_CPU_ISA";

// Extensions the kernels care about (false everywhere on non-x86 builds).
struct CpuFeatures {
  // SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B, LAHF/SAHF: the x86-64-v2 level, which the
  // x86-64-v3 code of the avx2 level may use.
  bool x86_64_v2 = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi1 = false;
  bool bmi2 = false;
  bool lzcnt = false;
  bool movbe = false;
  bool avx_vnni = false;  // VEX-encoded int8 dot products on ymm (Alder Lake, Zen 5)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512cd = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
};

// Kernel levels, in order of preference: the default is the highest one the CPU supports, and
// every level above kScalar includes all of kAvx2. kAvx512 does not include kAvxVnni (Ice Lake
// and Zen 4 have AVX-512 without AVX-VNNI), so the levels a CPU supports need not be a prefix of
// this list.
enum class CpuIsa {
  kScalar = 0,  // portable C++ (baseline x86-64: SSE2)
  // x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE. (The op loops of vec_math.h are compiled
  // for exactly this target.)
  kAvx2 = 1,
  // kAvx2 + AVX-VNNI: the int8-activation matrix products run on the VEX-encoded vpdpbusd /
  // vpdpwssd (matmul_int8_avxvnni.cc); every other kernel runs its AVX2 path.
  kAvxVnni = 2,
  // x86-64-v4: kAvx2 + AVX-512 F/BW/CD/DQ/VL. VNNI and BF16 are reported, not required: the
  // int8-activation products use AVX512-VNNI where the CPU has it and the f32 path where not.
  kAvx512 = 3,
};

// Every level, lowest first.
inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvxVnni,
                                         CpuIsa::kAvx512};

// The CPU's features, detected once.
const CpuFeatures& DetectedCpuFeatures();

// True when this build has the kernels for `isa` and a CPU with `features` can run them.
bool IsaSupportedOn(CpuIsa isa, const CpuFeatures& features);
// The same for this CPU.
bool IsaSupported(CpuIsa isa);

// The levels this CPU and build support, lowest first (kScalar always; the last is the best).
std::vector<CpuIsa> SupportedIsas();

// The best supported level, ignoring the environment.
CpuIsa BestSupportedIsa();

// The level that DELTASERVE_CPU_ISA=`requested` selects on a CPU with `features`: "" selects the
// best level; a level name is returned when IsaSupportedOn says so. Refused (InvalidArgument,
// the message naming the variable, the value, what is missing and the levels this CPU supports):
// an unknown name, and a level this CPU or build cannot run.
absl::StatusOr<CpuIsa> ResolveCpuIsa(std::string_view requested, const CpuFeatures& features);
// ResolveCpuIsa of the environment variable (unset: "") on this CPU. What programs call at
// start-up: a refusal is printed and the program exits 2.
absl::StatusOr<CpuIsa> ResolveCpuIsaFromEnv();

// The level the CPU kernels run: ResolveCpuIsaFromEnv(), resolved once. On a refusal it prints
// the message on stderr and aborts (see the file comment).
CpuIsa ActiveIsa();

// `requested` lowered to the highest supported level at or below it (kScalar at worst); for the
// explicit-ISA entry points, whose tests ask for every level.
CpuIsa ClampIsa(CpuIsa requested);

// "scalar", "avx2", "avx_vnni", "avx512".
std::string_view CpuIsaName(CpuIsa isa);
// Inverse of CpuIsaName; nullopt for anything else.
std::optional<CpuIsa> ParseCpuIsa(std::string_view name);

// The features present, by their /proc/cpuinfo-style names ("avx2 fma f16c ... avx512vnni"),
// for start-up logs; "none" when none is.
std::string CpuFeatureList(const CpuFeatures& features);

}  // namespace deltaserve::kernels
