// The kernel levels of kernels/cpu/cpu_features.h: names, what each level needs, DELTASERVE_CPU_ISA
// resolved on CPUs made up feature by feature (an AVX2-only Haswell, an Alder Lake with AVX-VNNI
// and no AVX-512, a Zen 4 with AVX-512 and no AVX-VNNI, a Zen 5 with both), the refusals and their
// messages, ActiveIsa() stopping a process nobody validated the variable for, and detection on
// this machine against the kernel's own view (/proc/cpuinfo).
#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::kernels {
namespace {

using ::testing::HasSubstr;

// x86-64-v3: what the avx2 level needs.
CpuFeatures Haswell() {
  CpuFeatures f;
  f.x86_64_v2 = f.avx2 = f.fma = f.f16c = f.bmi1 = f.bmi2 = f.lzcnt = f.movbe = true;
  return f;
}
CpuFeatures AlderLake() {
  CpuFeatures f = Haswell();
  f.avx_vnni = true;
  return f;
}
CpuFeatures Zen4() {
  CpuFeatures f = Haswell();
  f.avx512f = f.avx512bw = f.avx512cd = f.avx512dq = f.avx512vl = true;
  f.avx512vnni = f.avx512bf16 = true;
  return f;
}
CpuFeatures Zen5() {
  CpuFeatures f = Zen4();
  f.avx_vnni = true;
  return f;
}

std::vector<CpuIsa> SupportedOn(const CpuFeatures& f) {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : kAllCpuIsas) {
    if (IsaSupportedOn(isa, f)) out.push_back(isa);
  }
  return out;
}

TEST(CpuFeaturesTest, LevelNamesParseBack) {
  ASSERT_EQ(std::size(kAllCpuIsas), 4u);
  for (CpuIsa isa : kAllCpuIsas) EXPECT_EQ(ParseCpuIsa(CpuIsaName(isa)), isa);
  EXPECT_EQ(CpuIsaName(CpuIsa::kAvxVnni), "avx_vnni");
  for (const char* bad : {"", "avx1024", "AVX2", "avx-vnni", "avx512 ", "sse2"}) {
    EXPECT_EQ(ParseCpuIsa(bad), std::nullopt) << bad;
  }
  // Ordered by preference, lowest first.
  for (size_t i = 1; i < std::size(kAllCpuIsas); ++i) {
    EXPECT_LT(static_cast<int>(kAllCpuIsas[i - 1]), static_cast<int>(kAllCpuIsas[i]));
  }
}

#if defined(__x86_64__)
TEST(CpuFeaturesTest, WhatEachLevelNeeds) {
  EXPECT_EQ(SupportedOn(CpuFeatures{}), std::vector<CpuIsa>{CpuIsa::kScalar});
  EXPECT_EQ(SupportedOn(Haswell()), (std::vector<CpuIsa>{CpuIsa::kScalar, CpuIsa::kAvx2}));
  EXPECT_EQ(SupportedOn(AlderLake()),
            (std::vector<CpuIsa>{CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvxVnni}));
  // AVX-512 does not imply AVX-VNNI: the supported levels need not be a prefix of the list.
  EXPECT_EQ(SupportedOn(Zen4()),
            (std::vector<CpuIsa>{CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}));
  EXPECT_EQ(SupportedOn(Zen5()),
            (std::vector<CpuIsa>{std::begin(kAllCpuIsas), std::end(kAllCpuIsas)}));
  // Each feature of x86-64-v3 is needed by every SIMD level (the op loops are compiled for it).
  for (bool CpuFeatures::*field :
       {&CpuFeatures::x86_64_v2, &CpuFeatures::avx2, &CpuFeatures::fma, &CpuFeatures::f16c,
        &CpuFeatures::bmi1, &CpuFeatures::bmi2, &CpuFeatures::lzcnt, &CpuFeatures::movbe}) {
    CpuFeatures f = Zen5();
    f.*field = false;
    EXPECT_EQ(SupportedOn(f), std::vector<CpuIsa>{CpuIsa::kScalar});
  }
  // ... and each of AVX-512 F/BW/CD/DQ/VL by the avx512 level; VNNI and BF16 are not.
  for (bool CpuFeatures::*field :
       {&CpuFeatures::avx512f, &CpuFeatures::avx512bw, &CpuFeatures::avx512cd,
        &CpuFeatures::avx512dq, &CpuFeatures::avx512vl}) {
    CpuFeatures f = Zen4();
    f.*field = false;
    EXPECT_FALSE(IsaSupportedOn(CpuIsa::kAvx512, f));
    EXPECT_TRUE(IsaSupportedOn(CpuIsa::kAvx2, f));
  }
  CpuFeatures no_vnni = Zen4();
  no_vnni.avx512vnni = no_vnni.avx512bf16 = false;
  EXPECT_TRUE(IsaSupportedOn(CpuIsa::kAvx512, no_vnni));
}

TEST(CpuFeaturesTest, UnsetOrEmptySelectsTheBestLevel) {
  EXPECT_EQ(ResolveCpuIsa("", CpuFeatures{}).value(), CpuIsa::kScalar);
  EXPECT_EQ(ResolveCpuIsa("", Haswell()).value(), CpuIsa::kAvx2);
  EXPECT_EQ(ResolveCpuIsa("", AlderLake()).value(), CpuIsa::kAvxVnni);
  EXPECT_EQ(ResolveCpuIsa("", Zen4()).value(), CpuIsa::kAvx512);
  EXPECT_EQ(ResolveCpuIsa("", Zen5()).value(), CpuIsa::kAvx512);
}

TEST(CpuFeaturesTest, ASupportedLevelIsSelected) {
  for (CpuIsa isa : kAllCpuIsas) {
    EXPECT_EQ(ResolveCpuIsa(CpuIsaName(isa), Zen5()).value(), isa) << CpuIsaName(isa);
  }
  EXPECT_EQ(ResolveCpuIsa("scalar", CpuFeatures{}).value(), CpuIsa::kScalar);
  EXPECT_EQ(ResolveCpuIsa("avx2", Zen4()).value(), CpuIsa::kAvx2);
}

TEST(CpuFeaturesTest, ALevelTheCpuLacksIsRefusedNotLowered) {
  absl::StatusOr<CpuIsa> r = ResolveCpuIsa("avx512", Haswell());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "DELTASERVE_CPU_ISA=avx512: this CPU lacks avx512f avx512bw avx512cd avx512dq "
            "avx512vl; this machine supports scalar, avx2 (unset: the best, avx2)");
  r = ResolveCpuIsa("avx_vnni", Zen4());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "DELTASERVE_CPU_ISA=avx_vnni: this CPU lacks avx_vnni; this machine supports scalar, "
            "avx2, avx512 (unset: the best, avx512)");
  r = ResolveCpuIsa("avx512", AlderLake());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("supports scalar, avx2, avx_vnni (unset: the best, "
                                              "avx_vnni)"));
  CpuFeatures no_bmi2 = Zen5();
  no_bmi2.bmi2 = false;
  r = ResolveCpuIsa("avx2", no_bmi2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "DELTASERVE_CPU_ISA=avx2: this CPU lacks bmi2; this machine supports scalar (unset: "
            "the best, scalar)");
}
#endif  // __x86_64__

TEST(CpuFeaturesTest, AnUnknownLevelIsRefusedWithTheLevels) {
  for (const char* bad : {"avx1024", "AVX512", "avx-vnni", "native"}) {
    absl::StatusOr<CpuIsa> r = ResolveCpuIsa(bad, DetectedCpuFeatures());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                HasSubstr(std::string("DELTASERVE_CPU_ISA=") + bad +
                          ": unknown CPU kernel level (the levels: scalar, avx2, avx_vnni, "
                          "avx512); this machine supports scalar"));
    EXPECT_THAT(r.status().message(), HasSubstr(std::string("(unset: the best, ") +
                                                std::string(CpuIsaName(BestSupportedIsa())) + ")"));
  }
}

TEST(CpuFeaturesTest, SupportedLevelsOnThisMachine) {
  const std::vector<CpuIsa> supported = SupportedIsas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), CpuIsa::kScalar);
  EXPECT_EQ(supported.back(), BestSupportedIsa());
  EXPECT_EQ(ResolveCpuIsa("", DetectedCpuFeatures()).value(), BestSupportedIsa());
  for (CpuIsa isa : kAllCpuIsas) {
    const bool listed = std::count(supported.begin(), supported.end(), isa) == 1;
    EXPECT_EQ(IsaSupported(isa), listed) << CpuIsaName(isa);
    EXPECT_EQ(ResolveCpuIsa(CpuIsaName(isa), DetectedCpuFeatures()).ok(), listed);
    // ClampIsa: the level itself where supported, else the highest supported one below it.
    const CpuIsa clamped = ClampIsa(isa);
    EXPECT_TRUE(IsaSupported(clamped));
    EXPECT_LE(static_cast<int>(clamped), static_cast<int>(isa));
    if (listed) {
      EXPECT_EQ(clamped, isa);
    }
  }
}

// The level the kernels run is the one the variable names (what tests/isa_matrix.sh relies on),
// or the best when it is unset.
TEST(CpuFeaturesTest, ActiveIsaIsTheResolvedLevel) {
  absl::StatusOr<CpuIsa> resolved = ResolveCpuIsaFromEnv();
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(ActiveIsa(), *resolved);
  const char* env = std::getenv("DELTASERVE_CPU_ISA");
  if (env != nullptr && *env != '\0') {
    EXPECT_EQ(CpuIsaName(ActiveIsa()), env);
  } else {
    EXPECT_EQ(ActiveIsa(), BestSupportedIsa());
  }
}

// Sets an environment variable for the scope, then puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CpuFeaturesTest, ResolveCpuIsaFromEnvReadsTheVariable) {
  {
    ScopedEnv env("DELTASERVE_CPU_ISA", "scalar");
    EXPECT_EQ(ResolveCpuIsaFromEnv().value(), CpuIsa::kScalar);
  }
  {
    ScopedEnv env("DELTASERVE_CPU_ISA", "");
    EXPECT_EQ(ResolveCpuIsaFromEnv().value(), BestSupportedIsa());
  }
  ScopedEnv env("DELTASERVE_CPU_ISA", "avx1024");
  EXPECT_THAT(ResolveCpuIsaFromEnv().status().message(), HasSubstr("DELTASERVE_CPU_ISA=avx1024"));
}

// A process whose variable nobody checked (a test binary) stops at the first kernel rather than
// run another level than the one asked for. In a fresh process (threadsafe style), since the
// level is resolved once per process.
TEST(CpuFeaturesDeathTest, ActiveIsaStopsOnARefusedLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedEnv env("DELTASERVE_CPU_ISA", "avx1024");
  EXPECT_DEATH(ActiveIsa(), "deltaserve: DELTASERVE_CPU_ISA=avx1024: unknown CPU kernel level");
}

#if defined(__x86_64__) && defined(__linux__)
// The flags the Linux kernel reports for CPU 0 (it clears those whose register state the OS does
// not save, as the detection does through XGETBV).
std::set<std::string> ProcCpuinfoFlags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuFeaturesTest, DetectionAgreesWithTheKernel) {
  const std::set<std::string> flags = ProcCpuinfoFlags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const CpuFeatures& f = DetectedCpuFeatures();
  auto has = [&flags](const char* name) { return flags.count(name) == 1; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.fma, has("fma"));
  EXPECT_EQ(f.f16c, has("f16c"));
  EXPECT_EQ(f.bmi1, has("bmi1"));
  EXPECT_EQ(f.bmi2, has("bmi2"));
  EXPECT_EQ(f.lzcnt, has("abm"));
  EXPECT_EQ(f.movbe, has("movbe"));
  EXPECT_EQ(f.x86_64_v2, has("pni") && has("ssse3") && has("cx16") && has("sse4_1") &&
                             has("sse4_2") && has("popcnt") && has("lahf_lm"));
  EXPECT_EQ(f.avx_vnni, has("avx_vnni"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512cd, has("avx512cd"));
  EXPECT_EQ(f.avx512dq, has("avx512dq"));
  EXPECT_EQ(f.avx512vl, has("avx512vl"));
  EXPECT_EQ(f.avx512vnni, has("avx512_vnni"));
  EXPECT_EQ(f.avx512bf16, has("avx512_bf16"));
  // The start-up log's list names what was found.
  const std::string list = CpuFeatureList(f);
  EXPECT_EQ(list.find("avx2") != std::string::npos, f.avx2);
  EXPECT_EQ(list.find("avx_vnni") != std::string::npos, f.avx_vnni);
  EXPECT_EQ(list.find("avx512vnni") != std::string::npos, f.avx512vnni);
}
#endif

TEST(CpuFeaturesTest, FeatureListNamesWhatIsPresent) {
  EXPECT_EQ(CpuFeatureList(CpuFeatures{}), "none");
  EXPECT_EQ(CpuFeatureList(Haswell()), "x86-64-v2 avx2 fma f16c bmi1 bmi2 lzcnt movbe");
  EXPECT_EQ(CpuFeatureList(Zen5()),
            "x86-64-v2 avx2 fma f16c bmi1 bmi2 lzcnt movbe avx_vnni avx512f avx512bw avx512cd "
            "avx512dq avx512vl avx512vnni avx512bf16");
}

}  // namespace
}  // namespace deltaserve::kernels
