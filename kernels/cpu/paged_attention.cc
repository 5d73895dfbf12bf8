#include "kernels/cpu/paged_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels {
namespace {

using internal::FastExp;

// 16 floats: one AVX-512 register (two AVX2 ones, four SSE ones in the other clones). Values of
// this type never cross a function boundary (only always-inline helpers take pointers), since
// passing one would change the calling convention between the clones.
typedef float V16 __attribute__((vector_size(64)));
#define DS_LOAD16(v, p) std::memcpy(&(v), (p), sizeof(V16))
#define DS_STORE16(p, v) std::memcpy((p), &(v), sizeof(V16))

constexpr int64_t kKeyTile = 32;        // keys per tile; a multiple of 4
constexpr int64_t kRowsPerItem = 32;    // prefill: query rows (tokens x group heads) per item
constexpr int64_t kMinSplitKeys = 256;  // decode: fewest keys worth a split of their own
// Below this many multiply-adds (q·k plus p·v over all heads) the op stays on the calling thread.
constexpr int64_t kParallelFlops = 1 << 16;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Everything the items of one call share.
struct Problem {
  const Mat& q;
  const PagedKvView& kv;
  Mat& out;
  int64_t n_past;
  int64_t n_tokens;
  int64_t group;     // query heads per kv head
  int64_t head_dim;
  int64_t hdp;       // head_dim rounded up to 16 (the vector loops' row length)
  size_t k_head_bytes;  // bytes of one head inside a K row
  size_t v_head_bytes;
  float scale;
};

// One thread's buffers for one call (about 100 KiB at head_dim 256: from the allocator's
// arenas, not mmap; kept per call rather than thread_local so that nothing outlives the backend).
struct Scratch {
  std::vector<float> q, acc;  // [rows][hdp]
  std::vector<float> kt, vt;  // [kKeyTile][hdp] decoded K / V rows of a tile
  std::vector<float> s;       // [rows][kKeyTile] scores, then probabilities
  std::vector<float> m, l;    // [rows] running max and sum
  void Reserve(int64_t rows, int64_t hdp) {
    auto grow = [](std::vector<float>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    };
    grow(q, rows * hdp);
    grow(acc, rows * hdp);
    grow(kt, kKeyTile * hdp);
    grow(vt, kKeyTile * hdp);
    grow(s, rows * kKeyTile);
    grow(m, rows);
    grow(l, rows);
  }
};

inline const uint8_t* RowOf(const KvPool& pool, const PagedKvView& kv, int64_t pos) {
  const int64_t page = kv.page_table[pos / kv.page_tokens];
  return static_cast<const uint8_t*>(pool.data) +
         static_cast<size_t>(page * kv.page_tokens + pos % kv.page_tokens) * pool.row_bytes;
}

// IEEE half to float: F16C in the AVX2 / AVX-512 clones under g++. clang 14 has no _Float16 on
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
    case CpuIsa::kAvx512: return &HalfToFloatAvx512;
    case CpuIsa::kAvx2: return &HalfToFloatF16c;
    default: return &HalfToFloatScalar;
  }
}
const HalfRowFn g_half_to_float = PickHalfToFloat();

// Decodes the n values (n a multiple of the type's block size) at src into dst[0, n), with the
// arithmetic of quants.cc's DequantizeRow.
DELTASERVE_ALWAYS_INLINE void DecodeValues(WeightType type, const uint8_t* __restrict src,
                                           int64_t n, float* __restrict dst) {
  switch (type) {
    case WeightType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case WeightType::kF16:
      g_half_to_float(src, n, dst);
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

// s[r][j] (row stride ss) = q[r]·k[j] for 4 query rows (stride hdp) and 4 keys (stride hdp):
// 16 vector accumulators over the head dimension, then a shuffle tree that turns the 16
// vectors into one vector of their 16 sums (15 adds instead of 16 horizontal reductions).
DELTASERVE_ALWAYS_INLINE void ScoreTile4x4(const float* __restrict q, const float* __restrict k,
                                           int64_t hdp, float* __restrict s, int64_t ss) {
  V16 a[16] = {};
  for (int64_t d = 0; d < hdp; d += 16) {
    V16 q0, q1, q2, q3, k0, k1, k2, k3;
    DS_LOAD16(q0, q + d);
    DS_LOAD16(q1, q + hdp + d);
    DS_LOAD16(q2, q + 2 * hdp + d);
    DS_LOAD16(q3, q + 3 * hdp + d);
    DS_LOAD16(k0, k + d);
    DS_LOAD16(k1, k + hdp + d);
    DS_LOAD16(k2, k + 2 * hdp + d);
    DS_LOAD16(k3, k + 3 * hdp + d);
    a[0] += q0 * k0, a[1] += q0 * k1, a[2] += q0 * k2, a[3] += q0 * k3;
    a[4] += q1 * k0, a[5] += q1 * k1, a[6] += q1 * k2, a[7] += q1 * k3;
    a[8] += q2 * k0, a[9] += q2 * k1, a[10] += q2 * k2, a[11] += q2 * k3;
    a[12] += q3 * k0, a[13] += q3 * k1, a[14] += q3 * k2, a[15] += q3 * k3;
  }
  // Level 1: b[i] lanes 0-7 hold 8 partial sums of a[2i], lanes 8-15 those of a[2i+1].
  V16 b[8];
  for (int i = 0; i < 8; ++i) {
    b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                   26, 27, 28, 29, 30, 31);
  }
  // Level 2: 4 partials each of a[4i .. 4i+3].
  V16 c[4];
  for (int i = 0; i < 4; ++i) {
    c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18,
                                   19, 24, 25, 26, 27) +
           __builtin_shufflevector(b[2 * i], b[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  }
  // Level 3: 2 partials each of a[8i .. 8i+7].
  V16 e[2];
  for (int i = 0; i < 2; ++i) {
    e[i] = __builtin_shufflevector(c[2 * i], c[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20,
                                   21, 24, 25, 28, 29) +
           __builtin_shufflevector(c[2 * i], c[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  }
  // Level 4: lane i is the full sum of a[i] = q[i / 4]·k[i % 4].
  const V16 sums = __builtin_shufflevector(e[0], e[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                           24, 26, 28, 30) +
                   __builtin_shufflevector(e[0], e[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                           25, 27, 29, 31);
  float out[16];
  DS_STORE16(out, sums);
  for (int r = 0; r < 4; ++r) std::memcpy(s + r * ss, out + 4 * r, 4 * sizeof(float));
}

// acc[r][c0 .. c0 + 16 NV) += sum_j p[r][j] * v[j][c0 ..] for 4 rows (acc stride hdp, p stride
// kKeyTile) over nk keys (v stride hdp): 4 x NV accumulators stay in registers across the keys.
template <int NV>
DELTASERVE_ALWAYS_INLINE void AccumulateTile(const float* __restrict p, const float* __restrict v,
                                             int64_t nk, int64_t hdp, float* __restrict acc) {
  V16 o[4][NV];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) DS_LOAD16(o[r][c], acc + r * hdp + 16 * c);
  }
  for (int64_t j = 0; j < nk; ++j) {
    V16 vj[NV];
    for (int c = 0; c < NV; ++c) DS_LOAD16(vj[c], v + j * hdp + 16 * c);
    for (int r = 0; r < 4; ++r) {
      const float pr = p[r * kKeyTile + j];
      for (int c = 0; c < NV; ++c) o[r][c] += pr * vj[c];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) DS_STORE16(acc + r * hdp + 16 * c, o[r][c]);
  }
}

// Decodes K (or V) rows [kb, kb + nk) of kv head `kvh` into dst [kKeyTile][hdp], zero-padded to
// nk rounded up to 4 rows and to hdp columns.
DELTASERVE_ALWAYS_INLINE void DecodeTile(const Problem& p, const KvPool& pool, size_t head_bytes,
                                         int64_t kvh, int64_t kb, int64_t nk, float* dst) {
  for (int64_t j = 0; j < nk; ++j) {
    float* row = dst + j * p.hdp;
    DecodeValues(pool.type, RowOf(pool, p.kv, kb + j) + kvh * head_bytes, p.head_dim, row);
    std::fill(row + p.head_dim, row + p.hdp, 0.0f);
  }
  std::fill(dst + nk * p.hdp, dst + RoundUp(nk, 4) * p.hdp, 0.0f);
}

// One work item: tokens [t0, t0 + nt) times the query heads of kv head kvh against keys
// [key_begin, key_end). Rows r = ti * group + g. With `partial` null the item covers every key
// its tokens see and writes the normalised output; otherwise it stores, per row, its running max,
// sum and unnormalised accumulator ([rows][2 + hdp]) for MergePartials.
DELTASERVE_ISA_CLONES void AttendItem(const Problem& p, int64_t t0, int64_t nt, int64_t kvh,
                                      int64_t key_begin, int64_t key_end, Scratch& s,
                                      float* partial) {
  const int64_t hd = p.head_dim, hdp = p.hdp, g = p.group;
  const int64_t rows = nt * g, rows_p = RoundUp(rows, 4);
  float* q = s.q.data();
  float* acc = s.acc.data();
  float* sc = s.s.data();
  float* m = s.m.data();
  float* l = s.l.data();
  // Private, pre-scaled query copies (out may alias q).
  for (int64_t r = 0; r < rows_p; ++r) {
    float* qr = q + r * hdp;
    if (r < rows) {
      const float* src = p.q.data + (t0 + r / g) * p.q.stride + (kvh * g + r % g) * hd;
      for (int64_t x = 0; x < hd; ++x) qr[x] = src[x] * p.scale;
      std::fill(qr + hd, qr + hdp, 0.0f);
    } else {
      std::fill(qr, qr + hdp, 0.0f);
    }
    m[r] = kNegInf;
    l[r] = 0.0f;
  }
  std::fill(acc, acc + rows_p * hdp, 0.0f);
  // Row r sees keys up to and including p.n_past + t0 + r / g (padding rows: the last token's).
  const int64_t key_stop = std::min(key_end, p.n_past + t0 + nt);
  for (int64_t kb = key_begin; kb < key_stop; kb += kKeyTile) {
    const int64_t nk = std::min(kKeyTile, key_stop - kb), nk_p = RoundUp(nk, 4);
    DecodeTile(p, p.kv.k, p.k_head_bytes, kvh, kb, nk, s.kt.data());
    DecodeTile(p, p.kv.v, p.v_head_bytes, kvh, kb, nk, s.vt.data());
    for (int64_t r0 = 0; r0 < rows_p; r0 += 4) {
      for (int64_t j0 = 0; j0 < nk_p; j0 += 4) {
        ScoreTile4x4(q + r0 * hdp, s.kt.data() + j0 * hdp, hdp, sc + r0 * kKeyTile + j0,
                     kKeyTile);
      }
    }
    for (int64_t r = 0; r < rows_p; ++r) {
      const int64_t last = p.n_past + t0 + std::min(r / g, nt - 1);
      const int64_t visible = std::clamp<int64_t>(last - kb + 1, 0, nk);
      float* sr = sc + r * kKeyTile;
      if (visible == 0) {
        std::fill(sr, sr + nk_p, 0.0f);
        continue;
      }
      float tile_max = kNegInf;
      for (int64_t j = 0; j < visible; ++j) tile_max = std::max(tile_max, sr[j]);
      const float m_new = std::max(m[r], tile_max);
      float sum = 0.0f;
      for (int64_t j = 0; j < visible; ++j) {
        sr[j] = FastExp(sr[j] - m_new);
        sum += sr[j];
      }
      std::fill(sr + visible, sr + nk_p, 0.0f);
      if (m[r] != kNegInf && m_new != m[r]) {
        const float alpha = FastExp(m[r] - m_new);
        l[r] *= alpha;
        float* ar = acc + r * hdp;
        for (int64_t x = 0; x < hdp; ++x) ar[x] *= alpha;
      }
      l[r] += sum;
      m[r] = m_new;
    }
    for (int64_t r0 = 0; r0 < rows_p; r0 += 4) {
      const float* pr = sc + r0 * kKeyTile;
      float* ar = acc + r0 * hdp;
      int64_t c0 = 0;
      for (; c0 + 64 <= hdp; c0 += 64) {
        AccumulateTile<4>(pr, s.vt.data() + c0, nk_p, hdp, ar + c0);
      }
      switch ((hdp - c0) / 16) {
        case 3: AccumulateTile<3>(pr, s.vt.data() + c0, nk_p, hdp, ar + c0); break;
        case 2: AccumulateTile<2>(pr, s.vt.data() + c0, nk_p, hdp, ar + c0); break;
        case 1: AccumulateTile<1>(pr, s.vt.data() + c0, nk_p, hdp, ar + c0); break;
        default: break;
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (partial != nullptr) {
      float* dst = partial + r * (2 + hdp);
      dst[0] = m[r];
      dst[1] = l[r];
      std::copy_n(acc + r * hdp, hdp, dst + 2);
      continue;
    }
    float* o = p.out.data + (t0 + r / g) * p.out.stride + (kvh * g + r % g) * hd;
    const float inv = 1.0f / l[r];
    for (int64_t x = 0; x < hd; ++x) o[x] = acc[r * hdp + x] * inv;
  }
}

// Combines the n_splits partial results of one (token block, kv head): every split's sum and
// accumulator rescaled to the overall max.
void MergePartials(const Problem& p, int64_t t0, int64_t nt, int64_t kvh, const float* partials,
                   int64_t n_splits, int64_t split_stride) {
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

// Checks a pool against the row length; kv_dim = n_head_kv * head_dim.
bool PoolValid(const KvPool& pool, int64_t kv_dim, int64_t head_dim) {
  if (!IsKvCacheType(pool.type) || pool.data == nullptr || pool.n_pages <= 0) return false;
  const BlockLayout layout = BlockLayoutOf(pool.type);
  return head_dim % layout.block_size == 0 && pool.row_bytes == RowBytes(pool.type, kv_dim);
}

// Checks the view for positions [0, n_positions): pools, page size, and every page id used.
bool ViewValid(const PagedKvView& kv, int64_t kv_dim, int64_t head_dim, int64_t n_positions) {
  if (!PoolValid(kv.k, kv_dim, head_dim) || !PoolValid(kv.v, kv_dim, head_dim) ||
      kv.page_tokens <= 0 || kv.n_pages < 0 || kv.page_table == nullptr) {
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
DELTASERVE_ISA_CLONES KernelStatus EncodeRow(WeightType type, const float* src, int64_t n,
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

}  // namespace

KernelStatus StoreKvCpu(const Mat& k, const Mat& v, const PagedKvView& kv, int64_t first_pos) {
  if (!k.Valid() || !v.Valid() || k.rows != v.rows || k.cols != v.cols || first_pos < 0 ||
      k.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  // head_dim is not known here: whole rows are checked (PagedAttention checks the head split).
  if (!ViewValid(kv, k.cols, k.cols, first_pos + k.rows)) return KernelStatus::kInvalidArgument;
  for (int64_t t = 0; t < k.rows; ++t) {
    auto* k_row = const_cast<uint8_t*>(RowOf(kv.k, kv, first_pos + t));
    auto* v_row = const_cast<uint8_t*>(RowOf(kv.v, kv, first_pos + t));
    KernelStatus s = EncodeRow(kv.k.type, k.data + t * k.stride, k.cols, k_row);
    if (s == KernelStatus::kOk) s = EncodeRow(kv.v.type, v.data + t * v.stride, v.cols, v_row);
    if (s != KernelStatus::kOk) return s;
  }
  return KernelStatus::kOk;
}

KernelStatus PagedAttentionCpu(ThreadPool& pool, const Mat& q, const PagedKvView& kv,
                               int64_t n_past, int64_t n_head, int64_t n_head_kv, float scale,
                               Mat& out) {
  if (!q.Valid() || !out.Valid() || n_past < 0 || n_head <= 0 || n_head_kv <= 0 ||
      n_head % n_head_kv != 0 || q.cols % n_head != 0 || q.cols == 0) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t head_dim = q.cols / n_head;
  const int64_t n_tokens = q.rows;
  const int64_t n_keys = n_past + n_tokens;
  if (out.rows != n_tokens || out.cols != q.cols ||
      !ViewValid(kv, n_head_kv * head_dim, head_dim, n_keys)) {
    return KernelStatus::kInvalidArgument;
  }
  if (n_tokens == 0) return KernelStatus::kOk;
  const int64_t group = n_head / n_head_kv;
  const BlockLayout kl = BlockLayoutOf(kv.k.type), vl = BlockLayoutOf(kv.v.type);
  const Problem p{q,
                  kv,
                  out,
                  n_past,
                  n_tokens,
                  group,
                  head_dim,
                  RoundUp(head_dim, 16),
                  static_cast<size_t>(head_dim / kl.block_size * kl.block_bytes),
                  static_cast<size_t>(head_dim / vl.block_size * vl.block_bytes),
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
  const int64_t split_stride = rows_p * (2 + p.hdp);
  std::vector<float> partials;
  if (n_splits > 1) partials.resize(static_cast<size_t>(n_tblocks * n_head_kv * n_splits * split_stride));
  const int64_t n_items = n_tblocks * n_head_kv * n_splits;

  // The last token blocks see the most keys: they go first so that the tail balances.
  auto run_item = [&](int64_t item, Scratch& s) {
    const int64_t tb = n_tblocks - 1 - item / (n_head_kv * n_splits);
    const int64_t kvh = item / n_splits % n_head_kv;
    const int64_t sp = item % n_splits;
    const int64_t t0 = tb * block_tokens;
    float* partial = n_splits > 1
                         ? partials.data() + ((tb * n_head_kv + kvh) * n_splits + sp) * split_stride
                         : nullptr;
    AttendItem(p, t0, std::min(block_tokens, n_tokens - t0), kvh, sp * split_keys,
               std::min(n_keys, (sp + 1) * split_keys), s, partial);
  };
  if (!parallel) {
    Scratch scratch;
    scratch.Reserve(rows_p, p.hdp);
    for (int64_t item = 0; item < n_items; ++item) run_item(item, scratch);
  } else {
    std::atomic<int64_t> next{0};
    pool.Run([&](int, int) {
      Scratch s;
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
                      partials.data() + (tb * n_head_kv + kvh) * n_splits * split_stride,
                      n_splits, split_stride);
      }
    }
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
