#pragma once
// Shared pieces of deltaserve-bench-router (bench/router_overhead.cc, the latency load, and
// bench/router_idle_streams.cc, the idle SSE streams): its flags, the completion request it
// sends, /proc sampling of the process under test, and the idle-streams run.

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/worker_channel.h"

namespace deltaserve::bench {

using Clock = std::chrono::steady_clock;

// The command line of deltaserve-bench-router.
struct RouterLoadFlags {
  std::string target;   // grpc, http, idle
  std::string address;  // HOST:PORT of the worker (grpc) or router (http, idle)
  std::string model = "tiny";
  int clients = 1;
  double warmup_s = 1.0;
  double duration_s = 5.0;
  double hold_s = 10.0;   // idle: how long the streams are held
  int open_window = 256;  // idle: streams being opened at once
  int max_tokens = 2;
  bool stream = false;
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  int watch_pid = 0;     // the router's (or worker's) pid, for its RSS and CPU
  double rate = 0;       // requests per second over all clients; 0: closed loop
  std::string get_path;  // http: GET this path instead of the completion
  // grpc: TLS and the secret of the worker channel (--worker-tls-*, --worker-secret-file).
  proto::WorkerClientFiles worker_channel;
};

// The raw HTTP/1.1 request (keep-alive) for POST /v1/completions with the flags' model, prompt
// ids and max_tokens, greedy, streamed or not.
std::string CompletionRequest(const RouterLoadFlags& f, const std::string& host, bool stream);

// "127.0.0.1:8080" as an endpoint (IPv4 or IPv6 literal; no name lookup).
boost::asio::ip::tcp::endpoint Endpoint(const std::string& address);

// RSS (KiB) and CPU time (seconds, user + system) of a process, from /proc.
struct ProcSample {
  int64_t rss_kib = 0;
  double cpu_s = 0;
};

// The sample of `pid` now; zeros for pid <= 0 or a process that is gone.
ProcSample SampleProc(int pid);

// CPU time this process has used (user + system), seconds.
double SelfCpuSeconds();

// --target idle: opens f.clients streamed completions through the router at f.address, holds
// them f.hold_s seconds, prints one JSON line; exit status 0 when every stream opened and none
// ended early, else 3.
int RunIdleStreams(const RouterLoadFlags& f);

}  // namespace deltaserve::bench
