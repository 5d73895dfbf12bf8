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
#include "worker/engine/forward_counters.h"
#include "worker/service/expert_service.h"

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
  return absl::StrCat("HTTP/1.1 ", code, " ", common::Sv(reason),
                      "\r\nContent-Type: ", common::Sv(type), "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", common::Sv(body));
}

// The Redis tier's series (docs/snapshots.md, "Faults"), for the models that have one.
void WriteRedisTierMetrics(const WorkerService& service, common::PrometheusText& out) {
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
  static constexpr Series kSeries[] = {
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
  for (const Series& s : kSeries) {
    for (const auto& [name, st] : tiers) {
      out.Counter(s.name, s.help, {{"model", name}}, static_cast<double>(st.*(s.field)));
    }
  }
  for (const auto& [name, st] : tiers) {
    const std::pair<const char*, int64_t> ops[] = {
        {"lookup", st.lookup_errors}, {"get", st.get_errors}, {"set", st.set_errors}};
    for (const auto& [op, v] : ops) {
      out.Counter("deltaserve_model_snapshot_redis_errors_total",
                  "Redis calls that failed or timed out, by operation (the request ran without "
                  "Redis).",
                  {{"model", name}, {"op", op}}, static_cast<double>(v));
    }
  }
  for (const auto& [name, st] : tiers) {
    const std::pair<const char*, int64_t> reasons[] = {{"recent", st.write_skipped_recent},
                                                       {"too_large", st.write_skipped_too_large}};
    for (const auto& [reason, v] : reasons) {
      out.Counter("deltaserve_model_snapshot_redis_write_skipped_total",
                  "Snapshots not written: written by this worker within half the TTL, or over "
                  "--redis-max-bytes.",
                  {{"model", name}, {"reason", reason}}, static_cast<double>(v));
    }
  }
  for (const auto& [name, st] : tiers) {
    for (int r = 1; r <= static_cast<int>(common::SnapshotRejectReason::kTooLarge); ++r) {
      out.Counter("deltaserve_model_snapshot_rejected_total",
                  "Snapshot blobs refused on fetch, by reason (the request recomputed).",
                  {{"model", name},
                   {"reason", std::string(common::SnapshotRejectReasonName(
                                  static_cast<common::SnapshotRejectReason>(r)))}},
                  static_cast<double>(st.rejected[r]));
    }
  }
  for (const auto& [name, st] : tiers) {
    out.Summary("deltaserve_model_snapshot_redis_publish_seconds",
                "From a sequence's end to its snapshot's SET reply, per blob written.",
                {{"model", name}}, st.publish_seconds_sum,
                static_cast<uint64_t>(st.publish_seconds_count));
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
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", std::strerror(errno)));
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

void WriteWorkerMetrics(const WorkerService& service, common::PrometheusText& out) {
  const WorkerCounters& c = service.counters();
  out.Counter("deltaserve_worker_requests_total", "Generate calls received.", {},
              static_cast<double>(c.requests.load()));
  out.Counter("deltaserve_worker_requests_failed_total", "Generate calls refused or failed.", {},
              static_cast<double>(c.requests_failed.load()));
  out.Counter("deltaserve_worker_requests_cancelled_total", "Generate calls cancelled.", {},
              static_cast<double>(c.requests_cancelled.load()));
  out.Counter("deltaserve_worker_prompt_tokens_total", "Prompt tokens of finished requests.", {},
              static_cast<double>(c.prompt_tokens.load()));
  out.Counter("deltaserve_worker_completion_tokens_total", "Generated tokens of finished requests.",
              {}, static_cast<double>(c.completion_tokens.load()));
  out.Gauge("deltaserve_worker_draining", "1 while the worker refuses new work.", {},
            service.draining() ? 1 : 0);

  // One stats() per model per scrape: the scheduler locks for it.
  std::vector<std::pair<std::string, SchedulerStats>> stats;
  for (const auto& [name, model] : service.models()) {
    stats.emplace_back(name, model->scheduler().stats());
  }
  // The shape llm-d's endpoint picker reads (docs/metrics.md, "llm-d"): whole-worker queue,
  // running and KV utilisation gauges without labels.
  int64_t waiting = 0, running = 0, pages = 0, free_pages = 0;
  for (const auto& [name, st] : stats) {
    waiting += st.waiting;
    running += st.running;
    pages += st.total_pages;
    free_pages += st.free_pages;
  }
  out.Gauge("deltaserve_worker_waiting_requests",
            "Requests queued for admission, all models (vllm:num_requests_waiting).", {},
            static_cast<double>(waiting));
  out.Gauge("deltaserve_worker_running_requests",
            "Sequences running, all models (vllm:num_requests_running).", {},
            static_cast<double>(running));
  out.Gauge("deltaserve_worker_kv_cache_usage_ratio",
            "KV pages in use over KV pages, all models, 0 to 1 (vllm:kv_cache_usage_perc); pages "
            "held only by RAM snapshots count as free.",
            {},
            pages > 0 ? static_cast<double>(pages - free_pages) / static_cast<double>(pages) : 0.0);

  struct Series {
    const char* name;
    bool counter;
    const char* help;
    int64_t SchedulerStats::*field;
  };
  static constexpr Series kSeries[] = {
      {"deltaserve_model_running_sequences", false, "Sequences running.", &SchedulerStats::running},
      {"deltaserve_model_waiting_sequences", false, "Requests queued.", &SchedulerStats::waiting},
      {"deltaserve_model_free_kv_pages", false,
       "Free KV cache pages (pages held only by RAM snapshots count as free).",
       &SchedulerStats::free_pages},
      {"deltaserve_model_kv_pages", false, "KV cache pages.", &SchedulerStats::total_pages},
      {"deltaserve_model_free_state_slots", false, "Free recurrent-state slots.",
       &SchedulerStats::free_slots},
      {"deltaserve_model_steps_total", true, "Engine steps.", &SchedulerStats::steps},
      {"deltaserve_model_preemptions_total", true, "Sequences preempted for memory.",
       &SchedulerStats::preemptions},
      {"deltaserve_model_prompt_tokens_computed_total", true,
       "Prompt positions run through the model (prefill and recompute; a request with n choices "
       "adds its uncached prompt once).",
       &SchedulerStats::prompt_tokens_computed},
      {"deltaserve_model_forked_sequences_total", true,
       "Choices forked off a prefilled prompt (n - 1 per request with n choices).",
       &SchedulerStats::forked_sequences},
      {"deltaserve_model_drafted_tokens_total", true, "n-gram drafted tokens.",
       &SchedulerStats::drafted_tokens},
      {"deltaserve_model_accepted_tokens_total", true, "n-gram drafted tokens accepted.",
       &SchedulerStats::accepted_tokens},
      {"deltaserve_model_snapshot_lookups_total", true,
       "Requests that looked for a snapshot of their prompt's prefix.",
       &SchedulerStats::snapshot_lookups},
      {"deltaserve_model_snapshot_misses_total", true,
       "Snapshot lookups that found no usable prefix (the prompt ran cold).",
       &SchedulerStats::snapshot_misses},
      {"deltaserve_model_snapshot_tokens_reused_total", true,
       "Prompt tokens restored from snapshots instead of computed.",
       &SchedulerStats::snapshot_tokens_reused},
      {"deltaserve_model_snapshot_restore_failures_total", true,
       "Snapshot restores that failed; the sequence ran cold.",
       &SchedulerStats::snapshot_restore_failures},
      {"deltaserve_model_constrained_sequences_total", true,
       "Sequences admitted with an output constraint (docs/structured_outputs.md).",
       &SchedulerStats::constrained_sequences},
      {"deltaserve_model_grammar_mask_hits_total", true,
       "Allowed-token masks served from the scheduler's mask cache.",
       &SchedulerStats::grammar_mask_hits},
      {"deltaserve_model_grammar_mask_misses_total", true,
       "Allowed-token masks computed (a grammar state met for the first time, or evicted).",
       &SchedulerStats::grammar_mask_misses},
      {"deltaserve_model_constraint_failures_total", true,
       "Constrained sequences ended with an error (a grammar limit left no token).",
       &SchedulerStats::constraint_failures},
  };
  for (const Series& s : kSeries) {
    for (const auto& [name, st] : stats) {
      const double v = static_cast<double>(st.*(s.field));
      if (s.counter) {
        out.Counter(s.name, s.help, {{"model", name}}, v);
      } else {
        out.Gauge(s.name, s.help, {{"model", name}}, v);
      }
    }
  }
  for (const auto& [name, st] : stats) {
    out.Gauge("deltaserve_model_kv_pages_used",
              "KV cache pages in use by sequences (kv_pages - free_kv_pages).", {{"model", name}},
              static_cast<double>(st.total_pages - st.free_pages));
  }
  for (const auto& [name, st] : stats) {
    out.Gauge("deltaserve_model_kv_cache_usage_ratio", "KV pages in use over KV pages, 0 to 1.",
              {{"model", name}},
              st.total_pages > 0 ? static_cast<double>(st.total_pages - st.free_pages) /
                                       static_cast<double>(st.total_pages)
                                 : 0.0);
  }
  for (const auto& [name, model] : service.models()) {
    out.Gauge("deltaserve_model_state_slots",
              "Recurrent-state slots (twice --parallel with speculation: the spares hold drafts' "
              "snapshots).",
              {{"model", name}}, static_cast<double>(model->state_slots().total_slots()));
  }
  for (const auto& [name, st] : stats) {
    const ServedModel* model = service.models().at(name);
    out.Gauge("deltaserve_model_state_slots_used", "Recurrent-state slots in use.",
              {{"model", name}},
              static_cast<double>(model->state_slots().total_slots() - st.free_slots));
  }
  for (const auto& [name, st] : stats) {
    out.Counter("deltaserve_model_snapshot_hits_total",
                "Snapshot lookups that restored a prefix, by the tier it came from.",
                {{"model", name}, {"tier", "ram"}}, static_cast<double>(st.snapshot_hits_ram));
    out.Counter("deltaserve_model_snapshot_hits_total",
                "Snapshot lookups that restored a prefix, by the tier it came from.",
                {{"model", name}, {"tier", "redis"}}, static_cast<double>(st.snapshot_hits_remote));
  }
  for (const auto& [name, st] : stats) {
    out.Counter("deltaserve_model_snapshot_tapped_captures_total",
                "Snapshots taken at a position inside a prompt chunk (the recurrent state copied "
                "mid-pass), where the chunk did not have to end.",
                {{"model", name}}, static_cast<double>(st.snapshot_tapped_captures));
  }

  // The engine's passes (worker/engine/forward_counters.h).
  struct Pass {
    const char* name;
    const char* help;
    uint64_t (ForwardCounters::*value)() const;
  };
  static constexpr Pass kPass[] = {
      {"deltaserve_model_prefill_tokens_total",
       "Prompt tokens run through the model (prefill chunks, recompute after a preemption, "
       "turn-end tokens); rate() is prefill tokens per second.",
       &ForwardCounters::prefill_tokens},
      {"deltaserve_model_decode_tokens_total",
       "Tokens run through the model by generating sequences (each sampled token and its "
       "speculative drafts); rate() is decode tokens per second.",
       &ForwardCounters::decode_tokens},
      {"deltaserve_model_forward_passes_total", "Forward passes of the model.",
       &ForwardCounters::passes},
      // Decode steps as CUDA graphs (--cuda-graphs; docs/gpu.md): always 0 on the CPU.
      {"deltaserve_model_graph_launches_total",
       "Decode steps launched as a captured graph (CUDA graphs).",
       &ForwardCounters::graphs_launched},
      {"deltaserve_model_graph_instantiations_total",
       "Step graphs built from scratch: a new batch shape, or a kernel sequence that changed.",
       &ForwardCounters::graphs_instantiated},
      {"deltaserve_model_graph_updates_total",
       "Step graphs updated in place with a new step's arguments (the cheap path).",
       &ForwardCounters::graphs_updated},
      {"deltaserve_model_graph_capture_fallbacks_total",
       "Decode steps whose graph capture failed and that ran without a graph (degraded: the "
       "worker logged why; that batch shape is no longer captured).",
       &ForwardCounters::graph_fallbacks},
  };
  for (const Pass& p : kPass) {
    for (const auto& [name, model] : service.models()) {
      out.Counter(p.name, p.help, {{"model", name}},
                  static_cast<double>((model->model().counters().*p.value)()));
    }
  }
  for (const auto& [name, model] : service.models()) {
    const ForwardCounters& f = model->model().counters();
    const std::vector<double> bounds(ForwardCounters::kSequenceBounds.begin(),
                                     ForwardCounters::kSequenceBounds.end());
    out.Histogram("deltaserve_model_batch_size_sequences", "Sequences per forward pass.",
                  {{"model", name}}, bounds, f.sequence_buckets(),
                  static_cast<double>(f.sequences_sum()));
  }
  for (const auto& [name, model] : service.models()) {
    const ForwardCounters& f = model->model().counters();
    const std::vector<double> bounds(ForwardCounters::kTokenBounds.begin(),
                                     ForwardCounters::kTokenBounds.end());
    out.Histogram("deltaserve_model_batch_size_tokens", "Tokens per forward pass.",
                  {{"model", name}}, bounds, f.token_buckets(),
                  static_cast<double>(f.tokens_sum()));
  }
  // MoE: tokens routed per (layer, expert): n_layer x n_expert series per model, only for MoE
  // models (docs/metrics.md, "Expert routing").
  for (const auto& [name, model] : service.models()) {
    const ForwardCounters& f = model->model().counters();
    if (f.n_expert() == 0) continue;
    for (int64_t layer = 0; layer < f.n_layer(); ++layer) {
      for (int64_t e = 0; e < f.n_expert(); ++e) {
        out.Counter(
            "deltaserve_model_expert_routed_tokens_total",
            "Tokens the MoE router sent to an expert (each token goes to k experts), by "
            "layer and expert: for expert placement.",
            {{"model", name}, {"layer", std::to_string(layer)}, {"expert", std::to_string(e)}},
            static_cast<double>(f.routed(layer, e)));
      }
    }
  }

  struct CacheSeries {
    const char* name;
    bool counter;
    const char* help;
    double (*value)(const SnapshotCacheStats&);
  };
  static constexpr CacheSeries kCacheSeries[] = {
      {"deltaserve_model_snapshot_entries", false, "Snapshots held in RAM.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.entries); }},
      {"deltaserve_model_snapshot_ram_bytes", false,
       "RAM held by snapshots (state copies and token ids).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.ram_bytes); }},
      {"deltaserve_model_snapshot_ram_budget_bytes", false, "--snapshot-ram.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.ram_budget); }},
      {"deltaserve_model_snapshot_pinned_kv_pages", false,
       "KV pages referenced by RAM snapshots (given back when serving needs them).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.pinned_pages); }},
      {"deltaserve_model_snapshot_captures_total", true, "Snapshots taken.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.captures); }},
      {"deltaserve_model_snapshot_capture_seconds_total", true, "Time spent taking snapshots.",
       [](const SnapshotCacheStats& c) { return c.capture_us * 1e-6; }},
      {"deltaserve_model_snapshot_captures_skipped_total", true,
       "Snapshots not taken: larger than the whole RAM budget, or a copy failed.",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.capture_skipped); }},
      {"deltaserve_model_snapshot_restore_seconds_total", true,
       "Time spent restoring snapshots (RAM and Redis).",
       [](const SnapshotCacheStats& c) { return c.restore_us * 1e-6; }},
      {"deltaserve_model_snapshot_evictions_total", true,
       "Snapshots dropped from RAM (budget, or KV pages needed by serving).",
       [](const SnapshotCacheStats& c) { return static_cast<double>(c.evictions); }},
  };
  for (const CacheSeries& s : kCacheSeries) {
    for (const auto& [name, model] : service.models()) {
      const double v = s.value(model->snapshots().stats());
      if (s.counter) {
        out.Counter(s.name, s.help, {{"model", name}}, v);
      } else {
        out.Gauge(s.name, s.help, {{"model", name}}, v);
      }
    }
  }
  struct GrammarSeries {
    const char* name;
    const char* help;
    size_t (GrammarCache::*value)() const;
    bool counter = true;
  };
  static constexpr GrammarSeries kGrammarSeries[] = {
      {"deltaserve_model_grammar_cache_hits_total",
       "Output constraints whose grammar was already compiled.", &GrammarCache::hits},
      {"deltaserve_model_grammar_compiles_total",
       "Output constraints compiled (refused ones included).", &GrammarCache::misses},
      {"deltaserve_model_grammar_refusals_total",
       "Output constraints refused by the compiler (INVALID_ARGUMENT naming the keyword).",
       &GrammarCache::refused},
      {"deltaserve_model_grammar_cache_evictions_total",
       "Compiled grammars dropped because the cached ones held more state-table bytes than the "
       "cache's budget (1 GiB).",
       &GrammarCache::evicted_for_memory},
      {"deltaserve_model_grammar_cache_bytes",
       "State-table bytes held by the cached compiled grammars.", &GrammarCache::cached_bytes,
       false},
  };
  for (const GrammarSeries& s : kGrammarSeries) {
    for (const auto& [name, model] : service.models()) {
      const auto v = static_cast<double>((model->grammar_cache().*s.value)());
      if (s.counter) {
        out.Counter(s.name, s.help, {{"model", name}}, v);
      } else {
        out.Gauge(s.name, s.help, {{"model", name}}, v);
      }
    }
  }
  WriteRedisTierMetrics(service, out);
  WriteExpertMetrics(service, out);
}

std::string RenderWorkerMetrics(const WorkerService& service) {
  common::PrometheusText out;
  WriteWorkerMetrics(service, out);
  return out.Take();
}

ModelLoadProgress::ModelLoadProgress(const std::vector<std::string>& models) {
  for (const std::string& m : models) fraction_[m] = 0;
}

void ModelLoadProgress::Set(const std::string& model, double fraction) {
  std::lock_guard<std::mutex> lock(mu_);
  fraction_[model] = fraction;
}

void WriteCpuIsaInfo(kernels::CpuIsa isa, common::PrometheusText& out) {
  out.Gauge("deltaserve_worker_cpu_isa_info",
            "The CPU kernel level the worker runs (isa: the best its CPU supports, or "
            "DELTASERVE_CPU_ISA's) and the best one (best); always 1.",
            {{"isa", std::string(kernels::CpuIsaName(isa))},
             {"best", std::string(kernels::CpuIsaName(kernels::BestSupportedIsa()))}},
            1);
}

void ModelLoadProgress::Write(common::PrometheusText& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [model, f] : fraction_) {
    out.Gauge("deltaserve_worker_model_load_progress",
              "Fraction of a model's weights read at start-up, 0 to 1 (1 once loaded; the worker "
              "serves once every model is at 1).",
              {{"model", model}}, f);
  }
}

}  // namespace deltaserve::worker
