#include "kernels/cpu/paged_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention_tiles.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels {
namespace {

using internal::FastExp;

using internal::AttendItemBody;
using internal::AttentionProblem;
using internal::AttentionScratch;
using internal::F32Rows;
using internal::HeadRowOf;
using internal::kKeyTile;
using internal::kNegInf;
using internal::RoundUp;

constexpr int64_t kRowsPerItem = 32;    // prefill: query rows (tokens x group heads) per item
constexpr int64_t kMinSplitKeys = 256;  // decode: fewest keys worth a split of their own
// Below this many multiply-adds (q·k plus p·v over all heads) the op stays on the calling thread.
constexpr int64_t kParallelFlops = 1 << 16;
// IEEE half to float: F16C in the AVX2 / AVX-512 copies under g++. clang 14 has no _Float16 on
// x86 without AVX512-FP16, so it calls the scalar converter (the ASan build only).
DELTASERVE_ALWAYS_INLINE float HalfToFloat(uint16_t h) {
#if defined(__clang__)
  return Fp16ToFp32(h);
#else
  _Float16 x;
  std::memcpy(&x, &h, sizeof(x));
  return static_cast<float>(x);
#endif
}

// f16 rows to f32. g++ 12 vectorises neither a loop over _Float16 nor __builtin_convertvector
// into 16-wide vcvtph2ps (it emits 4-wide conversions), and the scalar loop cost 70% of decode
// attention at depth 4,096, so the conversion uses F16C intrinsics in functions compiled for
// the extension, picked once from the ISA the backend runs (cpu_features.h).
// GCC 12's _mm512_cvtph_ps starts from an undefined vector, which -Wmaybe-uninitialized flags.
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f,f16c"))) void HalfToFloatAvx512(const uint8_t* src, int64_t n,
                                                               float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = Fp16ToFp32(static_cast<uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
}

#pragma GCC diagnostic pop

__attribute__((target("avx2,f16c"))) void HalfToFloatF16c(const uint8_t* src, int64_t n,
                                                          float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = Fp16ToFp32(static_cast<uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
}

void HalfToFloatScalar(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = Fp16ToFp32(static_cast<uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
  }
}

using HalfRowFn = void (*)(const uint8_t*, int64_t, float*);
HalfRowFn PickHalfToFloat() {
  switch (ActiveIsa()) {
    case CpuIsa::kAvx512:
      return &HalfToFloatAvx512;
    case CpuIsa::kAvxVnni:
    case CpuIsa::kAvx2:
      return &HalfToFloatF16c;
    case CpuIsa::kScalar:
      break;
  }
  return &HalfToFloatScalar;
}
// Picked at the first call, not while the program loads: a program checks DELTASERVE_CPU_ISA in
// main first (cpu_features.h), and ActiveIsa() would stop it before it could say why.
HalfRowFn HalfToFloatRow() {
  static const HalfRowFn fn = PickHalfToFloat();
  return fn;
}

// Decodes the n values (n a multiple of the type's block size) at src into dst[0, n), with the
// arithmetic of quants.cc's DequantizeRow.
DELTASERVE_ALWAYS_INLINE void DecodeValues(WeightType type, const uint8_t* __restrict src,
                                           int64_t n, float* __restrict dst) {
  switch (type) {
    case WeightType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case WeightType::kF16:
      HalfToFloatRow()(src, n, dst);
      return;
    case WeightType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    case WeightType::kQ8_0:
      for (int64_t b = 0; b < n / kQk; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src + b * sizeof(BlockQ8_0));
        const float d = HalfToFloat(blk->d);
        for (int j = 0; j < kQk; ++j) dst[b * kQk + j] = d * static_cast<float>(blk->qs[j]);
      }
      return;
    case WeightType::kQ4_0:
      for (int64_t b = 0; b < n / kQk; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(src + b * sizeof(BlockQ4_0));
        const float d = HalfToFloat(blk->d);
        for (int j = 0; j < kQk / 2; ++j) {
          dst[b * kQk + j] = d * static_cast<float>((blk->qs[j] & 15) - 8);
          dst[b * kQk + j + 16] = d * static_cast<float>((blk->qs[j] >> 4) - 8);
        }
      }
      return;
    case WeightType::kQ4_1:
      for (int64_t b = 0; b < n / kQk; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ4_1*>(src + b * sizeof(BlockQ4_1));
        const float d = HalfToFloat(blk->d), m = HalfToFloat(blk->m);
        for (int j = 0; j < kQk / 2; ++j) {
          dst[b * kQk + j] = d * static_cast<float>(blk->qs[j] & 15) + m;
          dst[b * kQk + j + 16] = d * static_cast<float>(blk->qs[j] >> 4) + m;
        }
      }
      return;
    case WeightType::kQ5_0:
      for (int64_t b = 0; b < n / kQk; ++b) {
        const auto* blk = reinterpret_cast<const BlockQ5_0*>(src + b * sizeof(BlockQ5_0));
        const float d = HalfToFloat(blk->d);
        uint32_t qh;
        std::memcpy(&qh, blk->qh, 4);
        for (int j = 0; j < kQk / 2; ++j) {
          const int lo = (blk->qs[j] & 15) | static_cast<int>(((qh >> j) & 1) << 4);
          const int hi = (blk->qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
          dst[b * kQk + j] = d * static_cast<float>(lo - 16);
          dst[b * kQk + j + 16] = d * static_cast<float>(hi - 16);
        }
      }
      return;
    default:
      return;  // rejected by validation before any item runs
  }
}

// A K/V source decoding each row of a tile from its cache type into f32 (any cache type, any
// head_dim): rows hdp apart, columns head_dim .. hdp zero.
struct DecodedRows {
  using T = float;
  static constexpr bool kDecodes = true;
  template <class V>  // VecF<N> of any N
  DELTASERVE_ALWAYS_INLINE static void Load(V& out, const float* src) {
    internal::LoadVec<sizeof(V) / sizeof(float)>(out, src);
  }
  DELTASERVE_ALWAYS_INLINE static void Decode(const AttentionProblem& p, const KvPool& pool,
                                              int64_t kvh, int64_t kb, int64_t nk, float* dst) {
    for (int64_t j = 0; j < nk; ++j) {
      float* row = dst + j * p.hdp;
      DecodeValues(pool.type, HeadRowOf(pool, p.kv, kb + j, kvh), p.head_dim, row);
      std::fill(row + p.head_dim, row + p.hdp, 0.0f);
    }
  }
};

// How an item reads K and V (PagedAttentionCpu picks one per call).
enum class KvRead {
  kDecoded,    // any types: rows decoded into an f32 tile
  kF32,        // f32 K and V, head_dim a multiple of 16: read in place
  kF16Avx512,  // f16 K and V, head_dim a multiple of 16, AVX-512: converted inside the tiles
  kF16Avx2,    // the same at the avx2 and avx_vnni levels, 8 values at a time
};

template <int kLanes>
DELTASERVE_ALWAYS_INLINE void AttendItemImpl(const AttentionProblem& p, KvRead read, int64_t t0,
                                             int64_t nt, int64_t kvh, int64_t key_begin,
                                             int64_t key_end, AttentionScratch& s, float* partial) {
  if (read == KvRead::kF32) {
    AttendItemBody<kLanes, F32Rows, F32Rows>(p, t0, nt, kvh, key_begin, key_end, s, partial);
  } else {
    AttendItemBody<kLanes, DecodedRows, DecodedRows>(p, t0, nt, kvh, key_begin, key_end, s,
                                                     partial);
  }
}
DELTASERVE_ISA_DISPATCH_LANES(void, AttendItem,
                        (const AttentionProblem& p, KvRead read, int64_t t0, int64_t nt,
                         int64_t kvh, int64_t key_begin, int64_t key_end, AttentionScratch& s,
                         float* partial),
                        (p, read, t0, nt, kvh, key_begin, key_end, s, partial))

// Combines the n_splits partial results of one (token block, kv head): every split's sum and
// accumulator rescaled to the overall max.
void MergePartials(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                   const float* partials, int64_t n_splits, int64_t split_stride) {
  const int64_t g = p.group, hd = p.head_dim, hdp = p.hdp;
  for (int64_t r = 0; r < nt * g; ++r) {
    float mx = kNegInf;
    for (int64_t sp = 0; sp < n_splits; ++sp) {
      mx = std::max(mx, partials[sp * split_stride + r * (2 + hdp)]);
    }
    float* o = p.out.data + (t0 + r / g) * p.out.stride + (kvh * g + r % g) * hd;
    std::fill(o, o + hd, 0.0f);
    float sum = 0.0f;
    for (int64_t sp = 0; sp < n_splits; ++sp) {
      const float* src = partials + sp * split_stride + r * (2 + hdp);
      if (src[0] == kNegInf) continue;  // the split held no key this row sees
      const float w = FastExp(src[0] - mx);
      sum += w * src[1];
      for (int64_t x = 0; x < hd; ++x) o[x] += w * src[2 + x];
    }
    const float inv = 1.0f / sum;
    for (int64_t x = 0; x < hd; ++x) o[x] *= inv;
  }
}

// The cheapest way to read this call's K and V (KvRead). f16 in place also wins in prefill, where
// an item converts each K/V row once per 4 query rows (8 times): 6 layers of a 512-token chunk at
// depth 3,584 took 1.14-1.23 s against 1.37-1.51 s decoding each tile into f32 once (2 threads,
// interleaved runs on a busy machine).
KvRead PickKvRead(const PagedKvView& kv, int64_t head_dim, CpuIsa isa) {
  if (head_dim % 16 != 0 || kv.k.type != kv.v.type) return KvRead::kDecoded;
  if (kv.k.type == WeightType::kF32) return KvRead::kF32;
#if defined(DELTASERVE_HAVE_X86_SIMD)
  if (kv.k.type == WeightType::kF16) {
    switch (isa) {
      case CpuIsa::kAvx512:
        return KvRead::kF16Avx512;
      case CpuIsa::kAvxVnni:
      case CpuIsa::kAvx2:
        return KvRead::kF16Avx2;
      case CpuIsa::kScalar:
        break;
    }
  }
#endif
  return KvRead::kDecoded;
}

// Checks a pool against the row length; kv_dim = n_head_kv * head_dim.
bool PoolValid(const KvPool& pool, int64_t kv_dim, int64_t head_dim) {
  if (!IsKvCacheType(pool.type) || pool.data == nullptr || pool.n_pages <= 0) return false;
  const BlockLayout layout = BlockLayoutOf(pool.type);
  return head_dim % layout.block_size == 0 && pool.row_bytes == RowBytes(pool.type, kv_dim);
}

// Checks the view for positions [0, n_positions) of n_head_kv heads of head_dim values: pools,
// page size, head split, and every page id used.
bool ViewValid(const PagedKvView& kv, int64_t n_head_kv, int64_t head_dim, int64_t n_positions) {
  const int64_t kv_dim = n_head_kv * head_dim;
  if (kv.n_head_kv != n_head_kv || !PoolValid(kv.k, kv_dim, head_dim) ||
      !PoolValid(kv.v, kv_dim, head_dim) || kv.page_tokens <= 0 || kv.n_pages < 0 ||
      kv.page_table == nullptr) {
    return false;
  }
  const int64_t pages_used = (n_positions + kv.page_tokens - 1) / kv.page_tokens;
  if (pages_used > kv.n_pages) return false;
  const int64_t limit = std::min(kv.k.n_pages, kv.v.n_pages);
  for (int64_t i = 0; i < pages_used; ++i) {
    if (kv.page_table[i] < 0 || kv.page_table[i] >= limit) return false;
  }
  return true;
}

// F32 rows into a pool row of `type` (f16 / bf16 vectorised here, the block types through
// quants.cc's QuantizeRow).
DELTASERVE_ALWAYS_INLINE KernelStatus EncodeRowImpl(WeightType type, const float* src, int64_t n,
                                                    uint8_t* dst) {
#if !defined(__clang__)
  if (type == WeightType::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      const _Float16 h = static_cast<_Float16>(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return KernelStatus::kOk;
  }
#endif
  if (type == WeightType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return KernelStatus::kOk;
  }
  return QuantizeRow(type, src, dst, n);
}
DELTASERVE_ISA_DISPATCH(KernelStatus, EncodeRow,
                        (WeightType type, const float* src, int64_t n, uint8_t* dst),
                        (type, src, n, dst))

}  // namespace

KernelStatus StoreKvCpu(const Mat& k, const Mat& v, const PagedKvView& kv, int64_t first_pos) {
  if (!k.Valid() || !v.Valid() || k.rows != v.rows || k.cols != v.cols || first_pos < 0 ||
      k.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (kv.n_head_kv <= 0 || k.cols % kv.n_head_kv != 0 ||
      !ViewValid(kv, kv.n_head_kv, k.cols / kv.n_head_kv, first_pos + k.rows)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t head_dim = k.cols / kv.n_head_kv;
  for (int64_t t = 0; t < k.rows; ++t) {
    for (int64_t h = 0; h < kv.n_head_kv; ++h) {
      auto* k_row = const_cast<uint8_t*>(HeadRowOf(kv.k, kv, first_pos + t, h));
      auto* v_row = const_cast<uint8_t*>(HeadRowOf(kv.v, kv, first_pos + t, h));
      KernelStatus s = EncodeRow(kv.k.type, k.data + t * k.stride + h * head_dim, head_dim, k_row);
      if (s == KernelStatus::kOk) {
        s = EncodeRow(kv.v.type, v.data + t * v.stride + h * head_dim, head_dim, v_row);
      }
      if (s != KernelStatus::kOk) return s;
    }
  }
  return KernelStatus::kOk;
}

namespace {

// PagedAttentionCpu at the kernel level `isa`.
KernelStatus PagedAttentionAt(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                              int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                              Mat& out, CpuIsa isa) {
  if (!q.Valid() || !out.Valid() || n_past < 0 || n_head <= 0 || n_head_kv <= 0 ||
      n_head % n_head_kv != 0 || q.cols % n_head != 0 || q.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t head_dim = q.cols / n_head;
  const int64_t n_tokens = q.rows;
  const int64_t n_keys = n_past + n_tokens;
  if (out.rows != n_tokens || out.cols != q.cols || !ViewValid(kv, n_head_kv, head_dim, n_keys)) {
    return KernelStatus::kInvalidArgument;
  }
  if (n_tokens == 0) return KernelStatus::kOk;
  const int64_t group = n_head / n_head_kv;
  const AttentionProblem p{q,    kv, out, n_past, n_tokens, group, head_dim, RoundUp(head_dim, 16),
                           scale};

  // Items: (token block, kv head, key split). Prefill has many token blocks; decode (and short
  // verification batches) split the keys so that every thread gets work.
  const int64_t block_tokens = n_tokens > 1 ? std::max<int64_t>(1, kRowsPerItem / group) : 1;
  const int64_t n_tblocks = (n_tokens + block_tokens - 1) / block_tokens;
  const int64_t flops = n_tokens * n_head * (n_past + (n_tokens + 1) / 2) * 4 * head_dim;
  const bool parallel = flops >= kParallelFlops && pool.size() > 1;
  int64_t n_splits = 1;
  if (parallel && n_tblocks * n_head_kv < 2 * pool.size()) {
    const int64_t want = (2 * pool.size() + n_tblocks * n_head_kv - 1) / (n_tblocks * n_head_kv);
    n_splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, n_keys / kMinSplitKeys));
  }
  const int64_t split_keys = RoundUp((n_keys + n_splits - 1) / n_splits, kKeyTile);
  n_splits = (n_keys + split_keys - 1) / split_keys;
  const int64_t rows_p = RoundUp(block_tokens * group, 4);
  const KvRead read = PickKvRead(kv, head_dim, isa);
  const int64_t split_stride = rows_p * (2 + p.hdp);
  std::vector<float> partials;
  if (n_splits > 1)
    partials.resize(static_cast<size_t>(n_tblocks * n_head_kv * n_splits * split_stride));
  const int64_t n_items = n_tblocks * n_head_kv * n_splits;

  // The last token blocks see the most keys: they go first so that the tail balances.
  auto run_item = [&](int64_t item, AttentionScratch& s) {
    const int64_t tb = n_tblocks - 1 - item / (n_head_kv * n_splits);
    const int64_t kvh = item / n_splits % n_head_kv;
    const int64_t sp = item % n_splits;
    const int64_t t0 = tb * block_tokens;
    float* partial = n_splits > 1
                         ? partials.data() + ((tb * n_head_kv + kvh) * n_splits + sp) * split_stride
                         : nullptr;
    const int64_t nt = std::min(block_tokens, n_tokens - t0);
    const int64_t key_begin = sp * split_keys, key_end = std::min(n_keys, (sp + 1) * split_keys);
#if defined(DELTASERVE_HAVE_X86_SIMD)
    if (read == KvRead::kF16Avx512) {
      internal::AttendItemF16Avx512(p, t0, nt, kvh, key_begin, key_end, s, partial);
      return;
    }
    if (read == KvRead::kF16Avx2) {
      internal::AttendItemF16Avx2(p, t0, nt, kvh, key_begin, key_end, s, partial);
      return;
    }
#endif
    AttendItem(isa, p, read, t0, nt, kvh, key_begin, key_end, s, partial);
  };
  if (!parallel) {
    AttentionScratch scratch;
    scratch.Reserve(rows_p, p.hdp);
    for (int64_t item = 0; item < n_items; ++item) run_item(item, scratch);
  } else {
    std::atomic<int64_t> next{0};
    pool.Run([&](int, int) {
      AttentionScratch s;
      s.Reserve(rows_p, p.hdp);
      for (int64_t item = next.fetch_add(1, std::memory_order_relaxed); item < n_items;
           item = next.fetch_add(1, std::memory_order_relaxed)) {
        run_item(item, s);
      }
    });
  }
  if (n_splits > 1) {
    for (int64_t tb = 0; tb < n_tblocks; ++tb) {
      const int64_t t0 = tb * block_tokens;
      for (int64_t kvh = 0; kvh < n_head_kv; ++kvh) {
        MergePartials(p, t0, std::min(block_tokens, n_tokens - t0), kvh,
                      partials.data() + (tb * n_head_kv + kvh) * n_splits * split_stride, n_splits,
                      split_stride);
      }
    }
  }
  return KernelStatus::kOk;
}

}  // namespace

KernelStatus PagedAttentionCpu(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                               int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                               Mat& out) {
  return PagedAttentionAt(pool, q, kv, n_past, n_head, n_head_kv, scale, out, ActiveIsa());
}

namespace internal {

KernelStatus PagedAttentionCpuIsa(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                                  int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                                  Mat& out, CpuIsa isa) {
  return PagedAttentionAt(pool, q, kv, n_past, n_head, n_head_kv, scale, out, ClampIsa(isa));
}

}  // namespace internal
}  // namespace deltaserve::kernels
