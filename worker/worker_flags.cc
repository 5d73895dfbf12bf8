#include "worker/worker_flags.h"

#include <cmath>
#include <iostream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/redis_url.h"
#include "common/str_util.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/sched/parallel_auto.h"

namespace deltaserve::worker {
namespace {

// Adds one --model NAME=PATH (or PATH, named after the file); "" or what is wrong.
std::string AddModel(WorkerFlags& f, std::string_view text) {
  const std::string s(text);
  const size_t eq = s.find('=');
  std::string name, path;
  if (eq == std::string::npos) {
    path = s;
    name = s.substr(s.find_last_of('/') + 1);
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  } else {
    name = s.substr(0, eq);
    path = s.substr(eq + 1);
  }
  if (name.empty() || path.empty()) return absl::StrCat("bad --model '", s, "'");
  for (const auto& m : f.models) {
    if (m.first == name) return absl::StrCat("model name '", name, "' given twice");
  }
  f.models.emplace_back(name, path);
  return "";
}

// The command line (common/flags.h). The messages are the ones tests/worker and
// tests/integration expect; docs/worker.md has the same flags as a table.
std::vector<common::Flag> FlagTable(WorkerFlags& f) {
  using common::ChoiceFlag;
  using common::CustomFlag;
  using common::IntegerFlag;
  using common::StringFlag;
  ServingOptions& s = f.serving;
  RedisTierOptions& r = f.redis;
  auto file = [](std::string name, std::string* out, std::string help) {
    return StringFlag(std::move(name), out)
        .NonEmpty()
        .MissingMessage("{flag} needs a file")
        .Help("FILE", std::move(help));
  };
  return {
      CustomFlag("--model", [&f](std::string_view v) { return AddModel(f, v); })
          .Alias("-m")
          .MissingMessage("--model needs NAME=PATH")
          .Help("NAME=PATH",
                "a GGUF model served as NAME (repeatable; PATH alone: the file's name)"),
      StringFlag("--listen", &f.listen)
          .MissingMessage("--listen needs HOST:PORT")
          .Help("HOST:PORT", "the gRPC address (port 0: any free port; default 127.0.0.1:50051)"),
      StringFlag("--device", &f.device)
          .MissingMessage("--device needs a device")
          .Help("cpu|cuda:N|sim",
                "the backend (default cpu; sim: the test and development device, not for serving)"),
      IntegerFlag("--threads", &s.n_threads, 0)
          .Alias("-t")
          .Error("--threads needs a count >= 0")
          .Help("N", "backend threads (0: one per core; default 1)"),
      IntegerFlag("--ctx", &s.ctx, 1)
          .Alias("-c")
          .Error("--ctx needs a token count >= 1")
          .Help("N", "positions per sequence, prompt + generated (default 4096)"),
      CustomFlag("--parallel",
                 [&s](std::string_view v) -> std::string {
                   int n = 0;
                   if (v == "auto") {
                     s.n_parallel = kParallelAuto;
                     return "";
                   }
                   if (!absl::SimpleAtoi(common::Sv(v), &n) || n < 1 || n > 4096) {
                     return "--parallel needs a count >= 1 (at most 4096) or auto";
                   }
                   s.n_parallel = n;
                   return "";
                 })
          .Alias("-np")
          .MissingMessage("--parallel needs a count >= 1 (at most 4096) or auto")
          .Help("N|auto",
                "sequences running at once per model (default auto: as many as the memory budget "
                "fits at --ctx, at most 4 on a CPU and 16 on a device)"),
      StringFlag("--ram", &f.ram)
          .MissingMessage("--ram needs a size (8GiB)")
          .Help("SIZE", "memory budget of the CPU worker (default: physical memory)"),
      StringFlag("--vram", &f.vram)
          .MissingMessage("--vram needs a size (20GiB)")
          .Help("SIZE",
                "device memory budget with --device cuda:N (default: all it has free) or sim (its "
                "capacity; default: physical memory)"),
      StringFlag("--expert-vram", &f.expert_vram)
          .NonEmpty()
          .MissingMessage("--expert-vram needs a size (6GiB) or auto")
          .Help("SIZE|auto",
                "device memory for a MoE model's routed experts, the rest in RAM (default auto: "
                "what the VRAM budget leaves, at most every expert)"),
      StringFlag("--record-routing", &f.record_routing)
          .NonEmpty()
          .MissingMessage("--record-routing needs a file")
          .Help("FILE", "record the experts each token chose, per step (deltaserve-placement-sim)"),
      CustomFlag("--expert-half-life",
                 [&s](std::string_view v) -> std::string {
                   double seconds = 0;
                   if (!absl::SimpleAtod(common::Sv(v), &seconds) || !std::isfinite(seconds) ||
                       seconds <= 0 || seconds > 365.0 * 86400) {
                     return "--expert-half-life needs seconds > 0 (60, 0.5)";
                   }
                   s.expert_half_life_seconds = seconds;
                   return "";
                 })
          .MissingMessage("--expert-half-life needs seconds > 0 (60, 0.5)")
          .Help("SECONDS", "half-life of the expert routing counts (default 60)"),
      common::ByteSizeFlag("--expert-move-bytes", &s.expert_move_bytes, ParseByteSize, 1)
          .MissingMessage("--expert-move-bytes needs a size (64MiB)")
          .RangeMessage("--expert-move-bytes must be at least 1 byte")
          .Help("SIZE", "expert weights copied to the device per engine step (default 64MiB)"),
      StringFlag("--overhead", &f.overhead)
          .MissingMessage("--overhead needs a size (256MiB)")
          .Help("SIZE", "added to the memory plan's fixed overhead"),
      ChoiceFlag("--cuda-graphs", &s.step_graphs, {{"on", true}, {"off", false}})
          .Error("--cuda-graphs needs on or off")
          .Help("on|off", "decode steps as CUDA graphs (default on; no effect on the CPU)"),
      KvCacheTypeFlag("--cache-type-k", &s.k_type)
          .Alias("-ctk")
          .Help("T", "K cache type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 (default f16)"),
      KvCacheTypeFlag("--cache-type-v", &s.v_type)
          .Alias("-ctv")
          .Help("T", "V cache type, the same choices (default f16)"),
      IntegerFlag("--page-tokens", &s.page_tokens, 1)
          .Error("--page-tokens needs a count >= 1")
          .Help("N", "KV page size in positions (default 256)"),
      IntegerFlag("--batch-tokens", &s.step_tokens, 1)
          .Error("--batch-tokens needs a count >= 1")
          .Help("N", "tokens per engine step (default 512)"),
      IntegerFlag("--max-waiting", &s.max_waiting, 1)
          .Error("--max-waiting needs a count >= 1")
          .Help("N", "queued requests per model beyond which Generate refuses (default 256)"),
      common::SwitchFlag("--speculation", &s.speculation).Help("", "n-gram speculative decoding"),
      IntegerFlag("--ngram-min", &s.ngram.ngram_min, 1)
          .Error("--ngram-min needs a count >= 1")
          .Help("N", "shortest suffix a draft must match (default 3)"),
      IntegerFlag("--draft-max", &s.ngram.draft_max, 1)
          .Error("--draft-max needs a count >= 1")
          .Help("N", "most tokens drafted per step (default 8)"),
      IntegerFlag("--metrics-port", &f.metrics_port, 0, 65535)
          .Error("--metrics-port needs a port")
          .Help("P", "serve Prometheus text on P/metrics (0: any free port; default off)"),
      StringFlag("--metrics-host", &f.metrics_host)
          .NonEmpty()
          .Error("--metrics-host needs an address")
          .Help("ADDR", "the address /metrics listens on (default 127.0.0.1)"),
      StringFlag("--worker-id", &f.worker_id)
          .MissingMessage("--worker-id needs an id")
          .Help("ID", "the id in WorkerInfo (default: the listen address)"),
      StringFlag("--snapshot-ram", &f.snapshot_ram)
          .MissingMessage("--snapshot-ram needs a size (4GiB, or 0 for no snapshots)")
          .Help("SIZE", "RAM for session snapshots (0: none; default a quarter of what is left)"),
      IntegerFlag("--snapshot-interval", &s.snapshot_interval, 1)
          .Error("--snapshot-interval needs a token count >= 1")
          .Help("N", "tokens between snapshots inside one long message (default 1024)"),
      IntegerFlag("--reasoning-budget", &s.reasoning_budget, 0)
          .Error("--reasoning-budget needs a token count >= 0")
          .Help("N", "tokens a reasoning block may take (default no limit)"),
      CustomFlag("--redis",
                 [&f](std::string_view v) -> std::string {
                   absl::StatusOr<common::RedisOptions> o = common::ParseRedisUrl(v);
                   // ParseRedisUrl's messages never quote the password.
                   if (!o.ok()) return absl::StrCat("--redis: ", o.status().message());
                   f.redis_url = std::string(v);
                   f.redis.redis = *o;
                   return "";
                 })
          .MissingMessage("--redis needs a URL (redis://[user:pass@]host:port[/db])")
          .Help("URL", "session snapshots in Redis too: redis://[user:pass@]host:port[/db]"),
      IntegerFlag(
          "--redis-timeout", [&r](int64_t ms) { r.timeout = absl::Milliseconds(ms); }, 1, 60000)
          .Error("--redis-timeout needs milliseconds in 1..60000")
          .Help("MS", "deadline of a Redis lookup round trip (default 50)"),
      IntegerFlag(
          "--redis-min-rate",
          [&r](int64_t mb) { r.min_bytes_per_second = static_cast<double>(mb) * 1e6; }, 1, 100000)
          .Error("--redis-min-rate needs MB/s in 1..100000")
          .Help("MB/S", "slowest snapshot transfer before it is given up (default 100)"),
      IntegerFlag(
          "--redis-ttl", [&r](int64_t sec) { r.ttl = absl::Seconds(sec); }, 1, 365ll * 86400)
          .Error("--redis-ttl needs seconds in 1..31536000")
          .Help("SECONDS", "expiry of the snapshots written (default 3600)"),
      // Below a header and one token nothing could ever be written.
      common::ByteSizeFlag("--redis-max-bytes", &r.max_bytes, ParseByteSize, 4096)
          .MissingMessage("--redis-max-bytes needs a size (512MiB)")
          .RangeMessage("--redis-max-bytes must be at least 4KiB")
          .Help("SIZE", "largest snapshot blob written or read (default 512MiB)"),
      ChoiceFlag("--redis-compression", &r.compression,
                 {{"none", common::SnapshotCompression::kNone},
                  {"zstd", common::SnapshotCompression::kZstd}})
          .Error("--redis-compression needs none or zstd")
          .Help("none|zstd", "compression of snapshot blob sections (default none)"),
      file("--tls-cert", &f.tls_cert, "TLS on the gRPC port: the certificate (chain), PEM"),
      file("--tls-key", &f.tls_key, "its private key, PEM"),
      file("--tls-client-ca", &f.tls_client_ca, "mutual TLS: the CA of the callers, PEM"),
      file("--auth-secret-file", &f.auth_secret_file,
           "every call carries this shared secret (or $DELTASERVE_WORKER_SECRET)"),
      common::ActionFlag("--auth-secret",
                         [] {
                           return std::string(
                               "--auth-secret is not accepted: a secret on the command line is "
                               "visible to every user (ps); use --auth-secret-file FILE or "
                               "$DELTASERVE_WORKER_SECRET");
                         }),
      common::LogFormatFlag(&f.log_format),
      common::SwitchFlag("--check-args", &f.check_args)
          .Help("",
                "check the command line and exit: 0 valid, 2 what is wrong (reads no file, "
                "opens no device)"),
      common::SwitchFlag("--list-cpu-isas", &f.list_cpu_isas)
          .StopsParsing()
          .Help("",
                "print the CPU kernel levels this machine supports, lowest first (the values of "
                "DELTASERVE_CPU_ISA; the last is the default), and exit"),
      common::HelpFlag(),
  };
}

}  // namespace

int WorkerUsage(const std::string& why) {
  WorkerFlags defaults;
  return common::UsageExit(
      "deltaserve-worker", why,
      "usage: deltaserve-worker --model NAME=PATH.gguf (repeatable) [--listen HOST:PORT]\n"
      "         [--device cpu|cuda:N|sim] [--threads N] [--ctx N] [--parallel N]\n"
      "         [--ram SIZE] [--vram SIZE] [--overhead SIZE] [--cuda-graphs on|off]\n"
      "         [--expert-vram SIZE|auto] [--expert-half-life SECONDS]\n"
      "         [--expert-move-bytes SIZE] [--record-routing FILE]\n"
      "         [--cache-type-k T] [--cache-type-v T] [--page-tokens N]\n"
      "         [--batch-tokens N] [--max-waiting N] [--speculation] [--ngram-min N]\n"
      "         [--draft-max N] [--metrics-port P] [--metrics-host ADDR]\n"
      "         [--worker-id ID]\n"
      "         [--snapshot-ram SIZE] [--snapshot-interval N] [--reasoning-budget N]\n"
      "         [--redis URL] [--redis-timeout MS] [--redis-min-rate MB/S]\n"
      "         [--redis-ttl SECONDS] [--redis-max-bytes SIZE] [--redis-compression none|zstd]\n"
      "         [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
      "         [--auth-secret-file FILE]  (or the secret in $DELTASERVE_WORKER_SECRET)\n"
      "         [--log-format text|json] [--check-args]\n"
      "       deltaserve-worker --list-cpu-isas\n",
      "flags:\n" + common::FlagHelp(FlagTable(defaults)));
}

std::string ParseWorkerFlags(int argc, char** argv, WorkerFlags& f) {
  f.serving.n_parallel = kParallelAuto;  // --parallel's default
  if (std::string why = common::ParseFlags(FlagTable(f), argc, argv); !why.empty()) return why;
  if (f.list_cpu_isas) return "";
  if (f.models.empty()) return "at least one --model is required";
  if (f.tls_cert.empty() != f.tls_key.empty()) return "--tls-cert and --tls-key go together";
  if (!f.tls_client_ca.empty() && f.tls_cert.empty()) {
    return "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS runs over TLS)";
  }
  absl::StatusOr<DeviceSpec> device = ParseDevice(f.device);
  if (!device.ok()) return std::string(device.status().message());
  f.device_spec = *device;
  const bool cuda = f.device_spec.kind == DeviceSpec::Kind::kCuda;
  const bool on_device = f.device_spec.has_device_memory();  // cuda:N or sim
  if (on_device && !f.ram.empty()) {
    return absl::StrCat("--ram is the CPU worker's budget; with --device ",
                        cuda ? "cuda:N" : f.device_spec.Name(), " use --vram");
  }
  if (!on_device && !f.vram.empty()) {
    return "--vram needs --device cuda:N or sim (the CPU worker's budget is --ram)";
  }
  if (!on_device && !f.expert_vram.empty()) {
    return "--expert-vram needs --device cuda:N or sim (on the CPU every expert is in RAM)";
  }
  // The sizes: a bad one is a usage error now, not a failure after the files are read.
  auto size = [](const char* flag, const std::string& text, uint64_t& out) -> std::string {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) return absl::StrCat(flag, ": ", bytes.status().message());
    out = *bytes;
    return "";
  };
  std::string why;
  if (!f.ram.empty()) why = size("--ram", f.ram, f.serving.budget_bytes);
  if (why.empty() && !f.vram.empty()) why = size("--vram", f.vram, f.vram_bytes);
  if (why.empty() && !f.overhead.empty()) {
    why = size("--overhead", f.overhead, f.serving.fixed_overhead_bytes);
  }
  if (why.empty() && !f.snapshot_ram.empty()) {
    uint64_t bytes = 0;
    why = size("--snapshot-ram", f.snapshot_ram, bytes);
    if (why.empty()) f.serving.snapshot_ram_bytes = bytes;
  }
  if (why.empty() && !f.expert_vram.empty() && f.expert_vram != "auto") {
    uint64_t bytes = 0;
    why = size("--expert-vram", f.expert_vram, bytes);
    if (why.empty()) {
      f.serving.expert_vram_bytes = bytes;
    } else {
      why += ", or auto";
    }
  }
  if (!why.empty()) return why;
#if !defined(DELTASERVE_HAVE_CUDA)
  // Last: the command line is right, but this binary cannot run it.
  if (cuda) {
    return absl::StrCat("--device ", f.device,
                        ": this build has no CUDA backend (configure with nvcc present)");
  }
#endif
  return "";
}

}  // namespace deltaserve::worker
