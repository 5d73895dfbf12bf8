#include "worker/cache/redis_snapshot_tier.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using Clock = std::chrono::steady_clock;

// GETs one lookup makes at most: the longest existing blob and, when it is refused, the next.
constexpr size_t kMaxGets = 2;
// Keys remembered as written (the "written recently" set), oldest forgotten first.
constexpr size_t kMaxRemembered = 65536;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs `call(deadline)` once more, within what is left of `deadline`, when it failed on a
// connection that was open before it: a connection to a server that restarted since it was last
// used fails at the first write or read (a reset, at once), and is not a sign of trouble now.
template <typename Call>
auto WithOneReconnect(common::RedisClient& client, absl::Duration deadline, Call call) {
  const bool was_connected = client.connected();
  const absl::Time t0 = absl::Now();
  auto result = call(deadline);
  const absl::Duration left = deadline - (absl::Now() - t0);
  if (!result.ok() && was_connected && left > absl::ZeroDuration()) result = call(left);
  return result;
}

}  // namespace

struct RedisSnapshotTier::PublishJob {
  // Weak: a queued snapshot must not keep the RAM tier from giving its KV pages back; one
  // evicted before its turn is not written.
  std::vector<std::weak_ptr<const LocalSnapshot>> snapshots;
  // Per snapshot, its KV read out of device memory at Publish (on the engine thread: a Backend
  // is driven by one thread), or null where the pages are host memory and encoded in place.
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> staged_kv;
  uint64_t staged_bytes = 0;
  Clock::time_point published;
};

struct RedisSnapshotTier::FetchJob {
  RedisLookupPlan plan;
  std::function<void(std::shared_ptr<const SnapshotImage>)> done;
  Clock::time_point queued;
};

std::string RedisSnapshotKey(const common::SnapshotKey& key) {
  return absl::StrCat(common::Sv(kRedisSnapshotKeyPrefix), key.Hex());
}

common::SnapshotLayout SnapshotLayoutOf(const PagedKvCache& kv, const RecurrentStateLayout& state) {
  common::SnapshotLayout l;
  l.n_deltanet_layers = static_cast<uint32_t>(state.n_layers);
  l.n_attention_layers = static_cast<uint32_t>(kv.shape().n_layers);
  l.state_bytes = state.bytes();
  l.k_page_bytes = kv.k_page_bytes();
  l.v_page_bytes = kv.v_page_bytes();
  return l;
}

std::vector<size_t> SnapshotsToPublish(absl::Span<const int64_t> n_tokens, int64_t prompt_tokens) {
  std::optional<size_t> in_prompt, beyond;
  for (size_t i = 0; i < n_tokens.size(); ++i) {
    std::optional<size_t>& best = n_tokens[i] <= prompt_tokens ? in_prompt : beyond;
    if (!best || n_tokens[i] >= n_tokens[*best]) best = i;
  }
  std::vector<size_t> picked;
  if (beyond) picked.push_back(*beyond);
  if (in_prompt) picked.push_back(*in_prompt);
  return picked;
}

std::vector<size_t> RedisFetchOrder(absl::Span<const int64_t> lengths, size_t max_gets) {
  std::vector<size_t> order;
  for (size_t i = lengths.size(); i-- > 0 && order.size() < max_gets;) {
    if (lengths[i] > 0) order.push_back(i);
  }
  return order;
}

absl::StatusOr<std::unique_ptr<RedisSnapshotTier>> RedisSnapshotTier::Create(
    const RedisTierOptions& options, std::shared_ptr<SnapshotCache> cache,
    std::shared_ptr<const PagedKvCache> kv, const common::SnapshotLayout& layout, int64_t ctx,
    int64_t interval, std::string model) {
  if (cache == nullptr || kv == nullptr) {
    return absl::InvalidArgumentError("the Redis tier needs the RAM tier and the KV cache");
  }
  if (options.fetch_threads < 1) return absl::InvalidArgumentError("fetch_threads must be >= 1");
  std::unique_ptr<RedisSnapshotTier> t(new RedisSnapshotTier());
  t->options_ = options;
  t->options_.redis.max_reply_bytes =
      static_cast<int64_t>(std::min<uint64_t>(options.max_bytes, INT64_MAX));
  t->cache_ = std::move(cache);
  t->kv_ = std::move(kv);
  t->layout_ = layout;
  t->ctx_ = ctx;
  t->interval_ = interval;
  t->model_ = std::move(model);
  // SETs of large blobs get their own deadline per call (Write); this is the lookup's.
  absl::StatusOr<std::unique_ptr<common::RedisClient>> writer =
      common::RedisClient::Create(t->options_.redis, options.timeout);
  if (!writer.ok()) return writer.status();
  t->writer_client_ = std::move(*writer);
  std::vector<std::unique_ptr<common::RedisClient>> clients;
  for (int i = 0; i < options.fetch_threads; ++i) {
    absl::StatusOr<std::unique_ptr<common::RedisClient>> c =
        common::RedisClient::Create(t->options_.redis, options.timeout);
    if (!c.ok()) return c.status();
    clients.push_back(std::move(*c));
  }
  t->writer_ = std::thread([p = t.get()] { p->WriterLoop(); });
  for (auto& c : clients) {
    t->fetchers_.emplace_back([p = t.get(), c = std::shared_ptr<common::RedisClient>(
                                                std::move(c))] { p->FetchLoop(*c); });
  }
  return t;
}

RedisSnapshotTier::~RedisSnapshotTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    publish_queue_.clear();  // drops the references: their pages go back to the cache
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  for (std::thread& t : fetchers_) t.join();
}

void RedisSnapshotTier::LogDegraded(absl::string_view kind, absl::string_view message) {
  const Clock::time_point now = Clock::now();
  int64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, first] = last_log_.try_emplace(std::string(kind), now);
    if (!first && now - it->second < std::chrono::seconds(60)) {
      ++suppressed_[it->first];
      return;
    }
    it->second = now;
    suppressed = std::exchange(suppressed_[it->first], 0);
  }
  // RedactedUrl: the password never reaches a log.
  std::fprintf(
      stderr, "snapshot redis model=%s %s: %s (redis %s)%s\n", model_.c_str(),
      std::string(kind).c_str(), std::string(message).c_str(), options_.redis.RedactedUrl().c_str(),
      suppressed > 0 ? absl::StrCat("; ", suppressed, " more since the last line").c_str() : "");
}

void RedisSnapshotTier::Publish(std::vector<std::shared_ptr<const LocalSnapshot>> snapshots,
                                int64_t prompt_tokens) {
  PublishJob job;
  job.published = Clock::now();
  std::erase(snapshots, nullptr);
  std::vector<int64_t> lengths;
  for (const auto& snap : snapshots) lengths.push_back(snap->n_tokens());
  std::vector<size_t> chosen = SnapshotsToPublish(lengths, prompt_tokens);
  // KV pages in device memory (a GPU worker) are copied to the host here, on the engine thread,
  // since the writer thread may not use the backend; at most 2 x max_bytes of such copies wait
  // in the queue (beyond that whole sequences are dropped, as when the queue is full).
  const bool staging =
      kv_->shape().n_layers > 0 && kv_->total_pages() > 0 && kv_->HostKPage(0, 0) == nullptr;
  uint64_t queued_staged = 0;
  if (staging) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    for (const PublishJob& j : publish_queue_) queued_staged += j.staged_bytes;
  }
  bool over = false;
  for (size_t i : chosen) {
    std::shared_ptr<const std::vector<uint8_t>> staged;
    if (staging && !snapshots[i]->pages().empty()) {
      const uint64_t bytes = static_cast<uint64_t>(kv_->shape().n_layers) *
                             snapshots[i]->pages().size() *
                             (kv_->k_page_bytes() + kv_->v_page_bytes());
      if (queued_staged + job.staged_bytes + bytes > 2 * options_.max_bytes) {
        over = true;
        break;
      }
      absl::StatusOr<std::vector<uint8_t>> copy = cache_->CopyKv(*snapshots[i]);
      if (!copy.ok()) {
        LogDegraded("encode", copy.status().message());
        continue;
      }
      job.staged_bytes += bytes;
      staged = std::make_shared<const std::vector<uint8_t>>(std::move(*copy));
    }
    job.snapshots.push_back(snapshots[i]);
    job.staged_kv.push_back(std::move(staged));
  }
  snapshots.clear();
  if (over) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.publish_dropped += static_cast<int64_t>(chosen.size());
    }
    LogDegraded("publish_dropped",
                "device KV copies waiting to be written exceed 2 x "
                "--redis-max-bytes; snapshots dropped");
    return;
  }
  if (job.snapshots.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (publish_queue_.size() >= options_.max_publish_queue) {
      stats_.publish_dropped += static_cast<int64_t>(job.snapshots.size());
    } else {
      publish_queue_.push_back(std::move(job));
      cv_.notify_all();
      return;
    }
  }
  LogDegraded("publish_dropped", "the write queue is full; snapshots dropped");
}

void RedisSnapshotTier::FetchLoop(common::RedisClient& client) {
  while (true) {
    FetchJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !fetch_queue_.empty(); });
      if (fetch_queue_.empty()) return;  // stopping, nothing left
      job = std::move(fetch_queue_.front());
      fetch_queue_.pop_front();
      ++fetching_;
    }
    bool skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Shutting down, or a request that waited for a thread as long as a lookup may take: it
      // is not made to wait longer and runs without Redis.
      skip = stop_;
      if (!skip && Clock::now() - job.queued > absl::ToChronoNanoseconds(options_.timeout)) {
        ++stats_.fetch_skipped;
        skip = true;
      }
    }
    job.done(skip ? nullptr : Fetch(client, job.plan));
    {
      std::lock_guard<std::mutex> lock(mu_);
      --fetching_;
    }
    cv_.notify_all();
  }
}

void RedisSnapshotTier::WriterLoop() {
  while (true) {
    PublishJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !publish_queue_.empty(); });
      if (stop_) return;
      job = std::move(publish_queue_.front());
      publish_queue_.pop_front();
    }
    for (size_t i = 0; i < job.snapshots.size(); ++i) {
      std::shared_ptr<const LocalSnapshot> snap = job.snapshots[i].lock();
      if (snap == nullptr) {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.publish_dropped;
        continue;
      }
      Write(*writer_client_, *snap, job.staged_kv[i].get(), job.published);
      job.staged_kv[i].reset();
      // `snap` pins KV pages (and, once evicted, keeps them from the pool): it goes as soon as
      // the blob is out.
    }
  }
}

void RedisSnapshotTier::Write(common::RedisClient& client, const LocalSnapshot& snap,
                              const std::vector<uint8_t>* staged_kv, Clock::time_point published) {
  const Clock::time_point now = Clock::now();
  const auto recent = absl::ToChronoNanoseconds(options_.ttl / 2);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = written_.find(snap.key());
    if (it != written_.end() && now - it->second < recent) {
      ++stats_.write_skipped_recent;
      return;
    }
  }
  const SnapshotCache& cache = *cache_;
  common::SnapshotContents c;
  c.key = snap.key();
  c.domain = cache.domain();
  c.tokens = snap.tokens();
  c.layout = layout_;
  c.state_parts.push_back(snap.state());
  // The KV in place when the pages are host memory, else the copy Publish made on the engine
  // thread (this thread may not use the backend).
  const int n_layers = static_cast<int>(layout_.n_attention_layers);
  const bool in_place =
      n_layers == 0 || snap.pages().empty() || kv_->HostKPage(0, snap.pages().front()) != nullptr;
  if (in_place) {
    for (int layer = 0; layer < n_layers; ++layer) {
      for (int32_t page : snap.pages()) {
        c.kv_parts.push_back({kv_->HostKPage(layer, page), layout_.k_page_bytes});
        c.kv_parts.push_back({kv_->HostVPage(layer, page), layout_.v_page_bytes});
      }
    }
  } else if (staged_kv != nullptr) {
    c.kv_parts.push_back(*staged_kv);
  } else {
    LogDegraded("encode", "a device-memory snapshot reached the writer without its KV copy");
    return;
  }
  absl::StatusOr<std::string> blob = common::EncodeSnapshot(c, options_.compression);
  if (!blob.ok()) {
    LogDegraded("encode", blob.status().message());
    return;
  }
  if (blob->size() > options_.max_bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.write_skipped_too_large;
    }
    LogDegraded("too_large", absl::StrCat("a snapshot of ", snap.n_tokens(), " tokens is ",
                                          blob->size(), " bytes, over --redis-max-bytes ",
                                          options_.max_bytes, "; not written"));
    return;
  }
  const absl::Duration deadline = TransferDeadline(blob->size());
  const std::string name = RedisSnapshotKey(snap.key());
  absl::Status s = WithOneReconnect(
      client, deadline, [&](absl::Duration d) { return client.Set(name, *blob, options_.ttl, d); });
  if (!s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.set_errors;
    }
    LogDegraded("set_error", s.message());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.written;
  stats_.written_bytes += static_cast<int64_t>(blob->size());
  stats_.publish_seconds_sum += SecondsSince(published);
  ++stats_.publish_seconds_count;
  auto [it, inserted] = written_.insert_or_assign(snap.key(), Clock::now());
  (void)it;
  if (inserted) {
    written_order_.push_back(snap.key());
    if (written_order_.size() > kMaxRemembered) {
      written_.erase(written_order_.front());
      written_order_.pop_front();
    }
  }
}

std::optional<RedisLookupPlan> RedisSnapshotTier::PlanLookup(
    absl::Span<const int32_t> prompt, absl::Span<const int32_t> message_boundaries) const {
  // The scheduler's lookup positions (Scheduler::Submit): snapshot positions below the prompt's
  // length, so at least its last token is computed.
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int64_t> positions;
  for (int64_t p : common::SnapshotPositions(message_boundaries, ctx_, interval_)) {
    if (p < n) positions.push_back(p);
  }
  if (positions.empty()) return std::nullopt;
  absl::StatusOr<std::vector<common::SnapshotKey>> keys =
      common::SnapshotKeysAt(cache_->root(), prompt, positions);
  if (!keys.ok()) return std::nullopt;
  size_t first = 0;  // candidates: positions after the longest one RAM holds
  for (size_t i = keys->size(); i-- > 0;) {
    if (cache_->Contains((*keys)[i])) {
      first = i + 1;
      break;
    }
  }
  if (first == keys->size()) return std::nullopt;
  RedisLookupPlan plan;
  plan.keys.assign(keys->begin() + first, keys->end());
  plan.positions.assign(positions.begin() + first, positions.end());
  return plan;
}

void RedisSnapshotTier::FetchAsync(RedisLookupPlan plan,
                                   std::function<void(std::shared_ptr<const SnapshotImage>)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && fetch_queue_.size() < options_.max_fetch_queue) {
      fetch_queue_.push_back({std::move(plan), std::move(done), Clock::now()});
      cv_.notify_all();
      return;
    }
    ++stats_.fetch_skipped;
  }
  done(nullptr);
}

std::shared_ptr<const SnapshotImage> RedisSnapshotTier::Fetch(common::RedisClient& client,
                                                              const RedisLookupPlan& plan) {
  std::vector<std::string> names;
  names.reserve(plan.keys.size());
  for (const common::SnapshotKey& k : plan.keys) names.push_back(RedisSnapshotKey(k));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lookups;
  }
  absl::StatusOr<std::vector<int64_t>> lengths = WithOneReconnect(
      client, options_.timeout, [&](absl::Duration d) { return client.StrLens(names, d); });
  if (!lengths.ok() || lengths->size() != names.size()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.lookup_errors;
    }
    LogDegraded("lookup_error", lengths.ok() ? absl::string_view("short STRLEN reply")
                                             : lengths.status().message());
    return nullptr;
  }
  common::SnapshotExpectation expect;
  expect.domain = cache_->domain();
  expect.layout = layout_;
  expect.max_decoded_bytes = options_.max_bytes;
  auto reject = [this](common::SnapshotRejectReason reason, std::string_view key,
                       absl::string_view why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.rejected[static_cast<int>(reason)];
    }
    LogDegraded(absl::StrCat("rejected_", common::Sv(common::SnapshotRejectReasonName(reason))),
                absl::StrCat("blob ", common::Sv(key), " refused, recomputing: ", why));
  };
  for (size_t i : RedisFetchOrder(*lengths, kMaxGets)) {
    const uint64_t size = static_cast<uint64_t>((*lengths)[i]);
    if (size > options_.max_bytes) {
      reject(common::SnapshotRejectReason::kTooLarge, names[i],
             absl::StrCat(size, " bytes, over --redis-max-bytes"));
      continue;
    }
    const absl::Duration deadline = TransferDeadline(size);
    absl::StatusOr<std::optional<std::string>> blob = WithOneReconnect(
        client, deadline, [&](absl::Duration d) { return client.Get(names[i], d); });
    if (!blob.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.get_errors;
      }
      LogDegraded("get_error", blob.status().message());
      return nullptr;  // the connection is gone or slow: no second try within this request
    }
    if (!blob->has_value()) continue;  // expired or evicted since the STRLEN
    expect.key = plan.keys[i];
    common::SnapshotRejectReason reason = common::SnapshotRejectReason::kNone;
    absl::StatusOr<common::DecodedSnapshot> decoded =
        common::DecodeSnapshot(**blob, expect, &reason);
    if (!decoded.ok()) {
      reject(reason == common::SnapshotRejectReason::kNone ? common::SnapshotRejectReason::kFormat
                                                           : reason,
             names[i], decoded.status().message());
      continue;
    }
    auto owner = std::make_shared<common::DecodedSnapshot>(std::move(*decoded));
    auto image = std::make_shared<SnapshotImage>();
    image->key = plan.keys[i];
    image->tokens = std::move(owner->tokens);
    image->state = owner->state;
    image->kv = owner->kv;
    image->owner = owner;
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.hits;
    stats_.fetched_bytes += static_cast<int64_t>((*blob)->size());
    return image;
  }
  return nullptr;
}

bool RedisSnapshotTier::WaitForFetches(absl::Duration max) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, absl::ToChronoNanoseconds(max),
                      [this] { return fetch_queue_.empty() && fetching_ == 0; });
}

RedisTierStats RedisSnapshotTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace deltaserve::worker
