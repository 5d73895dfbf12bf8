// Internal to paged_attention*.cc: the work item of the paged attention kernel (one block of
// query tokens x the query heads of one kv head, against a range of keys) written once as an
// always-inline template over the vector width (kLanes floats: 16 for AVX-512, 8 for AVX2 and
// AVX-VNNI, 4 for baseline x86-64) and over where K and V rows come from. paged_attention.cc
// compiles it per level (DELTASERVE_ISA_DISPATCH_LANES: f32 rows read in place, other types
// decoded into an f32 tile); paged_attention_avx512.cc and paged_attention_avx2.cc compile it
// over f16 rows converted inside the score and p·V tiles. The register tiles are sized in
// vectors (TileShape), so that each width's tiles fit its register file. Everything here is
// always inlined: no out-of-line copy exists for the linker to share between code compiled for
// different ISAs (vec_math.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels::internal {

inline constexpr int64_t kKeyTile = 32;  // keys per tile; a multiple of 4
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The register tiles of a width of kLanes floats:
// - scores: kScoreRows query rows x kScoreKeys keys, kLanes accumulators of kLanes floats (one
//   per (row, key)) reduced by a shuffle tree into one vector of the kLanes scores: 4 x 4 at 16
//   lanes (16 + 4 key + 1 query zmm), 2 x 4 at 8 (8 + 4 + 1 ymm), 4 x 1 at 4;
// - p·V: 4 query rows x kAccVecs vectors of columns, 4 kAccVecs accumulators plus kAccVecs V
//   vectors and a broadcast probability: 16 + 4 + 1 zmm at 16 lanes, 12 + 3 + 1 ymm at 8 (the
//   16 there are; 4 x 2 took 12% longer), 8 + 2 + 1 xmm at 4.
// The AVX-512 shapes (4 rows x 4 keys, 4 rows x 64 columns) compiled for AVX2 needed 32 + 8 ymm
// of the 16 there are: the AVX2 copy spilled its accumulators to the stack at every key and was
// 45% of a 3,000-token prefill of the 0.8B model on Zen 3. At 8 lanes 2 x 4 beats 4 x 2: g++
// folds each query load into the FMAs that use it, so 4 x 2 read 8 query and 2 key vectors per 8
// FMAs and waited on loads; 2 x 4 reads 2 + 4 (one thread, 512 tokens at depth 2,488: 155 ->
// 125 ms, decode at depth 3,000: 0.34 -> 0.30 ms). At 16 lanes 2 x 8 was 5% slower than 4 x 4.
template <int kLanes>
struct TileShape {
  static_assert(kLanes == 4 || kLanes == 8 || kLanes == 16);
  static constexpr int kScoreRows = kLanes == 8 ? 2 : 4;
  static constexpr int kScoreKeys = kLanes / kScoreRows;
  // Key tiles are padded to a multiple of 4 keys and row blocks to a multiple of 4 rows.
  static_assert(4 % kScoreKeys == 0 && 4 % kScoreRows == 0);
  static constexpr int kAccVecs = kLanes == 16 ? 4 : kLanes == 8 ? 3 : 2;
};

// Everything the items of one call share.
struct AttentionProblem {
  const Mat& q;
  const PagedKvView& kv;
  Mat& out;
  int64_t n_past;
  int64_t n_tokens;
  int64_t group;     // query heads per kv head
  int64_t head_dim;
  int64_t hdp;       // head_dim rounded up to 16 (the vector loops' row length at every width)
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
  template <class V>  // VecF<N> of any N
  DELTASERVE_ALWAYS_INLINE static void Load(V& out, const float* src) {
    LoadVec<sizeof(V) / sizeof(float)>(out, src);
  }
};

// The shuffle tree that sums N vectors of N lanes each into one vector whose lane i is the sum
// of vector i's lanes (N - 1 adds instead of N horizontal reductions). Before level k each
// vector holds 2^k accumulators' partial sums, B = N / 2^k consecutive lanes each; a level
// pairs the vectors 2i and 2i + 1 into one holding 2^(k+1) accumulators of B / 2 partials (the
// sums of partials p and p + B / 2). TreeLane says where result lane `lane` takes its first
// (hi: second) addend from in the 2N lanes of the pair.
constexpr int TreeLane(int n, int level, bool hi, int lane) {
  const int slots = 1 << level, width = n >> level, half = width / 2;
  const int a = lane / half, p = lane % half;
  const int first = a < slots ? a * width + p : n + (a - slots) * width + p;
  return first + (hi ? half : 0);
}
template <int N, int kLevel, size_t... I>
DELTASERVE_ALWAYS_INLINE void TreePair(VecF<N>& out, const VecF<N>& x, const VecF<N>& y,
                                       std::index_sequence<I...>) {
  out = __builtin_shufflevector(x, y, TreeLane(N, kLevel, false, I)...) +
        __builtin_shufflevector(x, y, TreeLane(N, kLevel, true, I)...);
}
template <int N, int kLevel = 0, int kCount = N>
DELTASERVE_ALWAYS_INLINE void TreeSum(VecF<N>* a) {
  for (int i = 0; i < kCount / 2; ++i) {
    TreePair<N, kLevel>(a[i], a[2 * i], a[2 * i + 1], std::make_index_sequence<N>());
  }
  if constexpr (kCount > 2) TreeSum<N, kLevel + 1, kCount / 2>(a);
}

// s[r][j] (row stride ss) = q[r]·k[j] for kScoreRows query rows (stride hdp) and the kScoreKeys
// key rows k[j]: one vector accumulator per (row, key) over the head dimension, then the shuffle
// tree.
template <int L, class Src>
DELTASERVE_ALWAYS_INLINE void ScoreTile(const float* __restrict q,
                                        const typename Src::T* const* k, int64_t hdp,
                                        float* __restrict s, int64_t ss) {
  constexpr int kKeys = TileShape<L>::kScoreKeys;
  constexpr int kRows = TileShape<L>::kScoreRows;
  VecF<L> a[kRows * kKeys] = {};
  for (int64_t d = 0; d < hdp; d += L) {
    VecF<L> kv[kKeys];
    for (int j = 0; j < kKeys; ++j) Src::Load(kv[j], k[j] + d);
    for (int r = 0; r < kRows; ++r) {
      VecF<L> qr;
      LoadVec<L>(qr, q + r * hdp + d);
      for (int j = 0; j < kKeys; ++j) a[r * kKeys + j] += qr * kv[j];
    }
  }
  TreeSum<L>(a);  // lane r * kKeys + j of a[0]: q[r]·k[j]
  float out[L];
  StoreVec<L>(out, a[0]);
  for (int r = 0; r < kRows; ++r) std::memcpy(s + r * ss, out + kKeys * r, kKeys * sizeof(float));
}

// acc[r][0 .. NV L) += sum_j p[r][j] * v[j][0 ..] for 4 rows (acc stride hdp, p stride kKeyTile)
// over nk keys (v rows `vs` elements apart, v and acc already offset to the first column): 4 x NV
// accumulators stay in registers across the keys.
template <int L, int NV, class Src>
DELTASERVE_ALWAYS_INLINE void AccumulateTile(const float* __restrict p,
                                             const typename Src::T* __restrict v, int64_t vs,
                                             int64_t nk, int64_t hdp, float* __restrict acc) {
  VecF<L> o[4][NV];
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) LoadVec<L>(o[r][c], acc + r * hdp + L * c);
  }
  for (int64_t j = 0; j < nk; ++j) {
    VecF<L> vj[NV];
    for (int c = 0; c < NV; ++c) Src::Load(vj[c], v + j * vs + L * c);
    for (int r = 0; r < 4; ++r) {
      const float pr = p[r * kKeyTile + j];
      for (int c = 0; c < NV; ++c) o[r][c] += pr * vj[c];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < NV; ++c) StoreVec<L>(acc + r * hdp + L * c, o[r][c]);
  }
}

// AccumulateTile over the columns [c0, hdp): tiles of NV vectors, then the rest in narrower ones.
template <int L, class Src, int NV = TileShape<L>::kAccVecs>
DELTASERVE_ALWAYS_INLINE void AccumulateColumns(const float* __restrict p,
                                                const typename Src::T* __restrict v, int64_t vs,
                                                int64_t nk, int64_t hdp, int64_t c0,
                                                float* __restrict acc) {
  for (; c0 + NV * L <= hdp; c0 += NV * L) {
    AccumulateTile<L, NV, Src>(p, v + c0, vs, nk, hdp, acc + c0);
  }
  if constexpr (NV > 1) {
    if (c0 < hdp) AccumulateColumns<L, Src, NV - 1>(p, v, vs, nk, hdp, c0, acc);
  }
}

// One row of a tile's scores (sr[0, kKeyTile)), of which the first `visible` count: the later
// ones up to n (a multiple of L) set to -inf, returns the max of sr[0, n). Written over vectors
// since g++ vectorises no float max or sum reduction without -ffast-math: the scalar loops
// were 17% of the AVX2 item at depth 3,000.
template <int L>
DELTASERVE_ALWAYS_INLINE float MaskedRowMax(float* __restrict sr, int64_t visible, int64_t n) {
  for (int64_t j = visible; j < n; ++j) sr[j] = kNegInf;
  VecF<L> mx;
  LoadVec<L>(mx, sr);
  for (int64_t j = L; j < n; j += L) {
    VecF<L> x;
    LoadVec<L>(x, sr + j);
    mx = mx > x ? mx : x;
  }
  float out = mx[0];
  for (int i = 1; i < L; ++i) out = std::max(out, mx[i]);
  return out;
}

// sr[j] = e^(sr[j] - m) for j < n (a multiple of L; -inf gives 0); returns their sum.
template <int L>
DELTASERVE_ALWAYS_INLINE float ExpRowSum(float* __restrict sr, int64_t n, float m) {
  for (int64_t j = 0; j < n; ++j) sr[j] = FastExp(sr[j] - m);
  VecF<L> sum = {};
  for (int64_t j = 0; j < n; j += L) {
    VecF<L> x;
    LoadVec<L>(x, sr + j);
    sum += x;
  }
  float out = 0.0f;
  for (int i = 0; i < L; ++i) out += sum[i];
  return out;
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

// One work item with vectors of L floats: tokens [t0, t0 + nt) times the query heads of kv
// head kvh against keys [key_begin, key_end). Rows r = ti * group + g. With `partial` null the
// item covers every key its tokens see and writes the normalised output; otherwise it stores,
// per row, its running max, sum and unnormalised accumulator ([rows][2 + hdp]) for the merge.
template <int L, class KSrc, class VSrc>
DELTASERVE_ALWAYS_INLINE void AttendItemBody(const AttentionProblem& p, int64_t t0, int64_t nt,
                                             int64_t kvh, int64_t key_begin, int64_t key_end,
                                             AttentionScratch& s, float* partial) {
  constexpr int kKeys = TileShape<L>::kScoreKeys;
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
    const int64_t nk_v = RoundUp(nk, L);  // <= kKeyTile, a multiple of every L
    // The next tile's bytes, prefetched a few keys at a time while this tile's scores are
    // computed.
    const int64_t next = kb + nk;
    const int64_t next_nk = next < key_stop ? TileKeys(p.kv, next, key_stop) : 0;
    const uint8_t* next_k = next_nk > 0 ? HeadRowOf(p.kv.k, p.kv, next, kvh) : nullptr;
    const uint8_t* next_v = next_nk > 0 ? HeadRowOf(p.kv.v, p.kv, next, kvh) : nullptr;
    int64_t ks = 0, vs = 0;
    const typename KSrc::T* kt = TileRows<KSrc>(p, p.kv.k, kvh, kb, nk, s.kt.data(), &ks);
    const typename VSrc::T* vt = TileRows<VSrc>(p, p.kv.v, kvh, kb, nk, s.vt.data(), &vs);
    for (int64_t j0 = 0; j0 < nk_p; j0 += kKeys) {
      // Padding keys (past nk) reuse the tile's last row: their scores are never used.
      const typename KSrc::T* kj[kKeys];
      for (int j = 0; j < kKeys; ++j) kj[j] = kt + std::min<int64_t>(j0 + j, nk - 1) * ks;
      for (int64_t r0 = 0; r0 < rows_p; r0 += TileShape<L>::kScoreRows) {
        ScoreTile<L, KSrc>(q + r0 * hdp, kj, hdp, sc + r0 * kKeyTile + j0, kKeyTile);
      }
      const int64_t j1 = std::min(j0 + kKeys, next_nk);
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
      const float m_new = std::max(m[r], MaskedRowMax<L>(sr, visible, nk_v));
      const float sum = ExpRowSum<L>(sr, nk_v, m_new);
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
      AccumulateColumns<L, VSrc>(sc + r0 * kKeyTile, vt, vs, nk, hdp, 0, acc + r0 * hdp);
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
// AttendItemBody over f16 K and V read in place, each vector of values converted to f32 in a
// register (vcvtph2ps) inside the score and p·V tiles: no f32 copy of the tile is written and
// read back. Call only at the level named: paged_attention_avx512.cc (16 lanes, AVX-512 flags)
// when ActiveIsa() is kAvx512, paged_attention_avx2.cc (8 lanes, AVX2 + F16C flags) when it is
// kAvx2 or kAvxVnni.
void AttendItemF16Avx512(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                         int64_t key_begin, int64_t key_end, AttentionScratch& s, float* partial);
void AttendItemF16Avx2(const AttentionProblem& p, int64_t t0, int64_t nt, int64_t kvh,
                       int64_t key_begin, int64_t key_end, AttentionScratch& s, float* partial);
#endif

}  // namespace deltaserve::kernels::internal
