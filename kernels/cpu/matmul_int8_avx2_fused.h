// The 256-bit fused int8 products (Int8FusedFn and Int8FusedBatchFn of matmul_int8.h) for every
// int8 weight type, over the per-type kernels of matmul_int8_avx2_types.h and an `Ops` class
// (Avx2Ops in matmul_int8_avx2.cc, VnniOps in matmul_int8_avxvnni.cc, which instantiate them).
//
// One activation row (decode): each weight row streamed start to end, one 256-value unit at a
// time, decoded in registers and never stored, with a software prefetch kPrefetchBytes ahead
// (the rows of a range are contiguous, so it runs into the next rows).
// 2-6 activation rows (batches): each unit of a weight row decoded once for a block of up to
// kBatchTokens activation rows; weight rows in groups of 16 so that the group, not the whole
// range, is what later token blocks find in L1. Every output equals the one-row product of that
// activation row alone, bit for bit (the per-type kernels' contract).
//
// Included only by the files built with -mavx2 -mfma -mf16c (quants.cmake); internal linkage.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_int8.h"
#include "kernels/cpu/matmul_int8_avx2_types.h"
#include "kernels/cpu/matmul_int8_x86.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

// Activation rows one pass over a weight row takes in the batch product: T accumulators (two
// registers each for the K-quants), the decoded unit mostly read back from the stack. 6 against
// 4: 10-20% less time at 5 and 6 rows (1024 x 3584, one thread), the same at 4; matmul.cc
// sends the 256-bit levels at most 6 rows (kMaxFusedBatchInt8Ymm), so a batch is one pass.
constexpr int kBatchTokens = 6;

// y[t * y_stride] = (row b) . x[t] for t < T, over nblocks blocks.
template <class K, int T>
__attribute__((always_inline)) inline void DotTokens(const typename K::Block* b, int64_t nblocks,
                                                     const TokenX* x, float* y, int64_t y_stride) {
  using Block = typename K::Block;
  typename K::Acc acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) K::Init(acc[t]);
  int64_t ib = 0;
  for (; ib + K::kUnitBlocks <= nblocks; ib += K::kUnitBlocks) {
    PrefetchAhead<K::kUnitBlocks * sizeof(Block)>(b + ib, kPrefetchBytes);
    typename K::Unit u;
    K::Decode(b + ib, K::kUnitBlocks, u);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) K::Apply(u, x[t], ib, acc[t]);
  }
  if (ib < nblocks) {  // legacy types: a last unit of fewer than 8 blocks
    typename K::Unit u;
    K::Decode(b + ib, static_cast<int>(nblocks - ib), u);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) K::Apply(u, x[t], ib, acc[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) y[t * y_stride] = K::Finish(acc[t]);
}

template <class K>
__attribute__((noinline)) void FusedRows(const uint8_t* w, size_t row_bytes, int64_t rows,
                                         const Int8FlatRow& x, float* y) {
  using Block = typename K::Block;
  const int64_t nblocks = x.n / K::kBlockValues;
  const TokenX tx{x.q, x.d, x.dsum, x.qsum};
  for (int64_t r = 0; r < rows; ++r) {
    DotTokens<K, 1>(reinterpret_cast<const Block*>(w + r * row_bytes), nblocks, &tx, y + r, 1);
  }
}

// Rows [0, rows) times tokens [t0, t0 + T).
template <class K, int T>
__attribute__((noinline)) void BatchBlock(const uint8_t* w, size_t row_bytes, int64_t rows,
                                          const Int8FlatBatch& x, int64_t t0, float* y,
                                          int64_t y_stride) {
  using Block = typename K::Block;
  const int64_t nblocks = x.n / K::kBlockValues;
  const int64_t ng = x.n / x.group;
  TokenX tx[T];
  for (int t = 0; t < T; ++t) {
    tx[t] = {x.q + (t0 + t) * x.n, x.d + (t0 + t) * ng, x.dsum + (t0 + t) * ng,
             x.qsum + (t0 + t) * ng};
  }
  for (int64_t r = 0; r < rows; ++r) {
    DotTokens<K, T>(reinterpret_cast<const Block*>(w + r * row_bytes), nblocks, tx,
                    y + t0 * y_stride + r, y_stride);
  }
}

// Rows outer (in groups of 16), token blocks inner; the tokens split into
// ceil(rows / kBatchTokens) blocks of near-equal size (13 = 5 + 4 + 4, not 6 + 6 + 1).
template <class K>
void BatchRows(const uint8_t* w, size_t row_bytes, int64_t rows, const Int8FlatBatch& x, float* y,
               int64_t y_stride) {
  static_assert(kBatchTokens >= 1 && kBatchTokens <= 8);
  const int64_t n_blocks = (x.rows + kBatchTokens - 1) / kBatchTokens;
  constexpr int64_t kRowGroup = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
    const int64_t nr = rows - r0 < kRowGroup ? rows - r0 : kRowGroup;
    const uint8_t* wr = w + r0 * row_bytes;
    float* yr = y + r0;
    int64_t t0 = 0;
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const int64_t tn = x.rows / n_blocks + (blk < x.rows % n_blocks ? 1 : 0);
      switch (tn) {
        case 8:
          if constexpr (kBatchTokens >= 8) BatchBlock<K, 8>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 7:
          if constexpr (kBatchTokens >= 7) BatchBlock<K, 7>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 6:
          if constexpr (kBatchTokens >= 6) BatchBlock<K, 6>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 5:
          if constexpr (kBatchTokens >= 5) BatchBlock<K, 5>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 4:
          if constexpr (kBatchTokens >= 4) BatchBlock<K, 4>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 3:
          if constexpr (kBatchTokens >= 3) BatchBlock<K, 3>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        case 2:
          BatchBlock<K, 2>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
        default:
          BatchBlock<K, 1>(wr, row_bytes, nr, x, t0, yr, y_stride);
          break;
      }
      t0 += tn;
    }
  }
}

// Calls F<K>::Run(args...) with the kernel class of `type`; false for a type without one.
template <class Ops, template <class> class F, class... Args>
bool WithKernel(WeightType type, Args&&... args) {
  switch (type) {
    case WeightType::kQ8_0:
      F<LegacyKernel<Ops, Q8_0Type>>::Run(args...);
      return true;
    case WeightType::kQ4_0:
      F<LegacyKernel<Ops, Q4_0Type>>::Run(args...);
      return true;
    case WeightType::kQ4_1:
      F<LegacyKernel<Ops, Q4_1Type>>::Run(args...);
      return true;
    case WeightType::kQ5_0:
      F<LegacyKernel<Ops, Q5_0Type>>::Run(args...);
      return true;
    case WeightType::kQ5_1:
      F<LegacyKernel<Ops, Q5_1Type>>::Run(args...);
      return true;
    case WeightType::kQ4_K:
      F<K45Kernel<Ops, false>>::Run(args...);
      return true;
    case WeightType::kQ5_K:
      F<K45Kernel<Ops, true>>::Run(args...);
      return true;
    case WeightType::kQ6_K:
      F<Q6KKernel<Ops>>::Run(args...);
      return true;
    default:
      return false;
  }
}

template <class K>
struct FusedRowsOf {
  static void Run(const uint8_t* w, size_t row_bytes, int64_t rows, const Int8FlatRow& x,
                  float* y) {
    FusedRows<K>(w, row_bytes, rows, x, y);
  }
};
template <class K>
struct BatchRowsOf {
  static void Run(const uint8_t* w, size_t row_bytes, int64_t rows, const Int8FlatBatch& x,
                  float* y, int64_t y_stride) {
    BatchRows<K>(w, row_bytes, rows, x, y, y_stride);
  }
};

// The Int8FusedFn and Int8FusedBatchFn of an Ops class.
template <class Ops>
bool Int8Fused256(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                  const Int8FlatRow& x, float* y) {
  return WithKernel<Ops, FusedRowsOf>(type, w, row_bytes, rows, x, y);
}
template <class Ops>
bool Int8FusedBatch256(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                       const Int8FlatBatch& x, float* y, int64_t y_stride) {
  return WithKernel<Ops, BatchRowsOf>(type, w, row_bytes, rows, x, y, y_stride);
}

}  // namespace
}  // namespace deltaserve::kernels::internal
