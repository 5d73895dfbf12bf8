// deltaserve-worker --device as a real process where no GPU can be used: a CPU-only build says it
// has no CUDA backend; a CUDA build on a machine without a usable GPU says the probe's reason
// (never a silent CPU fallback); bad device names and budget flags that belong to the other kind
// of device are refused. Every refusal exits non-zero before anything listens. --check-args checks
// a GPU command line without opening the device (or reading a file). The GPU side
// (serving on cuda:0, --vram over the free memory, cuda:N past the last device) is in
// tests/gpu/cuda_worker_test.cc.
//
// --device sim, the test device, serves for real: a MoE model's plan and expert split are printed,
// a greedy generation gives the CPU engine's tokens, and the refusals of --expert-vram (more
// than the budget leaves, no MoE model, a CPU worker) exit non-zero with their message.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"
#include "worker/sched/served_model.h"

#if defined(DELTASERVE_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace deltaserve::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult RunWorker(std::vector<std::string> args) {
  args.insert(args.begin(), {BinaryPath("worker/deltaserve-worker"), "--model",
                             "t=" + GoldenPath("tiny-dense-f32.gguf"), "--listen", "127.0.0.1:0"});
  return RunProcess(args);
}

TEST(DeltaserveWorkerDevice, CudaWithoutAUsableGpuIsRefusedWithTheReason) {
#if defined(DELTASERVE_HAVE_CUDA)
  std::string why;
  if (kernels::CudaDeviceCount(&why) > 0) {
    GTEST_SKIP() << "this machine has a GPU: tests/gpu/cuda_worker_test.cc serves on it";
  }
  ProcessResult r = RunWorker({"--device", "cuda:0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: " + why));
#else
  ProcessResult r = RunWorker({"--device", "cuda:0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: this build has no CUDA backend (configure with "
                               "nvcc present)"));
#endif
  EXPECT_THAT(r.err, Not(HasSubstr("listening on")));
  EXPECT_THAT(r.err, Not(HasSubstr("loading t from")));
}

TEST(DeltaserveWorkerDevice, BadDevicesAndMismatchedBudgetsAreRefused) {
  ProcessResult r = RunWorker({"--device", "gpu0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--device gpu0: use cpu, cuda or cuda:N (N a device number)"));
  r = RunWorker({"--device", "cuda:-1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("use cpu, cuda or cuda:N"));
  r = RunWorker({"--device", "cpu", "--vram", "8GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--vram needs --device cuda:N"));
  // In every build: the command line's mistake comes before what the build lacks.
  r = RunWorker({"--device", "cuda:0", "--ram", "8GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--ram is the CPU worker's budget; with --device cuda:N use --vram"));
  r = RunWorker({"--overhead", "lots"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--overhead"));
  r = RunWorker({"--cuda-graphs", "maybe"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cuda-graphs needs on or off"));
}

// --check-args: the worker's own checks of the command line, nothing after them. The files it
// names do not exist here and the device cannot be opened, yet a valid line exits 0; a line the
// worker would refuse exits 2 with the worker's message.
TEST(DeltaserveWorkerDevice, CheckArgsChecksTheCommandLineOnly) {
  const std::string bin = BinaryPath("worker/deltaserve-worker");
  // clang-format off
  const std::vector<std::string> base = {
      bin, "--model", "big=/nonexistent/model.gguf", "--listen", "0.0.0.0:1",
      "--tls-cert", "/nonexistent/tls.crt", "--tls-key", "/nonexistent/tls.key",
      "--auth-secret-file", "/nonexistent/secret", "--check-args"};
  // clang-format on
  auto with = [&base](std::vector<std::string> more) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), more.begin(), more.end());
    return RunProcess(argv);
  };
  ProcessResult r = with({"--device", "cpu", "--ram", "12GiB", "--snapshot-ram", "2GiB"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the command line is valid (1 model(s) on cpu"));
  EXPECT_THAT(r.err, Not(HasSubstr("loading")));
  // A GPU pool's line: checked on a machine without a GPU, the device never opened.
  r = with({"--device", "cuda:0", "--vram", "70GiB", "--snapshot-ram", "8GiB"});
#if defined(DELTASERVE_HAVE_CUDA)
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("on cuda:0"));
#else
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--device cuda:0: this build has no CUDA backend"));
#endif
  // What the worker refuses, --check-args refuses with the same message.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--device", "cuda:0", "--ram", "12GiB"},
       "deltaserve-worker: --ram is the CPU worker's budget; with --device cuda:N use --vram"},
      {{"--vram", "8GiB"}, "deltaserve-worker: --vram needs --device cuda:N"},
      {{"--ram", "12 gigs"}, "deltaserve-worker: --ram: size '12 gigs'"},
      {{"--snapshot-ram", "lots"}, "deltaserve-worker: --snapshot-ram: size 'lots'"},
      {{"--redis", "http://r:6379"}, "deltaserve-worker: --redis: "},
      {{"--metrics-port", "70000"}, "deltaserve-worker: --metrics-port needs a port"},
      {{"--parallel", "0"}, "deltaserve-worker: --parallel needs a count >= 1 (at most 4096) or auto"},
  };
  for (const auto& [more, message] : refused) {
    r = with(more);
    EXPECT_EQ(r.exit_code, 2) << more[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.out, Not(HasSubstr("valid")));
  }
}

namespace pb = ::deltaserve::v1;
using std::chrono::seconds;

constexpr uint64_t kSlot = 3 * 256 * 32 * 4;  // one tiny-moe expert: gate + up + down, f32

// The sim worker's command line for the golden tiny MoE, served as "moe".
std::vector<std::string> SimWorkerArgs(std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model",
                                   "moe=" + GoldenPath("tiny-moe-f32.gguf"),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--device",
                                   "sim",
                                   "--ctx",
                                   "256",
                                   "--parallel",
                                   "2",
                                   "--page-tokens",
                                   "16",
                                   "--snapshot-ram",
                                   "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// The ServingOptions those flags give (worker_flags_test checks the flags land there), with
// `budget` as --vram: for the bytes the plan needs.
worker::ServingOptions SimWorkerOptions(uint64_t budget) {
  worker::ServingOptions o;
  o.ctx = 256;
  o.n_parallel = 2;
  o.page_tokens = 16;
  o.snapshot_ram_bytes = 0;
  o.budget_bytes = budget;
  o.budget_name = "VRAM";
  return o;
}

std::vector<int32_t> CpuGreedy(const std::vector<int32_t>& prompt, int n) {
  auto backend = kernels::MakeCpuBackend(1);
  auto model = worker::Qwen35Model::Load(GoldenPath("tiny-moe-f32.gguf"), *backend);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto seq = (*model)->NewSequence(static_cast<int64_t>(prompt.size()) + n);
  std::vector<int32_t> out, feed = prompt;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    worker::BatchEntry e{seq->get(), feed, false};
    EXPECT_TRUE((*model)->Forward({&e, 1}, logits).ok());
    out.push_back(worker::Argmax(logits, static_cast<int32_t>((*model)->n_vocab())));
    feed = {out.back()};
  }
  return out;
}

const std::vector<int32_t> kPrompt = {11, 48, 85, 122, 159, 196, 233, 270};

// Starts a sim worker with `extra` flags, generates 6 greedy tokens after kPrompt, drains it
// (exit 0 expected); the tokens, and the worker's stderr up to the drain.
struct Served {
  std::vector<int32_t> tokens;
  std::string start_log;
};
Served ServeGreedy(std::vector<std::string> extra) {
  Served out;
  ChildProcess w(SimWorkerArgs(std::move(extra)));
  EXPECT_TRUE(w.started());
  std::optional<std::string> line = w.WaitForLine("listening on ", seconds(120));
  out.start_log = w.err();
  EXPECT_TRUE(line.has_value()) << out.start_log;
  if (!line) return out;
  auto stub = pb::Worker::NewStub(grpc::CreateChannel(
      line->substr(line->find("listening on ") + 13), grpc::InsecureChannelCredentials()));
  pb::GenerateRequest r;
  r.set_model("moe");
  for (int32_t t : kPrompt) r.add_prompt_token_ids(t);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_max_tokens(6);
  r.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(120));
  auto reader = stub->Generate(&ctx, r);
  pb::GenerateEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_token_event()) {
      for (int32_t t : ev.token_event().token_ids()) out.tokens.push_back(t);
    }
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message() << "\n" << w.err();
  EXPECT_THAT(w.err(), Not(HasSubstr("sim device:")));  // no memory violation printed
  w.Signal(SIGTERM);
  std::optional<int> code = w.Wait(seconds(60));
  EXPECT_TRUE(code.has_value());
  if (code) {
    EXPECT_EQ(*code, 0) << w.err();
  }
  return out;
}

TEST(DeltaserveWorkerSim, ServesAMoeModelAndPrintsThePlanAndTheExpertSplit) {
  const Served s = ServeGreedy({"--vram", "512MiB", "--threads", "2"});
  EXPECT_THAT(s.start_log, HasSubstr("--device sim: the test and development device"));
  EXPECT_THAT(s.start_log, HasSubstr("512.0 MiB of device memory (--vram)"));
  EXPECT_THAT(s.start_log, HasSubstr("memory plan: tiny-moe-f32.gguf, VRAM budget 512.0 MiB"));
  // 128 experts of 96 KiB, 12 MiB: all fit, all on the device.
  EXPECT_THAT(s.start_log, HasSubstr("experts: 12.00 MiB of 12.00 MiB in VRAM (128 of 128 "
                                     "experts, 100 %), all on the device [--expert-vram auto]"));
  // The sim device computes with the CPU kernels: the CPU engine's tokens exactly.
  EXPECT_EQ(s.tokens, CpuGreedy(kPrompt, 6));
}

// Ten experts in VRAM, the rest computed on the CPU from the mapping: the same tokens.
TEST(DeltaserveWorkerSim, ServesWithMostExpertsInRam) {
  const Served s = ServeGreedy({"--vram", "512MiB", "--expert-vram", std::to_string(10 * kSlot)});
  EXPECT_THAT(s.start_log,
              HasSubstr("experts: 960.0 KiB of 12.00 MiB in VRAM (10 of 128 experts, 8 %), the "
                        "rest in RAM (computed on the CPU); slots of 96.00 KiB [--expert-vram "
                        "960.0 KiB]"));
  EXPECT_EQ(s.tokens, CpuGreedy(kPrompt, 6));
}

TEST(DeltaserveWorkerSim, ExpertVramRefusals) {
  // More expert memory than the budget leaves: the bytes needed with every expert in RAM, plus
  // room for 5 experts, and 10 asked for.
  worker::ServingOptions o = SimWorkerOptions(uint64_t{1} << 30);
  o.expert_vram_bytes = 0;
  absl::StatusOr<worker::PlannedServing> p =
      worker::ServedModel::Plan(GoldenPath("tiny-moe-f32.gguf"), o, /*host_memory=*/false);
  ASSERT_TRUE(p.ok()) << p.status();
  const uint64_t needed = worker::BytesNeeded(p->plan, o.ctx, o.n_parallel);
  ProcessResult r = RunProcess(SimWorkerArgs({"--vram", std::to_string(needed + 5 * kSlot),
                                              "--expert-vram", std::to_string(10 * kSlot)}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model moe: tiny-moe-f32.gguf: --expert-vram 960.0 KiB does not "
                               "fit"));
  EXPECT_THAT(r.err, HasSubstr("at most 5 of 128 experts"));
  EXPECT_THAT(r.err, Not(HasSubstr("listening on")));

  // No model with routed experts.
  r = RunWorker({"--device", "sim", "--vram", "1GiB", "--expert-vram", "64MiB"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--expert-vram 64MiB: no model here has routed experts (dense: "
                               "t (qwen35)); it applies to qwen35moe models only"));
  EXPECT_THAT(r.err, Not(HasSubstr("loading t from")));
  // A CPU worker: a usage error.
  r = RunWorker({"--device", "cpu", "--expert-vram", "auto"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--expert-vram needs --device cuda:N or sim"));
  // The sim device's budget is --vram.
  r = RunWorker({"--device", "sim", "--ram", "1GiB"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--ram is the CPU worker's budget; with --device sim use --vram"));
  // A budget the model does not fit even with every expert in RAM: the plan's refusal.
  r = RunProcess(SimWorkerArgs({"--vram", "4MiB"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("does not fit in VRAM 4.00 MiB"));
  EXPECT_THAT(r.err, HasSubstr("experts: 0 B of 12.00 MiB in VRAM"));
}

}  // namespace
}  // namespace deltaserve::testing
