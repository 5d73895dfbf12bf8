// deltaserve-worker --device cuda:0 as a real process (label gpu; SKIPPED with the reason where
// no GPU can be used):
// - it starts on the GPU, says so (device name, VRAM budget, context reserve, kernel scratch),
//   and GetWorkerInfo reports "cuda:0 <device name>";
// - behind a real deltaserve-router it answers a greedy chat request (non-streaming and SSE)
//   with the text a CPU worker gives for the same request (the tiny F32 model: the GPU's logits
//   are within 1e-3 of the CPU's, cuda_engine_golden_test, so greedy tokens agree);
// - SIGTERM drains it to exit 0;
// - refusals that need a GPU to reach: a device number past the last, --vram above the free
//   memory, and a configuration whose VRAM plan does not fit (exit 1 with the plan's table,
//   before any weight is copied).
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "deltaserve/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"
#include "tests/integration/router_service.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"

namespace deltaserve::testing {
namespace {

namespace pb = ::deltaserve::v1;
using std::chrono::seconds;
using ::testing::HasSubstr;

class CudaWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU on this machine: " << why;
    count_ = kernels::CudaDeviceCount(&why);
    ASSERT_TRUE(kernels::QueryCudaDevice(0, &info_, &why)) << why;
  }
  int count_ = 0;
  kernels::CudaDeviceInfo info_;
};

std::vector<std::string> WorkerArgs(const std::string& device) {
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model",
                                   "tiny=" + GoldenPath("tiny-dense-f32.gguf"),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--ctx",
                                   "256",
                                   "--parallel",
                                   "2",
                                   "--cache-type-k",
                                   "f32",
                                   "--cache-type-v",
                                   "f32",
                                   "--device",
                                   device};
  if (device == "cpu") argv.insert(argv.end(), {"--threads", "2", "--ram", "2GiB"});
  return argv;
}

// A worker and a router in front of it; port 0 with a test failure when either does not start.
struct Service {
  std::unique_ptr<ChildProcess> worker, router;
  std::string worker_addr;
  int port = 0;

  explicit Service(const std::string& device) {
    worker = std::make_unique<ChildProcess>(WorkerArgs(device));
    auto line = worker->WaitForLine("listening on ", seconds(120));
    EXPECT_TRUE(line.has_value()) << worker->err();
    if (!line) return;
    worker_addr = line->substr(line->find("listening on ") + 13);
    router = std::make_unique<ChildProcess>(
        std::vector<std::string>{BinaryPath("router/deltaserve-router"), "--listen", "127.0.0.1:0",
                                 "--worker", worker_addr});
    auto rline = router->WaitForLine("listening on ", seconds(30));
    EXPECT_TRUE(rline.has_value()) << router->err();
    if (!rline) return;
    const int p = std::atoi(rline->substr(rline->rfind(':') + 1).c_str());
    for (int i = 0; i < 600; ++i) {
      if (Http(p, "GET", "/ready").status == 200) {
        port = p;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "router never became ready: " << router->err();
  }
};

std::string Chat(bool stream) {
  nlohmann::json j{{"model", "tiny"},
                   {"max_tokens", 24},
                   {"temperature", 0},
                   {"stream", stream},
                   {"messages", {{{"role", "user"}, {"content", "Hello there, how are you?"}}}}};
  return j.dump();
}

// The message text of a non-streaming answer, or of an SSE stream's deltas joined.
std::string Text(const RawHttpReply& r, bool stream) {
  if (!stream) {
    return nlohmann::json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>();
  }
  std::string text;
  size_t at = 0;
  while ((at = r.body.find("data: {", at)) != std::string::npos) {
    const size_t end = r.body.find('\n', at);
    const nlohmann::json chunk = nlohmann::json::parse(r.body.substr(at + 6, end - at - 6));
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content")) {
      text += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
    at = end;
  }
  return text;
}

TEST_F(CudaWorkerTest, ServesAChatThroughTheRouterAsTheCpuWorkerDoes) {
  std::string cpu_text[2];
  {
    Service cpu("cpu");
    ASSERT_NE(cpu.port, 0);
    for (bool stream : {false, true}) {
      const RawHttpReply r = Http(cpu.port, "POST", "/v1/chat/completions", Chat(stream));
      ASSERT_EQ(r.status, 200) << r.body;
      cpu_text[stream] = Text(r, stream);
    }
  }
  Service gpu("cuda:0");
  ASSERT_NE(gpu.port, 0);
  const std::string err = gpu.worker->err();
  EXPECT_THAT(err, HasSubstr("cuda:0 " + info_.name));
  EXPECT_THAT(err, HasSubstr("VRAM budget"));
  EXPECT_THAT(err, HasSubstr("CUDA context reserve"));
  EXPECT_THAT(err, HasSubstr("device kernel scratch"));
  // GetWorkerInfo names the device.
  auto stub =
      pb::Worker::NewStub(grpc::CreateChannel(gpu.worker_addr, grpc::InsecureChannelCredentials()));
  pb::WorkerInfo info;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &info).ok());
  EXPECT_EQ(info.device(), "cuda:0 " + info_.name);
  for (bool stream : {false, true}) {
    const RawHttpReply r = Http(gpu.port, "POST", "/v1/chat/completions", Chat(stream));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Text(r, stream), cpu_text[stream]) << (stream ? "SSE" : "non-streaming");
    EXPECT_FALSE(cpu_text[stream].empty());
  }
  gpu.router->Signal(SIGTERM);
  EXPECT_EQ(gpu.router->Wait(seconds(30)), std::optional<int>(0));
  gpu.worker->Signal(SIGTERM);
  EXPECT_EQ(gpu.worker->Wait(seconds(30)), std::optional<int>(0)) << gpu.worker->err();
}

TEST_F(CudaWorkerTest, RefusalsThatNeedAGpu) {
  // A device number past the last.
  std::vector<std::string> argv = WorkerArgs("cuda:" + std::to_string(count_));
  ProcessResult r = RunProcess(argv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("this machine has " + std::to_string(count_) + " CUDA device"));
  // More VRAM than is free.
  argv = WorkerArgs("cuda:0");
  argv.insert(argv.end(), {"--vram", std::to_string(info_.total_bytes + (uint64_t{1} << 30))});
  r = RunProcess(argv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("free on " + info_.name));
  // A plan that does not fit: the context reserve alone is more than 64 MiB.
  argv = WorkerArgs("cuda:0");
  argv.insert(argv.end(), {"--vram", "64MiB"});
  r = RunProcess(argv);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("does not fit in VRAM 64.00 MiB"));
  EXPECT_THAT(r.err, HasSubstr("max context"));
  EXPECT_THAT(r.err, HasSubstr("CUDA context reserve"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("loading tiny from")))
      << "refused before the model was loaded onto the device";
}

}  // namespace
}  // namespace deltaserve::testing
