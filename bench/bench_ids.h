#pragma once
// What the engine and serving benchmarks share with each other and with their llama.cpp
// harnesses (bench/llama_cpp_*_throughput.py implement the same steps): the pseudo-random
// prompt ids both sides feed, the hash that proves both saw the same ids, and peak RSS.

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace deltaserve::bench {

// splitmix64 (Steele, Lea, Flood 2014).
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// `n` ids in [0, min(2000, n_vocab)): low ids are ordinary byte-level BPE tokens in the Qwen3
// vocabulary (no special tokens), and the tiny golden vocabularies have 2048 entries.
inline std::vector<int32_t> PromptIds(int64_t n, uint64_t seed, int64_t n_vocab) {
  const uint64_t limit = static_cast<uint64_t>(std::min<int64_t>(2000, n_vocab));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t state = seed;
  for (int32_t& id : ids) id = static_cast<int32_t>(SplitMix64(state) % limit);
  return ids;
}

// FNV-1a over `ids` as 32-bit little-endian values, continuing from `h`.
inline uint64_t HashIds(const std::vector<int32_t>& ids, uint64_t h = 0xCBF29CE484222325ULL) {
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xFF;
      h *= 0x100000001B3ULL;
    }
  }
  return h;
}

// Peak resident set size of this process so far, MiB.
inline double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace deltaserve::bench
