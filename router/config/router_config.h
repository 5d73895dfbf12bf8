// The router's configuration: where the workers are, which models and aliases it offers, the
// per-model defaults, and the API keys. Read from YAML (`--config FILE`, see
// router_config_yaml.h; docs/router.md has the format) and merged with the command line
// (`--listen`, `--worker` repeatable). Reloaded on SIGHUP: a new RouterConfig is parsed and
// validated whole, then swapped in; requests in flight keep the snapshot they started with
// (std::shared_ptr<const RouterConfig>).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace deltaserve::router {

// Per API: whether a request's max_tokens (chat's max_completion_tokens or max_tokens, the
// Responses API's max_output_tokens, the Anthropic API's max_tokens) larger than the room its
// prompt leaves in the worker's context is lowered to that room (as llama-server does), instead
// of refused with 400 context_length_exceeded (as OpenAI and vLLM do). `clamp_max_tokens` in the
// YAML, at the top level and per model: true or false for every API, or a mapping of these
// keys. Unset: the model's setting, else the top level's, else the API's default (Anthropic on:
// Claude Code asks 32000 on every request; the OpenAI APIs off: their clients expect the
// refusal). docs/router.md, "max_tokens and the context".
struct ClampMaxTokens {
  std::optional<bool> chat_completions;  // POST /v1/chat/completions
  std::optional<bool> completions;       // POST /v1/completions
  std::optional<bool> responses;         // POST /v1/responses
  std::optional<bool> anthropic;         // POST /v1/messages

  bool operator==(const ClampMaxTokens&) const = default;
};

// Sampling defaults a model applies when the request leaves a field unset.
struct ModelDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int32_t> max_tokens;       // when the request gives none
  std::optional<bool> enable_thinking;     // Qwen chat template switch
  // The model's `chat_template` key (models[i].chat_template in the YAML, next to `defaults`):
  // a Jinja file used instead of the template the workers report from the model file, as
  // written (relative to the config file's folder); LoadRouterConfigFile reads and parses it
  // into `chat_template` (its text).
  std::string chat_template_file;
  std::optional<std::string> chat_template;
  // The model's `allow_special_tokens_in_content` key (models[i], next to `chat_template`):
  // true parses special-token text inside chat messages, tools and tool calls as control tokens,
  // the behaviour before issue 17 and that of Hugging Face / vLLM / llama.cpp; unset or false:
  // only the chat template's own markup yields control tokens (docs/chat.md).
  std::optional<bool> allow_special_tokens_in_content;
  // The model's `clamp_max_tokens` (models[i], next to `chat_template`); unset keys: the top
  // level's (RouterConfig::clamp_max_tokens).
  ClampMaxTokens clamp_max_tokens;
};

// A model the router offers under `name`, served by workers that report `served_name`.
struct ModelConfig {
  std::string name;         // what clients ask for
  std::string served_name;  // the worker's --model NAME (default: name)
  ModelDefaults defaults;
};

// An alias resolves to an ordered chain of model names: tried in order, the next when one
// cannot take the request (no healthy worker, every worker saturated, context too small, or a
// failure before the first token).
struct AliasConfig {
  std::string name;
  std::vector<std::string> chain;
};

// A token bucket: `requests_per_minute` / `tokens_per_minute` (prompt + max tokens charged at
// admission), and `max_concurrent_requests` in flight at once; 0 means unlimited.
struct RateLimit {
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  int64_t max_concurrent_requests = 0;
};

// One API key. The key itself is never stored: `sha256_hex` is the lowercase hex SHA-256 of the
// key string as the client sends it after "Bearer ".
struct ApiKeyConfig {
  std::string name;                     // for logs and metrics (never the key)
  std::string sha256_hex;
  std::vector<std::string> models;      // allowed model or alias names; empty: all
  RateLimit limit;
  // May read the router's admin endpoints (GET /admin/placement). Without any keys configured
  // they are open, as everything else (the router then binds 127.0.0.1 only).
  bool admin = false;
};

// How the router reaches a worker (docs/router.md, "Worker channel"): TLS with the worker's
// certificate checked against `tls_ca_file` (and this router's client certificate for mutual
// TLS), and/or a shared secret sent with every call. Paths as written (relative to the config
// file's folder); LoadRouterConfigFile reads them into the *_pem fields and `secret`, so a
// missing file stops a start or a reload, naming the file.
struct WorkerChannelConfig {
  std::string tls_ca_file;
  std::string tls_cert_file;  // with tls_key_file: mutual TLS
  std::string tls_key_file;
  std::string tls_server_name;  // the name checked in the worker's certificate; "": the host
  std::string secret_file;      // or:
  std::string secret_env;       // the name of an environment variable holding the secret
  // Loaded:
  std::string ca_pem, cert_pem, key_pem, secret;

  bool operator==(const WorkerChannelConfig&) const = default;
};

// A worker endpoint: a gRPC address host:port, or dns:///NAME:PORT for every address NAME
// resolves to (a Kubernetes headless Service; re-resolved every routing.dns_interval_ms).
struct WorkerEndpoint {
  std::string address;
  // The worker's own `channel` in the YAML; unset: RouterConfig::worker_channel (the router's
  // start-up code fills it in from there before the worker pool sees it).
  std::optional<WorkerChannelConfig> channel = std::nullopt;
};

// Timeouts, retries and health checking of workers, and the routing-by-prefix knobs.
struct RoutingSettings {
  int max_attempts = 3;                 // tries before the first token, over workers/candidates
  int64_t retry_backoff_ms = 50;        // base of the jittered backoff between tries
  int64_t health_interval_ms = 1000;    // GetWorkerInfo / health poll period per worker
  int circuit_failures = 3;             // consecutive failures that open a worker's circuit
  int64_t circuit_open_ms = 5000;       // how long an open circuit keeps the worker out
  int64_t connect_timeout_ms = 2000;
  // Routing by prefix (docs/router.md): a request goes first to the worker holding a snapshot
  // of its longest prefix while that worker has fewer than `prefix_max_waiting` sequences
  // queued beyond its free slots; off: the session-affinity / least-loaded rule alone.
  bool prefix_affinity = true;
  int prefix_max_waiting = 4;
  // How often `dns:///NAME:PORT` workers are looked up again (router/routing/worker_discovery.h).
  int64_t dns_interval_ms = 5000;
};

// MoE expert placement (router/placement, docs/moe_placement.md): every `interval_seconds` the
// router gathers each MoE model's routing statistics from its workers, plans each worker's
// device-resident experts and pushes the plans; with `redis_url` it stores each model's
// placement there so a new or restarted worker starts warm.
struct PlacementSettings {
  bool enabled = true;
  int64_t interval_seconds = 30;
  // A resident expert is replaced only by one this fraction hotter, plus `min_gain` tokens
  // (decayed routed tokens): placements do not flap between near-equal experts.
  double hysteresis = 0.25;
  double min_gain = 1.0;
  // The machine the workers run on, as the cost-aware planner weighs it (expert_planner.h,
  // PlanCostsFor with each worker's slot size): the bandwidth at which the GPU and the host
  // threads read expert weights, and what a layer that has experts on the host pays per step to
  // synchronise. Only the ratios matter. Defaults: an RTX 4090 beside a Ryzen 9 7950X with
  // DDR5-6000 (deltaserve-placement-sim's rtx4090 profile).
  double device_bandwidth_gbs = 1008;
  double host_bandwidth_gbs = 37.4;
  double layer_sync_us = 18;
  // redis:// or rediss:// URL (common/redis_url.h); empty: placements are not stored.
  std::string redis_url;
  // Deadline of one GetExpertStats / SetExpertPlacement call, and of one Redis call.
  int64_t rpc_timeout_ms = 5000;
  int64_t redis_timeout_ms = 1000;

  bool operator==(const PlacementSettings&) const = default;
};

// A model served by an external HTTP endpoint instead of workers (docs/upstreams.md): an
// OpenAI-compatible server (a hosted API, vLLM, llama-server, another DeltaServe) or one that
// speaks Anthropic's Messages API. Its `name` is what clients and alias chains name; the router
// sends the upstream's own `model`. The API key comes from an environment variable or a file
// (never the config itself), read at start and on every SIGHUP reload.
enum class UpstreamKind { kOpenAi, kAnthropic };

struct UpstreamConfig {
  std::string name;
  UpstreamKind kind = UpstreamKind::kOpenAi;
  // http:// or https://HOST[:PORT][/PATH]; requests go to PATH/chat/completions,
  // PATH/completions (openai) or PATH/messages (anthropic), PATH typically ending in /v1.
  std::string base_url;
  std::string model;          // the upstream's own model name
  std::string api_key_env;    // the name of an environment variable holding the key, or
  std::string api_key_file;   // a file holding it (relative to the config file's folder)
  std::string tls_ca_file;    // PEM CA bundle for https; "": the system's CAs
  int64_t connect_timeout_ms = 5000;  // TCP connect + TLS handshake
  // From the request sent until the first byte of the answer's body (headers included); a
  // stream that goes quiet longer than `idle_timeout_ms` between bytes is cut.
  int64_t first_byte_timeout_ms = 60000;
  int64_t idle_timeout_ms = 60000;
  int64_t max_concurrent_requests = 0;  // 0: unlimited; more: the upstream counts as saturated
  int64_t context_window = 0;  // tokens; 0: unknown (never skipped for size)
  // Loaded by LoadRouterConfigFile (never written back, logged or exported):
  std::string api_key;
  std::string ca_pem;

  bool operator==(const UpstreamConfig&) const = default;
};

// See the file comment.
struct RouterConfig {
  std::string listen = "127.0.0.1:8080";
  std::vector<WorkerEndpoint> workers;
  WorkerChannelConfig worker_channel;  // every worker's, unless it has its own
  std::vector<ModelConfig> models;     // empty: every model the workers report, under its name
  std::vector<AliasConfig> aliases;
  std::vector<UpstreamConfig> upstreams;  // external models (docs/upstreams.md)
  std::vector<ApiKeyConfig> api_keys;  // empty: no authentication (bind 127.0.0.1 then)
  std::string api_keys_file;           // optional extra keys, one "name sha256hex [models]" per line
  RoutingSettings routing;
  PlacementSettings placement;
  uint64_t max_body_bytes = 8 << 20;
  ClampMaxTokens clamp_max_tokens;  // every model's, unless the model sets its own
};

}  // namespace deltaserve::router
