// deltaserve-worker's command line: the settings it fills (WorkerFlags), read from argv through a
// flag table (common/flags.h) and checked across flags; main.cc runs the worker from them, or
// with --check-args only reports that they are valid.
//
//   WorkerFlags f;
//   if (std::string why = ParseWorkerFlags(argc, argv, f); !why.empty()) return WorkerUsage(why);
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/request_log.h"
#include "worker/cache/device_memory.h"
#include "worker/cache/redis_snapshot_tier.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {

// What the command line says; docs/worker.md lists the flags.
struct WorkerFlags {
  std::vector<std::pair<std::string, std::string>> models;  // name, path
  std::string listen = "127.0.0.1:50051";
  std::string device = "cpu";
  // The sizes as given; ParseWorkerFlags reads them into serving.budget_bytes (--ram),
  // vram_bytes, serving.fixed_overhead_bytes and serving.snapshot_ram_bytes.
  std::string ram;          // empty: physical memory
  std::string vram;         // cuda:N: empty: the device's free memory at start-up; sim: its
                            // capacity, empty: physical memory
  std::string overhead;     // --overhead: added to the plan's fixed overhead
  uint64_t vram_bytes = 0;  // --vram read; meaningful only when vram is not empty
  DeviceSpec device_spec;
  // MoE experts on a device (docs/moe_placement.md). --expert-vram as given (empty: not given,
  // which is auto), read into serving.expert_vram_bytes; cuda:N and sim only.
  std::string expert_vram;
  // --record-routing FILE: per engine step, the experts each token chose (common/routing_trace.h),
  // for deltaserve-placement-sim. Empty: not recorded.
  std::string record_routing;
  std::string snapshot_ram;  // empty: the default (a quarter of the RAM left after the plan)
  std::string worker_id;
  int metrics_port = -1;
  // Where /metrics listens: loopback by default; 0.0.0.0 (or the pod's IP) where Prometheus
  // scrapes from another host (Kubernetes).
  std::string metrics_host = "127.0.0.1";
  ServingOptions serving;
  // Session snapshots in Redis (docs/snapshots.md, "Redis tier"); empty URL: the RAM tier alone.
  std::string redis_url;
  RedisTierOptions redis;
  // The gRPC port's security (docs/worker.md, "Securing the gRPC port"): paths; the secret never
  // on the command line, where ps shows it.
  std::string tls_cert, tls_key, tls_client_ca, auth_secret_file;
  common::LogFormat log_format = common::LogFormat::kText;  // --log-format: the request lines
  // --check-args: the command line is checked as the worker would check it, and nothing more
  // happens: no file is read (models, TLS, secret), no device opened, no port bound.
  bool check_args = false;
  // --list-cpu-isas: print the CPU kernel levels this machine supports (the values
  // DELTASERVE_CPU_ISA takes here) and exit; needs no other flag.
  bool list_cpu_isas = false;
};

// Reads argv into `f` and checks the flags together (--tls-cert with --tls-key, --ram or --vram
// for the device, the sizes, a CUDA device only in a build with the CUDA backend, ...); "" when
// fine, "help" for -h/--help, else what is wrong. Everything the command line alone decides is
// checked here, so --check-args answers for it; files and devices are checked at start (Run).
std::string ParseWorkerFlags(int argc, char** argv, WorkerFlags& f);

// For "help": the usage and the flag listing on stdout, exit status 0; otherwise
// "deltaserve-worker: why" and the usage on stderr, exit status 2 (common::UsageExit).
int WorkerUsage(const std::string& why);

}  // namespace deltaserve::worker
