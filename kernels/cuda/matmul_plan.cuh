// Index math of the CUDA matrix products (matmul.cu, moe_ffn.cu), in DS_HOST_DEVICE functions
// that the CPU unit test (tests/kernels/cuda_dequant_test.cc) checks: how a grid over the
// concatenated output rows of a group of products maps back to (product, row), the GEMM tile
// shape, and the GEMV/GEMM choice.
//
// Shapes: a product is y[t][o] = sum_k W[o][k] x[t][k], W [out][in] in GGUF blocks (row_bytes
// per row), x [rows][in] f32 (x_stride floats per row), y [rows][out] f32 (y_stride).
// - GEMV (rows <= kGemvMaxRows, the decode steps): one warp per output row o, kGemvWarps rows
//   per block; grid.x = ceil(total rows / kGemvWarps) over the concatenated rows of the group.
// - GEMM (more rows, prefill): one block per kGemmTileOut x kGemmTileRows tile of y; grid.x over
//   the concatenated output tiles of the group (a tile never straddles two products: each
//   product's rows are rounded up to whole tiles), grid.y over the token tiles.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_compat.h"

namespace deltaserve::kernels::cuda {

// Activation rows up to which a product is a GEMV (one accumulator per row in registers).
inline constexpr int kGemvMaxRows = 8;
// Warps (output rows) per GEMV block.
inline constexpr int kGemvWarps = 4;
// GEMM tile: output features x activation rows x reduction slice, 4 warps of 32 x 32.
inline constexpr int kGemmTileOut = 64;
inline constexpr int kGemmTileRows = 64;
inline constexpr int kGemmTileK = 32;
inline constexpr int kGemmThreads = 128;
// Products per launch of a group (kernel parameter space); larger groups go in pieces.
inline constexpr int kMaxGroupProducts = 8;

DS_HOST_DEVICE DS_INLINE int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One product of a group, as the kernels see it (device pointers).
struct GroupProduct {
  const uint8_t* w = nullptr;  // weight row 0
  size_t row_bytes = 0;
  int64_t out = 0;       // weight rows = columns of y
  float* y = nullptr;    // y[0][0]
  int64_t y_stride = 0;  // floats between rows of y
};

// Up to kMaxGroupProducts products of one weight type sharing x; first[i] is the first grid
// item (GEMV: output row, GEMM: output tile) of product i in the concatenation, first[n] the
// total.
struct GroupArgs {
  int n = 0;
  int64_t in = 0;
  GroupProduct p[kMaxGroupProducts];
  int64_t first[kMaxGroupProducts + 1] = {};
};

// Fills args.first for items of `item_rows` output rows each (1: GEMV, kGemmTileOut: GEMM).
DS_HOST_DEVICE DS_INLINE void PlanGroupItems(GroupArgs& args, int64_t item_rows) {
  args.first[0] = 0;
  for (int i = 0; i < args.n; ++i) {
    args.first[i + 1] = args.first[i] + CeilDiv(args.p[i].out, item_rows);
  }
}

// The product that grid item `item` (< first[n]) belongs to: the last i with first[i] <= item
// (products with no rows own no item and are skipped).
DS_HOST_DEVICE DS_INLINE int FindGroupProduct(const int64_t* first, int n, int64_t item) {
  int i = 0;
  while (i + 1 < n && first[i + 1] <= item) ++i;
  return i;
}

}  // namespace deltaserve::kernels::cuda
