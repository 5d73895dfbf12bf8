// The baseline-ISA parts of the int8-activation path (matmul_int8.h): activation quantization,
// weight rows decoded to int8, and the scalar reference of the integer products.
#include "kernels/cpu/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_int8_decode.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::internal {
namespace {

bool IsKQuant(WeightType type) {
  return type == WeightType::kQ4_K || type == WeightType::kQ5_K || type == WeightType::kQ6_K;
}

// Round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int): inlined, unlike
// std::nearbyint on baseline x86-64.
inline int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

size_t QIndex(int64_t n, int64_t panel, int64_t k, int lane) {
  return static_cast<size_t>(((panel * (n / 4) + k / 4) * kActPanel + lane) * 4 + k % 4);
}

// Quantizes x (n values, n a multiple of the block) into q_out (signed) and the per-G-block
// d / dsum / integer sum (sum_out may be null), `stride` values apart.
void QuantizeValues(bool k_quant, const float* x, int64_t n, int g, int8_t* q_out, float* d_out,
                    float* s_out, int64_t stride, int32_t* sum_out = nullptr) {
  const int super = k_quant ? kQkK : kQk;
  for (int64_t k0 = 0; k0 < n; k0 += super) {
    int8_t* q = q_out + k0;
    float d = 0.0f;
    if (k_quant) {
      // quantize_row_q8_K_ref: the signed value of largest magnitude maps to -127.
      float amax = 0.0f;
      float max = 0.0f;
      for (int i = 0; i < super; ++i) {
        if (std::fabs(x[k0 + i]) > amax) {
          amax = std::fabs(x[k0 + i]);
          max = x[k0 + i];
        }
      }
      if (amax == 0.0f) {
        std::fill(q, q + super, 0);
      } else {
        const float iscale = -127.0f / max;
        for (int i = 0; i < super; ++i) {
          q[i] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[k0 + i])));
        }
        d = 1.0f / iscale;
      }
    } else {
      // quantize_row_q8_0 (x86): d = amax / 127 stored as f16, q = round(x * 127 / amax).
      float amax = 0.0f;
      for (int i = 0; i < super; ++i) amax = std::max(amax, std::fabs(x[k0 + i]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (int i = 0; i < super; ++i) q[i] = static_cast<int8_t>(NearestInt(x[k0 + i] * id));
      d = Fp16ToFp32(Fp32ToFp16(amax / 127.0f));
    }
    for (int b0 = 0; b0 < super; b0 += g) {
      int sum = 0;
      for (int i = 0; i < g; ++i) sum += q[b0 + i];
      const int64_t b = (k0 + b0) / g;
      d_out[b * stride] = d;
      s_out[b * stride] = d * static_cast<float>(sum);
      if (sum_out != nullptr) sum_out[b * stride] = sum;
    }
  }
}

// Row `lane` of panel p: quantizes x (n values) into a; x null writes a zero row.
void QuantizeRow(bool k_quant, const float* x, const Int8ActivationsOut& a, int64_t p, int lane,
                 std::vector<int8_t>& q) {
  const int64_t n = a.n;
  const int g = a.group;
  const int64_t nb = n / g;
  float* d_out = a.d + p * nb * kActPanel + lane;
  float* s_out = a.dsum + p * nb * kActPanel + lane;
  if (x == nullptr) {
    for (int64_t k = 0; k < n; ++k) a.q[QIndex(n, p, k, lane)] = 128;
    for (int64_t b = 0; b < nb; ++b) d_out[b * kActPanel] = s_out[b * kActPanel] = 0.0f;
    return;
  }
  q.resize(static_cast<size_t>(n));
  QuantizeValues(k_quant, x, n, g, q.data(), d_out, s_out, kActPanel);
  uint8_t* dst = a.q + p * n * kActPanel + lane * 4;
  for (int64_t k = 0; k < n; k += 4) {
    for (int i = 0; i < 4; ++i) dst[k * kActPanel + i] = static_cast<uint8_t>(q[k + i] + 128);
  }
}

}  // namespace

int Int8Group(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
      return 32;
    case WeightType::kQ6_K:
      return 16;
    default:
      return 0;
  }
}

void PrepareInt8Activations(WeightType type, const Mat& x, Int8Activations& acts) {
  acts.rows = x.rows;
  acts.n = x.cols;
  acts.group = Int8Group(type);
  acts.super = IsKQuant(type) ? kQkK : kQk;
  acts.panels = (x.rows + kActPanel - 1) / kActPanel;
  const auto blocks = static_cast<size_t>(acts.panels * (x.cols / acts.group) * kActPanel);
  acts.q.resize(static_cast<size_t>(acts.panels * x.cols * kActPanel));
  acts.d.resize(blocks);
  acts.dsum.resize(blocks);
}

void QuantizeInt8PanelsScalar(bool k_quant, const Mat& x, const Int8ActivationsOut& a, int64_t p0,
                              int64_t p1) {
  std::vector<int8_t> q;
  for (int64_t p = p0; p < p1; ++p) {
    for (int lane = 0; lane < kActPanel; ++lane) {
      const int64_t t = p * kActPanel + lane;
      QuantizeRow(k_quant, t < x.rows ? x.data + t * x.stride : nullptr, a, p, lane, q);
    }
  }
}

bool QuantizeInt8PanelsSimd(CpuIsa isa, bool k_quant, const Mat& x, const Int8ActivationsOut& a,
                            int64_t p0, int64_t p1) {
#if defined(DELTASERVE_HAVE_X86_SIMD)
  if (isa == CpuIsa::kAvx512 && IsaSupported(CpuIsa::kAvx512)) {
    QuantizeInt8PanelsAvx512(k_quant, x, a, p0, p1);
    return true;
  }
  if ((isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvxVnni) && IsaSupported(CpuIsa::kAvx2)) {
    QuantizeInt8PanelsAvx2(k_quant, x, a, p0, p1);
    return true;
  }
#else
  (void)isa, (void)k_quant, (void)x, (void)a, (void)p0, (void)p1;
#endif
  return false;
}

void QuantizeInt8Panels(WeightType type, const Mat& x, Int8Activations& acts, int64_t p0,
                        int64_t p1, CpuIsa isa) {
  const Int8ActivationsOut out{acts.n, acts.group, acts.q.data(), acts.d.data(), acts.dsum.data()};
  if (!QuantizeInt8PanelsSimd(isa, IsKQuant(type), x, out, p0, p1)) {
    QuantizeInt8PanelsScalar(IsKQuant(type), x, out, p0, p1);
  }
}

void PrepareInt8Flat(WeightType type, const Mat& x, Int8FlatActivations& acts) {
  acts.n = x.cols;
  acts.group = Int8Group(type);
  const int64_t nb = x.cols / acts.group;
  acts.q.resize(static_cast<size_t>(x.rows * x.cols));
  acts.d.resize(static_cast<size_t>(x.rows * nb));
  acts.dsum.resize(static_cast<size_t>(x.rows * nb));
  acts.qsum.resize(static_cast<size_t>(x.rows * nb));
}

void QuantizeInt8FlatScalar(bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                            int64_t t1) {
  const int64_t nb = a.n / a.group;
  for (int64_t t = t0; t < t1; ++t) {
    QuantizeValues(k_quant, x.data + t * x.stride, a.n, a.group, a.q + t * a.n, a.d + t * nb,
                   a.dsum + t * nb, 1, a.qsum + t * nb);
  }
}

bool QuantizeInt8FlatSimd(CpuIsa isa, bool k_quant, const Mat& x, const Int8FlatOut& a, int64_t t0,
                          int64_t t1) {
#if defined(DELTASERVE_HAVE_X86_SIMD)
  if (isa == CpuIsa::kAvx512 && IsaSupported(CpuIsa::kAvx512)) {
    QuantizeInt8FlatAvx512(k_quant, x, a, t0, t1);
    return true;
  }
  if ((isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvxVnni) && IsaSupported(CpuIsa::kAvx2)) {
    QuantizeInt8FlatAvx2(k_quant, x, a, t0, t1);
    return true;
  }
#else
  (void)isa, (void)k_quant, (void)x, (void)a, (void)t0, (void)t1;
#endif
  return false;
}

void QuantizeInt8FlatRows(WeightType type, const Mat& x, Int8FlatActivations& acts, int64_t t0,
                          int64_t t1, CpuIsa isa) {
  const Int8FlatOut out{acts.n,        acts.group,       acts.q.data(),
                        acts.d.data(), acts.dsum.data(), acts.qsum.data()};
  if (!QuantizeInt8FlatSimd(isa, IsKQuant(type), x, out, t0, t1)) {
    QuantizeInt8FlatScalar(IsKQuant(type), x, out, t0, t1);
  }
}

void QuantizeInt8Flat(WeightType type, const Mat& x, Int8FlatActivations& acts, CpuIsa isa) {
  PrepareInt8Flat(type, x, acts);
  QuantizeInt8FlatRows(type, x, acts, 0, x.rows, isa);
}

Int8FlatBatch OrderInt8FlatForBatch(WeightType type, Int8FlatActivations& acts, int64_t rows,
                                    bool reorder) {
  if (reorder && type == WeightType::kQ4_K) {
    // Sub-blocks 1 and 2 of every 128 values trade places (matmul_int8.h).
    int8_t tmp[32];
    for (int64_t k = 0; k < rows * acts.n; k += 128) {
      int8_t* q = acts.q.data() + k;
      std::memcpy(tmp, q + 32, 32);
      std::memcpy(q + 32, q + 64, 32);
      std::memcpy(q + 64, tmp, 32);
    }
  }
  return {acts.q.data(), acts.d.data(), acts.dsum.data(), acts.n,
          acts.group,    rows,          acts.qsum.data()};
}

bool DecodeInt8RowsBaseline(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                            int64_t n, int g, int8_t* q, float* scale, float* minc, int32_t* wsum) {
  return DecodeInt8RowsImpl(type, w, row_bytes, rows, n, g, q, scale, minc, wsum);
}

Int8WeightRows DecodeInt8Rows(WeightType type, const uint8_t* w, size_t row_bytes, int64_t rows,
                              int64_t n, Int8WeightBuffer& buf, Int8DecodeFn decode) {
  const int g = Int8Group(type);
  const int64_t nb = n / g;
  buf.q.resize(static_cast<size_t>(rows * n));
  buf.scale.resize(static_cast<size_t>(rows * nb));
  buf.minc.assign(static_cast<size_t>(rows * nb), 0.0f);
  buf.wsum.resize(static_cast<size_t>(rows * nb));
  if (decode == nullptr) decode = &DecodeInt8RowsBaseline;
  const bool has_min = decode(type, w, row_bytes, rows, n, g, buf.q.data(), buf.scale.data(),
                              buf.minc.data(), buf.wsum.data());
  return {rows, n, g, has_min, buf.q.data(), buf.scale.data(), buf.minc.data(), buf.wsum.data(),
          type};
}

// Per block: the exact int32 sum, then one f32 multiply-add with the combined scale, and the
// min term, in the order the SIMD kernel uses.
void Int8RowsScalar(const Int8WeightRows& w, const Int8ActivationsView& a, Mat& y, int64_t col0) {
  const int64_t n = w.n;
  const int g = w.group;
  const int64_t nb = n / g;
  for (int64_t t = 0; t < a.rows; ++t) {
    const int64_t p = t / kActPanel;
    const int lane = static_cast<int>(t % kActPanel);
    const float* d = a.d + p * nb * kActPanel + lane;
    const float* dsum = a.dsum + p * nb * kActPanel + lane;
    for (int64_t r = 0; r < w.rows; ++r) {
      const int8_t* q = w.q + r * n;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t sum = -128 * w.wsum[r * nb + b];
        for (int j = 0; j < g; ++j) {
          const int64_t k = b * g + j;
          sum += static_cast<int32_t>(a.q[QIndex(n, p, k, lane)]) * q[k];
        }
        acc = std::fma(static_cast<float>(sum), d[b * kActPanel] * w.scale[r * nb + b], acc);
        if (w.has_min) acc = std::fma(w.minc[r * nb + b], dsum[b * kActPanel], acc);
      }
      y.data[t * y.stride + col0 + r] = acc;
    }
  }
}

}  // namespace deltaserve::kernels::internal
