// deltaserve-worker: serves one or more GGUF models on one device over gRPC
// (proto/deltaserve/v1/worker.proto), each through its own scheduler and memory plan. SIGTERM or
// SIGINT (or a Drain call with exit_when_idle) drains: new requests are refused, running ones
// finish, then the process exits 0.
//
//   deltaserve-worker --model qwen=model.gguf --listen 127.0.0.1:50051 --device cpu --threads 2
//                     [--ctx 4096] [--parallel 4] [--ram 8GiB] [--cache-type-k f16]
//                     [--device cuda:N|sim [--vram 20GiB]] [--overhead 256MiB]
//                     [--expert-vram 6GiB|auto] [--expert-half-life 60]
//                     [--expert-move-bytes 64MiB] [--record-routing FILE]
//                     [--cache-type-v f16] [--page-tokens 256] [--batch-tokens 512]
//                     [--speculation] [--ngram-min 3] [--draft-max 8] [--metrics-port P]
//                     [--metrics-host 127.0.0.1]
//                     [--snapshot-ram 4GiB] [--snapshot-interval 1024]
//                     [--redis redis://[user:pass@]host:port[/db]] [--redis-timeout 50]
//                     [--redis-min-rate 100] [--redis-ttl 3600] [--redis-max-bytes 512MiB]
//                     [--redis-compression none]
//                     [--tls-cert worker.crt --tls-key worker.key [--tls-client-ca ca.crt]]
//                     [--auth-secret-file FILE]   (or $DELTASERVE_WORKER_SECRET)
//                     [--log-format text|json] [--check-args]
//   deltaserve-worker --list-cpu-isas
//
// The CPU kernel level is the best the CPU supports, or DELTASERVE_CPU_ISA's
// (kernels/cpu/cpu_features.h): a level this machine cannot run stops the start (exit 2).
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/gguf_file.h"
#include "common/prometheus_text.h"
#include "common/qwen35_hparams.h"
#include "common/request_log.h"
#include "common/routing_trace.h"
#include "common/snapshot_key.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/sim/sim_backend.h"
#include "proto/worker_channel.h"
#include "worker/cache/device_memory.h"
#include "worker/cache/memory_plan.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/cache/redis_snapshot_tier.h"
#include "worker/sched/parallel_auto.h"
#include "worker/sched/served_model.h"
#include "worker/service/expert_service.h"
#include "worker/service/expert_startup.h"
#include "worker/service/metrics_endpoint.h"
#include "worker/service/worker_service.h"
#include "worker/worker_flags.h"

#if defined(DELTASERVE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#endif

namespace deltaserve::worker {
namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
}

#if defined(DELTASERVE_HAVE_CUDA)
// --device cuda:N: probes the device, sets the VRAM budget (--vram, at most the device's free
// memory; by default all of it), sizes the shared scratch area from the launchers' own figures
// for every model's batch shape and context, checks every model's VRAM plan (refusing with its
// table), and only then makes the backend. No CPU fallback: any failure ends the worker.
// `parallel` receives each model's --parallel auto choice (resolved once, on the VRAM budget
// each model will get; the loading loop uses it).
int OpenCudaDevice(WorkerFlags& f, std::unique_ptr<kernels::Backend>& backend, std::string& label,
                   std::vector<std::optional<ParallelChoice>>& parallel) {
  const std::string dev = f.device_spec.Name();
  auto fail = [&dev](std::string_view why) {
    std::cerr << "deltaserve-worker: --device " << dev << ": " << why << "\n";
    return 1;
  };
  std::string why;
  const int count = kernels::CudaDeviceCount(&why);
  if (count == 0) return fail(why);
  if (f.device_spec.index >= count) {
    return fail(absl::StrCat("this machine has ", count, " CUDA device", count == 1 ? "" : "s",
                             " (cuda:0 .. cuda:", count - 1, ")"));
  }
  kernels::CudaDeviceInfo info;
  if (!kernels::QueryCudaDevice(f.device_spec.index, &info, &why)) return fail(why);
  uint64_t budget = info.free_bytes;
  if (!f.vram.empty()) {  // read by ParseWorkerFlags
    if (f.vram_bytes > info.free_bytes) {
      return fail(absl::StrCat("--vram ", f.vram, " is more than the ", HumanBytes(info.free_bytes),
                               " free on ", info.name, " (", HumanBytes(info.total_bytes),
                               "; other processes hold the rest)"));
    }
    budget = f.vram_bytes;
  }
  f.serving.budget_bytes = budget;
  f.serving.budget_name = "VRAM";
  f.serving.device_context_bytes = kCudaContextReserveBytes;
  // One scratch area for every model: the largest need of any launcher call any of them makes.
  const DeviceScratchFunctions functions{
      &kernels::cuda::MatMulScratchBytes, &kernels::cuda::MoeFfnScratchBytes,
      &kernels::cuda::PagedAttentionScratchBytes, &kernels::cuda::GatedDeltaRuleScratchBytes};
  // --parallel auto is resolved per model below: the scratch area is sized for its cap.
  ServingOptions widest = f.serving;
  if (widest.n_parallel == kParallelAuto) widest.n_parallel = widest.parallel_auto_cap;
  const ServingBatchShape shape = BatchShapeFor(widest);
  uint64_t scratch = 0;
  for (const auto& [name, path] : f.models) {
    absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(path);
    absl::StatusOr<common::Qwen35HParams> hp =
        file.ok() ? common::ReadQwen35HParams(**file) : file.status();
    if (!hp.ok()) {
      std::cerr << "deltaserve-worker: model " << name << ": " << hp.status().message() << "\n";
      return 1;
    }
    scratch =
        std::max(scratch, ForwardPassScratchBytes(*hp, shape.max_batch_tokens, shape.logits_rows,
                                                  f.serving.ctx, functions));
  }
  f.serving.device_scratch_bytes = scratch;
  std::cerr << "deltaserve-worker: " << dev << " " << info.name << " (compute capability "
            << info.cc_major << "." << info.cc_minor << ", " << info.sm_count
            << " SMs): " << HumanBytes(info.total_bytes) << ", " << HumanBytes(info.free_bytes)
            << " free; VRAM budget " << HumanBytes(budget) << ", CUDA context reserve "
            << HumanBytes(kCudaContextReserveBytes) << ", kernel scratch " << HumanBytes(scratch)
            << "\n";
  // Every model's plan before the first byte is allocated on the device.
  uint64_t used = 0;
  for (size_t i = 0; i < f.models.size(); ++i) {
    ServingOptions o = f.serving;
    if (i > 0) o.device_context_bytes = o.device_scratch_bytes = 0;
    o.budget_bytes = budget > used ? budget - used : 0;
    if (o.n_parallel == kParallelAuto) {
      absl::StatusOr<ParallelChoice> c =
          ResolveAutoParallel(f.models[i].second, o, /*host_memory=*/false);
      if (!c.ok()) return fail(absl::StrCat("model ", f.models[i].first, ": ", c.status().message()));
      o.n_parallel = c->n_parallel;
      parallel[i] = *c;
    }
    absl::StatusOr<PlannedServing> planned =
        ServedModel::Plan(f.models[i].second, o, /*host_memory=*/false);
    if (!planned.ok()) {
      std::cerr << "deltaserve-worker: model " << f.models[i].first << ": "
                << planned.status().message() << "\n";
      return 1;
    }
    used += BytesNeeded(planned->plan, o.ctx, o.n_parallel);
  }
  kernels::CudaBackendOptions options;
  options.device = f.device_spec.index;
  options.scratch_bytes = scratch;
  backend = kernels::MakeCudaBackend(options, &why);
  if (backend == nullptr) return fail(why);
  label = absl::StrCat(dev, " ", info.name);
  return 0;
}
#endif

// --expert-vram given on a device: it must apply to a model. No MoE model among them is a
// mistake (exit 1, naming them); dense models beside a MoE one ignore it (one line each).
int CheckExpertVramApplies(const WorkerFlags& f) {
  if (f.expert_vram.empty() || !f.device_spec.has_device_memory()) return 0;
  std::vector<std::string> dense;
  for (const auto& [name, path] : f.models) {
    absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(path);
    absl::StatusOr<common::Qwen35HParams> hp =
        file.ok() ? common::ReadQwen35HParams(**file) : file.status();
    if (!hp.ok()) {
      std::cerr << "deltaserve-worker: model " << name << ": " << hp.status().message() << "\n";
      return 1;
    }
    if (!hp->is_moe) dense.push_back(absl::StrCat(name, " (", hp->arch, ")"));
  }
  if (dense.size() == f.models.size()) {
    std::cerr << "deltaserve-worker: --expert-vram " << f.expert_vram
              << ": no model here has routed experts (dense: " << absl::StrJoin(dense, ", ")
              << "); it applies to qwen35moe models only\n";
    return 1;
  }
  for (const std::string& d : dense) {
    std::cerr << "deltaserve-worker: --expert-vram does not apply to the dense model " << d
              << "\n";
  }
  return 0;
}

// MoE expert placement (docs/moe_placement.md) for every MoE model: the statistics
// GetExpertStats serves; with expert tiers the start-up placement (saved in Redis, else the
// warm-up's counts, else even), run before the schedulers start and before the snapshot
// publisher is set (the warm-up runs through the scheduler), then migration between steps; and
// --record-routing. A trace file that cannot be created stops the start (exit 1).
int SetUpExperts(const WorkerFlags& f, const std::map<std::string, ServedModel*>& models,
                 bool device_backend, std::map<std::string, std::unique_ptr<ModelExperts>>& out) {
  std::vector<std::pair<std::string, ServedModel*>> moe;
  for (const auto& [name, m] : models) {
    if (m->model().hparams().is_moe) moe.emplace_back(name, m);
  }
  if (!f.record_routing.empty() && moe.empty()) {
    std::cerr << "deltaserve-worker: --record-routing " << f.record_routing
              << ": no model here has routed experts; nothing is recorded\n";
  }
  for (const auto& [name, m] : moe) {
    ExpertTiers* tiers = m->model().expert_tiers();
    const ExpertSplit& split = m->plan().inputs.experts;
    ModelExpertsOptions o;
    o.half_life_seconds = f.serving.expert_half_life_seconds;
    o.device_backend = device_backend;
    o.device_budget_bytes = !split.applies     ? 0
                            : split.auto_sized ? split.device_bytes()
                                               : split.requested_bytes;
    auto experts = std::make_unique<ModelExperts>(*m, tiers, o);
    StartupPlacementOptions startup;
    if (!f.redis_url.empty()) startup.redis = f.redis.redis;
    ApplyStartupPlacement(name, *experts, startup);
    m->scheduler().SetExpertMigration(tiers, f.serving.expert_move_bytes);
    if (tiers != nullptr) {
      std::cerr << "  experts: " << tiers->n_slots() << " device slots of " << tiers->slot_bytes()
                << " B; start-up placement: " << experts->startup_source() << "; half-life "
                << o.half_life_seconds << " s, at most " << HumanBytes(f.serving.expert_move_bytes)
                << " moved per step\n";
    }
    if (!f.record_routing.empty()) {
      // One file per MoE model: FILE itself when there is one, FILE.<name> otherwise.
      const std::string path =
          moe.size() == 1 ? f.record_routing : absl::StrCat(f.record_routing, ".", name);
      const common::Qwen35HParams& hp = m->model().hparams();
      common::RoutingTraceHeader header;
      header.n_layer = hp.n_layer;
      header.n_expert = hp.n_expert;
      header.k = hp.n_expert_used;
      header.fingerprint = common::ModelFingerprint(m->model().file());
      header.model_name = name;
      absl::StatusOr<std::unique_ptr<common::RoutingTraceWriter>> w =
          common::RoutingTraceWriter::Create(path, header);
      if (!w.ok()) {
        std::cerr << "deltaserve-worker: --record-routing: " << w.status().message() << "\n";
        return 1;
      }
      // Shared with the observer: the model (and its forward passes) may outlive this scope.
      std::shared_ptr<common::RoutingTraceWriter> writer = std::move(*w);
      auto failed = std::make_shared<std::atomic<bool>>(false);
      m->model().set_routing_observer(
          [writer, failed, model = name](absl::Span<const int32_t> ids, int64_t n_tokens,
                                         int64_t k) {
            if (failed->load(std::memory_order_relaxed)) return;
            if (absl::Status s = writer->Append(ids, n_tokens, k); !s.ok()) {
              // Degraded: serving goes on, the trace stops here (one line).
              failed->store(true);
              std::cerr << "deltaserve-worker: " << model << ": --record-routing stopped: "
                        << s.message() << "\n";
            }
          });
      std::cerr << "  routing trace: " << path << "\n";
    }
    out[name] = std::move(experts);
  }
  return 0;
}

int Run(WorkerFlags& f, uint64_t baseline) {
  // First: a signal while the models load still ends in an orderly drain.
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // The CPU kernel level, before anything loads (the CPU kernels and the sampler run at it).
  const absl::StatusOr<kernels::CpuIsa> isa = kernels::ResolveCpuIsaFromEnv();
  if (!isa.ok()) {
    std::cerr << "deltaserve-worker: " << isa.status().message() << "\n";
    return 2;
  }
  const char* isa_env = std::getenv(std::string(kernels::kCpuIsaEnvVar).c_str());
  std::cerr << "deltaserve-worker: CPU kernels: " << kernels::CpuIsaName(*isa) << " (";
  if (isa_env != nullptr && *isa_env != '\0') {
    std::cerr << kernels::kCpuIsaEnvVar << "=" << isa_env
              << "; best on this CPU: " << kernels::CpuIsaName(kernels::BestSupportedIsa());
  } else {
    std::cerr << "the best on this CPU";
  }
  std::cerr << "; CPU features: " << kernels::CpuFeatureList(kernels::DetectedCpuFeatures())
            << ")\n";
  // Files read now: a missing or unreadable one stops the worker at start, naming the file.
  absl::StatusOr<proto::WorkerServerSecurity> security =
      proto::LoadWorkerServerSecurity({f.tls_cert, f.tls_key, f.tls_client_ca, f.auth_secret_file});
  if (!security.ok()) {
    std::cerr << "deltaserve-worker: " << security.status().message() << "\n";
    return 2;
  }
  auto refusals = std::make_shared<proto::CallRefusals>("deltaserve-worker");
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      proto::MakeWorkerServerCredentials(*security, refusals);
  if (!credentials.ok()) {
    std::cerr << "deltaserve-worker: " << credentials.status().message() << "\n";
    return 2;
  }
  // --ram, --overhead and --snapshot-ram were read by ParseWorkerFlags.
  if (f.device_spec.kind == DeviceSpec::Kind::kCpu) {
    if (f.ram.empty()) f.serving.budget_bytes = PhysicalMemory();
    f.serving.budget_name = "RAM";
  }
  if (f.device_spec.kind == DeviceSpec::Kind::kSim) {
    // The test device's memory is its capacity; no CUDA context, and no device scratch area
    // (the CPU kernels' scratch is host memory).
    f.serving.budget_bytes = f.vram.empty() ? PhysicalMemory() : f.vram_bytes;
    f.serving.budget_name = "VRAM";
  }
  f.serving.parallel_auto_cap = f.device_spec.kind == DeviceSpec::Kind::kCpu
                                    ? kParallelAutoCapCpu
                                    : kParallelAutoCapDevice;
  if (int rc = CheckExpertVramApplies(f); rc != 0) return rc;
  common::SetRequestLogFormat(f.log_format);
  // /metrics from before the first model loads (deltaserve_worker_model_load_progress); the
  // service's series join once it exists (StopMetrics, below, ends the endpoint before the
  // service goes).
  std::vector<std::string> names;
  for (const auto& m : f.models) names.push_back(m.first);
  auto progress = std::make_shared<ModelLoadProgress>(names);
  auto live_service = std::make_shared<std::atomic<const WorkerService*>>(nullptr);
  std::unique_ptr<MetricsEndpoint> metrics;
  if (f.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> m = MetricsEndpoint::Start(
        f.metrics_host, f.metrics_port, [progress, live_service, refusals, level = *isa] {
          common::PrometheusText out;
          WriteCpuIsaInfo(level, out);
          progress->Write(out);
          if (const WorkerService* s = live_service->load()) WriteWorkerMetrics(*s, out);
          return out.Take() + refusals->RenderPrometheus();
        });
    if (!m.ok()) {
      std::cerr << "deltaserve-worker: " << m.status().message() << "\n";
      return 1;
    }
    metrics = std::move(*m);
    std::cerr << "deltaserve-worker: metrics on " << f.metrics_host << ":" << metrics->port()
              << "/metrics\n";
  }
  std::unique_ptr<kernels::Backend> backend;
  std::string device_label = f.device_spec.Name();  // GetWorkerInfo's device
  std::vector<std::optional<ParallelChoice>> parallel(f.models.size());  // --parallel auto
  if (f.device_spec.kind == DeviceSpec::Kind::kCpu) {
    backend = kernels::MakeCpuBackend(f.serving.n_threads);
  } else if (f.device_spec.kind == DeviceSpec::Kind::kSim) {
    kernels::SimDeviceBackend::InstallFaultReporter();
    backend = std::make_unique<kernels::SimDeviceBackend>(
        kernels::SimDeviceOptions{.n_threads = f.serving.n_threads,
                                  .capacity_bytes = f.serving.budget_bytes,
                                  .print_violations = true});
    device_label = "sim (test device)";
    std::cerr << "deltaserve-worker: --device sim: the test and development device (CPU kernels "
                 "on memory that behaves like a GPU's; slow, not for serving): "
              << HumanBytes(f.serving.budget_bytes) << " of device memory"
              << (f.vram.empty() ? " (physical memory; --vram sets it)" : " (--vram)") << "\n";
  } else {
#if defined(DELTASERVE_HAVE_CUDA)
    if (int rc = OpenCudaDevice(f, backend, device_label, parallel); rc != 0) return rc;
#endif
  }
  std::vector<std::unique_ptr<ServedModel>> served;
  std::map<std::string, ServedModel*> by_name;
  uint64_t used = 0;
  for (size_t i = 0; i < f.models.size(); ++i) {
    ServingOptions o = f.serving;
    o.process_baseline_bytes = i == 0 ? baseline : 0;
    if (i > 0) o.device_context_bytes = o.device_scratch_bytes = 0;  // one backend for all
    // Later models get what the earlier ones left of the budget.
    o.budget_bytes = f.serving.budget_bytes > used ? f.serving.budget_bytes - used : 0;
    o.load_progress = [progress, name = f.models[i].first](double fraction) {
      progress->Set(name, fraction);
    };
    if (o.n_parallel == kParallelAuto) {
      if (!parallel[i]) {  // a CUDA device resolved it already, on this same budget
        absl::StatusOr<ParallelChoice> c =
            ResolveAutoParallel(f.models[i].second, o, backend->host_memory());
        if (!c.ok()) {
          std::cerr << "deltaserve-worker: model " << f.models[i].first << ": "
                    << c.status().message() << "\n";
          return 1;
        }
        parallel[i] = *c;
      }
      o.n_parallel = parallel[i]->n_parallel;
      std::cerr << "deltaserve-worker: " << f.models[i].first << ": " << parallel[i]->Describe(o)
                << "\n";
    }
    std::cerr << "deltaserve-worker: loading " << f.models[i].first << " from "
              << f.models[i].second << "\n";
    absl::StatusOr<std::unique_ptr<ServedModel>> m =
        ServedModel::Create(f.models[i].second, *backend, o);
    if (!m.ok()) {
      std::cerr << "deltaserve-worker: model " << f.models[i].first << ": " << m.status().message()
                << "\n";
      return 1;
    }
    used += (*m)->planned_bytes();
    std::cerr << RenderMemoryPlan((*m)->plan());
    if (std::string split = RenderExpertSplit((*m)->plan()); !split.empty()) {
      std::cerr << "  " << split << "\n";
    }
    std::cerr << "  planned " << f.serving.budget_name << ": " << (*m)->planned_bytes() << " B ("
              << HumanBytes((*m)->planned_bytes()) << ") for " << f.models[i].first << "\n";
    const SnapshotCacheStats snap = (*m)->snapshots().stats();
    std::cerr << "  session snapshots: "
              << (snap.ram_budget == 0
                      ? std::string("off (--snapshot-ram 0)")
                      : absl::StrCat(snap.ram_budget >> 20, " MiB of RAM for state copies (",
                                     (*m)->plan().recurrent.total() >> 20,
                                     " MiB each), a snapshot every ", f.serving.snapshot_interval,
                                     " tokens of a long message and at message ends"))
              << "\n";
    by_name[f.models[i].first] = m->get();
    served.push_back(std::move(*m));
  }
  // Expert placement before the snapshot publishers are set (its warm-up runs requests). Declared
  // before the service, which serves from it.
  std::map<std::string, std::unique_ptr<ModelExperts>> experts;
  if (int rc = SetUpExperts(f, by_name, !backend->host_memory(), experts); rc != 0) return rc;
  // The Redis tier per model, its publisher hooked in before the schedulers start. Declared
  // after the models: its fetch callbacks submit to their schedulers.
  std::map<std::string, std::unique_ptr<RedisSnapshotTier>> tiers;
  if (!f.redis_url.empty()) {
    // Not a start-up condition (Redis may come later; until then requests run without it), but
    // worth one line now rather than at the first request.
    if (auto probe = common::RedisClient::Create(f.redis.redis, absl::Seconds(1)); probe.ok()) {
      if (absl::Status s = (*probe)->Ping(); !s.ok()) {
        std::cerr << "deltaserve-worker: Redis " << f.redis.redis.RedactedUrl()
                  << " does not answer yet (snapshots stay in RAM until it does): " << s.message()
                  << "\n";
      }
    }
    for (auto& [name, m] : by_name) {
      if (!m->snapshots().enabled()) {
        std::cerr << "deltaserve-worker: " << name
                  << ": --redis ignored, snapshots are off (--snapshot-ram 0)\n";
        continue;
      }
      absl::StatusOr<std::unique_ptr<RedisSnapshotTier>> t =
          RedisSnapshotTier::Create(f.redis, m->shared_snapshots(), m->shared_kv_cache(),
                                    SnapshotLayoutOf(m->kv_cache(), m->model().state_layout()),
                                    f.serving.ctx, f.serving.snapshot_interval, name);
      if (!t.ok()) {
        std::cerr << "deltaserve-worker: --redis: " << t.status().message() << "\n";
        return 2;
      }
      RedisSnapshotTier* tier = t->get();
      m->scheduler().SetSnapshotPublisher(
          [tier](std::vector<std::shared_ptr<const LocalSnapshot>> s, int64_t prompt_tokens) {
            tier->Publish(std::move(s), prompt_tokens);
          });
      std::cerr << "  session snapshots in Redis: " << f.redis.redis.RedactedUrl() << ", timeout "
                << absl::ToInt64Milliseconds(f.redis.timeout) << " ms + size at "
                << f.redis.min_bytes_per_second / 1e6 << " MB/s, TTL "
                << absl::ToInt64Seconds(f.redis.ttl) << " s, at most " << f.redis.max_bytes
                << " bytes a blob, compression "
                << (f.redis.compression == common::SnapshotCompression::kZstd ? "zstd" : "none")
                << "\n";
      tiers[name] = std::move(*t);
    }
  }
  for (auto& m : served) m->scheduler().Start();

  const std::string id = f.worker_id.empty() ? f.listen : f.worker_id;
  WorkerService service(id, device_label, by_name);
  // /metrics stops (its thread joined: no scrape is rendering) before `service` goes, on every
  // way out of this function.
  struct StopMetrics {
    std::unique_ptr<MetricsEndpoint>& endpoint;
    std::shared_ptr<std::atomic<const WorkerService*>> p;
    ~StopMetrics() {
      endpoint.reset();
      p->store(nullptr);
    }
  } stop_metrics{metrics, live_service};
  for (auto& [name, tier] : tiers) service.SetRedisTier(name, tier.get());
  for (auto& [name, e] : experts) service.SetModelExperts(name, e.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.listen, *credentials, &port);
  builder.RegisterService(&service);
  builder.SetMaxSendMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "deltaserve-worker: cannot listen on " << f.listen
              << (security->tls() ? " (address in use or invalid, or the TLS certificate, key or "
                                    "client CA do not load)\n"
                                  : " (address in use or invalid)\n");
    for (auto& m : served) m->scheduler().Stop(false);
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus("deltaserve.v1.Worker", true);

  live_service->store(&service);
  std::cerr << "deltaserve-worker: gRPC port: "
            << (security->tls() ? (security->client_ca_pem.empty() ? "TLS" : "mutual TLS")
                                : "plain text")
            << (security->secret.empty() ? "" : ", shared secret required")
            << (security->authenticates() ? "" : " (any caller that reaches it is served)") << "\n";
  // The line the scripts and tests wait for.
  std::cerr << "deltaserve-worker: listening on " << f.listen.substr(0, f.listen.rfind(':')) << ":"
            << port << "\n";

  while (g_signal == 0 && !service.exit_requested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "deltaserve-worker: draining\n";
  const auto drain_start = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - drain_start)
        .count();
  };
  service.StartDraining();
  health->SetServingStatus("deltaserve.v1.Worker", false);
  // Requests accepted while draining began may still be in a Redis lookup: let them reach their
  // scheduler (a lookup is bounded by its deadlines) before it stops taking work.
  for (auto& [name, tier] : tiers) tier->WaitForFetches(absl::Seconds(5));
  for (auto& m : served) m->scheduler().Stop(/*drain=*/true);
  std::cerr << "deltaserve-worker: requests finished after " << since() << " ms\n";
  // Every stream has its final event queued; give the writes a moment to reach the clients.
  for (int i = 0; i < 200 && service.active_streams() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::cerr << "deltaserve-worker: streams closed after " << since() << " ms ("
            << service.active_streams() << " open)\n";
  // Every stream we served is closed: whatever gRPC still holds (idle connections) is cut now
  // rather than after a grace period.
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::seconds(service.active_streams() > 0 ? 5 : 0));
  // The tiers go before the service: queued fetches end (refused by the stopped schedulers)
  // while the service's counters still exist.
  tiers.clear();
  std::cerr << "deltaserve-worker: stopped after " << since() << " ms\n";
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) {
  using namespace deltaserve::worker;
  const uint64_t baseline = MeasureProcessBaseline().total();
  WorkerFlags f;
  if (std::string why = ParseWorkerFlags(argc, argv, f); !why.empty()) return WorkerUsage(why);
  if (f.list_cpu_isas) {
    // What this CPU and build can run, whatever DELTASERVE_CPU_ISA says (tests/isa_matrix.sh).
    for (deltaserve::kernels::CpuIsa isa : deltaserve::kernels::SupportedIsas()) {
      std::cout << deltaserve::kernels::CpuIsaName(isa) << "\n";
    }
    return 0;
  }
  if (f.check_args) {
    // Nothing past the command line: the files it names may exist only where the worker runs
    // (a pod's volumes), the device only on its machine.
    std::cout << "deltaserve-worker: the command line is valid (" << f.models.size()
              << " model(s) on " << f.device_spec.Name() << "; no file read, no device opened)\n";
    return 0;
  }
  return Run(f, baseline);
}
