#include "kernels/cpu/norm_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/vec_math.h"

namespace deltaserve::kernels {
namespace {

// Below this many elements an op runs on the calling thread: waking the pool costs a few
// microseconds, more than a norm over one decode batch takes.
constexpr int64_t kParallelElements = 1 << 15;

bool SameShape(const Mat& a, const Mat& b) { return a.rows == b.rows && a.cols == b.cols; }

// Runs fn(row_begin, row_end) over all rows, on the pool when the matrix is big.
template <typename Fn>
void ForRows(ThreadPool& pool, int64_t rows, int64_t cols, const Fn& fn) {
  if (rows * cols < kParallelElements || pool.size() == 1) {
    fn(int64_t{0}, rows);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelElements / 4 / std::max<int64_t>(cols, 1));
  pool.ParallelFor(rows, grain, [&](int64_t begin, int64_t end) { fn(begin, end); });
}

// Sum of squares with 16 independent partial sums: the fixed-size inner loop is what lets
// g++ -O3 vectorise a float reduction without -ffast-math.
float SumSquares(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * x[i + j];
  }
  float s = 0.0f;
  for (; i < n; ++i) s += x[i] * x[i];
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// log(1 + e^x); above 20 it equals x in f32 (and exp would overflow far beyond), the cut-off
// llama.cpp uses.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// The ops below evaluate an exp per element; compiled per ISA (DELTASERVE_ISA_DISPATCH) so that
// internal::FastExp runs 16 (AVX-512) or 8 (AVX2) lanes wide.
DELTASERVE_ALWAYS_INLINE void GatedRmsNormRowsImpl(const Mat& x, const float* w, const Mat& z,
                                                   float eps, Mat& y, int64_t begin, int64_t end) {
  const int64_t n = x.cols;
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x.data + r * x.stride;
    const float* zr = z.data + r * z.stride;
    float* yr = y.data + r * y.stride;
    const float scale = 1.0f / std::sqrt(SumSquares(xr, n) / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w[i] * internal::FastSilu(zr[i]);
  }
}
DELTASERVE_ISA_DISPATCH(void, GatedRmsNormRows,
                        (const Mat& x, const float* w, const Mat& z, float eps, Mat& y,
                         int64_t begin, int64_t end),
                        (x, w, z, eps, y, begin, end))

DELTASERVE_ALWAYS_INLINE void SwiGluRowsImpl(const Mat& gate, const Mat& up, Mat& out,
                                             int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* gr = gate.data + r * gate.stride;
    const float* ur = up.data + r * up.stride;
    float* orow = out.data + r * out.stride;
    for (int64_t i = 0; i < gate.cols; ++i) orow[i] = internal::FastSilu(gr[i]) * ur[i];
  }
}
DELTASERVE_ISA_DISPATCH(void, SwiGluRows,
                        (const Mat& gate, const Mat& up, Mat& out, int64_t begin, int64_t end),
                        (gate, up, out, begin, end))

DELTASERVE_ALWAYS_INLINE void MulSigmoidRowsImpl(Mat& x, const Mat& gate, bool per_row,
                                                 int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    float* xr = x.data + r * x.stride;
    const float* gr = gate.data + r * gate.stride;
    if (per_row) {
      const float s = internal::FastSigmoid(gr[0]);
      for (int64_t i = 0; i < x.cols; ++i) xr[i] *= s;
    } else {
      for (int64_t i = 0; i < x.cols; ++i) xr[i] *= internal::FastSigmoid(gr[i]);
    }
  }
}
DELTASERVE_ISA_DISPATCH(void, MulSigmoidRows,
                        (Mat & x, const Mat& gate, bool per_row, int64_t begin, int64_t end),
                        (x, gate, per_row, begin, end))

}  // namespace

KernelStatus RmsNormCpu(ThreadPool& pool, const Mat& x, Vec w, float eps, Mat& y) {
  if (!x.Valid() || !y.Valid() || !SameShape(x, y)) return KernelStatus::kInvalidArgument;
  if (w.data != nullptr && w.n != x.cols) return KernelStatus::kInvalidArgument;
  const int64_t n = x.cols;
  if (n == 0) return KernelStatus::kOk;
  ForRows(pool, x.rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x.data + r * x.stride;
      float* yr = y.data + r * y.stride;
      const float scale = 1.0f / std::sqrt(SumSquares(xr, n) / static_cast<float>(n) + eps);
      if (w.data != nullptr) {
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale * w.data[i];
      } else {
        for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
      }
    }
  });
  return KernelStatus::kOk;
}

KernelStatus L2NormCpu(ThreadPool& pool, Mat& x, int64_t group, float eps) {
  if (!x.Valid() || group <= 0 || x.cols % group != 0) return KernelStatus::kInvalidArgument;
  const int64_t n = x.cols;
  ForRows(pool, x.rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c0 = 0; c0 < n; c0 += group) {
        float* xr = x.data + r * x.stride + c0;
        const float scale = 1.0f / std::max(std::sqrt(SumSquares(xr, group)), eps);
        for (int64_t i = 0; i < group; ++i) xr[i] *= scale;
      }
    }
  });
  return KernelStatus::kOk;
}

KernelStatus CopyCpu(ThreadPool& pool, const Mat& src, Mat& dst) {
  if (!src.Valid() || !dst.Valid() || !SameShape(src, dst)) {
    return KernelStatus::kInvalidArgument;
  }
  if (src.data == dst.data && src.stride == dst.stride) return KernelStatus::kOk;
  const int64_t n = src.cols;
  ForRows(pool, src.rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::copy_n(src.data + r * src.stride, n, dst.data + r * dst.stride);
    }
  });
  return KernelStatus::kOk;
}

KernelStatus GatedRmsNormCpu(ThreadPool& pool, const Mat& x, Vec w, const Mat& z, float eps,
                             Mat& y) {
  if (!x.Valid() || !z.Valid() || !y.Valid() || !SameShape(x, z) || !SameShape(x, y)) {
    return KernelStatus::kInvalidArgument;
  }
  if (w.data == nullptr || w.n != x.cols) return KernelStatus::kInvalidArgument;
  const int64_t n = x.cols;
  if (n == 0) return KernelStatus::kOk;
  ForRows(pool, x.rows, n,
          [&](int64_t begin, int64_t end) { GatedRmsNormRows(x, w.data, z, eps, y, begin, end); });
  return KernelStatus::kOk;
}

KernelStatus AddCpu(ThreadPool& pool, Mat& x, const Mat& y) {
  if (!x.Valid() || !y.Valid() || !SameShape(x, y)) return KernelStatus::kInvalidArgument;
  const int64_t n = x.cols;
  ForRows(pool, x.rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* xr = x.data + r * x.stride;
      const float* yr = y.data + r * y.stride;
      for (int64_t i = 0; i < n; ++i) xr[i] += yr[i];
    }
  });
  return KernelStatus::kOk;
}

KernelStatus SwiGluCpu(ThreadPool& pool, const Mat& gate, const Mat& up, Mat& out) {
  if (!gate.Valid() || !up.Valid() || !out.Valid() || !SameShape(gate, up) ||
      !SameShape(gate, out)) {
    return KernelStatus::kInvalidArgument;
  }
  ForRows(pool, gate.rows, gate.cols,
          [&](int64_t begin, int64_t end) { SwiGluRows(gate, up, out, begin, end); });
  return KernelStatus::kOk;
}

KernelStatus MulSigmoidCpu(ThreadPool& pool, Mat& x, const Mat& gate) {
  if (!x.Valid() || !gate.Valid() || gate.rows != x.rows ||
      (gate.cols != x.cols && gate.cols != 1)) {
    return KernelStatus::kInvalidArgument;
  }
  const bool per_row = gate.cols == 1 && x.cols != 1;
  ForRows(pool, x.rows, x.cols,
          [&](int64_t begin, int64_t end) { MulSigmoidRows(x, gate, per_row, begin, end); });
  return KernelStatus::kOk;
}

KernelStatus DeltaNetGatesCpu(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias) {
  if (!alpha_to_g.Valid() || !beta.Valid() || !SameShape(alpha_to_g, beta)) {
    return KernelStatus::kInvalidArgument;
  }
  const int64_t n = alpha_to_g.cols;
  if (ssm_a.data == nullptr || dt_bias.data == nullptr || ssm_a.n != n || dt_bias.n != n) {
    return KernelStatus::kInvalidArgument;
  }
  // [T][n_v_heads] is a few hundred values per token: never worth the pool.
  for (int64_t r = 0; r < alpha_to_g.rows; ++r) {
    float* ar = alpha_to_g.data + r * alpha_to_g.stride;
    float* br = beta.data + r * beta.stride;
    for (int64_t h = 0; h < n; ++h) {
      ar[h] = ssm_a.data[h] * Softplus(ar[h] + dt_bias.data[h]);
      br[h] = Sigmoid(br[h]);
    }
  }
  return KernelStatus::kOk;
}

}  // namespace deltaserve::kernels
