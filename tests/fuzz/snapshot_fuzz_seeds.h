#pragma once
// Seeds of the snapshot_format fuzz target, written by fuzz_seed_corpus into
// snapshot_format-seeds/: valid blobs (raw and zstd; 1 to 130 tokens; zero, patterned and noisy
// state) of the domain and layout that the target expects, so that mutations start from blobs
// that pass every check.

#include <cstdint>
#include <filesystem>

#include "common/snapshot_format.h"

namespace deltaserve::testing {

// What the fuzz target decodes against: a made-up model with 3 DeltaNet layers of 48 state
// bytes in all and one attention layer of q8_0 K/V pages of 16 tokens (34 bytes each).
inline common::SnapshotExpectation SnapshotFuzzExpectation() {
  common::SnapshotExpectation e;
  for (int i = 0; i < 32; ++i) e.domain.model_fingerprint[i] = static_cast<uint8_t>(3 * i);
  e.domain.k_type = "q8_0";
  e.domain.v_type = "q8_0";
  e.domain.state_type = "f32";
  e.domain.page_tokens = 16;
  e.layout = {3, 1, 48, 34, 34};
  e.max_decoded_bytes = uint64_t{1} << 20;  // keeps each input's allocations small
  return e;
}

// Returns the number of seeds written into `dir`, or -1 (with a message on stderr).
int WriteSnapshotSeeds(const std::filesystem::path& dir);

}  // namespace deltaserve::testing
