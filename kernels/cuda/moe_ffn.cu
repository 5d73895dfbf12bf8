// The grouped expert FFN of the CUDA backend (cuda_ops.h LaunchMoeFfn, backend.h MoeFfn):
//   1. MoeSortKernel (one block): counting sort of the T * k assignments by expert into
//      positions, the plan of moe_sort.cuh (active experts, GEMM tiles; built by the whole block,
//      as an expert arena may have thousands of slots) in scratch;
//   2. gate and up products of every expert over its positions' token rows, one launch for all
//      experts and both matrices (grid.z): GEMV items per active expert for few tokens, GEMM
//      tiles otherwise (the kernels of matmul.cu's header files, with rows gathered through
//      order[]); each expert's weights are read once per call (per tile of 64 positions);
//   3. gate = silu(gate) * up;
//   4. down products the same way, position rows in, position rows out;
//   5. y[t] = sum_j weights[t][j] * down[inv[t * k + j]], j ascending: each output is one
//      thread's sum in a fixed order, so results do not depend on scheduling (no atomics on y).
// Expert stacks may lie matrix_stride apart (the slots of a device expert arena,
// worker/engine/expert_tiers.h): every weight address steps by MatrixStride(). A negative id is
// skipped (the other tier computes that expert; a token whose ids all are gets zeros). The device
// cannot refuse an id past the stacks the way the CPU backend does (kInvalidArgument, checked
// before anything is written) without a host round trip, so such an id makes that token's row
// of y NaN (the engine's ids come from MoeRoute or its own slot table, which never do).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/matmul_plan.cuh"
#include "kernels/cuda/moe_sort.cuh"

namespace deltaserve::kernels::cuda {
namespace {

constexpr int kSortThreads = 1024;

__global__ void __launch_bounds__(kSortThreads)
    MoeSortKernel(const int32_t* __restrict__ ids, int64_t n_assign, int32_t n_expert,
                  MoePlanPtrs plan) {
  for (int32_t e = threadIdx.x; e < n_expert; e += blockDim.x) plan.counts[e] = 0;
  __syncthreads();
  for (int64_t a = threadIdx.x; a < n_assign; a += blockDim.x) {
    const int32_t id = ids[a];
    if (id >= 0 && id < n_expert) atomicAdd(&plan.counts[id], 1);
  }
  __syncthreads();
  // The plan (moe_sort.cuh): chunk sums, an inclusive scan of them over the block
  // (Hillis-Steele in shared memory), each chunk written from its exclusive prefix.
  __shared__ int32_t scan[3][kSortThreads];
  const int32_t t = static_cast<int32_t>(threadIdx.x);
  const int32_t n_threads = static_cast<int32_t>(blockDim.x);
  const int32_t begin = MoePlanChunk(n_expert, n_threads, t);
  const int32_t end = MoePlanChunk(n_expert, n_threads, t + 1);
  const MoePlanSums mine = MoePlanChunkSums(plan.counts, begin, end, kGemmTileRows);
  scan[0][t] = mine.positions;
  scan[1][t] = mine.active;
  scan[2][t] = mine.tiles;
  __syncthreads();
  for (int32_t off = 1; off < n_threads; off <<= 1) {
    int32_t p = 0, act = 0, til = 0;
    if (t >= off) {
      p = scan[0][t - off];
      act = scan[1][t - off];
      til = scan[2][t - off];
    }
    __syncthreads();
    scan[0][t] += p;
    scan[1][t] += act;
    scan[2][t] += til;
    __syncthreads();
  }
  const MoePlanSums below{scan[0][t] - mine.positions, scan[1][t] - mine.active,
                          scan[2][t] - mine.tiles};
  MoePlanChunkWrite(plan.counts, begin, end, kGemmTileRows, below, plan.offsets, plan.fill,
                    plan.active, plan.tile_expert, plan.tile_start);
  if (t == n_threads - 1) {
    MoePlanFinish(MoePlanSums{scan[0][t], scan[1][t], scan[2][t]}, n_expert, plan.offsets,
                  plan.header);
  }
  __syncthreads();
  // Positions inside an expert come in atomic order; no result depends on it (every output row
  // of a product is computed from its own activation row alone).
  for (int64_t a = threadIdx.x; a < n_assign; a += blockDim.x) {
    const int32_t id = ids[a];
    if (id >= 0 && id < n_expert) {
      const int32_t p = atomicAdd(&plan.fill[id], 1);
      plan.order[p] = static_cast<int32_t>(a);
      plan.inv[a] = p;
    } else {
      plan.inv[a] = MoeUnplaced(id);
    }
  }
}

// GEMV items: block (b, s, z): output rows b * kGemvWarps + warp of matrix z of expert
// active[s], over its positions kGemvMaxRows at a time.
template <WeightType T, bool kFast>
__global__ void __launch_bounds__(kGemvWarps * 32) MoeGemvKernel(MoeProduct m, MoePlanPtrs plan) {
  const int32_t s = blockIdx.y;
  if (s >= plan.header[0]) return;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (o >= m.out) return;
  const int32_t e = plan.active[s];
  const int z = blockIdx.z;
  const uint8_t* wrow = MoeWeightRow(m, z, e, o);
  float* yz = MoeOutput(m, z);
  const int32_t end = plan.offsets[e + 1];
  for (int32_t p0 = plan.offsets[e]; p0 < end; p0 += kGemvMaxRows) {
    const int nr = end - p0 < kGemvMaxRows ? end - p0 : kGemvMaxRows;
    const float* xr[kGemvMaxRows];
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r)
      xr[r] = MoeActivationRow(m, plan.order, p0 + (r < nr ? r : 0));
    float acc[kGemvMaxRows];
    GemvWarpRow<T, kFast>(wrow, m.in, xr, nr, acc);
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < nr) yz[(p0 + r) * m.y_stride + o] = acc[r];
      }
    }
  }
}

// GEMM tiles: block (b, i, z): output features b * kGemmTileOut .. of matrix z over tile i's
// positions.
template <WeightType T>
__global__ void __launch_bounds__(kGemmThreads) MoeGemmKernel(MoeProduct m, MoePlanPtrs plan) {
  __shared__ GemmShared sh;
  const int32_t tile = blockIdx.y;
  if (tile >= plan.header[1]) return;  // the whole block leaves together
  const int32_t e = plan.tile_expert[tile];
  const int32_t start = plan.tile_start[tile];
  const int32_t end = plan.offsets[e + 1];
  const int z = blockIdx.z;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kGemmTileOut;
  const int n_out = static_cast<int>(m.out - o0 < kGemmTileOut ? m.out - o0 : kGemmTileOut);
  if (threadIdx.x < kGemmTileRows) {
    const int32_t p = start + static_cast<int32_t>(threadIdx.x);
    sh.xrow[threadIdx.x] = p < end ? MoeActivationRow(m, plan.order, p) : nullptr;
    sh.yrow[threadIdx.x] = p < end ? MoeOutput(m, z) + p * m.y_stride : nullptr;
  }
  const uint8_t* w = MoeWeightRow(m, z, e, o0);
  GemmTile<T>(sh, w, m.row_bytes, n_out, m.in, o0);
}

// gate[p][f] = silu(gate[p][f]) * up[p][f] for the n_valid positions (header[2]).
__global__ void MoeSwiGluKernel(float* gate, const float* __restrict__ up, int64_t ff,
                                const int32_t* __restrict__ header) {
  const int64_t n = static_cast<int64_t>(header[2]) * ff;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    gate[i] = MoeSwiGlu(gate[i], up[i]);
  }
}

// y[t][c] = sum_j weights[t * k + j] * down[inv[t * k + j]][c], j ascending; NaN when one of the
// token's ids was out of range.
__global__ void MoeCombineKernel(const float* __restrict__ down, int64_t n_embd,
                                 const int32_t* __restrict__ inv, const float* __restrict__ weights,
                                 int64_t k, float* y, int64_t y_stride) {
  const int64_t t = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= n_embd) return;
  y[t * y_stride + c] = MoeCombine(down, n_embd, inv, weights, k, t, c);
}

KernelStatus LastLaunchStatus() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

// Weight stack checks of kernels/cpu/matmul.cc CheckWeights (applied per expert there), a
// matrix stride of at least one matrix (kernels/cpu/moe.cc), plus the 2/4-byte alignment the
// decoders need of every expert's rows.
KernelStatus CheckStack(const WeightView& w) {
  const BlockLayout layout = BlockLayoutOf(w.type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (w.in < 0 || w.out < 0 || w.in % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  if (w.row_bytes < static_cast<size_t>(w.in / layout.block_size * layout.block_bytes)) {
    return KernelStatus::kInvalidArgument;
  }
  if (w.MatrixStride() < static_cast<size_t>(w.out) * w.row_bytes) {
    return KernelStatus::kInvalidArgument;
  }
  const size_t align = w.type == WeightType::kF32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(w.data) % align != 0 || w.row_bytes % align != 0 ||
      w.MatrixStride() % align != 0) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// Runs matrices mats[0 .. n) (same type and row_bytes) of `m` over the plan.
KernelStatus LaunchExpertProduct(const LaunchContext& ctx, WeightType type, const MoeProduct& m,
                                 int n_mats, const MoePlanPtrs& plan, bool gemv,
                                 int64_t max_items) {
  return DispatchWeightType(type, KernelStatus::kUnsupportedType, [&](auto tag) {
    constexpr WeightType T = decltype(tag)::value;
    if (gemv) {
      const dim3 grid(static_cast<unsigned>(CeilDiv(m.out, kGemvWarps)),
                      static_cast<unsigned>(max_items), static_cast<unsigned>(n_mats));
      if constexpr (T == WeightType::kQ4_K) {
        // The fast lane when every expert row of every stack is 16-byte aligned.
        if (MoeRowsAligned16(m, n_mats)) {
          MoeGemvKernel<T, true><<<grid, kGemvWarps * 32, 0, ctx.stream>>>(m, plan);
          return LastLaunchStatus();
        }
      }
      MoeGemvKernel<T, false><<<grid, kGemvWarps * 32, 0, ctx.stream>>>(m, plan);
    } else {
      const dim3 grid(static_cast<unsigned>(CeilDiv(m.out, kGemmTileOut)),
                      static_cast<unsigned>(max_items), static_cast<unsigned>(n_mats));
      MoeGemmKernel<T><<<grid, kGemmThreads, 0, ctx.stream>>>(m, plan);
    }
    return LastLaunchStatus();
  });
}

}  // namespace

size_t MoeFfnScratchBytes(int64_t n_tokens, int64_t k, int64_t n_expert, int64_t in, int64_t ff) {
  if (n_tokens <= 0 || k <= 0 || n_expert <= 0 || in < 0 || ff <= 0) return 0;
  return MoeLayout(n_tokens, k, n_expert, in, ff, kGemmTileRows).total;
}

KernelStatus LaunchMoeFfn(const LaunchContext& ctx, const Mat& x, const int32_t* ids,
                          const float* weights, int64_t k, const WeightView& gate_exps,
                          const WeightView& up_exps, const WeightView& down_exps, Mat& y) {
  const int64_t n_tokens = x.rows;
  const int64_t n_embd = x.cols;
  const int64_t n_expert = gate_exps.count;
  const int64_t ff = gate_exps.out;
  // kernels/cpu/moe.cc MoeFfnCpu, in its order.
  if (!x.Valid() || !y.Valid() || y.rows != n_tokens || y.cols != n_embd || k <= 0 ||
      n_expert <= 0 || gate_exps.data == nullptr || up_exps.data == nullptr ||
      down_exps.data == nullptr || gate_exps.in != n_embd || up_exps.in != n_embd ||
      up_exps.out != ff || up_exps.count != n_expert || down_exps.in != ff ||
      down_exps.out != n_embd || down_exps.count != n_expert || ff <= 0) {
    return KernelStatus::kInvalidArgument;
  }
  if (n_tokens == 0) return KernelStatus::kOk;
  if (ids == nullptr || weights == nullptr || x.data == y.data) {
    return KernelStatus::kInvalidArgument;
  }
  for (const WeightView* w : {&gate_exps, &up_exps, &down_exps}) {
    if (KernelStatus s = CheckStack(*w); s != KernelStatus::kOk) return s;
  }
  if (n_embd == 0) return KernelStatus::kOk;  // y has no columns (the CPU writes nothing either)
  const int64_t n_assign = n_tokens * k;
  const int64_t max_tiles = MoeMaxTiles(n_assign, n_expert, kGemmTileRows);
  const int64_t max_active = n_assign < n_expert ? n_assign : n_expert;
  if (n_assign > 0x7FFFFFFF || n_expert > 0x7FFFFFFF || max_tiles > 65535 || max_active > 65535) {
    return KernelStatus::kInvalidArgument;  // beyond the int32 positions / grid.y of the plan
  }
  const MoeScratchLayout layout = MoeLayout(n_tokens, k, n_expert, n_embd, ff, kGemmTileRows);
  if (ctx.scratch == nullptr || layout.total > ctx.scratch_bytes) return KernelStatus::kOutOfMemory;
  const MoePlanPtrs plan = PlanPtrs(ctx.scratch, layout);
  auto* base = static_cast<uint8_t*>(ctx.scratch);
  float* gate = reinterpret_cast<float*>(base + layout.gate);
  float* up = reinterpret_cast<float*>(base + layout.up);
  float* down = reinterpret_cast<float*>(base + layout.down);

  MoeSortKernel<<<1, kSortThreads, 0, ctx.stream>>>(ids, n_assign, static_cast<int32_t>(n_expert),
                                                    plan);
  if (KernelStatus s = LastLaunchStatus(); s != KernelStatus::kOk) return s;

  // GEMV items while experts see few positions each (decode), GEMM tiles otherwise.
  const bool gemv = MoeUsesGemv(n_tokens, k, n_expert);
  const int64_t max_items = gemv ? max_active : max_tiles;

  const MoeProduct gu = MoeGateUpProduct(gate_exps, up_exps, x, k, gate, up);
  if (gate_exps.type == up_exps.type && gate_exps.row_bytes == up_exps.row_bytes) {
    if (KernelStatus s = LaunchExpertProduct(ctx, gate_exps.type, gu, 2, plan, gemv, max_items);
        s != KernelStatus::kOk) {
      return s;
    }
  } else {
    KernelStatus s = LaunchExpertProduct(ctx, gate_exps.type, gu, 1, plan, gemv, max_items);
    if (s == KernelStatus::kOk) {
      s = LaunchExpertProduct(ctx, up_exps.type, MoeUpOnlyProduct(gu, up_exps), 1, plan, gemv,
                              max_items);
    }
    if (s != KernelStatus::kOk) return s;
  }

  const int64_t swiglu_blocks = CeilDiv(n_assign * ff, 256);
  MoeSwiGluKernel<<<static_cast<unsigned>(swiglu_blocks < 65535 ? swiglu_blocks : 65535), 256, 0,
                    ctx.stream>>>(gate, up, ff, plan.header);
  if (KernelStatus s = LastLaunchStatus(); s != KernelStatus::kOk) return s;

  const MoeProduct dn = MoeDownProduct(down_exps, gate, k, down);
  if (KernelStatus s = LaunchExpertProduct(ctx, down_exps.type, dn, 1, plan, gemv, max_items);
      s != KernelStatus::kOk) {
    return s;
  }

  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(CeilDiv(n_embd, 256)));
  MoeCombineKernel<<<grid, 256, 0, ctx.stream>>>(down, n_embd, plan.inv, weights, k, y.data,
                                                 y.stride);
  return LastLaunchStatus();
}

}  // namespace deltaserve::kernels::cuda
