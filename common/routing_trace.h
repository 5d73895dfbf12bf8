// Routing traces (docs/moe_placement.md, "Routing traces"): which experts every token of every
// forward pass chose in every MoE layer, as a worker records them with --record-routing FILE and
// deltaserve-placement-sim replays them through its cost model. A trace is a header naming the
// model and its routing shape, then one record per forward pass, appended and flushed as the
// pass completes, so a trace can be read while it is still being written and a worker that dies
// loses at most the pass it was writing. Trace files are untrusted input to the reader: every
// size is checked against the bytes left before anything is allocated, every record against its
// CRC-32C, and every id against the header's expert count.
//
//   ASSIGN_OR_RETURN(auto w, RoutingTraceWriter::Create("run.trace", header));
//   RETURN_IF_ERROR(w->Append(ids, n_tokens, k));   // from a RoutingObserver, per pass
//   ASSIGN_OR_RETURN(RoutingTrace t, ReadRoutingTrace("run.trace"));
//
// Byte layout, version 1 (integers little-endian):
//
//   header, 128 bytes:
//     0   u8[8]  magic "DSROUTE\0"
//     8   u32    format version (1); bytes 0..11 keep this meaning in every version
//     12  u32    header size (128)
//     16  u32    n_layer (MoE layers, 1..4096)      20 u32 n_expert (1..32768)
//     24  u32    k, experts per token (1..min(n_expert, 256))
//     28  u32    bytes per id: 2 (int16)
//     32  u8[32] model fingerprint (the worker's ModelFingerprint; zeros when unknown)
//     64  u8[56] model name, UTF-8, NUL-padded (cut at 56 bytes)
//     120 u32    reserved (0)
//     124 u32    CRC-32C of bytes [0, 124)
//   then records, back to back, to the end of the file:
//     0   u8[4]  tag "STEP"
//     4   u32    n_tokens of the pass (1..2^20)
//     8   u64    pass index (the writer's count of passes, from 0, increasing)
//     16  u64    microseconds since the writer created the trace
//     24  ids    n_layer * n_tokens * k ids as int16, [layer][token][j] (the pass's tokens in
//                batch order, each token's k experts in the router's order)
//     24 + 2 * n_layer * n_tokens * k: u32 CRC-32C of the record's bytes before it
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace deltaserve::common {

inline constexpr uint32_t kRoutingTraceVersion = 1;
inline constexpr size_t kRoutingTraceHeaderBytes = 128;
inline constexpr size_t kRoutingTraceModelNameBytes = 56;
// Bytes of a record before its ids, and its CRC after them.
inline constexpr size_t kRoutingStepHeaderBytes = 24;
inline constexpr size_t kRoutingStepCrcBytes = 4;
// Limits the reader enforces (and the writer refuses beyond): no real model comes near them,
// and they keep a hostile header from asking for absurd allocations.
inline constexpr int64_t kRoutingTraceMaxLayers = 4096;
inline constexpr int64_t kRoutingTraceMaxExperts = 32768;  // ids fit int16
inline constexpr int64_t kRoutingTraceMaxK = 256;
inline constexpr int64_t kRoutingStepMaxTokens = int64_t{1} << 20;

// What a trace describes: the model and its routing shape.
struct RoutingTraceHeader {
  int64_t n_layer = 0;   // MoE layers
  int64_t n_expert = 0;  // routed experts per layer
  int64_t k = 0;         // experts each token chooses
  std::array<uint8_t, 32> fingerprint{};
  std::string model_name;  // at most kRoutingTraceModelNameBytes bytes are stored

  bool operator==(const RoutingTraceHeader&) const = default;
};

// One forward pass.
struct RoutingStep {
  uint64_t index = 0;    // the pass's number
  uint64_t time_us = 0;  // since the trace was created
  int64_t n_tokens = 0;
  std::vector<int32_t> ids;  // [n_layer][n_tokens][k]

  bool operator==(const RoutingStep&) const = default;
};

// OK when the shape is within the limits above (InvalidArgument naming the field otherwise).
absl::Status ValidateRoutingTraceHeader(const RoutingTraceHeader& header);

// The 128 header bytes of `header` (which must be valid).
absl::StatusOr<std::string> EncodeRoutingTraceHeader(const RoutingTraceHeader& header);
// Appends the record of one pass to `out`. `ids` is [n_layer][n_tokens][k] with every id in
// [0, n_expert); InvalidArgument (naming the layer, token and id) otherwise, `out` unchanged.
absl::Status AppendRoutingStep(const RoutingTraceHeader& header, const RoutingStep& step,
                               std::string* out);

// Records passes into a file. Append is meant for the engine thread (a RoutingObserver): it
// encodes into a reused buffer, writes once and flushes, so a step costs one write(2). Safe to
// call from several threads (a mutex), though a worker calls it from one.
class RoutingTraceWriter {
 public:
  // Creates (or truncates) `path` and writes the header.
  static absl::StatusOr<std::unique_ptr<RoutingTraceWriter>> Create(
      const std::string& path, const RoutingTraceHeader& header);
  ~RoutingTraceWriter();
  RoutingTraceWriter(const RoutingTraceWriter&) = delete;
  RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;

  // Appends one pass (the RoutingObserver's arguments: ids [n_layer][n_tokens][k]). A pass of
  // no tokens writes nothing. Bad sizes or ids: InvalidArgument, nothing written. A failed write
  // (disk full) is an error, and every later Append fails the same way.
  absl::Status Append(absl::Span<const int32_t> ids, int64_t n_tokens, int64_t k);
  // Flushes and closes the file; Append fails afterwards. The destructor closes too.
  absl::Status Close();

  const RoutingTraceHeader& header() const { return header_; }
  uint64_t steps_written() const;
  uint64_t bytes_written() const;
  const std::string& path() const { return path_; }

 private:
  RoutingTraceWriter(std::string path, RoutingTraceHeader header, std::FILE* file);

  const std::string path_;
  const RoutingTraceHeader header_;
  const int64_t start_us_;
  mutable std::mutex mu_;
  std::FILE* file_;  // null once closed
  absl::Status error_;
  uint64_t steps_ = 0;
  uint64_t bytes_ = 0;
  std::string record_;  // reused encoding buffer
};

// Reads a trace record by record, from a file or from bytes in memory.
class RoutingTraceReader {
 public:
  // Opens `path` and reads its header (NotFound, or InvalidArgument naming what is wrong).
  // Records appended after Open (a trace still being written) are not read.
  static absl::StatusOr<std::unique_ptr<RoutingTraceReader>> Open(const std::string& path);
  // The same over `bytes` (tests, fuzzing).
  static absl::StatusOr<std::unique_ptr<RoutingTraceReader>> FromBytes(std::string bytes);
  ~RoutingTraceReader();
  RoutingTraceReader(const RoutingTraceReader&) = delete;
  RoutingTraceReader& operator=(const RoutingTraceReader&) = delete;

  const RoutingTraceHeader& header() const { return header_; }

  // Reads the next record into `step`: true, or false at the end of the trace. Errors name the
  // record's number and byte offset: DataLoss for a record cut short by the end of the file
  // (truncated_tail() is then true), InvalidArgument for a bad tag, size, CRC or id. After an
  // error every call fails the same way.
  absl::StatusOr<bool> Next(RoutingStep& step);

  // Byte offset of the next record (after an error, of the record that failed).
  uint64_t offset() const { return offset_; }
  // Bytes of the trace (of the file when it was opened).
  uint64_t size() const { return size_; }
  // Whether the last error was a record cut short by the end of the file.
  bool truncated_tail() const { return truncated_tail_; }

 private:
  RoutingTraceReader() = default;
  absl::Status ReadHeader();
  // Copies `n` bytes at offset_ into `out` (n <= remaining, checked by the caller).
  absl::Status ReadBytes(size_t n, char* out);

  std::string source_name_;
  std::FILE* file_ = nullptr;  // or, when null, bytes_
  std::string bytes_;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  uint64_t records_ = 0;
  RoutingTraceHeader header_;
  absl::Status error_;
  bool truncated_tail_ = false;
  std::string buffer_;
};

// A whole trace in memory.
struct RoutingTrace {
  RoutingTraceHeader header;
  std::vector<RoutingStep> steps;
  // Bytes after the last complete record, dropped (only with allow_truncated_tail).
  uint64_t truncated_tail_bytes = 0;
};

struct RoutingTraceReadOptions {
  // Accept a file whose last record is cut short (a worker killed while writing): the complete
  // records are returned and the cut one counted in truncated_tail_bytes. Corruption anywhere
  // else is an error whatever this says.
  bool allow_truncated_tail = false;
  // Stop after this many records (0: all).
  uint64_t max_steps = 0;
};

// Reads every record of `path`.
absl::StatusOr<RoutingTrace> ReadRoutingTrace(const std::string& path,
                                              const RoutingTraceReadOptions& options = {});

// Skewed routing for tests and benchmarks: the popularity rank (0 = hottest) of every expert of
// `layer` for `topic`, a permutation of [0, n_expert) drawn from (seed, layer, topic). Shared by
// deltaserve-synth --expert-skew (built into a model's router weights) and
// deltaserve-placement-sim --synthetic-trace (sampled directly), so that both rank alike.
std::vector<int32_t> ZipfExpertRanks(uint64_t seed, int64_t layer, int64_t topic, int64_t n_expert);

}  // namespace deltaserve::common
