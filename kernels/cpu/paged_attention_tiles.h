// Internal to paged_attention*.cc: the work item of the paged attention kernel (one block of
// query tokens x the query heads of one kv head, against a range of keys) written once as an
// always-inline template over where K and V rows come from, so that paged_attention.cc
// (DELTASERVE_ISA_DISPATCH: AVX-512 / AVX2 / baseline; f32 rows read in place, other types
// decoded into an f32 tile) and paged_attention_avx512.cc (f16 rows converted inside the score and p·V tiles)
// compile the same arithmetic for their ISA. Everything here is always inlined: no out-of-line
// copy exists for the linker to share between code compiled for different ISAs (vec_math.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels::internal {

// 16 floats: one AVX-512 register (two AVX2 ones, four SSE ones in the other copies). Values of
// this type never cross a function boundary (only always-inline helpers take references), since
// passing one would change the calling convention between the copies.
typedef float V16 __attribute__((vector_size(64)));

inline constexpr int64_t kKeyTile = 32;  // keys per tile; a multiple of 4
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Everything the items of one call share.
struct AttentionProblem {
  const Mat& q;
  const PagedKvView& kv;
  Mat& out;
  int64_t n_past;
  int64_t n_tokens;
  int64_t group;     // query heads per kv head
  int64_t head_dim;
  int64_t hdp;       // head_dim rounded up to 16 (the vector loops' row length)
  float scale;
};

// One thread's buffers for one call (about 100 KiB at head_dim 256: from the allocator's
// arenas, not mmap; kept per call rather than thread_local so that nothing outlives the backend).
struct AttentionScratch {
  std::vector<float> q, acc;  // [rows][hdp]
  std::vector<float> kt, vt;  // [kKeyTile][hdp] decoded K / V rows of a tile (decoding sources)
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

// Kv head `head` of position `pos` (head-major pages, backend.h).
DELTASERVE_ALWAYS_INLINE const uint8_t* HeadRowOf(const KvPool& pool, const PagedKvView& kv,
                                                  int64_t pos, int64_t head) {
  return static_cast<const uint8_t*>(pool.data) + KvHeadOffset(pool, kv, pos, head);
}

// Keys from kb on that one tile covers: at most kKeyTile, not past `stop`, not past the end of
// kb's page (so the tile's rows of one head are contiguous in the pool).
DELTASERVE_ALWAYS_INLINE int64_t TileKeys(const PagedKvView& kv, int64_t kb, int64_t stop) {
  return std::min({kKeyTile, stop - kb, kv.page_tokens - kb % kv.page_tokens});
}

// Asks for rows [j0, j1) (each `row_bytes`) at `base` to be brought into the cache: the next
// tile's K and V, fetched while the current one is computed, since the f16 K/V of a long
// context stream from memory (50 MB per token at depth 4,096 on the 0.8B model).
DELTASERVE_ALWAYS_INLINE void PrefetchRows(const uint8_t* base, size_t row_bytes, int64_t j0,
                                           int64_t j1) {
  if (base == nullptr) return;
  const uint8_t* end = base + j1 * row_bytes;
  for (const uint8_t* a = base + j0 * row_bytes; a < end; a += 64) __builtin_prefetch(a, 0, 3);
}

// A K/V source reading f32 rows straight from the pool (head_dim a multiple of 16).
struct F32Rows {
  using T = float;
  static constexpr bool kDecodes = false;
  DELTASERVE_ALWAYS_INLINE static void Load(V16& out, const float* src) {
    std::memcpy(&out, src, sizeof(V16));
  }
};

// s[r][j] (row stride ss) = q[r]·k[j] for 4 query rows (stride hdp) and the 4 key rows k[0..3]:
// 16 vector accumulators over the head dimension, then a shuffle tree that turns the 16
// vectors into one vector of their 16 sums (15 adds instead of 16 horizontal reductions).
template <class Src>
DELTASERVE_ALWAYS_INLINE void ScoreTile4x4(const float* __restrict q,
                                           const typename Src::T* const* k, int64_t hdp,
                                           float* __restrict s, int64_t ss) {
  V16 a[16] = {};
  for (int64_t d = 0; d < hdp; d += 16) {
    V16 q0, q1, q2, q3, k0, k1, k2, k3;
    std::memcpy(&q0, q + d, sizeof(V16));
    std::memcpy(&q1, q + hdp + d, sizeof(V16));
    std::memcpy(&q2, q + 2 * hdp + d, sizeof(V16));
    std::memcpy(&q3, q + 3 * hdp + d, sizeof(V16));
    Src::Load(k0, k[0] + d);
    Src::Load(k1, k[1] + d);
    Src::Load(k2, k[2] + d);
    Src::Load(k3, k[3] + d);
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
  std::memcpy(out, &sums, sizeof(V16));
  for (int r = 0; r < 4; ++r) std::memcpy(s + r * ss, out + 4 * r, 4 * sizeof(float));
}

// acc[r][c0 .. c0 + 16 NV) += sum_j p[r][j] * v[j][c0 ..] for 4 rows (acc stride hdp, p stride
// kKeyTile) over nk keys (v rows `vs` elements apart, v already offset to c0): 4 x NV
// accumulators stay in registers across the keys.
template <int NV, class Src>
DELTASERVE_ALWAYS_INLINE void AccumulateTile(const float* __restrict p,
                                             const typename Src::T* __restrict v, int64_t vs,
                                             int64_t nk, int64_t hdp, float* __restrict acc) {
  V16 o[4][NV];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) std::memcpy(&o[r][c], acc + r * hdp + 16 * c, sizeof(V16));
  }
  for (int64_t j = 0; j < nk; ++j) {
    V16 vj[NV];
    for (int c = 0; c < NV; ++c) Src::Load(vj[c], v + j * vs + 16 * c);
    for (int r = 0; r < 4; ++r) {
      const float pr = p[r * kKeyTile + j];
      for (int c = 0; c < NV; ++c) o[r][c] += pr * vj[c];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) std::memcpy(acc + r * hdp + 16 * c, &o[r][c], sizeof(V16));
  }
}

// The rows of one tile of one source: decoded into `scratch` (rows hdp apart) by a decoding
// source, else read in place (rows head_dim apart inside the page).
template <class Src>
DELTASERVE_ALWAYS_INLINE const typename Src::T* TileRows(const AttentionProblem& p,
                                                         const KvPool& pool, int64_t kvh,
                                                         int64_t kb, int64_t nk, float* scratch,
                                                         int64_t* stride) {
  if constexpr (Src::kDecodes) {
    *stride = p.hdp;
    Src::Decode(p, pool, kvh, kb, nk, scratch);
    return scratch;
  } else {
    *stride = p.head_dim;
    return reinterpret_cast<const typename Src::T*>(HeadRowOf(pool, p.kv, kb, kvh));
  }
}

// One work item: tokens [t0, t0 + nt) times the query heads of kv head kvh against keys
// [key_begin, key_end). Rows r = ti * group + g. With `partial` null the item covers every key
// its tokens see and writes the normalised output; otherwise it stores, per row, its running max,
// sum and unnormalised accumulator ([rows][2 + hdp]) for the merge.
template <class KSrc, class VSrc>
DELTASERVE_ALWAYS_INLINE void AttendItemBody(const AttentionProblem& p, int64_t t0, int64_t nt,
                                             int64_t kvh, int64_t key_begin, int64_t key_end,
                                             AttentionScratch& s, float* partial) {
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
  const size_t k_head_bytes = p.kv.k.row_bytes / p.kv.n_head_kv;
  const size_t v_head_bytes = p.kv.v.row_bytes / p.kv.n_head_kv;
  // Row r sees keys up to and including p.n_past + t0 + r / g (padding rows: the last token's).
  const int64_t key_stop = std::min(key_end, p.n_past + t0 + nt);
  for (int64_t kb = key_begin, nk = 0; kb < key_stop; kb += nk) {
    nk = TileKeys(p.kv, kb, key_stop);
    const int64_t nk_p = RoundUp(nk, 4);
    // The next tile's bytes, prefetched 4 keys at a time while this tile's scores are computed.
    const int64_t next = kb + nk;
    const int64_t next_nk = next < key_stop ? TileKeys(p.kv, next, key_stop) : 0;
    const uint8_t* next_k = next_nk > 0 ? HeadRowOf(p.kv.k, p.kv, next, kvh) : nullptr;
    const uint8_t* next_v = next_nk > 0 ? HeadRowOf(p.kv.v, p.kv, next, kvh) : nullptr;
    int64_t ks = 0, vs = 0;
    const typename KSrc::T* kt = TileRows<KSrc>(p, p.kv.k, kvh, kb, nk, s.kt.data(), &ks);
    const typename VSrc::T* vt = TileRows<VSrc>(p, p.kv.v, kvh, kb, nk, s.vt.data(), &vs);
    for (int64_t j0 = 0; j0 < nk_p; j0 += 4) {
      // Padding keys (past nk) reuse the tile's last row: their scores are never used.
      const typename KSrc::T* k4[4];
      for (int j = 0; j < 4; ++j) k4[j] = kt + std::min<int64_t>(j0 + j, nk - 1) * ks;
      for (int64_t r0 = 0; r0 < rows_p; r0 += 4) {
        ScoreTile4x4<KSrc>(q + r0 * hdp, k4, hdp, sc + r0 * kKeyTile + j0, kKeyTile);
      }
      const int64_t j1 = std::min(j0 + 4, next_nk);
      PrefetchRows(next_k, k_head_bytes, j0, j1);
      PrefetchRows(next_v, v_head_bytes, j0, j1);
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
        AccumulateTile<4, VSrc>(pr, vt + c0, vs, nk, hdp, ar + c0);
      }
      switch ((hdp - c0) / 16) {
        case 3: AccumulateTile<3, VSrc>(pr, vt + c0, vs, nk, hdp, ar + c0); break;
        case 2: AccumulateTile<2, VSrc>(pr, vt + c0, vs, nk, hdp, ar + c0); break;
        case 1: AccumulateTile<1, VSrc>(pr, vt + c0, vs, nk, hdp, ar + c0); break;
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

#if defined(DELTASERVE_HAVE_X86_SIMD)
// AttendItemBody over f16 K and V read in place, each 16 values converted to f32 in a register
// (vcvtph2ps) inside the score and p·V tiles: no f32 copy of the tile is written and read back.
// paged_attention_avx512.cc, compiled for AVX-512; call only when ActiveIsa() is kAvx512.
void AttendItemF16Avx512(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                         int64_t key_begin, int64_t key_end, AttentionScratch& s, float* partial);
#endif

}  // namespace deltaserve::kernels::internal
