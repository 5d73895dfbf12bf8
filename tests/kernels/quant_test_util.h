// Helpers shared by the block-format and matrix-product tests: the list of weight types, and
// random rows (as floats, and as raw blocks with random payload but finite f16 scales).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quants.h"

namespace deltaserve::kernels::testing {

inline const std::vector<WeightType>& AllWeightTypes() {
  static const std::vector<WeightType> types = {
      WeightType::kF32,  WeightType::kF16,  WeightType::kBF16, WeightType::kQ8_0,
      WeightType::kQ4_0, WeightType::kQ4_1, WeightType::kQ5_0, WeightType::kQ5_1,
      WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};
  return types;
}

inline std::string TypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "F32";
    case WeightType::kF16:
      return "F16";
    case WeightType::kBF16:
      return "BF16";
    case WeightType::kQ8_0:
      return "Q8_0";
    case WeightType::kQ4_0:
      return "Q4_0";
    case WeightType::kQ4_1:
      return "Q4_1";
    case WeightType::kQ5_0:
      return "Q5_0";
    case WeightType::kQ5_1:
      return "Q5_1";
    case WeightType::kQ4_K:
      return "Q4_K";
    case WeightType::kQ5_K:
      return "Q5_K";
    case WeightType::kQ6_K:
      return "Q6_K";
  }
  return "unknown";
}

// Every level above kScalar.
inline std::vector<CpuIsa> SimdIsas() {
  return {std::begin(kAllCpuIsas) + 1, std::end(kAllCpuIsas)};
}

// n values ~ N(0, 1), scaled per 32-value group by a random factor in [0.01, 10] and shifted
// in some groups, so blocks see different ranges, signs and asymmetries.
inline std::vector<float> RandomValues(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-2.0f, 1.0f);
  std::uniform_int_distribution<int> shift_kind(0, 3);
  std::vector<float> v(static_cast<size_t>(n));
  float scale = 1.0f;
  float shift = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) {
      scale = std::pow(10.0f, log_scale(rng));
      shift = shift_kind(rng) == 0 ? scale * 1.5f : 0.0f;
    }
    v[static_cast<size_t>(i)] = normal(rng) * scale + shift;
  }
  return v;
}

// A row of n values of `type` with random payload bits. The f16 / bf16 fields are random finite
// numbers (payload and scales), so decoders see every bit pattern of quants and scales but no
// inf or NaN.
inline std::vector<uint8_t> RandomBlocks(WeightType type, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> bytes(RowBytes(type, n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  auto put_half = [&](size_t offset) {
    const uint16_t h = Fp32ToFp16(value(rng));
    bytes[offset] = static_cast<uint8_t>(h & 0xFF);
    bytes[offset + 1] = static_cast<uint8_t>(h >> 8);
  };
  const BlockLayout layout = BlockLayoutOf(type);
  const size_t bb = static_cast<size_t>(layout.block_bytes);
  for (size_t base = 0; base < bytes.size(); base += bb) {
    switch (type) {
      case WeightType::kF32: {
        const float f = value(rng);
        std::memcpy(&bytes[base], &f, sizeof(f));
        break;
      }
      case WeightType::kF16:
        put_half(base);
        break;
      case WeightType::kBF16: {
        const uint16_t h = Fp32ToBf16(value(rng));
        bytes[base] = static_cast<uint8_t>(h & 0xFF);
        bytes[base + 1] = static_cast<uint8_t>(h >> 8);
        break;
      }
      case WeightType::kQ4_0:
      case WeightType::kQ5_0:
      case WeightType::kQ8_0:
        put_half(base);
        break;
      case WeightType::kQ4_1:
      case WeightType::kQ5_1:
      case WeightType::kQ4_K:
      case WeightType::kQ5_K:
        put_half(base);
        put_half(base + 2);
        break;
      case WeightType::kQ6_K:
        put_half(base + offsetof(BlockQ6_K, d));
        break;
    }
  }
  return bytes;
}

// The quantization step around value i of a quantized row: the scale one integer level is
// worth (|d| for the 32-value formats, d * sc of the sub-block for K-quants); 0 for dense types.
inline double QuantStep(WeightType type, const uint8_t* row, int64_t i) {
  auto half_at = [&](size_t offset) {
    uint16_t h;
    std::memcpy(&h, row + offset, sizeof(h));
    return static_cast<double>(Fp16ToFp32(h));
  };
  const BlockLayout layout = BlockLayoutOf(type);
  const size_t block = static_cast<size_t>(i / layout.block_size * layout.block_bytes);
  const int64_t j = i % layout.block_size;
  switch (type) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
      return std::fabs(half_at(block));
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      uint8_t sc;
      uint8_t m;
      GetScaleMinK4(static_cast<int>(j / 32), row + block + offsetof(BlockQ4_K, scales), &sc, &m);
      return half_at(block) * sc;
    }
    case WeightType::kQ6_K: {
      const auto sc = static_cast<int8_t>(row[block + offsetof(BlockQ6_K, scales) + j / 16]);
      return std::fabs(half_at(block + offsetof(BlockQ6_K, d)) * sc);
    }
    default:
      return 0;
  }
}

}  // namespace deltaserve::kernels::testing
