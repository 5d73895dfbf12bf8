// deltaserve-router: the OpenAI-compatible front door. HTTP/1.1 + SSE for clients
// (router/http, router/api), API keys (router/auth), aliases, fallbacks and worker choice over
// gRPC (router/routing), chat rendering with the model's own template and tokenizer and parsing of
// reasoning and tool calls in answers (router/chat), MoE expert placement across the workers
// (router/placement; GET /admin/placement).
// Holds no weights. SIGHUP reloads --config without dropping requests; SIGTERM / SIGINT drain
// (new requests refused, /ready 503, streams in flight finish) and exit 0.
//
//   deltaserve-router --listen 127.0.0.1:8080 --worker 127.0.0.1:50051 [--config router.yaml]
//                     [--log-format text|json]
//   deltaserve-router --worker dns:///deltaserve-workers.ns.svc.cluster.local:50051  (each
//     address of the name, looked up again every routing.dns_interval_ms; Kubernetes' headless
//     Services)
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/request_log.h"
#include "router/api/access_log.h"
#include "router/api/api_metrics.h"
#include "router/api/openai_api.h"
#include "router/api/openai_response.h"
#include "router/auth/api_key_authority.h"
#include "router/auth/authorizing_backend.h"
#include "router/chat/chat_prompt_renderer.h"
#include "router/chat/tokenizer_from_proto.h"
#include "router/config/router_config.h"
#include "router/config/router_config_validation.h"
#include "router/config/router_config_yaml.h"
#include "router/config/upstream_config.h"
#include "router/http/http_server.h"
#include "router/placement/placement_admin.h"
#include "router/placement/placement_controller.h"
#include "router/routing/router_backend.h"
#include "router/routing/router_tokenizer.h"
#include "router/routing/routing_state.h"
#include "router/routing/tokenizer_provider.h"
#include "router/routing/upstream_pool.h"
#include "router/routing/worker_discovery.h"
#include "router/routing/worker_pool.h"
#include "router/upstream/upstream_call.h"

namespace deltaserve::router {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_reload{0};
void OnSignal(int sig) { g_signal = sig; }
void OnHangup(int) { ++g_reload; }

struct Flags {
  std::string listen;                // overrides the config
  std::vector<std::string> workers;  // added to the config's
  std::string config_path;
  int http_threads = 2;
  int64_t drain_seconds = 30;
  int64_t max_connections = 20000;  // HTTP connections open at once; lowered to fit the fd limit
  std::string chat_template_path;   // --chat-template: replaces every model file's template
  common::LogFormat log_format = common::LogFormat::kText;  // --log-format: the request lines
};

// The command line (common/flags.h); the messages are the ones tests/integration expects.
std::vector<common::Flag> FlagTable(Flags& f) {
  using common::IntegerFlag;
  using common::StringFlag;
  return {
      StringFlag("--listen", &f.listen)
          .MissingMessage("--listen needs HOST:PORT")
          .Help("HOST:PORT", "the HTTP address (overrides the config's listen)"),
      common::RepeatedFlag("--worker", &f.workers)
          .MissingMessage("--worker needs HOST:PORT")
          .Help("HOST:PORT|dns:///NAME:PORT", "a worker, added to the config's (repeatable)"),
      StringFlag("--config", &f.config_path)
          .MissingMessage("--config needs a file")
          .Help("FILE.yaml", "the router config (reloaded on SIGHUP)"),
      IntegerFlag("--http-threads", &f.http_threads, 1)
          .Error("--http-threads needs a count >= 1")
          .Help("N", "HTTP threads (default 2)"),
      IntegerFlag("--drain-seconds", &f.drain_seconds, 0)
          .Error("--drain-seconds needs seconds >= 0")
          .Help("S", "how long streams may run on after SIGTERM (default 30)"),
      IntegerFlag("--max-connections", &f.max_connections, 1)
          .Error("--max-connections needs a count >= 1")
          .Help("N", "HTTP connections open at once (default 20000; lowered to fit the fd limit)"),
      StringFlag("--chat-template", &f.chat_template_path)
          .MissingMessage("--chat-template needs a file")
          .Help("FILE.jinja", "replaces every model's chat template"),
      common::LogFormatFlag(&f.log_format),
      common::HelpFlag(),
  };
}

int Usage(const std::string& why) {
  Flags defaults;
  return common::UsageExit("deltaserve-router", why,
                           "usage: deltaserve-router [--listen HOST:PORT] "
                           "[--worker HOST:PORT|dns:///NAME:PORT]... [--config FILE.yaml]\n"
                           "         [--http-threads N] [--drain-seconds S] [--max-connections N]\n"
                           "         [--chat-template FILE.jinja] [--log-format text|json]\n",
                           "flags:\n" + common::FlagHelp(FlagTable(defaults)));
}

std::string Parse(int argc, char** argv, Flags& f) {
  return common::ParseFlags(FlagTable(f), argc, argv);
}

// The config file (if any) merged with the command line, validated.
absl::StatusOr<RouterConfig> LoadConfig(const Flags& f) {
  RouterConfig c;
  if (!f.config_path.empty()) {
    absl::StatusOr<RouterConfig> loaded = LoadRouterConfigFile(f.config_path);
    if (!loaded.ok()) return loaded.status();
    c = std::move(*loaded);
  }
  if (!f.listen.empty()) c.listen = f.listen;
  for (const std::string& w : f.workers) {
    bool known = false;
    for (const WorkerEndpoint& e : c.workers) known |= e.address == w;
    if (!known) c.workers.push_back({w});
  }
  // A worker without its own channel settings (every --worker) uses worker_channel.
  for (WorkerEndpoint& e : c.workers) {
    if (!e.channel) e.channel = c.worker_channel;
  }
  if (absl::Status s = ValidateRouterConfig(c); !s.ok()) return s;
  if (c.workers.empty() && c.upstreams.empty()) {
    return absl::InvalidArgumentError(
        "no workers: give --worker HOST:PORT or workers: (or upstreams:) in --config");
  }
  // Without API keys the router is open: it must not listen beyond this machine.
  const std::string host = c.listen.substr(0, c.listen.rfind(':'));
  if (c.api_keys.empty() && host != "127.0.0.1" && host != "localhost" && host != "::1" &&
      host != "[::1]") {
    return absl::InvalidArgumentError(
        absl::StrCat("listen ", c.listen,
                     ": without api_keys the router only binds 127.0.0.1 (configure keys "
                     "to listen on other addresses)"));
  }
  return c;
}

// Process settings that the serving path depends on; see docs/benchmarks.md, "Router overhead".
// Returns the open-file limit in force afterwards (0 when unknown).
uint64_t TuneProcess() {
  // Debian's libabsl is built without NDEBUG, so absl::Mutex (gRPC's mutexes included) keeps a
  // lock graph for deadlock detection on every acquisition: ~5% of the router's CPU under load.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Each client connection is a file descriptor: thousands of open SSE streams need more than
  // the usual soft limit of 1,024, so take whatever the hard limit allows.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
      std::cerr << "deltaserve-router: cannot raise the open-file limit\n";
    }
  }
  return getrlimit(RLIMIT_NOFILE, &files) == 0 ? static_cast<uint64_t>(files.rlim_cur) : 0;
}

// File descriptors kept back from client connections: gRPC channels to workers, the config
// and keys files, logs.
constexpr uint64_t kReservedFds = 256;

int Run(const Flags& f) {
  const uint64_t fd_limit = TuneProcess();
  absl::StatusOr<RouterConfig> first = LoadConfig(f);
  if (!first.ok()) {
    std::cerr << "deltaserve-router: " << first.status().message() << "\n";
    return 1;
  }
  std::shared_ptr<const RouterConfig> config = std::make_shared<const RouterConfig>(*first);
  std::shared_ptr<auth::ApiKeyAuthority> authority =
      std::make_shared<auth::ApiKeyAuthority>(*config);
  ConfigSource source = [&config] { return std::atomic_load(&config); };

  WorkerPool pool({}, config->routing);
  // dns:/// workers become their addresses here, looked up before the first poll.
  WorkerDiscovery discovery(&pool, SystemResolver());
  discovery.SetEndpoints(config->workers, absl::Milliseconds(config->routing.dns_interval_ms));
  pool.Start();
  discovery.Start();
  CachingTokenizerProvider tokenizers(chat::TokenizerFromProto);
  std::string default_template;
  if (!f.chat_template_path.empty()) {
    absl::StatusOr<std::string> source = ReadChatTemplateFile(f.chat_template_path);
    if (!source.ok()) {
      std::cerr << "deltaserve-router: --chat-template: " << source.status().message() << "\n";
      return 1;
    }
    default_template = std::move(*source);
  }
  chat::ChatPromptRenderer renderer(std::move(default_template));
  // Upstream models (docs/upstreams.md): breakers, concurrency and metrics by upstream name.
  // Declared before the backend, whose destructor waits for upstream calls that report here.
  UpstreamPool upstreams(config->routing);
  RouterBackend routing(source, &pool, &tokenizers, &renderer);
  routing.SetUpstreams(&upstreams);
  api::ApiMetrics metrics;
  auth::AuthorizingBackend backend(
      routing, [&authority] { return std::atomic_load(&authority); }, &metrics);
  RoutingState state(source, &pool, api::UnixSecondsNow());
  state.SetDiscovery(&discovery);
  // MoE expert placement (docs/moe_placement.md): a cycle every placement.interval_seconds.
  PlacementController placement(&pool, config->placement);
  placement.Start();
  state.AddMetrics([&placement](api::PrometheusText& out) { placement.WriteMetrics(out); });
  state.AddMetrics([&upstreams, &config](api::PrometheusText& out) {
    upstreams.Write(out, std::atomic_load(&config)->upstreams);
  });

  http::HttpServerOptions opts;
  const std::string& listen = config->listen;
  opts.address = listen.substr(0, listen.rfind(':'));
  if (opts.address.size() > 2 && opts.address.front() == '[') {
    opts.address = opts.address.substr(1, opts.address.size() - 2);
  }
  if (opts.address == "localhost") opts.address = "127.0.0.1";
  int port = 0;
  if (!absl::SimpleAtoi(listen.substr(listen.rfind(':') + 1), &port) || port < 0 || port > 65535) {
    std::cerr << "deltaserve-router: bad listen address " << listen << "\n";
    return 1;
  }
  opts.port = static_cast<uint16_t>(port);
  opts.threads = f.http_threads;
  opts.max_body_bytes = config->max_body_bytes;
  opts.max_connections = static_cast<size_t>(f.max_connections);
  if (fd_limit > 0 && opts.max_connections + kReservedFds > fd_limit) {
    opts.max_connections =
        static_cast<size_t>(fd_limit > 2 * kReservedFds ? fd_limit - kReservedFds : fd_limit / 2);
    std::cerr << "deltaserve-router: at most " << opts.max_connections
              << " HTTP connections (open-file limit " << fd_limit << ")\n";
  }
  // One line per request (router/api/access_log.h); ConfigureServer chains its metrics first.
  opts.on_exchange_done = [format = f.log_format](const http::ExchangeRecord& record) {
    api::LogExchange(record, format);
  };
  api::OpenAiApi::ConfigureServer(opts, &metrics);
  http::HttpServer server(opts);
  api::OpenAiApi api(backend, state, metrics);
  auth::KeyedModelListGate model_list_gate([&authority] { return std::atomic_load(&authority); });
  api.SetModelListGate(&model_list_gate);
  RouterTokenizer prompt_tokenizer(source, &pool, &tokenizers, &renderer);
  api.SetPromptTokenizer(&prompt_tokenizer);
  api.Register(server);
  server.RouteSync("GET", "/admin/placement", [&placement, &authority](const http::Request& r) {
    return PlacementAdminResponse(r, placement, *std::atomic_load(&authority));
  });

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGHUP, OnHangup);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "deltaserve-router: " << s.message() << "\n";
    return 1;
  }
  std::cerr << "deltaserve-router: " << config->workers.size() << " worker(s), "
            << (config->api_keys.empty() ? "no API keys (open, local only)"
                                         : absl::StrCat(config->api_keys.size(), " API key(s)"))
            << "\n";
  for (const WorkerEndpoint& e : config->workers) {
    // The worker channel's security per worker (docs/router.md, "Worker channel"); a secret over
    // plain text is readable by anyone on the path, worth a line when the path leaves the host.
    const WorkerChannelConfig& ch = *e.channel;
    const std::string host = e.address.substr(0, e.address.rfind(':'));
    const bool local = host == "127.0.0.1" || host == "localhost" || host == "[::1]";
    std::cerr << "deltaserve-router: worker " << e.address << ": "
              << (ch.ca_pem.empty()     ? "plain text"
                  : ch.cert_pem.empty() ? "TLS"
                                        : "mutual TLS")
              << (ch.secret.empty() ? "" : ", shared secret")
              << (!ch.secret.empty() && ch.ca_pem.empty() && !local
                      ? " (sent in clear: configure tls_ca_file where the network is not trusted)"
                      : "")
              << "\n";
  }
  for (const UpstreamConfig& u : config->upstreams) {
    // Never the key: where it comes from.
    std::cerr << "deltaserve-router: upstream " << u.name << ": " << UpstreamKindName(u.kind)
              << " at " << u.base_url << ", model " << u.model << ", key "
              << (u.api_key.empty()         ? std::string("none")
                  : !u.api_key_file.empty() ? "from file " + u.api_key_file
                                            : "from $" + u.api_key_env)
              << "\n";
  }
  std::cerr << "deltaserve-router: expert placement "
            << (config->placement.enabled
                    ? absl::StrCat("every ", config->placement.interval_seconds, " s, ",
                                   config->placement.redis_url.empty()
                                       ? std::string("placements not stored (no placement.redis)")
                                       : "placements stored in " + placement.StoreDescription())
                    : std::string("off"))
            << "\n";
  std::cerr << "deltaserve-router: listening on " << opts.address << ":" << server.port() << "\n";

  int reloads_seen = 0;
  while (g_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_reload != reloads_seen) {
      reloads_seen = g_reload;
      if (f.config_path.empty()) {
        std::cerr << "deltaserve-router: SIGHUP without --config: nothing to reload\n";
        continue;
      }
      absl::StatusOr<RouterConfig> next = LoadConfig(f);
      if (!next.ok()) {
        // The running config stays: a broken file never takes the router down.
        std::cerr << "deltaserve-router: reload refused, keeping the running config: "
                  << next.status().message() << "\n";
        continue;
      }
      if (next->listen != config->listen) {
        std::cerr << "deltaserve-router: reload: 'listen' changes need a restart; ignored\n";
        next->listen = config->listen;
      }
      auto fresh = std::make_shared<const RouterConfig>(std::move(*next));
      auto fresh_auth = std::make_shared<auth::ApiKeyAuthority>(*fresh, authority.get());
      pool.SetSettings(fresh->routing);
      upstreams.SetSettings(fresh->routing);
      placement.SetSettings(fresh->placement);
      discovery.SetEndpoints(fresh->workers, absl::Milliseconds(fresh->routing.dns_interval_ms));
      std::atomic_store(&authority, fresh_auth);
      std::atomic_store(&config, std::shared_ptr<const RouterConfig>(fresh));
      std::cerr << "deltaserve-router: config reloaded (" << fresh->workers.size() << " worker(s), "
                << fresh->models.size() << " model(s), " << fresh->upstreams.size()
                << " upstream(s), " << fresh->aliases.size() << " alias(es), "
                << fresh->api_keys.size() << " key(s))\n";
    }
  }
  std::cerr << "deltaserve-router: draining\n";
  api.SetDraining(true);
  server.Stop(absl::Seconds(f.drain_seconds));
  placement.Stop();
  std::cerr << "deltaserve-router: stopped\n";
  return 0;
}

}  // namespace
}  // namespace deltaserve::router

int main(int argc, char** argv) {
  using namespace deltaserve::router;
  Flags f;
  if (std::string why = Parse(argc, argv, f); !why.empty()) return Usage(why);
  const int status = Run(f);
  // Run's backend cancelled every generation; an upstream call's thread may still be closing
  // its connection, which must not race the process's exit (OpenSSL's cleanup).
  deltaserve::router::upstream::WaitForUpstreamCalls(absl::Seconds(5));
  return status;
}
