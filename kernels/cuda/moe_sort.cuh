// Expert grouping of the CUDA MoE FFN (moe_ffn.cu), as DS_HOST_DEVICE functions the CPU unit
// test replays (tests/kernels/cuda_dequant_test.cc): the scratch layout (MoeFfnScratchBytes is
// its total, exactly), the plan one thread builds from the per-expert counts, how a position
// finds its activation row, weight row and output row, the GEMV/GEMM rule, SwiGLU and the
// combine of a token's k rows.
//
// The T * k assignments a = t * k + j (token t's j-th expert ids[a], weight weights[a]) are
// counting-sorted by expert into "positions" p = 0 .. n_valid - 1: expert e owns positions
// [offsets[e], offsets[e + 1]); order[p] is the assignment at p and inv[a] its position, or
// MoeUnplaced(id) for an id outside [0, n_expert): kMoeSkipped for a negative id (an expert the
// other tier computes, worker/engine/expert_tiers.h: it adds nothing), kMoeBadId for one past
// the stacks (the token's row becomes NaN). Per position the FFN writes one row of gate, up (ff
// floats) and down (n_embd floats); y[t] = sum_j weights[t][j] * down[inv[t * k + j]] in j
// order.
// The expert GEMMs run over work items built from the counts:
// - GEMV (few tokens): one item per non-empty expert, active[0 .. n_active);
// - GEMM: tiles of up to kGemmTileRows positions of one expert, (tile_expert[i],
//   tile_start[i]) for i < n_tiles; at most MoeMaxTiles of them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// Byte offsets of the arrays in the MoE scratch area (each 256-byte aligned) and its size.
struct MoeScratchLayout {
  size_t counts = 0;       // int32 [n_expert]: assignments per expert
  size_t offsets = 0;      // int32 [n_expert + 1]: first position of each expert
  size_t fill = 0;         // int32 [n_expert]: next free position while placing
  size_t order = 0;        // int32 [n_assign]: assignment at each position
  size_t inv = 0;          // int32 [n_assign]: position of each assignment, or MoeUnplaced
  size_t active = 0;       // int32 [n_expert]: the non-empty experts, ascending
  size_t tile_expert = 0;  // int32 [max_tiles]
  size_t tile_start = 0;   // int32 [max_tiles]
  size_t header = 0;       // int32 [4]: n_active, n_tiles, n_valid (positions), unused
  size_t gate = 0;         // f32 [n_assign][ff]: gate rows, then silu(gate) * up
  size_t up = 0;           // f32 [n_assign][ff]
  size_t down = 0;         // f32 [n_assign][n_embd], over up's bytes: up is dead after SwiGLU
  size_t total = 0;
};

// inv[a] of an assignment that has no position: a negative id is skipped, an id >= n_expert is
// an error the device cannot return (NaN instead).
inline constexpr int32_t kMoeSkipped = -1;
inline constexpr int32_t kMoeBadId = -2;
DS_HOST_DEVICE DS_INLINE int32_t MoeUnplaced(int32_t id) {
  return id < 0 ? kMoeSkipped : kMoeBadId;
}

// Tiles of at most `tile_rows` positions over experts with n_assign assignments in all: each
// non-empty expert (at most min(n_assign, n_expert)) has ceil(c_e / tile_rows) <=
// floor(c_e / tile_rows) + 1 tiles, and the floors sum to at most n_assign / tile_rows.
DS_HOST_DEVICE DS_INLINE int64_t MoeMaxTiles(int64_t n_assign, int64_t n_expert,
                                             int64_t tile_rows) {
  const int64_t non_empty = n_assign < n_expert ? n_assign : n_expert;
  return non_empty + n_assign / tile_rows;
}

DS_HOST_DEVICE DS_INLINE MoeScratchLayout MoeLayout(int64_t n_tokens, int64_t k, int64_t n_expert,
                                                    int64_t n_embd, int64_t ff, int64_t tile_rows) {
  const auto n_assign = static_cast<size_t>(n_tokens * k);
  const auto e = static_cast<size_t>(n_expert);
  const auto tiles = static_cast<size_t>(MoeMaxTiles(n_tokens * k, n_expert, tile_rows));
  MoeScratchLayout l;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t here = at;
    at += (bytes + 255) / 256 * 256;
    return here;
  };
  l.counts = take(e * 4);
  l.offsets = take((e + 1) * 4);
  l.fill = take(e * 4);
  l.order = take(n_assign * 4);
  l.inv = take(n_assign * 4);
  l.active = take(e * 4);
  l.tile_expert = take(tiles * 4);
  l.tile_start = take(tiles * 4);
  l.header = take(4 * 4);
  l.gate = take(n_assign * static_cast<size_t>(ff) * 4);
  const size_t up_bytes = n_assign * static_cast<size_t>(ff) * 4;
  const size_t down_bytes = n_assign * static_cast<size_t>(n_embd) * 4;
  l.up = take(up_bytes > down_bytes ? up_bytes : down_bytes);
  l.down = l.up;
  l.total = at;
  return l;
}

// The plan from counts[0 .. n_expert): offsets (exclusive prefix sums, offsets[n_expert] =
// n_valid), fill = offsets[0 .. n_expert), the active experts, the GEMM tiles of `tile_rows`
// positions and header = {n_active, n_tiles, n_valid}. The sort kernel builds it with a whole
// block: thread i of n takes the experts [MoePlanChunk(n_expert, n, i), MoePlanChunk(.., i + 1)),
// sums what they add (MoePlanChunkSums), the block scans those sums, and each thread writes its
// experts' part from what the experts below its chunk add (MoePlanChunkWrite); the thread with
// the totals writes the rest (MoePlanFinish). A sequential loop would cost a global-memory read
// per expert on one thread: ~1 ms a layer for an expert arena of thousands of slots.

// What a range of experts adds to the plan.
struct MoePlanSums {
  int32_t positions;
  int32_t active;
  int32_t tiles;
};

// The first expert of thread i's chunk (i = n_threads: n_expert, the end of the last chunk).
DS_HOST_DEVICE DS_INLINE int32_t MoePlanChunk(int32_t n_expert, int32_t n_threads, int32_t i) {
  const int64_t per = (static_cast<int64_t>(n_expert) + n_threads - 1) / n_threads;
  const int64_t at = per * i;
  return at < n_expert ? static_cast<int32_t>(at) : n_expert;
}

DS_HOST_DEVICE DS_INLINE MoePlanSums MoePlanChunkSums(const int32_t* counts, int32_t begin,
                                                      int32_t end, int32_t tile_rows) {
  MoePlanSums s{0, 0, 0};
  for (int32_t e = begin; e < end; ++e) {
    const int32_t c = counts[e];
    s.positions += c;
    if (c > 0) {
      ++s.active;
      s.tiles += (c + tile_rows - 1) / tile_rows;
    }
  }
  return s;
}

// Experts [begin, end)'s offsets, fill, active entries and tiles; `below`: what the experts
// before `begin` add (the exclusive prefix of the chunk sums).
DS_HOST_DEVICE DS_INLINE void MoePlanChunkWrite(const int32_t* counts, int32_t begin, int32_t end,
                                                int32_t tile_rows, MoePlanSums below,
                                                int32_t* offsets, int32_t* fill, int32_t* active,
                                                int32_t* tile_expert, int32_t* tile_start) {
  int32_t pos = below.positions;
  int32_t n_active = below.active;
  int32_t n_tiles = below.tiles;
  for (int32_t e = begin; e < end; ++e) {
    offsets[e] = pos;
    fill[e] = pos;
    const int32_t c = counts[e];
    if (c > 0) {
      active[n_active++] = e;
      for (int32_t s = 0; s < c; s += tile_rows) {
        tile_expert[n_tiles] = e;
        tile_start[n_tiles] = pos + s;
        ++n_tiles;
      }
    }
    pos += c;
  }
}

// offsets[n_expert] and the header, from the sums over every expert.
DS_HOST_DEVICE DS_INLINE void MoePlanFinish(MoePlanSums total, int32_t n_expert, int32_t* offsets,
                                            int32_t* header) {
  offsets[n_expert] = total.positions;
  header[0] = total.active;
  header[1] = total.tiles;
  header[2] = total.positions;
  header[3] = 0;
}

// The same plan on one thread (the reference the tests hold the block's plan to).
DS_HOST_DEVICE DS_INLINE void MoePlan(const int32_t* counts, int32_t n_expert, int32_t tile_rows,
                                      int32_t* offsets, int32_t* fill, int32_t* active,
                                      int32_t* tile_expert, int32_t* tile_start, int32_t* header) {
  const MoePlanSums total = MoePlanChunkSums(counts, 0, n_expert, tile_rows);
  MoePlanChunkWrite(counts, 0, n_expert, tile_rows, MoePlanSums{0, 0, 0}, offsets, fill, active,
                    tile_expert, tile_start);
  MoePlanFinish(total, n_expert, offsets, header);
}

// Pointers into the scratch area (device pointers in the kernels, host ones in the CPU replay).
struct MoePlanPtrs {
  int32_t* counts;
  int32_t* offsets;
  int32_t* fill;
  int32_t* order;
  int32_t* inv;
  int32_t* active;
  int32_t* tile_expert;
  int32_t* tile_start;
  int32_t* header;
};

inline MoePlanPtrs PlanPtrs(void* scratch, const MoeScratchLayout& l) {
  auto at = [scratch](size_t off) {
    return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(scratch) + off);
  };
  return {at(l.counts), at(l.offsets),     at(l.fill),       at(l.order), at(l.inv),
          at(l.active), at(l.tile_expert), at(l.tile_start), at(l.header)};
}

// One expert product over positions, matrix z = 0 .. n_mats - 1 (gate and up, or down).
// Position p's activation row: x + (by_token ? order[p] / k : p) * x_stride; its output row:
// y[z] + p * y_stride.
struct MoeProduct {
  const uint8_t* w[2];  // expert 0 of each stack
  size_t row_bytes;
  size_t matrix_bytes;  // bytes between experts: the stack's MatrixStride()
  int64_t in;
  int64_t out;
  const float* x;
  int64_t x_stride;
  bool by_token;
  int64_t k;
  float* y[2];
  int64_t y_stride;
};

// (Selects rather than indexes the two-entry arrays, so the kernels keep them in registers.)
DS_HOST_DEVICE DS_INLINE const uint8_t* MoeWeightRow(const MoeProduct& m, int z, int32_t e,
                                                     int64_t o) {
  return (z == 0 ? m.w[0] : m.w[1]) + static_cast<size_t>(e) * m.matrix_bytes +
         static_cast<size_t>(o) * m.row_bytes;
}
DS_HOST_DEVICE DS_INLINE float* MoeOutput(const MoeProduct& m, int z) {
  return z == 0 ? m.y[0] : m.y[1];
}
DS_HOST_DEVICE DS_INLINE const float* MoeActivationRow(const MoeProduct& m, const int32_t* order,
                                                       int64_t p) {
  const int64_t row = m.by_token ? order[p] / m.k : p;
  return m.x + row * m.x_stride;
}

// True when every expert row the product reads starts on a 16-byte boundary (the first
// `n_mats` stacks, their rows and the distance between experts): what the Q4_K fast GEMV lane
// (gemv_fast.cuh GemvFastEligible) needs of each row.
DS_HOST_DEVICE DS_INLINE bool MoeRowsAligned16(const MoeProduct& m, int n_mats) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(m.w[0]) | static_cast<uintptr_t>(m.row_bytes) |
                   static_cast<uintptr_t>(m.matrix_bytes);
  if (n_mats == 2) bits |= reinterpret_cast<uintptr_t>(m.w[1]);
  return (bits & 15) == 0;
}

// The expert products as GEMV items (few positions per expert: decode, small batches) or as GEMM
// tiles. GEMV while T <= kGemvMaxRows-ish batches or at most 4 positions per expert on average;
// an expert with more positions runs its GEMV kGemvMaxRows at a time (its weights then come
// from L2 for the later passes).
DS_HOST_DEVICE DS_INLINE bool MoeUsesGemv(int64_t n_tokens, int64_t k, int64_t n_expert) {
  return n_tokens <= 8 || n_tokens * k <= 4 * n_expert;
}

// Gate and up (z = 0, 1) of x's tokens, into gate_out / up_out rows [position][ff]. The caller
// runs them in one launch only when both stacks have the same type and row_bytes.
inline MoeProduct MoeGateUpProduct(const WeightView& gate, const WeightView& up, const Mat& x,
                                   int64_t k, float* gate_out, float* up_out) {
  MoeProduct m{};
  m.w[0] = static_cast<const uint8_t*>(gate.data);
  m.w[1] = static_cast<const uint8_t*>(up.data);
  m.row_bytes = gate.row_bytes;
  m.matrix_bytes = gate.MatrixStride();
  m.in = x.cols;
  m.out = gate.out;
  m.x = x.data;
  m.x_stride = x.stride;
  m.by_token = true;
  m.k = k;
  m.y[0] = gate_out;
  m.y[1] = up_out;
  m.y_stride = gate.out;
  return m;
}

// The same product with only `up` (z = 0 writes up_out): for an up stack whose type or
// row_bytes differ from gate's.
inline MoeProduct MoeUpOnlyProduct(const MoeProduct& gate_up, const WeightView& up) {
  MoeProduct m = gate_up;
  m.w[0] = gate_up.w[1];
  m.row_bytes = up.row_bytes;
  m.matrix_bytes = up.MatrixStride();
  m.y[0] = gate_up.y[1];
  return m;
}

// Down over positions: h rows [position][ff] in, down_out rows [position][n_embd] out.
inline MoeProduct MoeDownProduct(const WeightView& down, const float* h, int64_t k,
                                 float* down_out) {
  MoeProduct m{};
  m.w[0] = static_cast<const uint8_t*>(down.data);
  m.w[1] = nullptr;
  m.row_bytes = down.row_bytes;
  m.matrix_bytes = down.MatrixStride();
  m.in = down.in;
  m.out = down.out;
  m.x = h;
  m.x_stride = down.in;
  m.by_token = false;
  m.k = k;
  m.y[0] = down_out;
  m.y[1] = nullptr;
  m.y_stride = down.out;
  return m;
}

// silu(g) * u, as the CPU's SwiGlu defines it (x / (1 + e^-x)).
DS_HOST_DEVICE DS_INLINE float MoeSwiGlu(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// y[t][c]: the k contributions of token t summed in j order (one f32 FMA each), skipped ids
// adding nothing (0 when all are); NaN when one of its ids was past the stacks (kMoeBadId).
DS_HOST_DEVICE DS_INLINE float MoeCombine(const float* down, int64_t n_embd, const int32_t* inv,
                                          const float* weights, int64_t k, int64_t t, int64_t c) {
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t p = inv[t * k + j];
    if (p == kMoeSkipped) continue;
    if (p < 0) return NAN;
    sum = fmaf(weights[t * k + j], down[p * n_embd + c], sum);
  }
  return sum;
}

}  // namespace deltaserve::kernels::cuda
