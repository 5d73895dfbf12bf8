// deltaserve-bench-router: the load generator of bench/router_bench.sh (router overhead).
//   --target grpc   N closed-loop clients call a worker's Generate directly (one channel, like
//                   the router's), each starting its next call when the last one ends;
//   --target http   N closed-loop clients, one keep-alive HTTP/1.1 connection each, POST the same
//                   request to the router's /v1/completions (prompt as token ids, greedy,
//                   --max-tokens), non-streamed or streamed (--stream: until `data: [DONE]`);
//   --target idle   opens --clients streamed completions through the router, waits for each
//                   one's first event, holds them all for --hold seconds, and counts any that
//                   fails to open or ends early; samples the router's RSS and CPU (--watch-pid).
// Closed loop by default; --rate R paces the clients instead (R requests/s in all, each client
// every clients/R seconds), latency then counting from the scheduled send. --get PATH sends
// GET PATH instead of the completion (e.g. /health: the HTTP layer alone). Latency is from
// the first byte sent to the last byte of the answer; only answers that end in the measured
// window (after --warmup, for --duration seconds) count; failures count always. --watch-pid
// adds that process's CPU per answered request over the window. One JSON line on stdout:
//   {"target":"http","clients":64,"stream":true,"requests":..,"errors":..,"rps":..,"p50_ms":..,
//    "p90_ms":..,"p99_ms":..,"max_ms":..,"mean_ms":..,"watched_cpu_us_per_request":..}
// Progress and errors go to stderr. RLIMIT_NOFILE is raised to its hard limit first. The idle
// run is in router_idle_streams.cc, the shared pieces in router_load.h.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/router_load.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "proto/worker_channel.h"

namespace deltaserve::bench {
namespace {

namespace asio = boost::asio;
namespace v1 = ::deltaserve::v1;
using asio::ip::tcp;

// Open-loop pacing (--rate): client i sends at t0 + i / rate, then every clients / rate
// seconds. Latency counts from the scheduled time, so a late send is charged to the server
// (no coordinated omission).
struct Pacer {
  Clock::time_point t0;
  Clock::duration period{};  // zero: closed loop
  Clock::time_point First(int client, int clients) const {
    return period == Clock::duration::zero() ? t0 : t0 + period * client / clients;
  }
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration Dur(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Pacer MakePacer(const RouterLoadFlags& f) {
  Pacer p;
  p.t0 = Clock::now();
  if (f.rate > 0) p.period = Dur(f.clients / f.rate);
  return p;
}

// Latencies of the answers that ended inside [begin, end], and all failures. Thread-safe.
class Recorder {
 public:
  void Start(Clock::time_point begin, Clock::time_point end) {
    begin_ = begin;
    end_ = end;
  }
  // Failures count wherever they happen, warm-up included.
  void Done(Clock::time_point start, Clock::time_point finish, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok) {
      ++errors_;
    } else if (finish >= begin_ && finish <= end_) {
      ms_.push_back(Ms(finish - start));
    }
  }
  bool Running(Clock::time_point now) const { return now < end_; }
  Clock::time_point begin() const { return begin_; }
  Clock::time_point end() const { return end_; }
  int64_t requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(ms_.size());
  }
  // True for the first few failures: the ones worth a line on stderr.
  bool LogFailure() { return logged_++ < 5; }
  // The summary line (sorts the latencies); `cpu_us`: the watched process's CPU per request.
  std::string Json(const RouterLoadFlags& f, double cpu_us) {
    std::lock_guard<std::mutex> lock(mu_);
    std::sort(ms_.begin(), ms_.end());
    auto pct = [&](double p) {
      if (ms_.empty()) return 0.0;
      const size_t i = std::min(ms_.size() - 1, static_cast<size_t>(p * ms_.size()));
      return ms_[i];
    };
    double sum = 0;
    for (double m : ms_) sum += m;
    const double window = Seconds(end_ - begin_);
    return absl::StrFormat(
        "{\"target\":\"%s\",\"clients\":%d,\"stream\":%s,\"max_tokens\":%d,\"requests\":%d,"
        "\"errors\":%d,\"seconds\":%.3f,\"rps\":%.1f,\"p50_ms\":%.4f,\"p90_ms\":%.4f,"
        "\"p99_ms\":%.4f,\"max_ms\":%.4f,\"mean_ms\":%.4f,\"rate\":%.1f,\"path\":\"%s\","
        "\"watched_cpu_us_per_request\":%.1f,\"self_cpu_s\":%.3f}",
        f.target, f.clients, f.stream ? "true" : "false", f.max_tokens, ms_.size(), errors_, window,
        ms_.size() / window, pct(0.50), pct(0.90), pct(0.99), ms_.empty() ? 0 : ms_.back(),
        ms_.empty() ? 0 : sum / ms_.size(), f.rate, f.get_path, cpu_us, SelfCpuSeconds());
  }

 private:
  std::mutex mu_;
  Clock::time_point begin_, end_;
  std::vector<double> ms_;
  int64_t errors_ = 0;
  std::atomic<int64_t> logged_{0};
};

// CPU microseconds the watched process (--watch-pid) spent per answered request in the window.
double CpuPerRequestUs(const RouterLoadFlags& f, const ProcSample& before, const ProcSample& after,
                       Recorder& recorder) {
  const int64_t n = recorder.requests();
  if (f.watch_pid <= 0 || n == 0) return 0;
  return (after.cpu_s - before.cpu_s) * 1e6 / static_cast<double>(n);
}

// ---- gRPC Generate, straight to the worker ------------------------------------------------------

struct GrpcLoad {
  std::unique_ptr<v1::Worker::Stub> stub;
  v1::GenerateRequest request;
  Recorder recorder;
  Pacer pacer;
  asio::io_context timers;  // paced calls wait here for their turn
  std::atomic<int> in_flight{0};
};

// One Generate call; when it ends it records itself and starts its successor, at once (closed
// loop) or at its scheduled time (paced).
class GrpcCall : public grpc::ClientReadReactor<v1::GenerateEvent> {
 public:
  GrpcCall(GrpcLoad* load, Clock::time_point scheduled) : load_(load), scheduled_(scheduled) {}

  // Starts the call now, or when it is due.
  static void StartAt(GrpcLoad* load, Clock::time_point when) {
    if (when <= Clock::now()) return (new GrpcCall(load, when))->Start();
    auto timer = std::make_shared<asio::steady_timer>(load->timers, when);
    timer->async_wait([load, when, timer](boost::system::error_code) {
      if (load->recorder.Running(Clock::now())) (new GrpcCall(load, when))->Start();
    });
  }

  void Start() {
    ++load_->in_flight;
    const bool paced = load_->pacer.period != Clock::duration::zero();
    start_ = paced ? scheduled_ : Clock::now();
    load_->stub->async()->Generate(&context_, &load_->request, this);
    StartRead(&event_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (event_.has_final_event()) {
      final_ok_ = event_.final_event().finish_reason() == v1::FINISH_REASON_LENGTH ||
                  event_.final_event().finish_reason() == v1::FINISH_REASON_STOP;
    }
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    const Clock::time_point end = Clock::now();
    const bool ok = status.ok() && final_ok_;
    if (!ok && load_->recorder.LogFailure()) {
      std::cerr << "grpc: call failed: " << status.error_message() << "\n";
    }
    load_->recorder.Done(start_, end, ok);
    GrpcLoad* load = load_;
    const Clock::time_point next = scheduled_ + load->pacer.period;
    delete this;
    if (load->recorder.Running(end)) StartAt(load, next);
    --load->in_flight;
  }

 private:
  GrpcLoad* load_;
  const Clock::time_point scheduled_;
  grpc::ClientContext context_;
  v1::GenerateEvent event_;
  Clock::time_point start_;
  bool final_ok_ = false;
};

int RunGrpc(const RouterLoadFlags& f) {
  GrpcLoad load;
  absl::StatusOr<proto::WorkerClientSecurity> security =
      proto::LoadWorkerClientSecurity(f.worker_channel);
  if (!security.ok()) {
    std::cerr << "deltaserve-bench-router: " << security.status().message() << "\n";
    return 2;
  }
  load.stub = v1::Worker::NewStub(
      proto::CreateWorkerChannel(f.address, *security, grpc::ChannelArguments()));
  load.request.set_request_id("bench");
  load.request.set_model(f.model);
  for (int32_t id : f.prompt) load.request.add_prompt_token_ids(id);
  load.request.mutable_sampling()->set_temperature(0);
  load.request.mutable_sampling()->set_max_tokens(f.max_tokens);
  load.pacer = MakePacer(f);
  load.recorder.Start(load.pacer.t0 + Dur(f.warmup_s),
                      load.pacer.t0 + Dur(f.warmup_s + f.duration_s));
  auto work = asio::make_work_guard(load.timers);
  std::thread timer_thread([&] { load.timers.run(); });
  for (int i = 0; i < f.clients; ++i) GrpcCall::StartAt(&load, load.pacer.First(i, f.clients));
  std::this_thread::sleep_until(load.recorder.begin());
  const ProcSample before = SampleProc(f.watch_pid);
  std::this_thread::sleep_until(load.recorder.end());
  const ProcSample after = SampleProc(f.watch_pid);
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
  while (load.in_flight > 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  work.reset();
  load.timers.stop();
  timer_thread.join();
  std::cout << load.recorder.Json(f, CpuPerRequestUs(f, before, after, load.recorder)) << std::endl;
  return 0;
}

// ---- HTTP/1.1 to the router
// -----------------------------------------------------------------------

// Where a complete response ends in `data` (header + Content-Length body, or chunked body up to
// the last chunk), or npos while it is incomplete. `status` gets the status code. Enough HTTP
// for the router's own answers; not a general parser.
size_t ResponseEnd(const std::string& data, int* status) {
  const size_t header_end = data.find("\r\n\r\n");
  if (header_end == std::string::npos) return std::string::npos;
  *status = data.size() > 12 ? std::atoi(data.c_str() + 9) : 0;
  const size_t body = header_end + 4;
  const std::string_view header(data.data(), header_end);
  const size_t cl = header.find("Content-Length: ");
  if (cl != std::string_view::npos) {
    const size_t n = std::strtoul(data.c_str() + cl + 16, nullptr, 10);
    return data.size() >= body + n ? body + n : std::string::npos;
  }
  const size_t last = data.find("\r\n0\r\n\r\n", body - 2);  // the zero-size chunk
  return last == std::string::npos ? std::string::npos : last + 7;
}

// One keep-alive connection running the closed loop. All its work runs on the io thread.
class HttpClient : public std::enable_shared_from_this<HttpClient> {
 public:
  HttpClient(asio::io_context& io, const std::string* request, Recorder* recorder,
             const Pacer* pacer, Clock::time_point first)
      : socket_(io),
        timer_(io),
        request_(request),
        recorder_(recorder),
        pacer_(pacer),
        scheduled_(first) {}

  void Connect(const tcp::endpoint& to) {
    socket_.async_connect(to, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return self->Fail("connect: " + ec.message());
      self->socket_.set_option(tcp::no_delay(true));
      self->SendWhenDue();
    });
  }

 private:
  void SendWhenDue() {
    if (pacer_->period == Clock::duration::zero() || scheduled_ <= Clock::now()) return Send();
    timer_.expires_at(scheduled_);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code) { self->Send(); });
  }

  void Send() {
    const bool paced = pacer_->period != Clock::duration::zero();
    start_ = paced ? scheduled_ : Clock::now();
    scheduled_ += pacer_->period;
    data_.clear();
    asio::async_write(socket_, asio::buffer(*request_),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (ec) return self->Fail("write: " + ec.message());
                        self->Read();
                      });
  }

  void Read() {
    socket_.async_read_some(
        asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
          if (ec) return self->Fail("read: " + ec.message());
          self->data_.append(self->chunk_.data(), n);
          int status = 0;
          const size_t end = ResponseEnd(self->data_, &status);
          if (end == std::string::npos) return self->Read();
          const Clock::time_point now = Clock::now();
          self->recorder_->Done(self->start_, now, status == 200);
          if (status != 200 && self->recorder_->LogFailure()) {
            std::cerr << "http: status " << status << ": "
                      << self->data_.substr(self->data_.find("\r\n\r\n") + 4, 200) << "\n";
          }
          if (self->recorder_->Running(now)) self->SendWhenDue();
        });
  }

  void Fail(const std::string& why) {
    if (recorder_->LogFailure()) std::cerr << "http: " << why << "\n";
    recorder_->Done(start_, Clock::now(), false);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  const std::string* request_;
  Recorder* recorder_;
  const Pacer* pacer_;
  Clock::time_point scheduled_;  // when the next request is due (paced)
  Clock::time_point start_;
  std::string data_;
  std::array<char, 16384> chunk_;
};

int RunHttp(const RouterLoadFlags& f) {
  asio::io_context io;
  const std::string request =
      f.get_path.empty()
          ? CompletionRequest(f, f.address, f.stream)
          : absl::StrCat("GET ", f.get_path, " HTTP/1.1\r\nHost: ", f.address, "\r\n\r\n");
  Recorder recorder;
  const Pacer pacer = MakePacer(f);
  recorder.Start(pacer.t0 + Dur(f.warmup_s), pacer.t0 + Dur(f.warmup_s + f.duration_s));
  const tcp::endpoint to = Endpoint(f.address);
  for (int i = 0; i < f.clients; ++i) {
    std::make_shared<HttpClient>(io, &request, &recorder, &pacer, pacer.First(i, f.clients))
        ->Connect(to);
  }
  // The router's CPU is sampled over the measured window, from a timer on the same io thread.
  ProcSample before, after;
  asio::steady_timer window_begin(io, recorder.begin()), window_end(io, recorder.end());
  window_begin.async_wait([&](boost::system::error_code) { before = SampleProc(f.watch_pid); });
  window_end.async_wait([&](boost::system::error_code) { after = SampleProc(f.watch_pid); });
  io.run();  // returns when every client has stopped
  std::cout << recorder.Json(f, CpuPerRequestUs(f, before, after, recorder)) << std::endl;
  return 0;
}

// ---- command line
// ----------------------------------------------------------------------------------

int Usage(const std::string& why) {
  std::cerr << "deltaserve-bench-router: " << why << "\n"
            << "usage: deltaserve-bench-router --target grpc|http|idle --address HOST:PORT\n"
               "         [--model NAME] [--clients N] [--warmup S] [--duration S] [--stream]\n"
               "         [--max-tokens N] [--prompt 1,2,3] [--hold S] [--open-window N]\n"
               "         [--watch-pid PID] [--rate REQ_PER_S] [--get PATH]\n"
               "         (grpc) "
            << proto::kWorkerClientFlagsUsage << "\n";
  return 2;
}

int Main(int argc, char** argv) {
  RouterLoadFlags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--stream") {
      f.stream = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(a + " needs a value");
    const std::string v = argv[++i];
    bool ok = true;
    std::string flag_error;
    if (proto::ParseWorkerClientFlag(a, v.c_str(), f.worker_channel, flag_error)) {
      continue;
    } else if (a == "--target") {
      f.target = v;
    } else if (a == "--address") {
      f.address = v;
    } else if (a == "--model") {
      f.model = v;
    } else if (a == "--clients") {
      ok = absl::SimpleAtoi(v, &f.clients) && f.clients >= 1;
    } else if (a == "--warmup") {
      ok = absl::SimpleAtod(v, &f.warmup_s) && f.warmup_s >= 0;
    } else if (a == "--duration") {
      ok = absl::SimpleAtod(v, &f.duration_s) && f.duration_s > 0;
    } else if (a == "--hold") {
      ok = absl::SimpleAtod(v, &f.hold_s) && f.hold_s >= 0;
    } else if (a == "--open-window") {
      ok = absl::SimpleAtoi(v, &f.open_window) && f.open_window >= 1;
    } else if (a == "--max-tokens") {
      ok = absl::SimpleAtoi(v, &f.max_tokens) && f.max_tokens >= 1;
    } else if (a == "--rate") {
      ok = absl::SimpleAtod(v, &f.rate) && f.rate >= 0;
    } else if (a == "--get") {
      f.get_path = v;
      ok = !v.empty() && v[0] == '/';
    } else if (a == "--watch-pid") {
      ok = absl::SimpleAtoi(v, &f.watch_pid);
    } else if (a == "--prompt") {
      f.prompt.clear();
      for (absl::string_view p : absl::StrSplit(v, ',')) {
        int32_t id = 0;
        ok = ok && absl::SimpleAtoi(p, &id) && id >= 0;
        f.prompt.push_back(id);
      }
    } else {
      return Usage("unknown argument '" + a + "'");
    }
    if (!ok) return Usage("bad value for " + a + ": '" + v + "'");
  }
  if (f.address.empty()) return Usage("--address is required");
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (f.target == "grpc") return RunGrpc(f);
  if (f.target == "http") return RunHttp(f);
  if (f.target == "idle") return RunIdleStreams(f);
  return Usage("--target must be grpc, http or idle");
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) { return deltaserve::bench::Main(argc, argv); }
