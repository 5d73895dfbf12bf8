// The engine on a CUDA device (issue 16's speed table; bench/gpu/run.sh runs it): batch-1 decode
// tokens per second at a context depth, prefill tokens per second, batched decode throughput,
// and the device's copy bandwidth the decode rows are measured against.
//
//   deltaserve-bench-gpu --bandwidth [--device cuda:0]
//   deltaserve-bench-gpu -m FILE --scenario decode --depth N [--decode 64]
//   deltaserve-bench-gpu -m FILE --scenario prefill --prompt N [--batch 8192]
//   deltaserve-bench-gpu -m FILE --scenario batched --sequences S --depth N [--decode 64]
//   common: [--device cuda:0] [--reps 3] [--seed 1] [--cache-type-k f16] [--cache-type-v f16]
//           [--cuda-graphs on|off]
//
// Prompts are bench/bench_ids.h's pseudo-random ids (the CPU benchmarks' and the llama.cpp
// harnesses' ids). decode: every repetition prefills --depth tokens into a fresh sequence
// (untimed, in chunks of --batch), then times --decode greedy single-token Forward calls.
// prefill: times feeding --prompt tokens in chunks of --batch, only the last token's logits
// computed. batched: --sequences sequences each prefilled to --depth, then --decode steps in
// which every sequence feeds one token (one Forward call per step); tok/s counts all of them.
// Forward ends with the logits copied to the host, so each timed call includes its whole GPU
// work. --cuda-graphs (default on, as the worker's flag) runs decode steps as CUDA graphs
// (Qwen35Model::set_step_graphs); the line reports it with the graph launches and
// instantiations of the timed repetitions, so a graphs-on row shows its steps were graphs and
// that they were updated, not rebuilt. One JSON line per scenario on stdout (medians over
// --reps), progress on stderr:
//   {"scenario":"decode","depth":4096,"tok_s":..., "weight_bytes_per_token":...,
//    "device":"NVIDIA H100 80GB HBM3", ...}
// weight_bytes_per_token is what one decode token reads of the weights: every matrix once, the
// embedding's one row (unless tied to the output), and of the expert stacks n_expert_used of
// n_expert; times tok/s it gives the achieved bandwidth for the roofline column.
// --bandwidth: device-to-device cudaMemcpy of 1 GiB, best of 10, bytes read + written per second.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/bench_ids.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "worker/cache/device_memory.h"
#include "worker/cache/paged_kv_cache.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::bench {
namespace {

using worker::BatchEntry;
using worker::Qwen35Model;
using worker::SequenceState;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model, scenario, device = "cuda:0";
  int64_t depth = 0, prompt = 0, decode = 64, batch = 8192, sequences = 1;
  int reps = 3;
  uint64_t seed = 1;
  bool bandwidth = false;
  std::string cuda_graphs = "on";
  std::string cache_type_k = "f16", cache_type_v = "f16";
};

int Fail(const std::string& why) {
  std::fprintf(stderr, "deltaserve-bench-gpu: %s\n", why.c_str());
  return 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int Bandwidth(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return Fail("cudaSetDevice failed");
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    return Fail("cudaMalloc of 2 x 1 GiB failed");
  }
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_ms = 1e30f;
  for (int i = 0; i < 11; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (i > 0) best_ms = std::min(best_ms, ms);  // the first one warms up
  }
  cudaFree(a);
  cudaFree(b);
  std::printf("{\"scenario\":\"bandwidth\",\"bytes\":%zu,\"best_ms\":%.4f,\"gb_s\":%.1f}\n", bytes,
              best_ms, 2.0 * bytes / (best_ms * 1e-3) / 1e9);
  return 0;
}

// Weight bytes one decode token reads (see the file comment).
uint64_t DecodeWeightBytes(const common::GgufFile& file, const common::Qwen35HParams& hp) {
  uint64_t total = 0;
  for (const common::GgufTensorInfo& t : file.tensors()) {
    const uint64_t bytes = file.TensorData(t).size();
    if (t.name == "token_embd.weight") {
      total += hp.tied_output ? bytes : bytes / std::max<int64_t>(hp.n_vocab, 1);
    } else if (t.name.ends_with("_exps.weight") && hp.n_expert > 0) {
      total += bytes * hp.n_expert_used / hp.n_expert;
    } else if (t.name.starts_with("blk.") || t.name.starts_with("output")) {
      total += bytes;
    }
  }
  return total;
}

int Run(const Options& o) {
  absl::StatusOr<worker::DeviceSpec> dev = worker::ParseDevice(o.device);
  if (!dev.ok() || dev->kind != worker::DeviceSpec::Kind::kCuda) return Fail("--device cuda:N");
  std::string why;
  if (kernels::CudaDeviceCount(&why) == 0) return Fail(why);
  if (o.bandwidth) return Bandwidth(dev->index);
  kernels::CudaDeviceInfo info;
  if (!kernels::QueryCudaDevice(dev->index, &info, &why)) return Fail(why);
  auto file = common::GgufFile::Open(o.model);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  auto hp = common::ReadQwen35HParams(**file);
  if (!hp.ok()) return Fail(std::string(hp.status().message()));
  const uint64_t decode_bytes = DecodeWeightBytes(**file, *hp);
  const int64_t seqs = o.scenario == "batched" ? o.sequences : 1;
  const int64_t ctx = std::max(o.depth, o.prompt) + o.decode + 1;
  const int64_t max_tokens = std::max<int64_t>(std::min(o.batch, ctx), seqs);
  const worker::DeviceScratchFunctions f{
      &kernels::cuda::MatMulScratchBytes, &kernels::cuda::MoeFfnScratchBytes,
      &kernels::cuda::PagedAttentionScratchBytes, &kernels::cuda::GatedDeltaRuleScratchBytes};
  kernels::CudaBackendOptions bo;
  bo.device = dev->index;
  bo.scratch_bytes = worker::ForwardPassScratchBytes(*hp, max_tokens, seqs, ctx, f);
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCudaBackend(bo, &why);
  if (backend == nullptr) return Fail(why);
  std::fprintf(stderr, "loading %s onto %s %s\n", o.model.c_str(), o.device.c_str(),
               info.name.c_str());
  auto model = Qwen35Model::Load(std::move(*file), *backend);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  (*model)->set_step_graphs(o.cuda_graphs == "on");
  auto k_type = worker::ParseKvCacheType(o.cache_type_k);
  auto v_type = worker::ParseKvCacheType(o.cache_type_v);
  if (!k_type.ok() || !v_type.ok()) return Fail("bad --cache-type-k / --cache-type-v");
  const worker::KvCacheOptions kv{*k_type, *v_type, 256};
  const int64_t nv = (*model)->n_vocab();
  std::vector<float> logits;

  // Prefills `ids` into `seq` in chunks of --batch tokens, only the last chunk's last logits.
  auto prefill = [&](SequenceState& seq, const std::vector<int32_t>& ids) -> bool {
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(o.batch)) {
      const size_t n = std::min<size_t>(static_cast<size_t>(o.batch), ids.size() - i);
      BatchEntry e{&seq, absl::Span<const int32_t>(ids.data() + i, n), false};
      e.no_logits = i + n < ids.size();
      if (auto s = (*model)->Forward({&e, 1}, logits); !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return false;
      }
    }
    return true;
  };
  std::vector<double> tok_s;
  for (int rep = 0; rep <= o.reps; ++rep) {  // rep 0: untimed warm-up
    std::vector<std::unique_ptr<SequenceState>> states;
    for (int64_t s = 0; s < seqs; ++s) {
      auto seq = (*model)->NewSequence(ctx, kv);
      if (!seq.ok()) return Fail(std::string(seq.status().message()));
      states.push_back(std::move(*seq));
    }
    double seconds = 0;
    int64_t tokens = 0;
    if (o.scenario == "prefill") {
      const std::vector<int32_t> ids = PromptIds(o.prompt, o.seed + rep, nv);
      const Clock::time_point t0 = Clock::now();
      if (!prefill(*states[0], ids)) return 1;
      seconds = Seconds(t0);
      tokens = o.prompt;
    } else {
      for (int64_t s = 0; s < seqs; ++s) {
        const std::vector<int32_t> ids = PromptIds(o.depth, o.seed + 1000 * s + rep, nv);
        if (!ids.empty() && !prefill(*states[s], ids)) return 1;
      }
      std::vector<int32_t> next(static_cast<size_t>(seqs), 1);
      const Clock::time_point t0 = Clock::now();
      for (int64_t step = 0; step < o.decode; ++step) {
        std::vector<BatchEntry> batch;
        for (int64_t s = 0; s < seqs; ++s) {
          batch.push_back({states[s].get(), absl::Span<const int32_t>(&next[s], 1), false});
        }
        if (auto st = (*model)->Forward(batch, logits); !st.ok()) {
          return Fail(std::string(st.message()));
        }
        for (int64_t s = 0; s < seqs; ++s) {
          const float* row = logits.data() + s * nv;
          next[s] = static_cast<int32_t>(std::max_element(row, row + nv) - row);
        }
      }
      seconds = Seconds(t0);
      tokens = o.decode * seqs;
    }
    if (rep == 0) (*model)->counters().Reset();  // graph counts of the timed repetitions
    if (rep > 0) tok_s.push_back(tokens / seconds);
    std::fprintf(stderr, "  %s rep %d: %.1f tok/s\n", o.scenario.c_str(), rep, tokens / seconds);
  }
  std::printf(
      "{\"scenario\":\"%s\",\"model\":\"%s\",\"device\":\"%s\",\"depth\":%lld,\"prompt\":%lld,"
      "\"sequences\":%lld,\"decode\":%lld,\"reps\":%d,\"tok_s\":%.2f,"
      "\"weight_bytes_per_token\":%llu,\"weight_bytes\":%llu,\"cuda_graphs\":%s,"
      "\"graph_launches\":%llu,\"graph_instantiations\":%llu,\"graph_fallbacks\":%llu}\n",
      o.scenario.c_str(), o.model.c_str(), info.name.c_str(), static_cast<long long>(o.depth),
      static_cast<long long>(o.prompt), static_cast<long long>(seqs),
      static_cast<long long>(o.decode), o.reps, Median(tok_s),
      static_cast<unsigned long long>(decode_bytes),
      static_cast<unsigned long long>((*model)->Memory(kv).weight_bytes),
      o.cuda_graphs == "on" ? "true" : "false",
      static_cast<unsigned long long>((*model)->counters().graphs_launched()),
      static_cast<unsigned long long>((*model)->counters().graphs_instantiated()),
      static_cast<unsigned long long>((*model)->counters().graph_fallbacks()));
  return 0;
}

}  // namespace
}  // namespace deltaserve::bench

int main(int argc, char** argv) {
  using deltaserve::bench::Options;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto num = [&](auto& out) {
      if (v == nullptr || !absl::SimpleAtoi(v, &out)) {
        std::fprintf(stderr, "deltaserve-bench-gpu: %s needs a number\n", a.c_str());
        std::exit(2);
      }
      ++i;
    };
    auto str = [&](std::string& out) {
      if (v == nullptr) {
        std::fprintf(stderr, "deltaserve-bench-gpu: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      out = v;
      ++i;
    };
    if (a == "-m" || a == "--model")
      str(o.model);
    else if (a == "--scenario")
      str(o.scenario);
    else if (a == "--device")
      str(o.device);
    else if (a == "--cache-type-k")
      str(o.cache_type_k);
    else if (a == "--cache-type-v")
      str(o.cache_type_v);
    else if (a == "--depth")
      num(o.depth);
    else if (a == "--prompt")
      num(o.prompt);
    else if (a == "--decode")
      num(o.decode);
    else if (a == "--batch")
      num(o.batch);
    else if (a == "--sequences")
      num(o.sequences);
    else if (a == "--reps")
      num(o.reps);
    else if (a == "--seed")
      num(o.seed);
    else if (a == "--bandwidth")
      o.bandwidth = true;
    else if (a == "--cuda-graphs")
      str(o.cuda_graphs);
    else {
      std::fprintf(stderr,
                   "deltaserve-bench-gpu: unknown argument '%s' (see the file comment "
                   "of bench/gpu/gpu_engine_bench.cc)\n",
                   a.c_str());
      return 2;
    }
  }
  if (!o.bandwidth && (o.model.empty() || (o.scenario != "decode" && o.scenario != "prefill" &&
                                           o.scenario != "batched"))) {
    std::fprintf(stderr, "deltaserve-bench-gpu: -m FILE and --scenario decode|prefill|batched\n");
    return 2;
  }
  if (o.cuda_graphs != "on" && o.cuda_graphs != "off") {
    std::fprintf(stderr, "deltaserve-bench-gpu: --cuda-graphs on|off\n");
    return 2;
  }
  if (o.batch < 1 || o.sequences < 1 || o.decode < 1 || o.reps < 1 || o.depth < 0 || o.prompt < 0) {
    std::fprintf(stderr, "deltaserve-bench-gpu: counts out of range\n");
    return 2;
  }
  // A DELTASERVE_CPU_ISA the CPU cannot run is refused before anything loads.
  if (absl::StatusOr<deltaserve::kernels::CpuIsa> isa = deltaserve::kernels::ResolveCpuIsaFromEnv();
      !isa.ok()) {
    std::fprintf(stderr, "deltaserve-bench-gpu: %s\n", std::string(isa.status().message()).c_str());
    return 2;
  }
  return deltaserve::bench::Run(o);
}
