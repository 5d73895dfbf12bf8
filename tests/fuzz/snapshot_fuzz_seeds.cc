#include "tests/fuzz/snapshot_fuzz_seeds.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::testing {

int WriteSnapshotSeeds(const std::filesystem::path& dir) {
  const common::SnapshotExpectation e = SnapshotFuzzExpectation();
  int n = 0;
  for (int n_tokens : {1, 5, 16, 64, 70, 130}) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < n_tokens; ++i) tokens.push_back((i * 7919 + 11) % 151936);
    const uint64_t pages = common::SnapshotPages(e.layout, e.domain.page_tokens, n_tokens);
    for (int fill = 0; fill < 3; ++fill) {
      std::vector<uint8_t> state(e.layout.state_bytes);
      std::vector<uint8_t> kv(*common::SnapshotKvBytes(e.layout, pages));
      uint32_t x = 99u + static_cast<uint32_t>(n_tokens);
      for (std::vector<uint8_t>* v : {&state, &kv}) {
        for (size_t i = 0; i < v->size(); ++i) {
          x = x * 1664525 + 1013904223;
          (*v)[i] = fill == 0 ? 0 : fill == 1 ? static_cast<uint8_t>(i % 5) : (x >> 24);
        }
      }
      common::SnapshotContents c;
      c.domain = e.domain;
      c.key = common::SnapshotKeysAt(common::SnapshotRootKey(e.domain), tokens,
                                     {static_cast<int64_t>(n_tokens)})
                  .value()[0];
      c.tokens = tokens;
      c.layout = e.layout;
      c.state_parts = {state};
      c.kv_parts = {kv};
      for (auto compression :
           {common::SnapshotCompression::kNone, common::SnapshotCompression::kZstd}) {
        absl::StatusOr<std::string> blob = common::EncodeSnapshot(c, compression);
        if (!blob.ok()) {
          std::fprintf(stderr, "snapshot seeds: %s\n",
                       std::string(blob.status().message()).c_str());
          return -1;
        }
        const std::string name =
            absl::StrCat("blob-", n_tokens, "-fill", fill,
                         compression == common::SnapshotCompression::kZstd ? "-zstd" : "-raw");
        std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
        out.write(blob->data(), static_cast<std::streamsize>(blob->size()));
        if (!out) return -1;
        ++n;
      }
    }
  }
  return n;
}

}  // namespace deltaserve::testing
