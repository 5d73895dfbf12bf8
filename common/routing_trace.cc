#include "common/routing_trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace deltaserve::common {
namespace {

static_assert(std::endian::native == std::endian::little);

constexpr char kMagic[8] = {'D', 'S', 'R', 'O', 'U', 'T', 'E', '\0'};
constexpr char kStepTag[4] = {'S', 'T', 'E', 'P'};
constexpr uint32_t kIdBytes = 2;

// Header field offsets (the table in routing_trace.h).
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 12;
constexpr size_t kOffNLayer = 16;
constexpr size_t kOffNExpert = 20;
constexpr size_t kOffK = 24;
constexpr size_t kOffIdBytes = 28;
constexpr size_t kOffFingerprint = 32;
constexpr size_t kOffName = 64;
constexpr size_t kOffReserved = 120;
constexpr size_t kOffHeaderCrc = 124;
static_assert(kOffName + kRoutingTraceModelNameBytes == kOffReserved);
static_assert(kOffHeaderCrc + 4 == kRoutingTraceHeaderBytes);

void PutU32(char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t CrcOf(const char* p, size_t n) {
  return Crc32c(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(p), n));
}

// Ids per record of `n_tokens` tokens; the header's limits keep this below 2^51.
uint64_t IdsPerStep(const RoutingTraceHeader& h, int64_t n_tokens) {
  return static_cast<uint64_t>(h.n_layer) * static_cast<uint64_t>(n_tokens) *
         static_cast<uint64_t>(h.k);
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status ValidateRoutingTraceHeader(const RoutingTraceHeader& h) {
  if (h.n_layer < 1 || h.n_layer > kRoutingTraceMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_layer ", h.n_layer, " is not in [1, ", kRoutingTraceMaxLayers, "]"));
  }
  if (h.n_expert < 1 || h.n_expert > kRoutingTraceMaxExperts) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_expert ", h.n_expert, " is not in [1, ", kRoutingTraceMaxExperts, "]"));
  }
  const int64_t max_k = std::min(h.n_expert, kRoutingTraceMaxK);
  if (h.k < 1 || h.k > max_k) {
    return absl::InvalidArgumentError(absl::StrCat("k ", h.k, " is not in [1, ", max_k, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeRoutingTraceHeader(const RoutingTraceHeader& h) {
  if (absl::Status s = ValidateRoutingTraceHeader(h); !s.ok()) return s;
  std::string out(kRoutingTraceHeaderBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  PutU32(p + kOffVersion, kRoutingTraceVersion);
  PutU32(p + kOffHeaderSize, static_cast<uint32_t>(kRoutingTraceHeaderBytes));
  PutU32(p + kOffNLayer, static_cast<uint32_t>(h.n_layer));
  PutU32(p + kOffNExpert, static_cast<uint32_t>(h.n_expert));
  PutU32(p + kOffK, static_cast<uint32_t>(h.k));
  PutU32(p + kOffIdBytes, kIdBytes);
  std::memcpy(p + kOffFingerprint, h.fingerprint.data(), h.fingerprint.size());
  std::memcpy(p + kOffName, h.model_name.data(),
              std::min(h.model_name.size(), kRoutingTraceModelNameBytes));
  PutU32(p + kOffHeaderCrc, CrcOf(p, kOffHeaderCrc));
  return out;
}

namespace {

// AppendRoutingStep over a span of ids (the writer's path: no copy of the ids).
absl::Status EncodeStep(const RoutingTraceHeader& h, uint64_t index, uint64_t time_us,
                        int64_t n_tokens, absl::Span<const int32_t> ids, std::string* out) {
  if (n_tokens < 1 || n_tokens > kRoutingStepMaxTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pass of ", n_tokens, " tokens (1..", kRoutingStepMaxTokens, ")"));
  }
  const uint64_t n_ids = IdsPerStep(h, n_tokens);
  if (ids.size() != n_ids) {
    return absl::InvalidArgumentError(absl::StrCat(ids.size(), " ids for ", h.n_layer, " layers x ",
                                                   n_tokens, " tokens x k ", h.k, " (", n_ids,
                                                   " expected)"));
  }
  for (uint64_t i = 0; i < n_ids; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= h.n_expert) {
      const uint64_t per_layer = n_ids / static_cast<uint64_t>(h.n_layer);
      return absl::InvalidArgumentError(absl::StrCat("layer ", i / per_layer, " token ",
                                                     (i % per_layer) / h.k, ": expert id ", id,
                                                     " is not in [0, ", h.n_expert, ")"));
    }
  }
  const size_t start = out->size();
  out->resize(start + kRoutingStepHeaderBytes + n_ids * kIdBytes + kRoutingStepCrcBytes);
  char* p = out->data() + start;
  std::memcpy(p, kStepTag, sizeof(kStepTag));
  PutU32(p + 4, static_cast<uint32_t>(n_tokens));
  PutU64(p + 8, index);
  PutU64(p + 16, time_us);
  char* q = p + kRoutingStepHeaderBytes;
  for (uint64_t i = 0; i < n_ids; ++i) {
    const auto v = static_cast<int16_t>(ids[i]);
    std::memcpy(q + i * kIdBytes, &v, kIdBytes);
  }
  const size_t body = kRoutingStepHeaderBytes + n_ids * kIdBytes;
  PutU32(p + body, CrcOf(p, body));
  return absl::OkStatus();
}

}  // namespace

absl::Status AppendRoutingStep(const RoutingTraceHeader& h, const RoutingStep& step,
                               std::string* out) {
  return EncodeStep(h, step.index, step.time_us, step.n_tokens, step.ids, out);
}

// ---- RoutingTraceWriter ----

RoutingTraceWriter::RoutingTraceWriter(std::string path, RoutingTraceHeader header, std::FILE* file)
    : path_(std::move(path)), header_(std::move(header)), start_us_(NowMicros()), file_(file) {}

RoutingTraceWriter::~RoutingTraceWriter() { (void)Close(); }

absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> RoutingTraceWriter::Create(
    const std::string& path, const RoutingTraceHeader& header) {
  absl::StatusOr<std::string> head = EncodeRoutingTraceHeader(header);
  if (!head.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing trace ", path, ": ", head.status().message()));
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create routing trace ", path, ": ", std::strerror(errno)));
  }
  if (std::fwrite(head->data(), 1, head->size(), f) != head->size() || std::fflush(f) != 0) {
    const int err = errno;
    std::fclose(f);
    return absl::InternalError(
        absl::StrCat("cannot write routing trace ", path, ": ", std::strerror(err)));
  }
  auto w = std::unique_ptr<RoutingTraceWriter>(new RoutingTraceWriter(path, header, f));
  w->bytes_ = head->size();
  return w;
}

absl::Status RoutingTraceWriter::Append(absl::Span<const int32_t> ids, int64_t n_tokens,
                                        int64_t k) {
  if (n_tokens == 0) return absl::OkStatus();
  if (k != header_.k) {
    return absl::InvalidArgumentError(absl::StrCat("routing trace ", path_, ": a pass with k ", k,
                                                   ", the trace has ", header_.k));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("routing trace ", path_, " is closed"));
  }
  const auto time_us = static_cast<uint64_t>(std::max<int64_t>(0, NowMicros() - start_us_));
  record_.clear();
  if (absl::Status s = EncodeStep(header_, steps_, time_us, n_tokens, ids, &record_); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("routing trace ", path_, ": ", s.message()));
  }
  if (std::fwrite(record_.data(), 1, record_.size(), file_) != record_.size() ||
      std::fflush(file_) != 0) {
    error_ = absl::InternalError(
        absl::StrCat("cannot write routing trace ", path_, ": ", std::strerror(errno)));
    return error_;
  }
  ++steps_;
  bytes_ += record_.size();
  return absl::OkStatus();
}

absl::Status RoutingTraceWriter::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ == nullptr) return error_;
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok && error_.ok()) {
    error_ = absl::InternalError(
        absl::StrCat("cannot close routing trace ", path_, ": ", std::strerror(errno)));
  }
  return error_;
}

uint64_t RoutingTraceWriter::steps_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

uint64_t RoutingTraceWriter::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

// ---- RoutingTraceReader ----

RoutingTraceReader::~RoutingTraceReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<RoutingTraceReader>> RoutingTraceReader::Open(
    const std::string& path) {
  auto r = std::unique_ptr<RoutingTraceReader>(new RoutingTraceReader());
  r->source_name_ = path;
  r->file_ = std::fopen(path.c_str(), "rb");
  if (r->file_ == nullptr) {
    const int err = errno;
    const std::string what =
        absl::StrCat("cannot open routing trace ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(what) : absl::PermissionDeniedError(what);
  }
  struct stat st {};
  if (fstat(fileno(r->file_), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("routing trace ", path, " is not a file"));
  }
  r->size_ = static_cast<uint64_t>(st.st_size);
  if (absl::Status s = r->ReadHeader(); !s.ok()) return s;
  return r;
}

absl::StatusOr<std::unique_ptr<RoutingTraceReader>> RoutingTraceReader::FromBytes(
    std::string bytes) {
  auto r = std::unique_ptr<RoutingTraceReader>(new RoutingTraceReader());
  r->source_name_ = "(bytes)";
  r->size_ = bytes.size();
  r->bytes_ = std::move(bytes);
  if (absl::Status s = r->ReadHeader(); !s.ok()) return s;
  return r;
}

absl::Status RoutingTraceReader::ReadBytes(size_t n, char* out) {
  if (file_ == nullptr) {
    std::memcpy(out, bytes_.data() + offset_, n);
  } else if (std::fread(out, 1, n, file_) != n) {
    // The file shrank after Open.
    return absl::DataLossError(
        absl::StrCat("routing trace ", source_name_, ": read failed at byte ", offset_));
  }
  offset_ += n;
  return absl::OkStatus();
}

absl::Status RoutingTraceReader::ReadHeader() {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("routing trace ", source_name_, ": ", why));
  };
  if (size_ < kRoutingTraceHeaderBytes) {
    return bad(absl::StrCat("not a routing trace (", size_, " bytes, shorter than the ",
                            kRoutingTraceHeaderBytes, "-byte header)"));
  }
  char h[kRoutingTraceHeaderBytes];
  if (absl::Status s = ReadBytes(sizeof(h), h); !s.ok()) return s;
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    return bad("not a routing trace (no DSROUTE magic)");
  }
  if (const uint32_t v = GetU32(h + kOffVersion); v != kRoutingTraceVersion) {
    return bad(
        absl::StrCat("format version ", v, ", this build reads version ", kRoutingTraceVersion));
  }
  if (GetU32(h + kOffHeaderCrc) != CrcOf(h, kOffHeaderCrc)) {
    return bad("the header's checksum does not match (corrupt file)");
  }
  if (GetU32(h + kOffHeaderSize) != kRoutingTraceHeaderBytes) {
    return bad(absl::StrCat("header size ", GetU32(h + kOffHeaderSize)));
  }
  if (GetU32(h + kOffIdBytes) != kIdBytes) {
    return bad(absl::StrCat("ids of ", GetU32(h + kOffIdBytes), " bytes (2 expected)"));
  }
  if (GetU32(h + kOffReserved) != 0) return bad("reserved header field is not 0");
  header_.n_layer = GetU32(h + kOffNLayer);
  header_.n_expert = GetU32(h + kOffNExpert);
  header_.k = GetU32(h + kOffK);
  if (absl::Status s = ValidateRoutingTraceHeader(header_); !s.ok()) return bad(s.message());
  std::memcpy(header_.fingerprint.data(), h + kOffFingerprint, header_.fingerprint.size());
  const char* name = h + kOffName;
  header_.model_name.assign(name, strnlen(name, kRoutingTraceModelNameBytes));
  return absl::OkStatus();
}

absl::StatusOr<bool> RoutingTraceReader::Next(RoutingStep& step) {
  if (!error_.ok()) return error_;
  if (offset_ == size_) return false;
  const uint64_t start = offset_;
  auto fail = [&](absl::Status s) {
    error_ = std::move(s);
    offset_ = start;
    return error_;
  };
  auto where = [&] {
    return absl::StrCat("routing trace ", source_name_, ": record ", records_, " at byte ", start,
                        ": ");
  };
  const uint64_t left = size_ - offset_;
  if (left < kRoutingStepHeaderBytes) {
    truncated_tail_ = true;
    return fail(absl::DataLossError(
        absl::StrCat(where(), "cut short (", left, " bytes left, the file ends mid-record)")));
  }
  char head[kRoutingStepHeaderBytes];
  if (absl::Status s = ReadBytes(sizeof(head), head); !s.ok()) return fail(s);
  if (std::memcmp(head, kStepTag, sizeof(kStepTag)) != 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(where(), "no STEP tag (corrupt file)")));
  }
  const int64_t n_tokens = GetU32(head + 4);
  if (n_tokens < 1 || n_tokens > kRoutingStepMaxTokens) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        where(), n_tokens, " tokens is not in [1, ", kRoutingStepMaxTokens, "] (corrupt file)")));
  }
  const uint64_t n_ids = IdsPerStep(header_, n_tokens);
  const uint64_t rest = n_ids * kIdBytes + kRoutingStepCrcBytes;
  if (rest > size_ - offset_) {
    truncated_tail_ = true;
    return fail(absl::DataLossError(absl::StrCat(where(), "cut short: ", n_tokens, " tokens need ",
                                                 kRoutingStepHeaderBytes + rest, " bytes, ",
                                                 kRoutingStepHeaderBytes + (size_ - offset_),
                                                 " are left (the file ends mid-record)")));
  }
  buffer_.resize(kRoutingStepHeaderBytes + rest);
  std::memcpy(buffer_.data(), head, sizeof(head));
  if (absl::Status s = ReadBytes(rest, buffer_.data() + sizeof(head)); !s.ok()) return fail(s);
  const size_t body = kRoutingStepHeaderBytes + n_ids * kIdBytes;
  if (GetU32(buffer_.data() + body) != CrcOf(buffer_.data(), body)) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(where(), "checksum does not match (corrupt file)")));
  }
  step.index = GetU64(head + 8);
  step.time_us = GetU64(head + 16);
  step.n_tokens = n_tokens;
  step.ids.resize(n_ids);
  const char* q = buffer_.data() + kRoutingStepHeaderBytes;
  const uint64_t per_layer = n_ids / static_cast<uint64_t>(header_.n_layer);
  for (uint64_t i = 0; i < n_ids; ++i) {
    int16_t v;
    std::memcpy(&v, q + i * kIdBytes, kIdBytes);
    if (v < 0 || v >= header_.n_expert) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(where(), "layer ", i / per_layer, " token ", (i % per_layer) / header_.k,
                       ": expert id ", v, " is not in [0, ", header_.n_expert, ")")));
    }
    step.ids[i] = v;
  }
  ++records_;
  return true;
}

absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path,
                                              const RoutingTraceReadOptions& options) {
  absl::StatusOr<std::unique_ptr<RoutingTraceReader>> reader = RoutingTraceReader::Open(path);
  if (!reader.ok()) return reader.status();
  RoutingTrace trace;
  trace.header = (*reader)->header();
  while (options.max_steps == 0 || trace.steps.size() < options.max_steps) {
    RoutingStep step;
    absl::StatusOr<bool> more = (*reader)->Next(step);
    if (!more.ok()) {
      if ((*reader)->truncated_tail() && options.allow_truncated_tail) {
        trace.truncated_tail_bytes = (*reader)->size() - (*reader)->offset();
        break;
      }
      return more.status();
    }
    if (!*more) break;
    trace.steps.push_back(std::move(step));
  }
  return trace;
}

std::vector<int32_t> ZipfExpertRanks(uint64_t seed, int64_t layer, int64_t topic,
                                     int64_t n_expert) {
  auto mix = [](uint64_t x) {  // SplitMix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  std::vector<int32_t> order(static_cast<size_t>(std::max<int64_t>(n_expert, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  uint64_t state =
      mix(seed ^ mix(static_cast<uint64_t>(layer) * 0x10001 + static_cast<uint64_t>(topic)));
  for (int64_t i = n_expert - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<int64_t>(mix(state++) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  // order[r] is the expert of rank r; invert.
  std::vector<int32_t> rank(order.size());
  for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int32_t>(r);
  return rank;
}

}  // namespace deltaserve::common
