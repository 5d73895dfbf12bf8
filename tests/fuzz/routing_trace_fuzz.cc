// libFuzzer target for routing traces (common/routing_trace.h), which deltaserve-placement-sim
// reads from files it is given. Each input is read twice: as it is, and with the header's and
// every whole record's CRC-32C recomputed, so that mutations reach the field checks behind the
// checksums. Properties: no crash, no out-of-bounds read (ASan), no allocation beyond the input's
// size (the records' ids fit in the bytes read); a refusal has a message; an accepted record has
// n_layer * n_tokens * k ids, each in [0, n_expert), and re-encoding it gives its bytes back.
#include <cstdint>
#include <cstring>
#include <string>

#include "common/crc32c.h"
#include "common/routing_trace.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::common {
namespace {

constexpr const char* kTarget = "routing_trace_fuzz";

void Check(bool ok, const char* what) { fuzz::Check(ok, kTarget, what); }

uint32_t Crc(const std::string& b, size_t off, size_t n) {
  return Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(b.data()) + off, n));
}
uint32_t GetU32(const std::string& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}
void PutU32(std::string& b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }

// Recomputes the header CRC and the CRC of every record whose size (from its header fields and
// n_tokens) fits in the bytes, walking records as the reader does.
std::string WithFixedChecksums(std::string b) {
  if (b.size() < kRoutingTraceHeaderBytes) return b;
  PutU32(b, 124, Crc(b, 0, 124));
  const uint64_t per_token = uint64_t{GetU32(b, 16)} * GetU32(b, 24) * 2;
  size_t off = kRoutingTraceHeaderBytes;
  while (b.size() - off >= kRoutingStepHeaderBytes) {
    const uint64_t body = kRoutingStepHeaderBytes + per_token * GetU32(b, off + 4);
    if (per_token == 0 || body > b.size() - off || b.size() - off - body < kRoutingStepCrcBytes) {
      break;
    }
    PutU32(b, off + body, Crc(b, off, body));
    off += body + kRoutingStepCrcBytes;
  }
  return b;
}

void ReadAndCheck(const std::string& bytes) {
  absl::StatusOr<std::unique_ptr<RoutingTraceReader>> r = RoutingTraceReader::FromBytes(bytes);
  if (!r.ok()) {
    Check(!r.status().message().empty(), "header refusal without a message");
    return;
  }
  const RoutingTraceHeader& h = (*r)->header();
  Check(ValidateRoutingTraceHeader(h).ok(), "accepted a header out of limits");
  absl::StatusOr<std::string> head = EncodeRoutingTraceHeader(h);
  Check(head.ok() && head->size() == kRoutingTraceHeaderBytes, "header re-encodes");
  RoutingStep step;
  for (;;) {
    const uint64_t start = (*r)->offset();
    absl::StatusOr<bool> more = (*r)->Next(step);
    if (!more.ok()) {
      Check(!more.status().message().empty(), "record refusal without a message");
      Check((*r)->offset() == start, "offset after an error is the failed record's");
      Check(!(*r)->Next(step).ok(), "an error is sticky");
      return;
    }
    if (!*more) {
      Check(start == bytes.size(), "clean end before the end of the bytes");
      return;
    }
    Check(step.n_tokens >= 1 &&
              step.ids.size() == static_cast<size_t>(h.n_layer * step.n_tokens * h.k),
          "id count");
    for (int32_t id : step.ids) Check(id >= 0 && id < h.n_expert, "id out of range");
    std::string again;
    Check(AppendRoutingStep(h, step, &again).ok(), "an accepted record re-encodes");
    Check((*r)->offset() - start == again.size() &&
              std::memcmp(bytes.data() + start, again.data(), again.size()) == 0,
          "re-encoding gives the record's bytes");
  }
}

}  // namespace
}  // namespace deltaserve::common

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  deltaserve::common::ReadAndCheck(bytes);
  deltaserve::common::ReadAndCheck(deltaserve::common::WithFixedChecksums(bytes));
  return 0;
}
