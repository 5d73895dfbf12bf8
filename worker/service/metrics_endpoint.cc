#include "worker/service/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

constexpr size_t kMaxRequest = 8192;
constexpr int kReadTimeoutMs = 5000;

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string Response(int code, std::string_view reason, std::string_view type,
                     std::string_view body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", common::Sv(reason), "\r\nContent-Type: ",
                      common::Sv(type), "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", common::Sv(body));
}

// The Redis tier's series (docs/snapshots.md, "Faults"), for the models that have one.
void AppendRedisTierMetrics(const WorkerService& service, std::string& out) {
  std::vector<std::pair<std::string, RedisTierStats>> tiers;
  for (const auto& [name, model] : service.models()) {
    if (const RedisSnapshotTier* t = service.redis_tier(name)) tiers.emplace_back(name, t->stats());
  }
  if (tiers.empty()) return;
  struct Series {
    const char* name;
    const char* help;
    int64_t RedisTierStats::*field;
  };
  const Series series[] = {
      {"deltaserve_model_snapshot_redis_lookups_total",
       "Requests that asked Redis (one pipelined STRLEN) for a longer prefix than RAM holds.",
       &RedisTierStats::lookups},
      {"deltaserve_model_snapshot_redis_hits_total",
       "Snapshots fetched from Redis, verified and handed to a request.", &RedisTierStats::hits},
      {"deltaserve_model_snapshot_redis_fetched_bytes_total", "Blob bytes of those snapshots.",
       &RedisTierStats::fetched_bytes},
      {"deltaserve_model_snapshot_redis_fetch_skipped_total",
       "Requests that waited for a fetch thread past --redis-timeout and ran without Redis.",
       &RedisTierStats::fetch_skipped},
      {"deltaserve_model_snapshot_redis_written_total", "Snapshot blobs written to Redis.",
       &RedisTierStats::written},
      {"deltaserve_model_snapshot_redis_written_bytes_total", "Bytes of those blobs.",
       &RedisTierStats::written_bytes},
      {"deltaserve_model_snapshot_redis_publish_dropped_total",
       "Snapshots not written: the write queue was full, or RAM evicted them before their turn.",
       &RedisTierStats::publish_dropped},
  };
  for (const Series& s : series) {
    absl::StrAppend(&out, "# HELP ", s.name, " ", s.help, "\n# TYPE ", s.name, " counter\n");
    for (const auto& [name, st] : tiers) {
      absl::StrAppend(&out, s.name, "{model=\"", name, "\"} ", st.*(s.field), "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP deltaserve_model_snapshot_redis_errors_total Redis calls that failed or "
                  "timed out, by operation (the request ran without Redis).\n"
                  "# TYPE deltaserve_model_snapshot_redis_errors_total counter\n");
  for (const auto& [name, st] : tiers) {
    const std::pair<const char*, int64_t> ops[] = {
        {"lookup", st.lookup_errors}, {"get", st.get_errors}, {"set", st.set_errors}};
    for (const auto& [op, v] : ops) {
      absl::StrAppend(&out, "deltaserve_model_snapshot_redis_errors_total{model=\"", name,
                      "\",op=\"", op, "\"} ", v, "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP deltaserve_model_snapshot_redis_write_skipped_total Snapshots not "
                  "written: written by this worker within half the TTL, or over "
                  "--redis-max-bytes.\n"
                  "# TYPE deltaserve_model_snapshot_redis_write_skipped_total counter\n");
  for (const auto& [name, st] : tiers) {
    absl::StrAppend(&out, "deltaserve_model_snapshot_redis_write_skipped_total{model=\"", name,
                    "\",reason=\"recent\"} ", st.write_skipped_recent, "\n",
                    "deltaserve_model_snapshot_redis_write_skipped_total{model=\"", name,
                    "\",reason=\"too_large\"} ", st.write_skipped_too_large, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP deltaserve_model_snapshot_rejected_total Snapshot blobs refused on "
                  "fetch, by reason (the request recomputed).\n"
                  "# TYPE deltaserve_model_snapshot_rejected_total counter\n");
  for (const auto& [name, st] : tiers) {
    for (int r = 1; r <= static_cast<int>(common::SnapshotRejectReason::kTooLarge); ++r) {
      absl::StrAppend(
          &out, "deltaserve_model_snapshot_rejected_total{model=\"", name, "\",reason=\"",
          common::Sv(
              common::SnapshotRejectReasonName(static_cast<common::SnapshotRejectReason>(r))),
          "\"} ", st.rejected[r], "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP deltaserve_model_snapshot_redis_publish_seconds From a sequence's end "
                  "to its snapshot's SET reply, per blob written.\n"
                  "# TYPE deltaserve_model_snapshot_redis_publish_seconds summary\n");
  for (const auto& [name, st] : tiers) {
    absl::StrAppend(&out, "deltaserve_model_snapshot_redis_publish_seconds_sum{model=\"", name,
                    "\"} ", st.publish_seconds_sum, "\n",
                    "deltaserve_model_snapshot_redis_publish_seconds_count{model=\"", name, "\"} ",
                    st.publish_seconds_count, "\n");
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  e->render_ = std::move(render);
  e->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (e->listen_fd_ < 0) return absl::InternalError("metrics: cannot create a socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: bad address ", host));
  }
  if (::bind(e->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(e->listen_fd_, 16) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", host, ":", port,
                                               ": ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(e->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  e->port_ = ntohs(addr.sin_port);
  e->thread_ = std::thread([p = e.get()] { p->Serve(); });
  return e;
}

MetricsEndpoint::~MetricsEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsEndpoint::Serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Handle(fd);
    ::close(fd);
  }
}

void MetricsEndpoint::Handle(int fd) {
  std::string req;
  char buf[1024];
  while (req.find("\r\n\r\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kReadTimeoutMs) <= 0) return;  // timeout: close
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
    if (req.size() > kMaxRequest) {
      WriteAll(fd, Response(431, "Request Header Fields Too Large", "text/plain", "too large\n"));
      return;
    }
  }
  const size_t line_end = req.find("\r\n");
  const std::string_view line(req.data(), line_end);
  if (line.starts_with("GET /metrics ") || line.starts_with("GET /metrics?")) {
    WriteAll(fd, Response(200, "OK", "text/plain; version=0.0.4", render_()));
  } else if (line.starts_with("GET ")) {
    WriteAll(fd, Response(404, "Not Found", "text/plain", "only /metrics here\n"));
  } else {
    WriteAll(fd, Response(405, "Method Not Allowed", "text/plain", "GET only\n"));
  }
}

std::string RenderWorkerMetrics(const WorkerService& service) {
  const WorkerCounters& c = service.counters();
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ",
                    v, "\n");
  };
  counter("deltaserve_worker_requests_total", "Generate calls received.", c.requests.load());
  counter("deltaserve_worker_requests_failed_total", "Generate calls refused or failed.",
          c.requests_failed.load());
  counter("deltaserve_worker_requests_cancelled_total", "Generate calls cancelled.",
          c.requests_cancelled.load());
  counter("deltaserve_worker_prompt_tokens_total", "Prompt tokens of finished requests.",
          c.prompt_tokens.load());
  counter("deltaserve_worker_completion_tokens_total", "Generated tokens of finished requests.",
          c.completion_tokens.load());
  absl::StrAppend(&out, "# HELP deltaserve_worker_draining 1 while the worker refuses new work.\n",
                  "# TYPE deltaserve_worker_draining gauge\ndeltaserve_worker_draining ",
                  service.draining() ? 1 : 0, "\n");
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    int64_t SchedulerStats::*field;
  };
  const Series series[] = {
      {"deltaserve_model_running_sequences", "gauge", "Sequences running.",
       &SchedulerStats::running},
      {"deltaserve_model_waiting_sequences", "gauge", "Requests queued.", &SchedulerStats::waiting},
      {"deltaserve_model_free_kv_pages", "gauge", "Free KV cache pages.",
       &SchedulerStats::free_pages},
      {"deltaserve_model_kv_pages", "gauge", "KV cache pages.", &SchedulerStats::total_pages},
      {"deltaserve_model_free_state_slots", "gauge", "Free recurrent-state slots.",
       &SchedulerStats::free_slots},
      {"deltaserve_model_steps_total", "counter", "Engine steps.", &SchedulerStats::steps},
      {"deltaserve_model_preemptions_total", "counter", "Sequences preempted for memory.",
       &SchedulerStats::preemptions},
      {"deltaserve_model_prompt_tokens_computed_total", "counter",
       "Prompt positions run through the model (prefill and recompute; a request with n choices "
       "adds its uncached prompt once).",
       &SchedulerStats::prompt_tokens_computed},
      {"deltaserve_model_forked_sequences_total", "counter",
       "Choices forked off a prefilled prompt (n - 1 per request with n choices).",
       &SchedulerStats::forked_sequences},
      {"deltaserve_model_drafted_tokens_total", "counter", "n-gram drafted tokens.",
       &SchedulerStats::drafted_tokens},
      {"deltaserve_model_accepted_tokens_total", "counter", "n-gram drafted tokens accepted.",
       &SchedulerStats::accepted_tokens},
      {"deltaserve_model_snapshot_lookups_total", "counter",
       "Requests that looked for a snapshot of their prompt's prefix.",
       &SchedulerStats::snapshot_lookups},
      {"deltaserve_model_snapshot_misses_total", "counter",
       "Snapshot lookups that found no usable prefix (the prompt ran cold).",
       &SchedulerStats::snapshot_misses},
      {"deltaserve_model_snapshot_tokens_reused_total", "counter",
       "Prompt tokens restored from snapshots instead of computed.",
       &SchedulerStats::snapshot_tokens_reused},
      {"deltaserve_model_snapshot_restore_failures_total", "counter",
       "Snapshot restores that failed; the sequence ran cold.",
       &SchedulerStats::snapshot_restore_failures},
      {"deltaserve_model_constrained_sequences_total", "counter",
       "Sequences admitted with an output constraint (docs/structured_outputs.md).",
       &SchedulerStats::constrained_sequences},
      {"deltaserve_model_grammar_mask_hits_total", "counter",
       "Allowed-token masks served from the scheduler's mask cache.",
       &SchedulerStats::grammar_mask_hits},
      {"deltaserve_model_grammar_mask_misses_total", "counter",
       "Allowed-token masks computed (a grammar state met for the first time, or evicted).",
       &SchedulerStats::grammar_mask_misses},
      {"deltaserve_model_constraint_failures_total", "counter",
       "Constrained sequences ended with an error (a grammar limit left no token).",
       &SchedulerStats::constraint_failures},
  };
  for (const Series& s : series) {
    absl::StrAppend(&out, "# HELP ", s.name, " ", s.help, "\n# TYPE ", s.name, " ", s.type, "\n");
    for (const auto& [name, model] : service.models()) {
      const SchedulerStats st = model->scheduler().stats();
      absl::StrAppend(&out, s.name, "{model=\"", name, "\"} ", st.*(s.field), "\n");
    }
  }
  absl::StrAppend(&out,
                  "# HELP deltaserve_model_snapshot_hits_total Snapshot lookups that restored a "
                  "prefix, by the tier it came from.\n"
                  "# TYPE deltaserve_model_snapshot_hits_total counter\n");
  for (const auto& [name, model] : service.models()) {
    const SchedulerStats st = model->scheduler().stats();
    absl::StrAppend(&out, "deltaserve_model_snapshot_hits_total{model=\"", name,
                    "\",tier=\"ram\"} ", st.snapshot_hits_ram, "\n",
                    "deltaserve_model_snapshot_hits_total{model=\"", name,
                    "\",tier=\"redis\"} ", st.snapshot_hits_remote, "\n");
  }
  struct CacheSeries {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const SnapshotCacheStats&);
  };
  const CacheSeries cache_series[] = {
      {"deltaserve_model_snapshot_entries", "gauge", "Snapshots held in RAM.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.entries); }},
      {"deltaserve_model_snapshot_ram_bytes", "gauge",
       "RAM held by snapshots (state copies and token ids).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.ram_bytes); }},
      {"deltaserve_model_snapshot_ram_budget_bytes", "gauge", "--snapshot-ram.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.ram_budget); }},
      {"deltaserve_model_snapshot_pinned_kv_pages", "gauge",
       "KV pages referenced by RAM snapshots (given back when serving needs them).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.pinned_pages); }},
      {"deltaserve_model_snapshot_captures_total", "counter", "Snapshots taken.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.captures); }},
      {"deltaserve_model_snapshot_capture_seconds_total", "counter",
       "Time spent taking snapshots.",
       [](const SnapshotCacheStats& c) { return c.capture_us * 1e-6; }},
      {"deltaserve_model_snapshot_captures_skipped_total", "counter",
       "Snapshots not taken: larger than the whole RAM budget, or a copy failed.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.capture_skipped); }},
      {"deltaserve_model_snapshot_restore_seconds_total", "counter",
       "Time spent restoring snapshots (RAM and Redis).",
       [](const SnapshotCacheStats& c) { return c.restore_us * 1e-6; }},
      {"deltaserve_model_snapshot_evictions_total", "counter",
       "Snapshots dropped from RAM (budget, or KV pages needed by serving).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.evictions); }},
  };
  for (const CacheSeries& s : cache_series) {
    absl::StrAppend(&out, "# HELP ", s.name, " ", s.help, "\n# TYPE ", s.name, " ", s.type, "\n");
    for (const auto& [name, model] : service.models()) {
      absl::StrAppend(&out, s.name, "{model=\"", name, "\"} ", s.value(model->snapshots().stats()),
                      "\n");
    }
  }
  struct GrammarSeries {
    const char* name;
    const char* help;
    size_t (GrammarCache::*value)() const;
  };
  const GrammarSeries grammar_series[] = {
      {"deltaserve_model_grammar_cache_hits_total",
       "Output constraints whose grammar was already compiled.", &GrammarCache::hits},
      {"deltaserve_model_grammar_compiles_total",
       "Output constraints compiled (refused ones included).", &GrammarCache::misses},
      {"deltaserve_model_grammar_refusals_total",
       "Output constraints refused by the compiler (INVALID_ARGUMENT naming the keyword).",
       &GrammarCache::refused},
  };
  for (const GrammarSeries& s : grammar_series) {
    absl::StrAppend(&out, "# HELP ", s.name, " ", s.help, "\n# TYPE ", s.name, " counter\n");
    for (const auto& [name, model] : service.models()) {
      absl::StrAppend(&out, s.name, "{model=\"", name, "\"} ", (model->grammar_cache().*s.value)(),
                      "\n");
    }
  }
  AppendRedisTierMetrics(service, out);
  return out;
}

}  // namespace deltaserve::worker
