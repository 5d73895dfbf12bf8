// deltaserve-bench-stand-in-worker: a STAND-IN for deltaserve-worker, for the router benchmark
// (bench/router_bench.sh) only. It serves deltaserve.v1.Worker without an engine, so that what
// is measured behind it is the router alone:
//   --mode instant  Generate answers at once with --tokens TokenEvents (one token each) and a
//                   FinalEvent (LENGTH): a worker that costs nothing, for the latency rows;
//   --mode hold     Generate sends one TokenEvent, then holds the stream open until the client
//                   cancels: the idle-streams row (thousands of open streams, which a real
//                   worker could not admit).
// GetWorkerInfo is copied once, at start-up, from a real worker (--info-from HOST:PORT, with its
// tokenizer), so the router sees a real model and vocabulary; the copy reports
// max_parallel_sequences = --parallel and an idle load, so the router never considers it
// saturated. Callback API: an open stream holds no thread.
//
//   deltaserve-bench-stand-in-worker --info-from 127.0.0.1:50051 --mode hold
//       [--listen 127.0.0.1:0] [--parallel 100000] [--tokens 2]
// Prints "listening on 127.0.0.1:PORT" on stderr when it accepts calls; SIGTERM / SIGINT stop it.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "proto/worker_channel.h"

namespace deltaserve::bench {
namespace {

namespace v1 = ::deltaserve::v1;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

struct Flags {
  std::string listen = "127.0.0.1:0";
  std::string info_from;
  proto::WorkerClientFiles info_channel;  // TLS and secret to reach --info-from
  bool hold = false;
  int32_t parallel = 100000;
  int tokens = 2;
};

// One Generate stream. Writes are serial (the next starts in OnWriteDone); Finish is called
// exactly once and never while a write is in flight, as gRPC requires.
class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateEvent> {
 public:
  GenerateReactor(int tokens, bool hold, int32_t prompt_tokens)
      : tokens_(tokens), hold_(hold), prompt_tokens_(prompt_tokens) {
    event_.mutable_token_event()->add_token_ids(1);
    event_.mutable_token_event()->set_text("x");
    NextWrite();
  }

  void OnWriteDone(bool ok) override {
    grpc::Status finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_) {
        if (!TakeFinish()) return;
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "gone");
      } else if (hold_) {
        return;  // OnCancel finishes
      } else if (!finished_writing_) {
        NextWrite();
        return;
      } else if (!TakeFinish()) {
        return;
      }
    }
    // Outside the lock: Finish may lead to OnDone, which deletes this.
    Finish(finish);
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      if (writing_ || !TakeFinish()) return;  // OnWriteDone finishes
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override { delete this; }

 private:
  // Starts the next event: a token while tokens remain (one in hold mode), then the final one.
  void NextWrite() {
    writing_ = true;
    if (sent_ < tokens_ || (hold_ && sent_ == 0)) {
      ++sent_;
      StartWrite(&event_);
      return;
    }
    final_.mutable_final_event()->set_finish_reason(v1::FINISH_REASON_LENGTH);
    final_.mutable_final_event()->mutable_usage()->set_prompt_tokens(prompt_tokens_);
    final_.mutable_final_event()->mutable_usage()->set_completion_tokens(sent_);
    finished_writing_ = true;
    StartWrite(&final_);
  }

  // True the first time only: the caller then calls Finish, after releasing mu_.
  bool TakeFinish() {
    if (finish_called_) return false;
    finish_called_ = true;
    return true;
  }

  const int tokens_;
  const bool hold_;
  const int32_t prompt_tokens_;
  std::mutex mu_;
  v1::GenerateEvent event_;
  v1::GenerateEvent final_;
  int sent_ = 0;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_writing_ = false;
  bool finish_called_ = false;
};

class StandInService final : public v1::Worker::CallbackService {
 public:
  StandInService(v1::WorkerInfo info, const Flags& flags) : info_(std::move(info)), flags_(flags) {}

  grpc::ServerWriteReactor<v1::GenerateEvent>* Generate(
      grpc::CallbackServerContext* /*context*/, const v1::GenerateRequest* request) override {
    return new GenerateReactor(flags_.tokens, flags_.hold, request->prompt_token_ids_size());
  }

  grpc::ServerUnaryReactor* GetWorkerInfo(grpc::CallbackServerContext* context,
                                          const v1::WorkerInfoRequest* request,
                                          v1::WorkerInfo* response) override {
    *response = info_;
    if (!request->include_tokenizer()) {
      for (v1::ModelInfo& m : *response->mutable_models()) m.clear_tokenizer();
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* /*request*/,
                                  v1::DrainResponse* /*response*/) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const v1::WorkerInfo info_;
  const Flags flags_;
};

int Usage(const std::string& why) {
  std::cerr << "deltaserve-bench-stand-in-worker: " << why << "\n"
            << "usage: deltaserve-bench-stand-in-worker --info-from HOST:PORT --mode instant|hold\n"
               "         [--listen HOST:PORT] [--parallel N] [--tokens N]\n"
               "         "
            << proto::kWorkerClientFlagsUsage << "  (to reach --info-from)\n";
  return 2;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) return Usage(a + " needs a value");
    ++i;
    std::string flag_error;
    if (proto::ParseWorkerClientFlag(a, v, f.info_channel, flag_error)) {
      continue;
    } else if (a == "--listen") {
      f.listen = v;
    } else if (a == "--info-from") {
      f.info_from = v;
    } else if (a == "--mode") {
      if (std::string(v) != "instant" && std::string(v) != "hold") return Usage("bad --mode");
      f.hold = std::string(v) == "hold";
    } else if (a == "--parallel") {
      if (!absl::SimpleAtoi(v, &f.parallel) || f.parallel < 1) return Usage("bad --parallel");
    } else if (a == "--tokens") {
      if (!absl::SimpleAtoi(v, &f.tokens) || f.tokens < 1) return Usage("bad --tokens");
    } else {
      return Usage("unknown argument '" + a + "'");
    }
  }
  if (f.info_from.empty()) return Usage("--info-from is required");

  // The real worker's description, tokenizer included (it can take a moment to come up).
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  absl::StatusOr<proto::WorkerClientSecurity> security =
      proto::LoadWorkerClientSecurity(f.info_channel);
  if (!security.ok()) {
    std::cerr << "deltaserve-bench-stand-in-worker: " << security.status().message() << "\n";
    return 2;
  }
  auto stub = v1::Worker::NewStub(proto::CreateWorkerChannel(f.info_from, *security, args));
  v1::WorkerInfoRequest request;
  request.set_include_tokenizer(true);
  v1::WorkerInfo info;
  grpc::Status status;
  for (int attempt = 0; attempt < 100; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    status = stub->GetWorkerInfo(&context, request, &info);
    if (status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!status.ok()) {
    std::cerr << "deltaserve-bench-stand-in-worker: GetWorkerInfo from " << f.info_from
              << " failed: " << status.error_message() << "\n";
    return 1;
  }
  info.set_worker_id("stand-in");
  for (v1::ModelInfo& m : *info.mutable_models()) {
    m.set_max_parallel_sequences(f.parallel);
    m.clear_load();
  }

  StandInService service(std::move(info), f);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(f.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 1 << 30);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "deltaserve-bench-stand-in-worker: cannot listen on " << f.listen << "\n";
    return 1;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const std::string host = f.listen.substr(0, f.listen.rfind(':'));
  std::cerr << "deltaserve-bench-stand-in-worker: " << (f.hold ? "hold" : "instant")
            << " mode, listening on " << host << ":" << port << "\n";
  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) { return deltaserve::bench::Main(argc, argv); }
