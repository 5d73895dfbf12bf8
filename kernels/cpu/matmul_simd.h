// The SIMD leaf kernels of the CPU matrix products, written once over a lane-traits class `V`
// (V256 in matmul_avx2.cc, V512 in matmul_avx512.cc) and instantiated by each ISA file. Only
// those two files include this header, and everything here has internal linkage, so each gets a
// private copy built with its own -m flags.
//
// Every block type is described by a decoder that calls emit(pos, q, scale, offset) for each
// vector of V::kLanes consecutive values at offset `pos` of the block: the value is
// q * scale + offset, q holding small integers as floats. Sinks consume that: DequantSink
// stores it with a separate multiply and add (bit-identical to quants.cc), DotSink multiplies
// it into an activation row without storing it (the fused one-token product). The K-quants,
// which carry most of a Q4_K_M / Q5_K_M model, have hand-fused dot kernels instead (DotK45,
// DotQ6K) that factor the per-sub-block scale and min out of the per-value work.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// F16C scalar conversion (quants.h's Fp16ToFp32 is deliberately not used here: see quants.h).
inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (same packing as quants.h).
inline void ScaleMinK4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Values per block of each block struct.
template <class Block>
constexpr int kBlockValues = kQk;
template <>
constexpr int kBlockValues<BlockQ4_K> = kQkK;
template <>
constexpr int kBlockValues<BlockQ5_K> = kQkK;
template <>
constexpr int kBlockValues<BlockQ6_K> = kQkK;

template <class V>
struct Decoders {
  using I = typename V::I;
  static constexpr int L = V::kLanes;

  template <class Emit>
  static void Q8_0(const BlockQ8_0& b, Emit& emit) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < kQk; j += L) emit(j, V::ToF(V::I8(b.qs + j)), d, 0.0f);
  }

  template <class Emit>
  static void Q4_0(const BlockQ4_0& b, Emit& emit) {
    const float d = HalfToFloat(b.d);
    for (int j = 0; j < kQk / 2; j += L) {
      const I bytes = V::U8(b.qs + j);
      emit(j, V::ToF(V::AddI(V::And(bytes, 0xF), -8)), d, 0.0f);
      emit(j + kQk / 2, V::ToF(V::AddI(V::template Shr<4>(bytes), -8)), d, 0.0f);
    }
  }

  template <class Emit>
  static void Q4_1(const BlockQ4_1& b, Emit& emit) {
    const float d = HalfToFloat(b.d);
    const float m = HalfToFloat(b.m);
    for (int j = 0; j < kQk / 2; j += L) {
      const I bytes = V::U8(b.qs + j);
      emit(j, V::ToF(V::And(bytes, 0xF)), d, m);
      emit(j + kQk / 2, V::ToF(V::template Shr<4>(bytes)), d, m);
    }
  }

  // Q5_0 / Q5_1 values as unsigned 5-bit integers; `bias` is -16 for Q5_0, 0 for Q5_1.
  template <class Block, class Emit>
  static void Q5(const Block& b, int bias, float d, float m, Emit& emit) {
    const uint32_t qh = LoadU32(b.qh);
    for (int j = 0; j < kQk / 2; j += L) {
      const I bytes = V::U8(b.qs + j);
      const I lo = V::Or(V::And(bytes, 0xF), V::template Shl<4>(V::Bits(qh >> j)));
      const I hi = V::Or(V::template Shr<4>(bytes), V::template Shl<4>(V::Bits(qh >> (j + 16))));
      emit(j, V::ToF(V::AddI(lo, bias)), d, m);
      emit(j + kQk / 2, V::ToF(V::AddI(hi, bias)), d, m);
    }
  }
  template <class Emit>
  static void Q5_0(const BlockQ5_0& b, Emit& emit) {
    Q5(b, -16, HalfToFloat(b.d), 0.0f, emit);
  }
  template <class Emit>
  static void Q5_1(const BlockQ5_1& b, Emit& emit) {
    Q5(b, 0, HalfToFloat(b.d), HalfToFloat(b.m), emit);
  }

  // Q4_K (kFive = false) and Q5_K: the offset is -dmin * m, so q * scale + offset is
  // d1 * q - m1 exactly (IEEE a - b is a + (-b)).
  template <bool kFive, class Block, class Emit>
  static void K45(const Block& b, Emit& emit) {
    const float d = HalfToFloat(b.d);
    const float dmin = HalfToFloat(b.dmin);
    for (int c = 0; c < 4; ++c) {
      int sc;
      int m;
      ScaleMinK4(2 * c, b.scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      ScaleMinK4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; l += L) {
        const I bytes = V::U8(b.qs + 32 * c + l);
        I lo = V::And(bytes, 0xF);
        I hi = V::template Shr<4>(bytes);
        if constexpr (kFive) {
          const I h = V::U8(b.qh + l);
          lo = V::Or(lo, V::template Shl<4>(V::BitOf(h, 2 * c)));
          hi = V::Or(hi, V::template Shl<4>(V::BitOf(h, 2 * c + 1)));
        }
        emit(64 * c + l, V::ToF(lo), d1, -m1);
        emit(64 * c + 32 + l, V::ToF(hi), d2, -m2);
      }
    }
  }
  template <class Emit>
  static void Q4_K(const BlockQ4_K& b, Emit& emit) {
    K45<false>(b, emit);
  }
  template <class Emit>
  static void Q5_K(const BlockQ5_K& b, Emit& emit) {
    K45<true>(b, emit);
  }

  // The four unsigned 6-bit values of lane group l of a Q6_K half: low nibbles of ql[l] (a)
  // and ql[32 + l] (c), high nibbles, each with its 2-bit field of qh[l] (h) on top.
  static void Q6Unpack(I a, I c, I h, I* q1, I* q2, I* q3, I* q4) {
    *q1 = V::OrAnd(V::And(a, 0xF), V::template Shl<4>(h), 0x30);
    *q2 = V::OrAnd(V::And(c, 0xF), V::template Shl<2>(h), 0x30);
    *q3 = V::OrAnd(V::template Shr<4>(a), h, 0x30);
    *q4 = V::OrAnd(V::template Shr<4>(c), V::template Shr<2>(h), 0x30);
  }

  template <class Emit>
  static void Q6_K(const BlockQ6_K& b, Emit& emit) {
    const float d = HalfToFloat(b.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const int8_t* sc = b.scales + 8 * half;
      for (int l = 0; l < 32; l += L) {
        const int is = l / 16;  // a vector never straddles two 16-value sub-blocks
        const I a = V::U8(ql + l);
        const I c = V::U8(ql + 32 + l);
        const I h = V::U8(qh + l);
        I q1, q2, q3, q4;
        Q6Unpack(a, c, h, &q1, &q2, &q3, &q4);
        const int base = 128 * half + l;
        emit(base, V::ToF(V::AddI(q1, -32)), d * static_cast<float>(sc[is]), 0.0f);
        emit(base + 32, V::ToF(V::AddI(q2, -32)), d * static_cast<float>(sc[is + 2]), 0.0f);
        emit(base + 64, V::ToF(V::AddI(q3, -32)), d * static_cast<float>(sc[is + 4]), 0.0f);
        emit(base + 96, V::ToF(V::AddI(q4, -32)), d * static_cast<float>(sc[is + 6]), 0.0f);
      }
    }
  }
};

// Stores decoded values: q * scale, then + offset, as two roundings like the scalar decoder.
template <class V, bool kOffset>
struct DequantSink {
  float* out;
  void operator()(int pos, typename V::F q, float scale, float offset) {
    typename V::F w = V::Mul(q, V::Set1(scale));
    if constexpr (kOffset) w = V::Add(w, V::Set1(offset));
    V::Store(out + pos, w);
  }
};

// Accumulates decoded values times x. The accumulator is picked by the vector's position in
// the block, so consecutive vectors of a block feed independent FMA chains.
template <class V, bool kOffset>
struct DotSink {
  const float* x;
  typename V::F acc[4];
  void operator()(int pos, typename V::F q, float scale, float offset) {
    typename V::F w;
    if constexpr (kOffset) {
      w = V::Fma(q, V::Set1(scale), V::Set1(offset));
    } else {
      w = V::Mul(q, V::Set1(scale));
    }
    const int slot = (pos / V::kLanes) & 3;
    acc[slot] = V::Fma(w, V::Load(x + pos), acc[slot]);
  }
};

template <class V>
struct Kernels {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int L = V::kLanes;
  using D = Decoders<V>;

  template <class Block, bool kOffset, class Fn, class Decode>
  static void Call(Fn& fn, Decode decode) {
    fn(std::type_identity<Block>{}, decode, std::bool_constant<kOffset>{});
  }

  // Calls fn(type_identity<Block>, decoder, bool_constant<has_offset>) for the block type of
  // `type`; false for the dense types.
  template <class Fn>
  static bool Visit(WeightType type, Fn&& fn) {
    switch (type) {
      case WeightType::kQ8_0:
        Call<BlockQ8_0, false>(fn, [](const BlockQ8_0& b, auto& e) { D::Q8_0(b, e); });
        return true;
      case WeightType::kQ4_0:
        Call<BlockQ4_0, false>(fn, [](const BlockQ4_0& b, auto& e) { D::Q4_0(b, e); });
        return true;
      case WeightType::kQ4_1:
        Call<BlockQ4_1, true>(fn, [](const BlockQ4_1& b, auto& e) { D::Q4_1(b, e); });
        return true;
      case WeightType::kQ5_0:
        Call<BlockQ5_0, false>(fn, [](const BlockQ5_0& b, auto& e) { D::Q5_0(b, e); });
        return true;
      case WeightType::kQ5_1:
        Call<BlockQ5_1, true>(fn, [](const BlockQ5_1& b, auto& e) { D::Q5_1(b, e); });
        return true;
      case WeightType::kQ4_K:
        Call<BlockQ4_K, true>(fn, [](const BlockQ4_K& b, auto& e) { D::Q4_K(b, e); });
        return true;
      case WeightType::kQ5_K:
        Call<BlockQ5_K, true>(fn, [](const BlockQ5_K& b, auto& e) { D::Q5_K(b, e); });
        return true;
      case WeightType::kQ6_K:
        Call<BlockQ6_K, false>(fn, [](const BlockQ6_K& b, auto& e) { D::Q6_K(b, e); });
        return true;
      default:
        return false;
    }
  }

  // V::kLanes values of a dense (f16 / bf16 / f32) row from index k, as f32.
  static F LoadDense(WeightType type, const void* src, int64_t k) {
    const auto* h = static_cast<const uint16_t*>(src) + k;
    switch (type) {
      case WeightType::kF16:
        return V::Half(h);
      case WeightType::kBF16:
        return V::Bf16(h);
      default:
        return V::Load(static_cast<const float*>(src) + k);
    }
  }
  static float DenseScalar(WeightType type, const void* src, int64_t k) {
    switch (type) {
      case WeightType::kF16:
        return HalfToFloat(static_cast<const uint16_t*>(src)[k]);
      case WeightType::kBF16: {
        const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(src)[k]) << 16;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        return f;
      }
      default:
        return static_cast<const float*>(src)[k];
    }
  }
  static bool IsDense(WeightType type) {
    return type == WeightType::kF32 || type == WeightType::kF16 || type == WeightType::kBF16;
  }

  static bool DequantizeRow(WeightType type, const void* blocks, float* out, int64_t n) {
    if (IsDense(type)) {
      int64_t k = 0;
      for (; k + L <= n; k += L) V::Store(out + k, LoadDense(type, blocks, k));
      for (; k < n; ++k) out[k] = DenseScalar(type, blocks, k);
      return true;
    }
    return Visit(type, [&](auto block, auto decode, auto has_offset) {
      using Block = typename decltype(block)::type;
      constexpr int kBlock = kBlockValues<Block>;
      const auto* b = static_cast<const Block*>(blocks);
      DequantSink<V, decltype(has_offset)::value> sink{out};
      for (int64_t i = 0; i < n / kBlock; ++i, sink.out += kBlock) decode(b[i], sink);
    });
  }

  static float DenseDot(WeightType type, const void* w, const float* x, int64_t n) {
    F acc[4] = {V::Zero(), V::Zero(), V::Zero(), V::Zero()};
    int64_t k = 0;
    for (; k + 4 * L <= n; k += 4 * L) {
      for (int u = 0; u < 4; ++u) {
        acc[u] = V::Fma(LoadDense(type, w, k + u * L), V::Load(x + k + u * L), acc[u]);
      }
    }
    for (; k + L <= n; k += L) acc[0] = V::Fma(LoadDense(type, w, k), V::Load(x + k), acc[0]);
    float tail = 0.0f;
    for (; k < n; ++k) tail += DenseScalar(type, w, k) * x[k];
    return V::Sum(V::Add(V::Add(acc[0], acc[1]), V::Add(acc[2], acc[3]))) + tail;
  }

  static float Hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // One Q4_K / Q5_K row times x, factored per 32-value sub-block j as
  // d * sc_j * sum(q * x) - dmin * m_j * sum(x): the min never touches the per-value path,
  // which is then load, mask, convert and one FMA. The 6-bit scales of a block are unpacked
  // as whole words (the packing of GetScaleMinK4) and converted eight at a time.
  template <bool kFive, class Block>
  static float DotK45(const Block* b, int64_t nb, const float* x, const float* sums32) {
    F acc[4] = {V::Zero(), V::Zero(), V::Zero(), V::Zero()};
    __m256 acc_min = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i, x += kQkK, sums32 += 8) {
      uint32_t w[3];
      std::memcpy(w, b[i].scales, sizeof(w));
      const uint32_t sc_lo = w[0] & 0x3F3F3F3F;
      const uint32_t m_lo = w[1] & 0x3F3F3F3F;
      const uint32_t sc_hi = (w[2] & 0x0F0F0F0F) | (((w[0] >> 6) & 0x03030303) << 4);
      const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0F) | (((w[1] >> 6) & 0x03030303) << 4);
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo))));
      const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
          _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo))));
      alignas(32) float d1[8];
      _mm256_store_ps(d1, _mm256_mul_ps(sc, _mm256_set1_ps(HalfToFloat(b[i].d))));
      acc_min = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(HalfToFloat(b[i].dmin))),
                                _mm256_loadu_ps(sums32), acc_min);
      // Chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high), into accumulators `slot`.
      auto chunk = [&](int c, int slot) {
        F s_lo = V::Zero();
        F s_hi = V::Zero();
        for (int l = 0; l < 32; l += L) {
          const I bytes = V::U8(b[i].qs + 32 * c + l);
          I lo = V::And(bytes, 0xF);
          I hi = V::template Shr<4>(bytes);
          if constexpr (kFive) {
            const I h = V::SrlN(V::U8(b[i].qh + l), 2 * c);  // bits 2c, 2c + 1 at 0, 1
            lo = V::OrAnd(lo, V::template Shl<4>(h), 0x10);
            hi = V::OrAnd(hi, V::template Shl<3>(h), 0x10);
          }
          s_lo = V::Fma(V::ToF(lo), V::Load(x + 64 * c + l), s_lo);
          s_hi = V::Fma(V::ToF(hi), V::Load(x + 64 * c + 32 + l), s_hi);
        }
        acc[slot] = V::Fma(V::Set1(d1[2 * c]), s_lo, acc[slot]);
        acc[slot + 1] = V::Fma(V::Set1(d1[2 * c + 1]), s_hi, acc[slot + 1]);
      };
      chunk(0, 0);
      chunk(1, 2);
      chunk(2, 0);
      chunk(3, 2);
    }
    return V::Sum(V::Add(V::Add(acc[0], acc[1]), V::Add(acc[2], acc[3]))) - Hsum256(acc_min);
  }

  // One Q6_K row times x: values taken as unsigned q in [0, 63] and the -32 folded in as
  // -32 * d * sc_j * sum(x) per 16-value sub-block; d * sc for the block converted at once.
  static float DotQ6K(const BlockQ6_K* b, int64_t nb, const float* x, const float* sums16) {
    F acc[4] = {V::Zero(), V::Zero(), V::Zero(), V::Zero()};
    __m256 acc_off = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i, x += kQkK, sums16 += 16) {
      const __m256 d = _mm256_set1_ps(HalfToFloat(b[i].d));
      alignas(32) float dsc[16];
      for (int h = 0; h < 2; ++h) {
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].scales + 8 * h))));
        const __m256 v = _mm256_mul_ps(sc, d);
        _mm256_store_ps(dsc + 8 * h, v);
        acc_off = _mm256_fmadd_ps(v, _mm256_loadu_ps(sums16 + 8 * h), acc_off);
      }
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = b[i].ql + 64 * half;
        const uint8_t* qh = b[i].qh + 32 * half;
        const float* xh = x + 128 * half;
        const float* sc = dsc + 8 * half;
        for (int l = 0; l < 32; l += L) {
          I q[4];
          D::Q6Unpack(V::U8(ql + l), V::U8(ql + 32 + l), V::U8(qh + l), &q[0], &q[1], &q[2], &q[3]);
          const int is = l / 16;
          for (int k = 0; k < 4; ++k) {
            const F w = V::Mul(V::ToF(q[k]), V::Set1(sc[is + 2 * k]));
            acc[k] = V::Fma(w, V::Load(xh + 32 * k + l), acc[k]);
          }
        }
      }
    }
    return V::Sum(V::Add(V::Add(acc[0], acc[1]), V::Add(acc[2], acc[3]))) -
           32.0f * Hsum256(acc_off);
  }

  static bool HasFusedRows(WeightType type) {
    return IsDense(type) || Visit(type, [](auto, auto, auto) {});
  }

  static void FusedRows(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                        const FusedActivation& act, float* y) {
    const float* x = act.x;
    const int64_t n = act.n;
    if (IsDense(type)) {
      for (int64_t r = 0; r < rows; ++r) y[r] = DenseDot(type, w + r * row_bytes, x, n);
      return;
    }
    switch (type) {
      case WeightType::kQ4_K:
        for (int64_t r = 0; r < rows; ++r) {
          y[r] = DotK45<false>(reinterpret_cast<const BlockQ4_K*>(w + r * row_bytes), n / kQkK, x,
                               act.sums32);
        }
        return;
      case WeightType::kQ5_K:
        for (int64_t r = 0; r < rows; ++r) {
          y[r] = DotK45<true>(reinterpret_cast<const BlockQ5_K*>(w + r * row_bytes), n / kQkK, x,
                              act.sums32);
        }
        return;
      case WeightType::kQ6_K:
        for (int64_t r = 0; r < rows; ++r) {
          y[r] = DotQ6K(reinterpret_cast<const BlockQ6_K*>(w + r * row_bytes), n / kQkK, x,
                        act.sums16);
        }
        return;
      default:
        break;
    }
    Visit(type, [&](auto block, auto decode, auto has_offset) {
      using Block = typename decltype(block)::type;
      constexpr int kBlock = kBlockValues<Block>;
      const int64_t nb = n / kBlock;
      for (int64_t r = 0; r < rows; ++r) {
        const auto* b = reinterpret_cast<const Block*>(w + r * row_bytes);
        DotSink<V, decltype(has_offset)::value> sink{x,
                                                     {V::Zero(), V::Zero(), V::Zero(), V::Zero()}};
        for (int64_t i = 0; i < nb; ++i, sink.x += kBlock) decode(b[i], sink);
        y[r] = V::Sum(V::Add(V::Add(sink.acc[0], sink.acc[1]), V::Add(sink.acc[2], sink.acc[3])));
      }
    });
  }

  // kTileRows weight rows x NX activation rows, all f32; K tail by masked loads.
  template <int NX>
  static void DotTileN(const float* const* w, const float* const* x, int64_t n, float* out) {
    F acc[kTileRows][NX];
    for (int i = 0; i < kTileRows; ++i) {
      for (int j = 0; j < NX; ++j) acc[i][j] = V::Zero();
    }
    int64_t k = 0;
    for (; k + L <= n; k += L) {
      F xv[NX];
      for (int j = 0; j < NX; ++j) xv[j] = V::Load(x[j] + k);
      for (int i = 0; i < kTileRows; ++i) {
        const F wv = V::Load(w[i] + k);
        for (int j = 0; j < NX; ++j) acc[i][j] = V::Fma(wv, xv[j], acc[i][j]);
      }
    }
    if (k < n) {
      const int rest = static_cast<int>(n - k);
      F xv[NX];
      for (int j = 0; j < NX; ++j) xv[j] = V::LoadN(x[j] + k, rest);
      for (int i = 0; i < kTileRows; ++i) {
        const F wv = V::LoadN(w[i] + k, rest);
        for (int j = 0; j < NX; ++j) acc[i][j] = V::Fma(wv, xv[j], acc[i][j]);
      }
    }
    for (int i = 0; i < kTileRows; ++i) {
      for (int j = 0; j < NX; ++j) out[i * kMaxTileCols + j] = V::Sum(acc[i][j]);
    }
  }

  static void DotTile(const float* const* w, const float* const* x, int nx, int64_t n, float* out) {
    static_assert(V::kMaxNx >= 3 && V::kMaxNx <= kMaxTileCols);
    switch (nx) {
      case 1:
        DotTileN<1>(w, x, n, out);
        break;
      case 2:
        DotTileN<2>(w, x, n, out);
        break;
      case 3:
        DotTileN<3>(w, x, n, out);
        break;
      default:
        if constexpr (V::kMaxNx >= 4) DotTileN<4>(w, x, n, out);
        break;
    }
  }

  static constexpr MatMulKernels kTable = {&DequantizeRow, &DotTile, V::kMaxNx, &HasFusedRows,
                                           &FusedRows};
};

}  // namespace
}  // namespace deltaserve::kernels::internal
