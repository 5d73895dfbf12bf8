// Expert grouping of the CUDA MoE FFN (moe_ffn.cu), as DS_HOST_DEVICE functions the CPU unit
// test checks (tests/kernels/cuda_dequant_test.cc): the scratch layout (MoeFfnScratchBytes is
// its total, exactly), and the plan one thread builds from the per-expert counts.
//
// The T * k assignments a = t * k + j (token t's j-th expert ids[a], weight weights[a]) are
// counting-sorted by expert into "positions" p = 0 .. n_valid - 1: expert e owns positions
// [offsets[e], offsets[e + 1]); order[p] is the assignment at p and inv[a] its position (-1
// for an id outside [0, n_expert)). Per position the FFN writes one row of gate, up (ff floats)
// and down (n_embd floats); y[t] = sum_j weights[t][j] * down[inv[t * k + j]] in j order.
// The expert GEMMs run over work items built from the counts:
// - GEMV (few tokens): one item per non-empty expert, active[0 .. n_active);
// - GEMM: tiles of up to kGemmTileRows positions of one expert, (tile_expert[i],
//   tile_start[i]) for i < n_tiles; at most MoeMaxTiles of them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// Byte offsets of the arrays in the MoE scratch area (each 256-byte aligned) and its size.
struct MoeScratchLayout {
  size_t counts = 0;       // int32 [n_expert]: assignments per expert
  size_t offsets = 0;      // int32 [n_expert + 1]: first position of each expert
  size_t fill = 0;         // int32 [n_expert]: next free position while placing
  size_t order = 0;        // int32 [n_assign]: assignment at each position
  size_t inv = 0;          // int32 [n_assign]: position of each assignment, -1: bad id
  size_t active = 0;       // int32 [n_expert]: the non-empty experts, ascending
  size_t tile_expert = 0;  // int32 [max_tiles]
  size_t tile_start = 0;   // int32 [max_tiles]
  size_t header = 0;       // int32 [4]: n_active, n_tiles, n_valid (positions), unused
  size_t gate = 0;         // f32 [n_assign][ff]: gate rows, then silu(gate) * up
  size_t up = 0;           // f32 [n_assign][ff]
  size_t down = 0;         // f32 [n_assign][n_embd]
  size_t total = 0;
};

// Tiles of at most `tile_rows` positions over experts with n_assign assignments in all: each
// non-empty expert (at most min(n_assign, n_expert)) has ceil(c_e / tile_rows) <=
// floor(c_e / tile_rows) + 1 tiles, and the floors sum to at most n_assign / tile_rows.
DS_HOST_DEVICE DS_INLINE int64_t MoeMaxTiles(int64_t n_assign, int64_t n_expert,
                                             int64_t tile_rows) {
  const int64_t non_empty = n_assign < n_expert ? n_assign : n_expert;
  return non_empty + n_assign / tile_rows;
}

DS_HOST_DEVICE DS_INLINE MoeScratchLayout MoeLayout(int64_t n_tokens, int64_t k, int64_t n_expert,
                                                    int64_t n_embd, int64_t ff,
                                                    int64_t tile_rows) {
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
  l.up = take(n_assign * static_cast<size_t>(ff) * 4);
  l.down = take(n_assign * static_cast<size_t>(n_embd) * 4);
  l.total = at;
  return l;
}

// From counts[0 .. n_expert): offsets (exclusive prefix sums, offsets[n_expert] = n_valid),
// fill = offsets[0 .. n_expert), the active experts, the GEMM tiles of `tile_rows` positions
// and header = {n_active, n_tiles, n_valid}. Sequential: one thread runs it (n_expert is a few
// hundred).
DS_HOST_DEVICE DS_INLINE void MoePlan(const int32_t* counts, int32_t n_expert, int32_t tile_rows,
                                      int32_t* offsets, int32_t* fill, int32_t* active,
                                      int32_t* tile_expert, int32_t* tile_start,
                                      int32_t* header) {
  int32_t pos = 0;
  int32_t n_active = 0;
  int32_t n_tiles = 0;
  for (int32_t e = 0; e < n_expert; ++e) {
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
  offsets[n_expert] = pos;
  header[0] = n_active;
  header[1] = n_tiles;
  header[2] = pos;
  header[3] = 0;
}

}  // namespace deltaserve::kernels::cuda
