// Inline helpers of the int8-activation path that need no more than AVX2 (256-bit loads and
// stores, byte sums, nibbles and the bit moves of the 5-bit types, the software prefetch of the
// decode kernels), shared by the AVX2 / AVX-VNNI files (matmul_int8_avx2*.cc,
// matmul_int8_avxvnni.cc) and, through matmul_int8_avx512_common.h, the AVX-512 ones. Included only
// by files built with at least -mavx2 -mfma -mf16c (quants.cmake); internal linkage, so each
// includer gets its own copy compiled with its own flags (see quants.h on sharing code across ISA
// files).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace deltaserve::kernels::internal {
namespace {

// Sums of the 32 unsigned bytes of v: s16[0] over bytes 0..15, s16[1] over 16..31.
inline void ByteSums16(__m256i v, int32_t s16[2]) {
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_sad_epu8(v, _mm256_setzero_si256()));
  s16[0] = static_cast<int32_t>(t[0] + t[1]);
  s16[1] = static_cast<int32_t>(t[2] + t[3]);
}
inline int32_t ByteSum32(__m256i v) {
  int32_t s[2];
  ByteSums16(v, s);
  return s[0] + s[1];
}
inline __m256i Load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void Store256(int8_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
// Bit `bit` of every byte of h, moved to bit 4 (per byte: 16-bit shifts never carry a set bit
// across bytes after the mask).
inline __m256i BitTo4(__m256i h, int bit) {
  const __m256i b =
      _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(bit)), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(b, 4);
}

inline int32_t LoadI32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The 32 nibbles of a legacy block's qs: values 0..15 the low nibbles, 16..31 the high ones.
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0xF));
}

// Bit k of the 32-bit qh as 16 in byte k (the fifth bit of Q5_0 / Q5_1 value k).
inline __m256i FifthBits(const uint8_t* qh) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(LoadI32(qh)), shuf);
  // Byte j of each 8 has every bit but j set: all ones exactly where bit j is.
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

// The multi-row kernels read R rows side by side, R streams advancing 144 / 210 bytes a step,
// which the hardware prefetchers follow poorly: without help, Q6_K 1024 x 151936 on one thread
// took 11.4 ms against 4.4 ms for the single-row kernel (bench/matmul_bench.cc). So each block
// read also prefetches the block kPrefetchBytes ahead (rounded up to whole rows). It was 8 KiB,
// chosen on one thread; with two threads streaming a whole model the loads still stalled on the
// Q6_K scales and qh (perf annotate), and decode of synth-0.8b-q4_k_m at depth 0 measured, in
// alternating runs of one binary (medians of 4-5 runs of 3 x 64 tokens): 2 KiB 85.4 tok/s,
// 3 KiB 93.0, 4 KiB 85.3-85.4, 6 KiB 81.0, 8 KiB 78.3, 16 KiB 80.7, 24 KiB 78.6; 4 KiB was
// ahead of 8 KiB in each of 5 paired rounds (+7.7%). T1 and NTA hints were no better than T0.
constexpr size_t kPrefetchBytes = 4096;

// Bytes from a block to the one to prefetch: whole rows, at least the four being read.
inline size_t PrefetchDistance(size_t row_bytes) {
  const size_t rows = (kPrefetchBytes + row_bytes - 1) / row_bytes;
  return (rows < 4 ? 4 : rows) * row_bytes;
}

// Prefetches the lines of the kBytes-byte block at p + ahead (every line, as consecutive calls
// walk contiguous blocks).
template <int kBytes>
inline void PrefetchAhead(const void* p, size_t ahead) {
  const char* q = static_cast<const char*>(p) + ahead;
  for (int o = 0; o < kBytes; o += 64) _mm_prefetch(q + o, _MM_HINT_T0);
}

}  // namespace
}  // namespace deltaserve::kernels::internal
