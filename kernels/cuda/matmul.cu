// Matrix products and row gathers of the CUDA backend (cuda_ops.h): LaunchMatMul,
// LaunchMatMulGroup and LaunchGetRows on every WeightType.
// - x.rows <= kGemvMaxRows (decode): GEMV, one warp per output feature, every activation row
//   in the same pass over the weights (gemv.cuh).
// - more rows (prefill): tensor-core GEMM on 64 x 64 tiles, weights decoded to f16 in shared
//   memory (gemm.cuh).
// A group of products sharing x runs as one launch per weight type over the concatenated
// output rows (matmul_plan.cuh). Shape checks are those of the CPU backend (cpu_backend.cc
// MatMul / MatMulGroup / GetRows, kernels/cpu/matmul.cc CheckWeights), plus one the GPU needs:
// weight data and row_bytes 2-byte aligned (4-byte for F32), as GGUF data always is.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/matmul_plan.cuh"

namespace deltaserve::kernels::cuda {
namespace {

// --- kernels --------------------------------------------------------------------------------

// GEMV over a group: warp w of block b computes concatenated output row b * kGemvWarps + w for
// activation rows 0 .. nr-1 of x.
template <WeightType T, bool kFast>
__global__ void __launch_bounds__(kGemvWarps * 32)
    GemvGroupKernel(GroupArgs args, const float* __restrict__ x, int64_t x_stride, int nr) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (item >= args.first[args.n]) return;
  const int i = FindGroupProduct(args.first, args.n, item);
  const GroupProduct& p = args.p[i];
  const int64_t o = item - args.first[i];
  const float* xr[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) xr[r] = x + (r < nr ? r : 0) * x_stride;
  float acc[kGemvMaxRows];
  GemvWarpRow<T, kFast>(p.w + static_cast<size_t>(o) * p.row_bytes, args.in, xr, nr, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      if (r < nr) p.y[r * p.y_stride + o] = acc[r];
    }
  }
}

// GEMM over a group: block (b, c) computes output tile b of the concatenation (kGemmTileOut
// features of one product) for activation rows c * kGemmTileRows .. + kGemmTileRows - 1.
template <WeightType T>
__global__ void __launch_bounds__(kGemmThreads)
    GemmGroupKernel(GroupArgs args, const float* __restrict__ x, int64_t x_stride, int64_t rows) {
  __shared__ GemmShared sh;
  const int64_t item = blockIdx.x;
  const int i = FindGroupProduct(args.first, args.n, item);
  const GroupProduct& p = args.p[i];
  const int64_t o0 = (item - args.first[i]) * kGemmTileOut;
  const int n_out = static_cast<int>(p.out - o0 < kGemmTileOut ? p.out - o0 : kGemmTileOut);
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kGemmTileRows;
  if (threadIdx.x < kGemmTileRows) {
    const int64_t t = t0 + threadIdx.x;
    sh.xrow[threadIdx.x] = t < rows ? x + t * x_stride : nullptr;
    sh.yrow[threadIdx.x] = t < rows ? p.y + t * p.y_stride : nullptr;
  }
  GemmTile<T>(sh, p.w + static_cast<size_t>(o0) * p.row_bytes, p.row_bytes, n_out, args.in, o0);
}

// out row i = table row ids[i] decoded to f32; an id outside [0, n_rows) gives a row of NaN
// (see LaunchGetRows).
template <WeightType T>
__global__ void GetRowsKernel(const uint8_t* __restrict__ table, size_t row_bytes, int64_t n_rows,
                              int64_t in, const int32_t* __restrict__ ids, float* out,
                              int64_t out_stride) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  float* dst = out + i * out_stride;
  if (id < 0 || id >= n_rows) {
    for (int64_t k = threadIdx.x; k < in; k += blockDim.x) dst[k] = __int_as_float(0x7FC00000);
    return;
  }
  const uint8_t* row = table + static_cast<size_t>(id) * row_bytes;
  const int64_t units = in / 8;
  for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
    float v[8];
    DecodeUnit<T>(row, u, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[8 * u + j] = v[j];
  }
  for (int64_t k = units * 8 + threadIdx.x; k < in; k += blockDim.x)
    dst[k] = DecodeValue<T>(row, k);
}

// y = 0 over rows x cols (a product with in == 0, as the CPU backend does).
__global__ void ZeroRowsKernel(float* y, int64_t cols, int64_t stride) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row[c] = 0.0f;
}

// --- checks ---------------------------------------------------------------------------------

// kernels/cpu/matmul.cc CheckWeights, plus the alignment the decoders rely on (dequant.cuh).
KernelStatus CheckWeights(const WeightView& w) {
  const BlockLayout layout = BlockLayoutOf(w.type);
  if (layout.block_size == 0) return KernelStatus::kUnsupportedType;
  if (w.in < 0 || w.out < 0 || w.count != 1) return KernelStatus::kInvalidArgument;
  if (w.in % layout.block_size != 0) return KernelStatus::kInvalidArgument;
  if (w.row_bytes < static_cast<size_t>(w.in / layout.block_size * layout.block_bytes)) {
    return KernelStatus::kInvalidArgument;
  }
  if (w.out > 0 && w.in > 0 && w.data == nullptr) return KernelStatus::kInvalidArgument;
  const size_t align = w.type == WeightType::kF32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(w.data) % align != 0 || w.row_bytes % align != 0) {
    return KernelStatus::kInvalidArgument;
  }
  return KernelStatus::kOk;
}

// kernels/cpu/matmul.cc MatOk: a matrix the kernels can address.
bool MatOk(const Mat& m) {
  if (m.rows < 0 || m.cols < 0) return false;
  if (m.rows == 0 || m.cols == 0) return true;
  return m.data != nullptr && (m.rows == 1 || m.stride >= m.cols);
}

// cpu_backend.cc MatMul's checks of one product (kInvalidArgument).
bool ShapesOk(const WeightView& w, const Mat& x, const Mat& y) {
  return y.Valid() && x.cols == w.in && y.cols == w.out && x.rows == y.rows && w.count == 1 &&
         (w.data != nullptr || w.in == 0 || w.out == 0);
}

KernelStatus LastLaunchStatus() {
  return cudaGetLastError() == cudaSuccess ? KernelStatus::kOk : KernelStatus::kDeviceError;
}

// --- launches -------------------------------------------------------------------------------

// Products w[idx[0..n)] of one weight type (already checked) on x; x.rows > 0, w.in > 0.
KernelStatus LaunchSameType(const LaunchContext& ctx, const WeightView* w, const int* idx, int n,
                            const Mat& x, Mat* y) {
  GroupArgs args;
  args.n = n;
  args.in = x.cols;
  for (int j = 0; j < n; ++j) {
    const WeightView& wj = w[idx[j]];
    args.p[j] = {static_cast<const uint8_t*>(wj.data), wj.row_bytes, wj.out, y[idx[j]].data,
                 y[idx[j]].stride};
  }
  const bool gemv = x.rows <= kGemvMaxRows;
  PlanGroupItems(args, gemv ? 1 : kGemmTileOut);
  const int64_t items = args.first[n];
  if (items == 0) return KernelStatus::kOk;
  const WeightType type = w[idx[0]].type;
  return DispatchWeightType(type, KernelStatus::kUnsupportedType, [&](auto tag) {
    constexpr WeightType T = decltype(tag)::value;
    if (gemv) {
      const auto blocks = static_cast<unsigned>(CeilDiv(items, kGemvWarps));
      bool fast = true;  // the fast lane where it exists and every product's rows allow it
      for (int j = 0; j < n; ++j)
        fast = fast && GemvFastEligible(T, args.p[j].w, args.p[j].row_bytes);
      if constexpr (T == WeightType::kQ4_K) {
        if (fast) {
          GemvGroupKernel<T, true><<<blocks, kGemvWarps * 32, 0, ctx.stream>>>(
              args, x.data, x.stride, static_cast<int>(x.rows));
          return LastLaunchStatus();
        }
      }
      GemvGroupKernel<T, false><<<blocks, kGemvWarps * 32, 0, ctx.stream>>>(
          args, x.data, x.stride, static_cast<int>(x.rows));
    } else {
      const int64_t row_tiles = CeilDiv(x.rows, kGemmTileRows);
      if (row_tiles > 65535 || items > 0x7FFFFFFF) return KernelStatus::kInvalidArgument;
      const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(row_tiles));
      GemmGroupKernel<T><<<grid, kGemmThreads, 0, ctx.stream>>>(args, x.data, x.stride, x.rows);
    }
    return LastLaunchStatus();
  });
}

// Checked products on x: y[i] = 0 where in == 0, else one launch per weight type and per
// kMaxGroupProducts products.
KernelStatus RunProducts(const LaunchContext& ctx, const WeightView* w, int n, const Mat& x,
                         Mat* y) {
  if (x.rows == 0) return KernelStatus::kOk;
  if (x.cols == 0) {
    for (int i = 0; i < n; ++i) {
      if (w[i].out == 0 || y[i].rows == 0) continue;
      ZeroRowsKernel<<<static_cast<unsigned>(y[i].rows), 256, 0, ctx.stream>>>(y[i].data, y[i].cols,
                                                                               y[i].stride);
      if (KernelStatus s = LastLaunchStatus(); s != KernelStatus::kOk) return s;
    }
    return KernelStatus::kOk;
  }
  // Products of one weight type share a launch (kMaxGroupProducts at a time), in the order of
  // their first appearance.
  std::vector<char> launched(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    if (launched[i]) continue;
    int idx[kMaxGroupProducts];
    int count = 0;
    for (int j = i; j < n; ++j) {
      if (launched[j] || w[j].type != w[i].type) continue;
      launched[j] = 1;
      idx[count++] = j;
      if (count == kMaxGroupProducts || j == n - 1) {
        if (KernelStatus s = LaunchSameType(ctx, w, idx, count, x, y); s != KernelStatus::kOk) {
          return s;
        }
        count = 0;
      }
    }
    if (count > 0) {
      if (KernelStatus s = LaunchSameType(ctx, w, idx, count, x, y); s != KernelStatus::kOk) {
        return s;
      }
    }
  }
  return KernelStatus::kOk;
}

}  // namespace

KernelStatus LaunchMatMul(const LaunchContext& ctx, const WeightView& w, const Mat& x, Mat& y) {
  return LaunchMatMulGroup(ctx, &w, 1, x, &y);
}

// The checks in the order of cpu_backend.cc MatMulGroup (every product's shapes), then
// matmul.cc MatMulGroupCpuIsa (weights, then the matrices, product by product).
KernelStatus LaunchMatMulGroup(const LaunchContext& ctx, const WeightView* w, int n, const Mat& x,
                               Mat* y) {
  if (n < 0 || (n > 0 && (w == nullptr || y == nullptr)) || !x.Valid()) {
    return KernelStatus::kInvalidArgument;
  }
  for (int i = 0; i < n; ++i) {
    if (!ShapesOk(w[i], x, y[i])) return KernelStatus::kInvalidArgument;
  }
  if (!MatOk(x)) return KernelStatus::kInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (KernelStatus s = CheckWeights(w[i]); s != KernelStatus::kOk) return s;
    if (!MatOk(y[i])) return KernelStatus::kInvalidArgument;
  }
  return RunProducts(ctx, w, n, x, y);
}

KernelStatus LaunchGetRows(const LaunchContext& ctx, const WeightView& table, const int32_t* ids,
                           int64_t n, Mat& out) {
  if (!out.Valid() || n < 0 || out.rows != n || out.cols != table.in ||
      (n > 0 && (ids == nullptr || table.data == nullptr))) {
    return KernelStatus::kInvalidArgument;
  }
  if (KernelStatus s = CheckWeights(table); s != KernelStatus::kOk) return s;
  if (!MatOk(out)) return KernelStatus::kInvalidArgument;
  if (n == 0 || table.in == 0) return KernelStatus::kOk;
  if (n > 0x7FFFFFFF) return KernelStatus::kInvalidArgument;
  return DispatchWeightType(table.type, KernelStatus::kUnsupportedType, [&](auto tag) {
    constexpr WeightType T = decltype(tag)::value;
    GetRowsKernel<T><<<static_cast<unsigned>(n), 128, 0, ctx.stream>>>(
        static_cast<const uint8_t*>(table.data), table.row_bytes, table.out, table.in, ids,
        out.data, out.stride);
    return LastLaunchStatus();
  });
}

size_t MatMulScratchBytes(int64_t, int64_t, int64_t) { return 0; }

}  // namespace deltaserve::kernels::cuda
