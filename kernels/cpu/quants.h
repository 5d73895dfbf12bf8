// GGML weight block formats (ggml-common.h), their f16/bf16 scalars, and scalar reference
// decoders and encoders for every WeightType. These are the definitions the SIMD paths of
// matmul_avx2.cc / matmul_avx512.cc are tested against (their decoded floats are bit-identical),
// and what the synthetic-model generator and the tests use to write quantized weights.
//
//   std::vector<uint8_t> blocks(RowBytes(WeightType::kQ4_K, n));
//   QuantizeRow(WeightType::kQ4_K, x, blocks.data(), n);    // n % 256 == 0
//   DequantizeRow(WeightType::kQ4_K, blocks.data(), y, n);   // |y - x| <= step / 2
//
// A row of n elements is n / block_size blocks back to back, no padding. Multi-byte fields are
// little-endian (as in GGUF); structs are only 2-byte aligned, like the tensor data of a GGUF
// file whose rows are multiples of the block size in bytes.
//
// The inline helpers here are for baseline-ISA code only: the AVX2/AVX-512 translation units
// keep private copies, so the linker can never pick an AVX-512 instance of a shared inline
// function for code that runs on an older CPU.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"

namespace deltaserve::kernels {

// Elements per block of the "legacy" formats and of the K-quant super-blocks.
inline constexpr int kQk = 32;
inline constexpr int kQkK = 256;

// Q4_0: x = d * (q - 8), q in [0, 15]. qs[j] holds element j in its low nibble and element
// j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = d * q + m, q in [0, 15], nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16), q in [0, 31]: low 4 bits as Q4_0, bit 4 of element j is bit j of the
// little-endian uint32 qh.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m, q in [0, 31], bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;  // f16
  uint16_t m;  // f16
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q8_0: x = d * q, q in [-127, 127] (int8).
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQk];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_K: 256 values in 8 sub-blocks of 32. Sub-block j: x = d * sc_j * q - dmin * m_j with 6-bit
// sc_j, m_j packed in `scales` (see GetScaleMinK4) and q in [0, 15]. Chunk c (values 64c ..
// 64c+63) uses qs[32c .. 32c+31]: value 64c + l is the low nibble of qs[32c + l] (sub-block
// 2c), value 64c + 32 + l its high nibble (sub-block 2c + 1).
struct BlockQ4_K {
  uint16_t d;     // f16, scale of the sub-block scales
  uint16_t dmin;  // f16, scale of the sub-block mins
  uint8_t scales[12];
  uint8_t qs[kQkK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a fifth bit: value 64c + l (l < 32) adds 16 when bit 2c of qh[l] is set,
// value 64c + 32 + l when bit 2c + 1 is set. q in [0, 31].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQkK / 8];
  uint8_t qs[kQkK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 256 values in 16 sub-blocks of 16, x = d * scales[i / 16] * (q - 32), q in [0, 63].
// Half h (values 128h .. 128h+127) uses ql[64h ..], qh[32h ..]: for l < 32, value 128h + l is
// low nibble of ql[64h + l] | bits 0-1 of qh[32h + l] << 4; + 32: low nibble of ql[64h + 32 +
// l] | bits 2-3; + 64: high nibble of ql[64h + l] | bits 4-5; + 96: high nibble of
// ql[64h + 32 + l] | bits 6-7.
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];
  uint8_t qh[kQkK / 4];
  int8_t scales[kQkK / 16];
  uint16_t d;  // f16
};
static_assert(sizeof(BlockQ6_K) == 210);

// IEEE half <-> float. Fp32ToFp16 rounds to nearest even (like F16C's _cvtss_sh(x, 0)),
// overflows to inf, and keeps NaN quiet.
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
// bfloat16 <-> float; Fp32ToBf16 rounds to nearest even and keeps NaN quiet (as ggml does).
inline float Bf16ToFp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
uint16_t Fp32ToBf16(float f);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block: j < 4 in the low 6
// bits of scales[j] and scales[j + 4]; j >= 4 split between a nibble of scales[j + 4] and the
// top 2 bits of scales[j - 4] (scale) and scales[j] (min).
inline void GetScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Bytes of a row of `n` elements of `type` (n a multiple of the block size); 0 for an unknown
// type.
size_t RowBytes(WeightType type, int64_t n);

// Decodes the n values of a row (n a multiple of the block size) into out[0..n), with exactly
// the arithmetic of llama.cpp's dequantize_row_* (so results are bit-identical to it).
// kUnsupportedType for an unknown type, kInvalidArgument when n is not a multiple of the block.
KernelStatus DequantizeRow(WeightType type, const void* blocks, float* out, int64_t n);

// Encodes n finite floats into blocks (RowBytes(type, n) bytes), round to nearest:
// - F16/BF16: nearest even; F32: a copy.
// - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: the rules of llama.cpp's quantize_row_*_ref, so the bytes
//   equal what llama-quantize writes for these types without an importance matrix
//   (quants_golden_test checks this for Q8_0 and Q5_0 on the golden models). Error per value
//   <= step / 2 (Q4_0/Q5_0: <= step, the value opposite the block's largest magnitude may
//   clamp), plus the f16 rounding of the block scale.
// - Q4_K, Q5_K, Q6_K: a simple scheme (not llama.cpp's iterative search): 6-bit (Q6_K 8-bit)
//   sub-block scales and mins rounded up so every value lies inside its sub-block's grid, hence
//   error <= d * sc / 2 for every value.
KernelStatus QuantizeRow(WeightType type, const float* in, void* blocks, int64_t n);

}  // namespace deltaserve::kernels
