// Unit tests of deltaserve-worker's flag table (worker/worker_flags.cc): every flag's value lands
// in its own setting (the process tests in deltaserve_worker_test.cc check only the refusals),
// the defaults stay those of WorkerFlags / ServingOptions / RedisTierOptions, and the checks
// across flags (sizes included, so that --check-args answers for them). Expected values are the
// ones given on the command line below.
#include "worker/worker_flags.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/sched/parallel_auto.h"

namespace deltaserve::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::StartsWith;

// ParseWorkerFlags over {"deltaserve-worker", args...}.
std::string Parse(std::vector<std::string> args, WorkerFlags& f) {
  args.insert(args.begin(), "deltaserve-worker");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseWorkerFlags(static_cast<int>(argv.size()), argv.data(), f);
}

TEST(WorkerFlagsTest, EveryFlagLandsInItsSetting) {
  WorkerFlags f;
  // clang-format off
  const std::vector<std::string> args = {
      "--model", "a=/m/a.gguf", "-m", "/m/b.gguf", "--listen", "0.0.0.0:9", "--device", "cpu",
      "-t", "3", "--ctx=8192", "-np", "5", "--ram", "16GiB", "--overhead", "1MiB",
      "--cuda-graphs", "off", "-ctk", "q8_0", "--cache-type-v", "q4_0",
      "--page-tokens", "128", "--batch-tokens", "64", "--max-waiting", "7",
      "--speculation", "--ngram-min", "2", "--draft-max", "4",
      "--metrics-port", "0", "--metrics-host", "0.0.0.0", "--worker-id", "w1",
      "--snapshot-ram", "0", "--snapshot-interval", "256", "--reasoning-budget", "0",
      "--redis", "redis://cache:6380/2", "--redis-timeout", "75", "--redis-min-rate", "250",
      "--redis-ttl", "60", "--redis-max-bytes", "8KiB", "--redis-compression", "zstd",
      "--tls-cert", "w.crt", "--tls-key", "w.key", "--tls-client-ca", "ca.crt",
      "--auth-secret-file", "s.txt", "--log-format", "json", "--check-args"};
  // clang-format on
  ASSERT_EQ(Parse(args, f), "");
  EXPECT_THAT(f.models, ElementsAre(Pair("a", "/m/a.gguf"), Pair("b", "/m/b.gguf")));
  EXPECT_EQ(f.listen, "0.0.0.0:9");
  EXPECT_EQ(f.device_spec.kind, DeviceSpec::Kind::kCpu);
  const ServingOptions& s = f.serving;
  EXPECT_EQ(s.n_threads, 3);
  EXPECT_EQ(s.ctx, 8192);
  EXPECT_EQ(s.n_parallel, 5);
  EXPECT_EQ(f.ram, "16GiB");
  EXPECT_EQ(s.budget_bytes, uint64_t{16} << 30);
  EXPECT_EQ(f.overhead, "1MiB");
  EXPECT_EQ(s.fixed_overhead_bytes, uint64_t{1} << 20);
  EXPECT_FALSE(s.step_graphs);
  EXPECT_EQ(s.k_type, kernels::WeightType::kQ8_0);
  EXPECT_EQ(s.v_type, kernels::WeightType::kQ4_0);
  EXPECT_EQ(s.page_tokens, 128);
  EXPECT_EQ(s.step_tokens, 64);
  EXPECT_EQ(s.max_waiting, 7);
  EXPECT_TRUE(s.speculation);
  EXPECT_EQ(s.ngram.ngram_min, 2);
  EXPECT_EQ(s.ngram.draft_max, 4);
  EXPECT_EQ(f.metrics_port, 0);
  EXPECT_EQ(f.metrics_host, "0.0.0.0");
  EXPECT_EQ(f.worker_id, "w1");
  EXPECT_EQ(f.snapshot_ram, "0");
  EXPECT_EQ(s.snapshot_ram_bytes, std::optional<uint64_t>(0));
  EXPECT_EQ(s.snapshot_interval, 256);
  EXPECT_EQ(s.reasoning_budget, 0);
  EXPECT_EQ(f.redis_url, "redis://cache:6380/2");
  EXPECT_EQ(f.redis.redis.host, "cache");
  EXPECT_EQ(f.redis.redis.port, 6380);
  EXPECT_EQ(f.redis.redis.db, 2);
  EXPECT_EQ(f.redis.timeout, absl::Milliseconds(75));
  EXPECT_EQ(f.redis.min_bytes_per_second, 250e6);
  EXPECT_EQ(f.redis.ttl, absl::Seconds(60));
  EXPECT_EQ(f.redis.max_bytes, 8192u);
  EXPECT_EQ(f.redis.compression, common::SnapshotCompression::kZstd);
  EXPECT_EQ(f.tls_cert, "w.crt");
  EXPECT_EQ(f.tls_key, "w.key");
  EXPECT_EQ(f.tls_client_ca, "ca.crt");
  EXPECT_EQ(f.auth_secret_file, "s.txt");
  EXPECT_EQ(f.log_format, common::LogFormat::kJson);
  EXPECT_TRUE(f.check_args);
}

TEST(WorkerFlagsTest, DefaultsStayWhenOnlyAModelIsGiven) {
  WorkerFlags f;
  const WorkerFlags defaults;
  ASSERT_EQ(Parse({"--model", "/m/qwen.gguf"}, f), "");
  EXPECT_THAT(f.models, ElementsAre(Pair("qwen", "/m/qwen.gguf")));
  EXPECT_EQ(f.listen, "127.0.0.1:50051");
  EXPECT_EQ(f.device, "cpu");
  EXPECT_EQ(f.metrics_port, -1);
  EXPECT_EQ(f.metrics_host, "127.0.0.1");
  EXPECT_EQ(f.serving.ctx, defaults.serving.ctx);
  EXPECT_EQ(f.serving.n_threads, defaults.serving.n_threads);
  EXPECT_EQ(f.serving.reasoning_budget, -1);
  EXPECT_TRUE(f.serving.step_graphs);
  EXPECT_FALSE(f.serving.speculation);
  EXPECT_EQ(f.redis.timeout, defaults.redis.timeout);
  EXPECT_EQ(f.redis.max_bytes, defaults.redis.max_bytes);
  EXPECT_EQ(f.redis.compression, common::SnapshotCompression::kNone);
  EXPECT_TRUE(f.redis_url.empty());
  EXPECT_EQ(f.log_format, common::LogFormat::kText);
  EXPECT_FALSE(f.check_args);
  EXPECT_FALSE(f.list_cpu_isas);
  EXPECT_FALSE(f.serving.snapshot_ram_bytes.has_value());
  // MoE placement: auto expert budget, no trace, the documented half-life and move size.
  EXPECT_TRUE(f.expert_vram.empty());
  EXPECT_FALSE(f.serving.expert_vram_bytes.has_value());
  EXPECT_TRUE(f.record_routing.empty());
  EXPECT_EQ(f.serving.expert_half_life_seconds, 60.0);
  EXPECT_EQ(f.serving.expert_move_bytes, uint64_t{64} << 20);
}

// The sim test device and the MoE placement flags: a device like cuda:N for the budget flags.
TEST(WorkerFlagsTest, SimDeviceAndExpertFlags) {
  WorkerFlags f;
  ASSERT_EQ(Parse({"--model", "a=x", "--device", "sim", "--vram", "3GiB", "--expert-vram",
                   "1.5GiB", "--record-routing", "/tmp/r.trace", "--expert-half-life", "2.5",
                   "--expert-move-bytes", "8MiB"},
                  f),
            "");
  EXPECT_EQ(f.device_spec.kind, DeviceSpec::Kind::kSim);
  EXPECT_EQ(f.vram_bytes, uint64_t{3} << 30);
  EXPECT_EQ(f.expert_vram, "1.5GiB");
  EXPECT_EQ(f.serving.expert_vram_bytes, std::optional<uint64_t>(uint64_t{3} << 29));
  EXPECT_EQ(f.record_routing, "/tmp/r.trace");
  EXPECT_EQ(f.serving.expert_half_life_seconds, 2.5);
  EXPECT_EQ(f.serving.expert_move_bytes, uint64_t{8} << 20);

  WorkerFlags g;  // auto: given, but no byte count
  ASSERT_EQ(Parse({"--model", "a=x", "--device", "sim", "--expert-vram", "auto"}, g), "");
  EXPECT_EQ(g.expert_vram, "auto");
  EXPECT_FALSE(g.serving.expert_vram_bytes.has_value());
  WorkerFlags h;  // 0: every expert in RAM (llama.cpp's --cpu-moe)
  ASSERT_EQ(Parse({"--model", "a=x", "--device", "sim", "--expert-vram", "0"}, h), "");
  EXPECT_EQ(h.serving.expert_vram_bytes, std::optional<uint64_t>(0));

  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--expert-vram", "4GiB"},
       "--expert-vram needs --device cuda:N or sim (on the CPU every expert is in RAM)"},
      {{"--device", "cpu", "--expert-vram", "auto"},
       "--expert-vram needs --device cuda:N or sim (on the CPU every expert is in RAM)"},
      {{"--device", "sim", "--ram", "4GiB"},
       "--ram is the CPU worker's budget; with --device sim use --vram"},
      {{"--device", "sim", "--expert-vram", "most"},
       "--expert-vram: size 'most': does not start with a number (examples: 8GiB, 512MiB, 64G, "
       "1.5GiB), or auto"},
      {{"--device", "sim", "--expert-vram"}, "--expert-vram needs a size (6GiB) or auto"},
      {{"--expert-half-life", "0"}, "--expert-half-life needs seconds > 0 (60, 0.5)"},
      {{"--expert-half-life", "soon"}, "--expert-half-life needs seconds > 0 (60, 0.5)"},
      {{"--expert-half-life", "nan"}, "--expert-half-life needs seconds > 0 (60, 0.5)"},
      {{"--expert-move-bytes", "0"}, "--expert-move-bytes must be at least 1 byte"},
      {{"--record-routing", ""}, "--record-routing needs a file"},
  };
  for (const auto& [args, message] : refused) {
    WorkerFlags r;
    std::vector<std::string> argv = {"--model", "a=x"};
    argv.insert(argv.end(), args.begin(), args.end());
    EXPECT_EQ(Parse(argv, r), message) << args.back();
  }
}

// --list-cpu-isas needs no model and ends the parse (main.cc prints the levels and exits).
TEST(WorkerFlagsTest, ListCpuIsasNeedsNothingElse) {
  WorkerFlags f;
  ASSERT_EQ(Parse({"--list-cpu-isas"}, f), "");
  EXPECT_TRUE(f.list_cpu_isas);
  WorkerFlags g;
  ASSERT_EQ(Parse({"--list-cpu-isas", "--no-such-flag"}, g), "");
  EXPECT_TRUE(g.list_cpu_isas);
}

TEST(WorkerFlagsTest, RefusalsAndChecksAcrossFlags) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "at least one --model is required"},
      {{"--model", "a=x.gguf", "--model", "a=y.gguf"}, "model name 'a' given twice"},
      {{"--model", "=x.gguf"}, "bad --model '=x.gguf'"},
      {{"--model", "a=x", "--tls-cert", "c"}, "--tls-cert and --tls-key go together"},
      {{"--model", "a=x", "--tls-client-ca", "ca"},
       "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS runs over TLS)"},
      {{"--model", "a=x", "--vram", "1GiB"},
       "--vram needs --device cuda:N or sim (the CPU worker's budget is --ram)"},
      // What the command line says is wrong comes before what this build lacks, so that
      // --check-args names a GPU command line's mistakes in any build.
      {{"--model", "a=x", "--device", "cuda:0", "--ram", "8GiB"},
       "--ram is the CPU worker's budget; with --device cuda:N use --vram"},
      {{"--model", "a=x", "--device", "cuda:0", "--vram", "lots"},
       "--vram: size 'lots': does not start with a number (examples: 8GiB, 512MiB, 64G, 1.5GiB)"},

      {{"--model", "a=x", "--cuda-graphs", "maybe"}, "--cuda-graphs needs on or off"},
      {{"--model", "a=x", "-ctv"}, "-ctv needs a type"},
      {{"--model", "a=x", "--metrics-port", "65536"}, "--metrics-port needs a port"},
      {{"--model", "a=x", "--parallel", "2147483648"},
       "--parallel needs a count >= 1 (at most 4096) or auto"},
      {{"--model", "a=x", "--parallel", "0"}, "--parallel needs a count >= 1 (at most 4096) or auto"},
      {{"--model", "a=x", "--parallel", "Auto"},
       "--parallel needs a count >= 1 (at most 4096) or auto"},
      {{"--model", "a=x", "--auth-secret", "s3cret"},
       "--auth-secret is not accepted: a secret on the command line is visible to every user "
       "(ps); use --auth-secret-file FILE or $DELTASERVE_WORKER_SECRET"},
      {{"--model", "a=x", "-h"}, "help"},
      {{"--model", "a=x", "--wat=1"}, "unknown argument '--wat'"},
  };
  for (const auto& [args, message] : cases) {
    WorkerFlags f;
    EXPECT_EQ(Parse(args, f), message) << (args.empty() ? "" : args.back());
  }
}

TEST(WorkerFlagsTest, ParallelDefaultsToAuto) {
  WorkerFlags plain;
  ASSERT_EQ(Parse({"--model", "a=x"}, plain), "");
  EXPECT_EQ(plain.serving.n_parallel, kParallelAuto);
  WorkerFlags named;
  ASSERT_EQ(Parse({"--model", "a=x", "--parallel", "auto"}, named), "");
  EXPECT_EQ(named.serving.n_parallel, kParallelAuto);
  WorkerFlags most;
  ASSERT_EQ(Parse({"--model", "a=x", "-np", "4096"}, most), "");
  EXPECT_EQ(most.serving.n_parallel, 4096);
}

TEST(WorkerFlagsTest, SizesAreReadWithTheFlags) {
  // A bad size is refused by the parse (the message then says what a size looks like), not at
  // start after the files are read: --check-args sees it.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ram", "12XB"}, "--ram: size '12XB': unknown unit 'XB'"},
      {{"--overhead", "lots"}, "--overhead: size 'lots': does not start with a number"},
      {{"--snapshot-ram", "-1"}, "--snapshot-ram: size '-1': does not start with a number"},
      {{"--device", "cuda:1", "--vram", "1.5QiB"}, "--vram: size '1.5QiB': unknown unit"},
  };
  for (const auto& [args, message] : cases) {
    WorkerFlags f;
    std::vector<std::string> argv = {"--model", "a=x"};
    argv.insert(argv.end(), args.begin(), args.end());
    EXPECT_THAT(Parse(argv, f), StartsWith(message));
  }
  WorkerFlags f;
  ASSERT_EQ(Parse({"--model", "a=x", "--device", "cpu", "--ram", "1.5GiB"}, f), "");
  EXPECT_EQ(f.serving.budget_bytes, uint64_t{3} << 29);
}

TEST(WorkerFlagsTest, ACudaCommandLineNeedsTheCudaBackendLast) {
  WorkerFlags f;
  const std::string why = Parse({"--model", "a=x", "--device", "cuda:0", "--vram", "20GiB"}, f);
#if defined(DELTASERVE_HAVE_CUDA)
  EXPECT_EQ(why, "");
  EXPECT_EQ(f.vram_bytes, uint64_t{20} << 30);
#else
  EXPECT_EQ(why, "--device cuda:0: this build has no CUDA backend (configure with nvcc present)");
#endif
}

}  // namespace
}  // namespace deltaserve::worker
