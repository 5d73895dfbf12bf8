// Building blocks for the loops of the CPU ops (norm_ops, attention, conv1d, gated_delta_rule):
// a macro that compiles a function for AVX-512, AVX2+FMA and baseline x86-64 and runs the copy
// of the kernel level ActiveIsa() names (the library itself targets baseline x86-64), its
// variant for loops written over vectors of the level's width (VecF), and exp, sigmoid and SiLU
// written without library calls so that g++ vectorises loops over them (in files compiled with
// -fno-trapping-math, kernels/cpu/ops.cmake: without it their clamps stay branches).
//
// The helpers are always inlined, so no out-of-line copy exists for the linker to share between
// code compiled for different ISAs.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "kernels/cpu/cpu_features.h"

#define DELTASERVE_ALWAYS_INLINE __attribute__((always_inline)) inline

// DELTASERVE_ISA_DISPATCH(ret, Name, (params), (args)) defines `ret Name(params)`, which runs
// NameImpl (declared DELTASERVE_ALWAYS_INLINE, as must be all it calls that should be vectorised)
// compiled for x86-64-v4 at the avx512 level, for x86-64-v3 at avx2 and avx_vnni, and for
// baseline x86-64 at scalar:
//
//   DELTASERVE_ALWAYS_INLINE void ScaleRowsImpl(Mat& x, float s) { ... }
//   DELTASERVE_ISA_DISPATCH(void, ScaleRows, (Mat& x, float s), (x, s))
//
// The copy is picked per call from ActiveIsa(), not by the loader as target_clones would (that
// picks by the CPU alone, so DELTASERVE_CPU_ISA could not test the narrower copies). No copy is
// inlined into the callers (the V4 and V3 ones cannot be), as with target_clones.
#if defined(__x86_64__) && defined(__GNUC__)
#define DELTASERVE_ISA_DISPATCH(ret, name, params, args)                                    \
  __attribute__((target("arch=x86-64-v4"))) ret name##V4 params { return name##Impl args; } \
  __attribute__((target("arch=x86-64-v3"))) ret name##V3 params { return name##Impl args; } \
  __attribute__((noinline)) ret name##Baseline params { return name##Impl args; }           \
  ret name params {                                                                         \
    switch (::deltaserve::kernels::ActiveIsa()) {                                           \
      case ::deltaserve::kernels::CpuIsa::kAvx512:                                          \
        return name##V4 args;                                                               \
      case ::deltaserve::kernels::CpuIsa::kAvxVnni:                                         \
      case ::deltaserve::kernels::CpuIsa::kAvx2:                                            \
        return name##V3 args;                                                               \
      case ::deltaserve::kernels::CpuIsa::kScalar:                                          \
        break;                                                                              \
    }                                                                                       \
    return name##Baseline args;                                                             \
  }

// DELTASERVE_ISA_DISPATCH_LANES(ret, Name, (params), (args)) is the same for a NameImpl that is
// a template over its vector width in floats (template <int kLanes>, vectors VecF<kLanes>): 16
// (one zmm) in the avx512 copy, 8 (one ymm) at avx2 and avx_vnni, 4 (one xmm) at scalar. Register
// tiles sized in vectors then fit each level's register file (32 zmm, 16 ymm, 16 xmm), where a
// tile written for 16-float vectors needs twice the ymm registers AVX2 has and spills. The
// function it defines takes the level first, `ret Name(CpuIsa isa, params)`: callers pass
// ActiveIsa(), or in the explicit-ISA entry points that tests use to compare the levels in one
// run, a level that IsaSupported() says this CPU runs.
#define DELTASERVE_ISA_UNPAREN(...) __VA_ARGS__
#define DELTASERVE_ISA_DISPATCH_LANES(ret, name, params, args)                                   \
  __attribute__((target("arch=x86-64-v4"))) ret name##V4 params { return name##Impl<16> args; } \
  __attribute__((target("arch=x86-64-v3"))) ret name##V3 params { return name##Impl<8> args; }  \
  __attribute__((noinline)) ret name##Baseline params { return name##Impl<4> args; }            \
  ret name(::deltaserve::kernels::CpuIsa isa, DELTASERVE_ISA_UNPAREN params) {                  \
    switch (isa) {                                                                              \
      case ::deltaserve::kernels::CpuIsa::kAvx512:                                              \
        return name##V4 args;                                                                   \
      case ::deltaserve::kernels::CpuIsa::kAvxVnni:                                             \
      case ::deltaserve::kernels::CpuIsa::kAvx2:                                                \
        return name##V3 args;                                                                   \
      case ::deltaserve::kernels::CpuIsa::kScalar:                                              \
        break;                                                                                  \
    }                                                                                           \
    return name##Baseline args;                                                                 \
  }
#else
#define DELTASERVE_ISA_DISPATCH(ret, name, params, args) \
  ret name params { return name##Impl args; }
#define DELTASERVE_ISA_UNPAREN(...) __VA_ARGS__
#define DELTASERVE_ISA_DISPATCH_LANES(ret, name, params, args)            \
  ret name(::deltaserve::kernels::CpuIsa, DELTASERVE_ISA_UNPAREN params) { \
    return name##Impl<4> args;                                            \
  }
#endif

namespace deltaserve::kernels::internal {

// N floats in one vector: VecF<16> is a zmm register, VecF<8> a ymm, VecF<4> an xmm (or pairs
// of narrower ones in a copy compiled for less). Values of these types never cross a function
// boundary (only always-inline helpers take them, by reference), since passing one by value
// would change the calling convention between the copies.
template <int N>
using VecF __attribute__((vector_size(4 * N))) = float;

// VecF<N> loaded from / stored to floats at any alignment, through a vector type that may alias
// them. Not memcpy: in a function whose wider target comes from an attribute (the V4 and V3
// copies), g++ 12 expands a memcpy into a vector kept in an array in 16-byte pieces (the move
// sizes follow the command line's baseline target), and the 32-byte load that follows two
// 16-byte stores stalls store forwarding: the AVX2 attention over f32 or decoded K/V tiles
// spent most of its time there.
// clang drops the aligned(4) of an alias template (the type keeps its natural alignment, so the
// access would assume it: UBSan reports a misaligned load), and lowers memcpy to one unaligned
// move anyway: it takes the memcpy.
#if defined(__clang__)
template <int N>
DELTASERVE_ALWAYS_INLINE void LoadVec(VecF<N>& out, const float* src) {
  __builtin_memcpy(&out, src, sizeof(out));
}
template <int N>
DELTASERVE_ALWAYS_INLINE void StoreVec(float* dst, const VecF<N>& v) {
  __builtin_memcpy(dst, &v, sizeof(v));
}
#else
template <int N>
using VecFUnaligned __attribute__((vector_size(4 * N), aligned(4), may_alias)) = float;
template <int N>
DELTASERVE_ALWAYS_INLINE void LoadVec(VecF<N>& out, const float* src) {
  out = *reinterpret_cast<const VecFUnaligned<N>*>(src);
}
template <int N>
DELTASERVE_ALWAYS_INLINE void StoreVec(float* dst, const VecF<N>& v) {
  *reinterpret_cast<VecFUnaligned<N>*>(dst) = v;
}
#endif

// e^x with relative error below 1e-7 (measured 8.1e-8 over [-87, 88]), after Cephes expf:
// x = n ln2 + r, |r| <= ln2/2 (ln2 split in two so n ln2 is exact), e^r = 1 + r + r^2 p(r) with
// p of degree 5, 2^n written into the exponent bits. e^0 is exactly 1; x < -87 gives 0 (e^-87
// is near the smallest normal float), x > 88 gives +inf, NaN stays NaN. A library expf call is
// ~20 cycles and blocks vectorisation; this is a few cycles per 16 values with AVX-512.
DELTASERVE_ALWAYS_INLINE float FastExp(float x_in) {
  // Clamped into range first (NaN included: the int conversion below must see a finite value).
  const float x = x_in > -87.0f ? (x_in < 88.0f ? x_in : 88.0f) : -87.0f;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (kept: no -ffast-math here).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  const float y = er * two_n;
  if (x_in >= -87.0f) return x_in <= 88.0f ? y : std::numeric_limits<float>::infinity();
  return x_in < -87.0f ? 0.0f : x_in;
}

// 1 / (1 + e^-x).
DELTASERVE_ALWAYS_INLINE float FastSigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }

// x / (1 + e^-x).
DELTASERVE_ALWAYS_INLINE float FastSilu(float x) { return x / (1.0f + FastExp(-x)); }

}  // namespace deltaserve::kernels::internal
