// The Redis tier of session snapshots (docs/snapshots.md, "Redis tier"): what lets a worker resume
// a conversation that another worker — or this one before a restart — has read. It sits behind
// the RAM tier (snapshot_cache.h) and never on the engine thread.
//
// Publish. The scheduler hands every finished sequence's snapshots to Publish (the publisher
// hook, on the engine thread), which only picks the ones worth sharing and queues them: the
// longest beyond the prompt's length (the end of the output, for clients that send the reply back
// verbatim), then the longest at or below it (the deepest point the next turn of a client that
// rewrites the reply still shares). The queue is bounded; when the writer falls behind, whole
// sequences are dropped and counted, never waited for. The queue holds weak references, so
// snapshots waiting there never keep the RAM tier from giving their KV pages back to serving (one
// evicted before its turn is dropped and counted). One writer thread encodes each snapshot
// (common/snapshot_format.h) straight from the RAM tier's buffers — the state copy and, on host
// memory, the KV pages in place (PagedKvCache::HostKPage: a page held by a snapshot is never
// written) — and SETs it with a TTL under `ds:snap:v1:<key hex>`, holding the one snapshot it
// writes only while it writes it (the engine thread gives evicted pages back in
// SnapshotCache::ReleaseUnreferenced). Keys this worker wrote within the last half TTL are not
// written again, and blobs over max_bytes are not written at all.
//
// Fetch. A request whose prompt may have a longer snapshot in Redis than in RAM goes through
// PlanLookup (cheap: key hashing and SnapshotCache::Contains) on the gRPC thread and then
// FetchAsync on a small pool of fetch threads, each with its own RedisClient: one pipelined
// STRLEN round trip for every candidate key longer than the RAM hit (deadline: `timeout`), then
// a GET of the longest existing one (deadline: timeout + size / min rate, the size being known
// from STRLEN), verified by DecodeSnapshot against this worker's domain, layout and the key; a
// rejected blob is counted by reason and the next shorter existing key is tried (two GETs at
// most). The callback gets the image (or nullptr) and submits the request; so a slow or dead
// Redis costs a request at most its deadlines, and any failure runs it from the RAM hit or cold.
//
// Device memory (a GPU worker, PagedKvCache::HostKPage null): the writer thread may not use the
// backend, so Publish copies the chosen snapshots' KV pages to the host itself; it must then be
// called on the engine thread (the scheduler's publisher hook is), and at most 2 x max_bytes of
// such copies wait in the queue.
//
// Threading: Publish (see above), PlanLookup, FetchAsync and stats() from any thread. The
// destructor stops the writer (unwritten snapshots are dropped) and the fetch threads after
// their current call; queued fetches still run their callback with nullptr.
//
//   ASSIGN_OR_RETURN(auto tier, RedisSnapshotTier::Create(options, m.shared_snapshots(), ...));
//   scheduler.SetSnapshotPublisher([t = tier.get()](auto s, int64_t n) { t->Publish(s, n); });
//   if (auto plan = tier->PlanLookup(prompt, boundaries)) tier->FetchAsync(*plan, done);
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/redis_client.h"
#include "common/snapshot_format.h"
#include "common/snapshot_key.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/recurrent_state_slots.h"
#include "worker/cache/snapshot_cache.h"

namespace deltaserve::worker {

// Redis key prefix of version-1 snapshot blobs; the key is this plus SnapshotKey::Hex().
inline constexpr std::string_view kRedisSnapshotKeyPrefix = "ds:snap:v1:";
// Default of RedisTierOptions::min_bytes_per_second (--redis-min-rate 100 MB/s).
inline constexpr double kRedisDefaultMinBytesPerSecond = 100e6;

// The Redis key of a snapshot.
std::string RedisSnapshotKey(const common::SnapshotKey& key);

// The layout a snapshot of this cache has (SnapshotContents::layout, the expectation's layout).
common::SnapshotLayout SnapshotLayoutOf(const PagedKvCache& kv, const RecurrentStateLayout& state);

// The worker's --redis* flags.
struct RedisTierOptions {
  common::RedisOptions redis;                       // --redis URL
  absl::Duration timeout = absl::Milliseconds(50);  // --redis-timeout: the lookup round trip
  absl::Duration ttl = absl::Seconds(3600);         // --redis-ttl
  // --redis-min-rate: the slowest transfer a GET or SET of a blob may have before it is given
  // up: a blob of n bytes gets timeout + n / this. 250 MB/s cut off a 90 MB GET at 408 ms on a
  // 2-core guest where the other worker's SET shared the Redis server (bench, 2026-11-25).
  double min_bytes_per_second = kRedisDefaultMinBytesPerSecond;
  uint64_t max_bytes = uint64_t{512} << 20;         // --redis-max-bytes: largest blob
  common::SnapshotCompression compression = common::SnapshotCompression::kNone;
  int fetch_threads = 2;          // concurrent lookups; each has its own connection
  size_t max_publish_queue = 64;  // finished sequences waiting to be written
  size_t max_fetch_queue = 256;   // lookups waiting for a fetch thread
};

// What the tier has done (monotonic counters, the `…_snapshot_redis_*` metrics).
struct RedisTierStats {
  int64_t lookups = 0;        // STRLEN round trips asked
  int64_t hits = 0;           // images handed to a request
  int64_t fetched_bytes = 0;  // blob bytes of those images
  int64_t lookup_errors = 0, get_errors = 0, set_errors = 0;
  int64_t fetch_skipped = 0;  // waited for a fetch thread past the timeout: not asked
  int64_t written = 0, written_bytes = 0;
  int64_t write_skipped_recent = 0;     // written by this worker within half the TTL
  int64_t write_skipped_too_large = 0;  // over max_bytes
  int64_t publish_dropped = 0;     // not written: the queue was full, or evicted from RAM first
  double publish_seconds_sum = 0;  // from Publish to the SET's reply, per written blob
  int64_t publish_seconds_count = 0;
  // Blobs refused by DecodeSnapshot (or over max_bytes by their STRLEN), by reason.
  int64_t rejected[static_cast<int>(common::SnapshotRejectReason::kTooLarge) + 1] = {};
};

// The keys one request may find in Redis: those of its snapshot positions beyond the RAM hit.
struct RedisLookupPlan {
  std::vector<common::SnapshotKey> keys;  // ascending positions
  std::vector<int64_t> positions;
};

// Which existing candidates to GET and in what order (the lookup policy as one pure function):
// the positions whose STRLEN is > 0, longest first, at most `max_gets` of them. `lengths` are
// STRLEN's answers, one per plan position (0: no such key).
std::vector<size_t> RedisFetchOrder(absl::Span<const int64_t> lengths, size_t max_gets);

// Which of a finished sequence's snapshots to write, in writing order (the publish policy as one
// pure function): indexes into `n_tokens` (the snapshots' lengths) of the longest beyond
// `prompt_tokens` (the end of the output), then of the longest at or below it; either may be
// missing. Ties go to the later index. The end of the output goes first: it is what an agent that
// sends the reply back verbatim needs next, and with ~30 MB blobs (0.8B model, 1K tokens) the
// second write would otherwise wait ~75 ms behind the first.
std::vector<size_t> SnapshotsToPublish(absl::Span<const int64_t> n_tokens, int64_t prompt_tokens);

// See the file comment.
class RedisSnapshotTier {
 public:
  // `cache` is the model's RAM tier; `kv` its paged cache (for zero-copy page reads); `layout`
  // the model's snapshot layout; `ctx` and `interval` the scheduler's max_context and
  // snapshot_interval (the lookup computes the same positions); `model` names it in logs.
  // Fails only on bad options (TLS files); a Redis that does not answer is not an error here.
  static absl::StatusOr<std::unique_ptr<RedisSnapshotTier>> Create(
      const RedisTierOptions& options, std::shared_ptr<SnapshotCache> cache,
      std::shared_ptr<const PagedKvCache> kv, const common::SnapshotLayout& layout, int64_t ctx,
      int64_t interval, std::string model);
  ~RedisSnapshotTier();
  RedisSnapshotTier(const RedisSnapshotTier&) = delete;
  RedisSnapshotTier& operator=(const RedisSnapshotTier&) = delete;

  // The scheduler's publisher (any thread on host memory, the engine thread on device memory;
  // never blocks beyond a short lock, plus the KV copy on device memory).
  void Publish(std::vector<std::shared_ptr<const LocalSnapshot>> snapshots, int64_t prompt_tokens);

  // The candidate keys longer than the RAM tier's best for this prompt, or nullopt when Redis
  // cannot improve on RAM (no positions, or the longest is held in RAM).
  std::optional<RedisLookupPlan> PlanLookup(absl::Span<const int32_t> prompt,
                                            absl::Span<const int32_t> message_boundaries) const;

  // Runs the lookup on a fetch thread, then `done` there with the image (nullptr on a miss, an
  // error, a timeout, a full queue — then `done` runs on the caller's thread — or shutdown).
  void FetchAsync(RedisLookupPlan plan,
                  std::function<void(std::shared_ptr<const SnapshotImage>)> done);

  // The lookup itself on the calling thread with `client` (the fetch threads' body).
  std::shared_ptr<const SnapshotImage> Fetch(common::RedisClient& client,
                                             const RedisLookupPlan& plan);

  // Waits (at most `max`) until no lookup is queued or running, so a draining worker submits
  // the requests it accepted before its scheduler stops; false on timeout.
  bool WaitForFetches(absl::Duration max);

  RedisTierStats stats() const;
  const RedisTierOptions& options() const { return options_; }

 private:
  struct PublishJob;
  struct FetchJob;
  RedisSnapshotTier() = default;
  void WriterLoop();
  void FetchLoop(common::RedisClient& client);
  void Write(common::RedisClient& client, const LocalSnapshot& snap,
             const std::vector<uint8_t>* staged_kv,
             std::chrono::steady_clock::time_point published);
  // Deadline of a GET or SET of `bytes`: the round trip plus the transfer at the slowest rate.
  absl::Duration TransferDeadline(uint64_t bytes) const {
    return options_.timeout +
           absl::Seconds(static_cast<double>(bytes) / options_.min_bytes_per_second);
  }
  // One log line per kind of degraded event: the first, then at most one a minute.
  void LogDegraded(absl::string_view kind, absl::string_view message);

  RedisTierOptions options_;
  std::shared_ptr<SnapshotCache> cache_;
  std::shared_ptr<const PagedKvCache> kv_;
  common::SnapshotLayout layout_;
  int64_t ctx_ = 0, interval_ = 0;
  std::string model_;
  std::unique_ptr<common::RedisClient> writer_client_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<PublishJob> publish_queue_;
  std::deque<FetchJob> fetch_queue_;
  int fetching_ = 0;  // lookups popped from fetch_queue_ whose callback has not returned
  absl::flat_hash_map<common::SnapshotKey, std::chrono::steady_clock::time_point> written_;
  std::deque<common::SnapshotKey> written_order_;
  RedisTierStats stats_;
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point> last_log_;
  absl::flat_hash_map<std::string, int64_t> suppressed_;

  std::thread writer_;
  std::vector<std::thread> fetchers_;
};

}  // namespace deltaserve::worker
