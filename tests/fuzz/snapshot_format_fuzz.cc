// libFuzzer target for session-snapshot blobs (common/snapshot_format.h), which come from Redis
// and are untrusted. Each input is decoded twice: as it is, against the expectation the seeds
// were made for; and with its CRCs recomputed (tests/common/snapshot_blob_edit.h), against the
// expectation its own header describes, so that mutations reach the checks behind the
// checksums. Properties: no crash or out-of-bounds read (ASan); a refusal has a reason and a
// message; an accepted blob's contents match its header and the expectation, and re-encoding
// them (raw and zstd) gives blobs that decode to the same contents.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/snapshot_format.h"
#include "tests/common/snapshot_blob_edit.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/snapshot_fuzz_seeds.h"

namespace deltaserve::common {
namespace {

constexpr const char* kTarget = "snapshot_format_fuzz";

void Check(bool ok, const char* what) { fuzz::Check(ok, kTarget, what); }

bool SameContents(const DecodedSnapshot& a, const DecodedSnapshot& b) {
  return a.header.domain == b.header.domain && a.header.key == b.header.key &&
         a.header.n_tokens == b.header.n_tokens && a.header.layout == b.header.layout &&
         a.tokens == b.tokens && a.state.size() == b.state.size() && a.kv.size() == b.kv.size() &&
         (a.state.empty() || std::memcmp(a.state.data(), b.state.data(), a.state.size()) == 0) &&
         (a.kv.empty() || std::memcmp(a.kv.data(), b.kv.data(), a.kv.size()) == 0);
}

void DecodeAndCheck(std::string_view blob, const SnapshotExpectation& expect) {
  SnapshotRejectReason reason = SnapshotRejectReason::kNone;
  absl::StatusOr<DecodedSnapshot> d = DecodeSnapshot(blob, expect, &reason);
  Check(d.ok() == (reason == SnapshotRejectReason::kNone), "reason agrees with the status");
  if (!d.ok()) {
    Check(!d.status().message().empty(), "refusal without a message");
    const std::string_view name = SnapshotRejectReasonName(reason);
    Check(name != "none" && name != "unknown", "refusal without a reason name");
    return;
  }
  const SnapshotHeader& h = d->header;
  Check(h.domain == expect.domain && h.layout == expect.layout, "accepted another domain");
  Check(!expect.key.has_value() || *expect.key == h.key, "accepted another key");
  Check(h.stored_bytes == blob.size() && h.raw_bytes <= expect.max_decoded_bytes, "sizes");
  Check(d->tokens.size() == static_cast<size_t>(h.n_tokens) &&
            d->state.size() == h.layout.state_bytes &&
            d->kv.size() == SnapshotKvBytes(h.layout, h.n_pages).value_or(~uint64_t{0}),
        "section sizes");
  Check(h.n_pages == SnapshotPages(h.layout, h.domain.page_tokens, h.n_tokens), "page count");

  SnapshotContents c;
  c.key = h.key;
  c.domain = h.domain;
  c.tokens = d->tokens;
  c.layout = h.layout;
  c.state_parts = {d->state};
  c.kv_parts = {d->kv};
  for (SnapshotCompression compression : {SnapshotCompression::kNone, SnapshotCompression::kZstd}) {
    absl::StatusOr<std::string> again = EncodeSnapshot(c, compression);
    Check(again.ok(), "re-encoding an accepted blob failed");
    absl::StatusOr<DecodedSnapshot> e = DecodeSnapshot(*again, expect, nullptr);
    Check(e.ok(), "a re-encoded blob is refused");
    Check(SameContents(*d, *e), "a re-encoded blob decodes to other contents");
  }
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deltaserve::common;
  const std::string_view blob(reinterpret_cast<const char*>(data), size);
  DecodeAndCheck(blob, deltaserve::testing::SnapshotFuzzExpectation());

  if (size < kSnapshotHeaderBytes) return 0;
  std::string resealed(blob);
  deltaserve::testing::Reseal(resealed);
  absl::StatusOr<SnapshotHeader> h = ParseSnapshotHeader(resealed, nullptr);
  if (!h.ok()) return 0;
  SnapshotExpectation own;
  own.domain = h->domain;
  own.layout = h->layout;
  own.max_decoded_bytes = uint64_t{1} << 20;
  DecodeAndCheck(resealed, own);
  return 0;
}
