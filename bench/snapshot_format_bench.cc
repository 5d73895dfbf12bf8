// Cost of a session-snapshot blob (common/snapshot_format.h) at the 0.8B model's shape: encode
// and decode, raw and zstd level 1, and CRC-32C alone, median of --reps runs.
//
//   deltaserve-bench-snapshot-format [--tokens 8192] [--reps 5]
//
// The shape: 18 DeltaNet layers with 18 MiB of f32 state in all, 6 attention layers with f16 K
// and V of 2 heads x 256 dims (1 KiB per token per layer each), 256-token pages; at 8,192
// tokens that is 18 MiB of state and 96 MiB of KV. The state is Gaussian noise and the KV f16
// values in [1, 2) with random mantissas, so zstd's ratio here is a floor, not a forecast.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/snapshot_format.h"

namespace {

using deltaserve::common::SnapshotCompression;
namespace common = deltaserve::common;

template <typename F>
double MedianMs(int reps, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n_tokens = 8192;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) n_tokens = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  if (n_tokens < 1) {
    std::fprintf(stderr, "usage: %s [--tokens N>=1] [--reps R]\n", argv[0]);
    return 2;
  }
  common::SnapshotDomain domain;
  domain.page_tokens = 256;
  const common::SnapshotLayout layout{18, 6, uint64_t{18} << 20, 256 << 10, 256 << 10};
  const uint64_t pages = common::SnapshotPages(layout, domain.page_tokens, n_tokens);

  std::vector<int32_t> tokens(n_tokens);
  for (int64_t i = 0; i < n_tokens; ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 151936);
  std::vector<uint8_t> state(layout.state_bytes);
  std::vector<uint8_t> kv(*common::SnapshotKvBytes(layout, pages));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i + 4 <= state.size(); i += 4) {
    const float f = normal(rng);
    std::memcpy(&state[i], &f, 4);
  }
  for (size_t i = 0; i + 2 <= kv.size(); i += 2) {
    const uint16_t h = static_cast<uint16_t>(0x3C00 | (rng() & 0x3FF));
    std::memcpy(&kv[i], &h, 2);
  }

  common::SnapshotContents c;
  c.domain = domain;
  c.tokens = tokens;
  c.layout = layout;
  c.key = common::SnapshotKeysAt(common::SnapshotRootKey(domain), tokens, {n_tokens}).value()[0];
  c.state_parts = {state};
  // As a worker passes them: one view per page per layer, K then V.
  for (size_t off = 0; off < kv.size(); off += layout.k_page_bytes) {
    c.kv_parts.push_back(absl::MakeConstSpan(kv).subspan(off, layout.k_page_bytes));
  }
  common::SnapshotExpectation expect;
  expect.domain = domain;
  expect.layout = layout;
  expect.key = c.key;
  expect.max_decoded_bytes = uint64_t{4} << 30;

  const double crc_ms = MedianMs(reps, [&] {
    volatile uint32_t crc = common::Crc32c(kv);
    (void)crc;
  });
  std::printf("tokens %lld: state %.1f MiB, kv %.1f MiB; CRC-32C of the kv %.1f ms (%s)\n",
              static_cast<long long>(n_tokens), state.size() / 1048576.0, kv.size() / 1048576.0,
              crc_ms, common::internal::Crc32cUsesHardware() ? "SSE4.2, 3 chains" : "table");
  for (SnapshotCompression compression : {SnapshotCompression::kNone, SnapshotCompression::kZstd}) {
    std::string blob;
    const double encode_ms =
        MedianMs(reps, [&] { blob = common::EncodeSnapshot(c, compression).value(); });
    bool ok = true;
    const double decode_ms =
        MedianMs(reps, [&] { ok = ok && common::DecodeSnapshot(blob, expect, nullptr).ok(); });
    std::printf("%-5s blob %.1f MiB: encode %.1f ms, decode %.1f ms%s\n",
                compression == SnapshotCompression::kNone ? "raw" : "zstd1",
                blob.size() / 1048576.0, encode_ms, decode_ms, ok ? "" : "  DECODE FAILED");
    if (!ok) return 1;
  }
  return 0;
}
