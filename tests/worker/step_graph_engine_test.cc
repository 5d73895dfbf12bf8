// The engine's decode steps as step graphs (CUDA graphs; kernels/backend.h "step capture"),
// checked without a GPU on the DeferredCaptureBackend (tests/support/deferred_capture_backend.h)
// wrapped around the StrictDeviceBackend: while capturing, ops are recorded with their arguments
// by value and run only when the graph launches, calls a graph cannot contain are refused, and
// every op's memory must be backend memory that the host never touches. The golden models then
// run the same scenario on the plain CPU backend (which has no capture) and on that stack, and:
// - the logits (and sampled tokens) must be bit-identical: the capture changes when the ops run,
//   not what they compute, so any difference means the engine read something on the host between
//   capture and launch or handed an op a host pointer whose contents changed after the call;
// - the decode passes must really be captured (launches counted), keys reused across steps (one
//   graph per batch shape, updated in place after the first), nothing refused, no fallback;
// - an injected capture failure (an op of the capture failing, or the end of capture failing)
//   falls back to the uncaptured step with the same logits, counted as a fallback.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "nlohmann/json.hpp"
#include "tests/support/deferred_capture_backend.h"
#include "tests/support/strict_device_backend.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sched/scheduler.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::DeferredCaptureBackend;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::StrictDeviceBackend;

std::vector<std::vector<int32_t>> GoldenTokens(const std::string& name) {
  std::ifstream in(GoldenPath(name + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : doc.at("sequences")) {
    out.push_back(s.at("tokens").get<std::vector<int32_t>>());
  }
  return out;
}

// The capturing stack: deferred capture over the strict device memory.
std::unique_ptr<DeferredCaptureBackend> CapturingBackend() {
  StrictDeviceBackend::InstallFaultReporter();
  return std::make_unique<DeferredCaptureBackend>(std::make_unique<StrictDeviceBackend>(2));
}

std::unique_ptr<Qwen35Model> Load(const std::string& name, kernels::Backend& backend) {
  auto m = Qwen35Model::Load(GoldenPath(name + ".gguf"), backend);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Every logits value and token of a scenario, in order.
struct Outcome {
  std::vector<float> values;
  std::vector<int32_t> tokens;
};

void ExpectBitIdentical(const Outcome& want, const Outcome& got) {
  ASSERT_FALSE(want.values.empty() && want.tokens.empty()) << "the scenario produced nothing";
  EXPECT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.values.size(), want.values.size());
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.values.size(); ++i) {
    if (std::memcmp(&want.values[i], &got.values[i], sizeof(float)) != 0 && differ++ == 0) {
      first = i;
    }
  }
  EXPECT_EQ(differ, 0u) << "first at value " << first << ": uncaptured " << want.values[first]
                        << ", captured " << got.values[first];
}

// What the capturing stack must have seen: no refused call, no buffer freed mid-capture, no
// strict-memory violation; the model's counters agree with the backend's.
void ExpectCleanCapture(DeferredCaptureBackend& backend, const Qwen35Model& model) {
  EXPECT_TRUE(backend.refused().empty()) << backend.refused().front() << " while capturing";
  EXPECT_TRUE(backend.violations().empty()) << backend.violations().front();
  auto& strict = static_cast<StrictDeviceBackend&>(backend.inner());
  EXPECT_TRUE(strict.violations().empty()) << strict.Report();
  const kernels::Backend::StepGraphStats s = backend.step_graph_stats();
  const ForwardCounters& c = model.counters();
  EXPECT_EQ(c.graphs_launched(), static_cast<uint64_t>(s.launched));
  EXPECT_EQ(c.graphs_instantiated(), static_cast<uint64_t>(s.instantiated));
  EXPECT_EQ(c.graphs_updated(), static_cast<uint64_t>(s.updated));
}

void Append(Outcome& out, const std::vector<float>& logits) {
  out.values.insert(out.values.end(), logits.begin(), logits.end());
}

// --- token-by-token decode --------------------------------------------------------------------

// Each golden sequence: its first 3 tokens as a prompt (not captured: one logits row of 3
// tokens), then every further token as a decode step of one sequence (captured). Returns the
// passes that are decode steps.
int64_t DecodeGoldenSequences(Qwen35Model& model, const std::vector<std::vector<int32_t>>& seqs,
                              Outcome& out) {
  int64_t decode_passes = 0;
  std::vector<float> logits;
  for (const auto& tokens : seqs) {
    auto seq = model.NewSequence(static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(seq.ok()) << seq.status();
    if (!seq.ok()) return 0;
    const size_t prompt = std::min<size_t>(3, tokens.size());
    const BatchEntry first{seq->get(), absl::Span<const int32_t>(tokens.data(), prompt), false};
    EXPECT_TRUE(model.Forward({&first, 1}, logits).ok());
    Append(out, logits);
    if (prompt == 1) ++decode_passes;  // a one-token prompt is a decode step too
    for (size_t i = prompt; i < tokens.size(); ++i) {
      const BatchEntry e{seq->get(), absl::Span<const int32_t>(tokens.data() + i, 1), false};
      absl::Status s = model.Forward({&e, 1}, logits);
      EXPECT_TRUE(s.ok()) << s;
      Append(out, logits);
      ++decode_passes;
    }
  }
  return decode_passes;
}

class StepGraphEngineTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StepGraphEngineTest, TokenByTokenDecodeIsBitIdenticalAndReusesOneGraph) {
  const std::string name = GetParam();
  const auto sequences = GoldenTokens(name);
  Outcome want, got, off;
  {
    std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
    std::unique_ptr<Qwen35Model> model = Load(name, *cpu);
    ASSERT_NE(model, nullptr);
    DecodeGoldenSequences(*model, sequences, want);
    EXPECT_EQ(model->counters().graphs_launched(), 0u) << "the CPU backend has no capture";
  }
  auto backend = CapturingBackend();
  {
    std::unique_ptr<Qwen35Model> model = Load(name, *backend);
    ASSERT_NE(model, nullptr);
    const int64_t decode_passes = DecodeGoldenSequences(*model, sequences, got);
    ASSERT_GT(decode_passes, 10);
    ExpectCleanCapture(*backend, *model);
    const ForwardCounters& c = model->counters();
    EXPECT_EQ(c.graphs_launched(), static_cast<uint64_t>(decode_passes));
    // One batch shape (one sequence of one token): one graph, updated at every later step.
    EXPECT_EQ(c.graphs_instantiated(), 1u);
    EXPECT_EQ(c.graphs_updated(), static_cast<uint64_t>(decode_passes - 1));
    EXPECT_EQ(c.graph_fallbacks(), 0u);
    EXPECT_EQ(backend->graphs(), 1u);
    EXPECT_GT(backend->ops_recorded(), decode_passes * model->hparams().n_layer);
  }
  ExpectBitIdentical(want, got);
  {
    // --cuda-graphs off: the same backend runs every op at once.
    const int64_t launched = backend->step_graph_stats().launched;
    std::unique_ptr<Qwen35Model> model = Load(name, *backend);
    ASSERT_NE(model, nullptr);
    model->set_step_graphs(false);
    DecodeGoldenSequences(*model, sequences, off);
    EXPECT_EQ(backend->step_graph_stats().launched, launched);
    EXPECT_EQ(model->counters().graphs_launched(), 0u);
  }
  ExpectBitIdentical(want, off);
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, StepGraphEngineTest,
                         ::testing::Values("tiny-dense-f32", "tiny-moe-f32", "tiny-dense-q8_0",
                                           "tiny-dense-q4_k_m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --- batches, drafts, failures ----------------------------------------------------------------

// What happens to a step of the batch scenario below.
enum class Inject { kNone, kOpFails, kEndFails };

struct BatchStep {
  std::vector<int> entries;  // sequence index per entry
  std::vector<int> tokens;   // tokens per entry (1: a decode step; more: a token and drafts)
  Inject inject = Inject::kNone;
};

// Three golden sequences prefilled together, then the decode steps of `steps`, each entry asking
// for the logits of all its tokens (a decode step with drafts, as the scheduler sends them).
void RunBatchScenario(kernels::Backend& backend, const std::string& name,
                      const std::vector<BatchStep>& steps, Outcome& out,
                      std::unique_ptr<Qwen35Model>* keep = nullptr) {
  const auto golden = GoldenTokens(name);
  ASSERT_GE(golden.size(), 3u);
  std::unique_ptr<Qwen35Model> model = Load(name, backend);
  ASSERT_NE(model, nullptr);
  std::vector<std::unique_ptr<SequenceState>> seqs;
  std::vector<BatchEntry> prefill;
  for (int i = 0; i < 3; ++i) {
    auto s = model->NewSequence(static_cast<int64_t>(golden[i].size()) + 64);
    ASSERT_TRUE(s.ok()) << s.status();
    seqs.push_back(std::move(*s));
    prefill.push_back({seqs.back().get(), golden[i], false});
  }
  std::vector<float> logits;
  ASSERT_TRUE(model->Forward(prefill, logits).ok());
  Append(out, logits);
  auto* deferred = dynamic_cast<DeferredCaptureBackend*>(&backend);
  int32_t next_token = 5;
  for (const BatchStep& step : steps) {
    if (deferred != nullptr && step.inject == Inject::kOpFails) deferred->FailOpOfNextCapture(17);
    if (deferred != nullptr && step.inject == Inject::kEndFails) deferred->FailNextEndCapture();
    std::vector<std::vector<int32_t>> ids(step.entries.size());
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < step.entries.size(); ++i) {
      for (int t = 0; t < step.tokens[i]; ++t) ids[i].push_back(next_token++ % 200 + 1);
      BatchEntry e{seqs[step.entries[i]].get(), ids[i], false};
      e.last_logits = step.tokens[i];
      batch.push_back(e);
    }
    absl::Status s = model->Forward(batch, logits);
    ASSERT_TRUE(s.ok()) << s;
    Append(out, logits);
  }
  if (keep != nullptr) *keep = std::move(model);
}

std::vector<BatchStep> Repeat(int n, BatchStep step) { return std::vector<BatchStep>(n, step); }

std::vector<BatchStep> Concat(std::initializer_list<std::vector<BatchStep>> parts) {
  std::vector<BatchStep> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(StepGraphBatches, BatchedDecodeWithDraftsIsBitIdenticalWithAGraphPerShape) {
  // 6 steps of three sequences, 2 with drafts (1, 3 and 2 tokens), 3 plain again, then 2 steps
  // of two sequences in another order: 3 shapes, 13 captured steps.
  const std::vector<BatchStep> steps = Concat({
      Repeat(6, {{0, 1, 2}, {1, 1, 1}}),
      Repeat(2, {{0, 1, 2}, {1, 3, 2}}),
      Repeat(3, {{0, 1, 2}, {1, 1, 1}}),
      Repeat(2, {{2, 0}, {1, 1}}),
  });
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    SCOPED_TRACE(name);
    Outcome want, got;
    std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
    RunBatchScenario(*cpu, name, steps, want);
    auto backend = CapturingBackend();
    std::unique_ptr<Qwen35Model> model;
    RunBatchScenario(*backend, name, steps, got, &model);
    ASSERT_NE(model, nullptr);
    ExpectBitIdentical(want, got);
    ExpectCleanCapture(*backend, *model);
    const ForwardCounters& c = model->counters();
    EXPECT_EQ(c.graphs_launched(), 13u);
    EXPECT_EQ(c.graphs_instantiated(), 3u);
    EXPECT_EQ(c.graphs_updated(), 10u);
    EXPECT_EQ(c.graph_fallbacks(), 0u);
    EXPECT_EQ(backend->graphs(), 3u);
  }
}

TEST(StepGraphBatches, AFailedCaptureFallsBackWithIdenticalLogits) {
  // Three-sequence steps: captured twice, then an op of the capture fails (the step runs
  // uncaptured; that shape is not captured again). Two-sequence steps: the end of the capture
  // fails on the first (idem). One-sequence steps after both: still captured.
  const std::vector<BatchStep> steps = Concat({
      Repeat(2, {{0, 1, 2}, {1, 1, 1}}),
      {{{0, 1, 2}, {1, 1, 1}, Inject::kOpFails}},
      Repeat(2, {{0, 1, 2}, {1, 1, 1}}),
      {{{0, 1}, {1, 1}, Inject::kEndFails}},
      Repeat(2, {{0, 1}, {1, 1}}),
      Repeat(3, {{2}, {1}}),
  });
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    SCOPED_TRACE(name);
    Outcome want, got;
    std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
    RunBatchScenario(*cpu, name, steps, want);
    auto backend = CapturingBackend();
    std::unique_ptr<Qwen35Model> model;
    RunBatchScenario(*backend, name, steps, got, &model);
    ASSERT_NE(model, nullptr);
    ExpectBitIdentical(want, got);
    ExpectCleanCapture(*backend, *model);
    const ForwardCounters& c = model->counters();
    EXPECT_EQ(c.graph_fallbacks(), 2u);
    EXPECT_EQ(c.graphs_launched(), 2u + 3u);  // three-sequence steps before the failure, B = 1
    EXPECT_EQ(c.graphs_instantiated(), 2u);
    EXPECT_EQ(c.passes(), 1u + steps.size());
  }
}

// --- the scheduler and ServedModel ------------------------------------------------------------

GenerationRequest Request(std::vector<int32_t> prompt, int max_tokens, float temperature,
                          uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.max_tokens = max_tokens;
  r.logprobs = true;
  return r;
}

class Sink : public GenerationSink {
 public:
  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    for (const GeneratedToken& t : tokens) {
      out.tokens.push_back(t.token);
      out.values.push_back(t.logprobs ? t.logprobs->logprob : NAN);
    }
  }
  void OnFinish(const GenerationResult& r) override {
    out.tokens.push_back(static_cast<int32_t>(r.reason));
  }
  Outcome out;
};

// ServedModel as the worker builds it (warm-up passes included), serving requests with n-gram
// speculation through its scheduler: decode steps with and without drafts, batches that change
// as requests join and finish. `graphs` is ServingOptions::step_graphs (--cuda-graphs).
Outcome Serve(kernels::Backend& backend, bool graphs, std::unique_ptr<ServedModel>* keep) {
  const auto sequences = GoldenTokens("tiny-moe-f32");
  ServingOptions o;
  o.ctx = 512;
  o.n_parallel = 3;
  o.k_type = o.v_type = kernels::WeightType::kF16;
  o.page_tokens = 32;
  o.step_tokens = 96;
  o.speculation = true;
  o.budget_bytes = uint64_t{8} << 30;
  o.snapshot_ram_bytes = 0;
  o.step_graphs = graphs;
  auto m = ServedModel::Create(GoldenPath("tiny-moe-f32.gguf"), backend, o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  std::vector<std::shared_ptr<Sink>> sinks;
  for (size_t i = 0; i < sequences.size(); ++i) {
    // A repeated prompt gives the n-gram drafter something to propose.
    std::vector<int32_t> prompt = sequences[i];
    prompt.insert(prompt.end(), sequences[i].begin(),
                  sequences[i].begin() + std::min<size_t>(sequences[i].size(), 20));
    auto sink = std::make_shared<Sink>();
    auto h = (*m)->scheduler().Submit(Request(prompt, 24, i % 2 == 0 ? 0.0f : 0.7f, 3 + i), sink);
    EXPECT_TRUE(h.ok()) << h.status();
    sinks.push_back(sink);
    (*m)->scheduler().Step();
  }
  for (int guard = 0; (*m)->scheduler().busy() && guard < 100000; ++guard) {
    (*m)->scheduler().Step();
  }
  Outcome out;
  for (const auto& s : sinks) {
    out.tokens.insert(out.tokens.end(), s->out.tokens.begin(), s->out.tokens.end());
    out.values.insert(out.values.end(), s->out.values.begin(), s->out.values.end());
  }
  *keep = std::move(*m);
  return out;
}

TEST(StepGraphServing, TheSchedulerWithSpeculationIsBitIdenticalWithGraphs) {
  // Each backend outlives the model served on it.
  std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
  auto backend = CapturingBackend();
  auto plain = CapturingBackend();
  std::unique_ptr<ServedModel> cpu_model, on_model, off_model;
  const Outcome want = Serve(*cpu, true, &cpu_model);
  const Outcome got = Serve(*backend, true, &on_model);
  ASSERT_NE(on_model, nullptr);
  ExpectBitIdentical(want, got);
  const ForwardCounters& c = on_model->model().counters();
  EXPECT_GT(c.graphs_launched(), 10u);
  EXPECT_LT(c.graphs_instantiated(), c.graphs_launched()) << "no graph was reused";
  EXPECT_EQ(c.graph_fallbacks(), 0u);
  EXPECT_TRUE(backend->refused().empty()) << backend->refused().front() << " while capturing";
  EXPECT_TRUE(backend->violations().empty());
  auto& strict = static_cast<StrictDeviceBackend&>(backend->inner());
  EXPECT_TRUE(strict.violations().empty()) << strict.Report();
  on_model.reset();

  // --cuda-graphs off reaches the engine: nothing captured, the same outcome.
  const Outcome off = Serve(*plain, false, &off_model);
  ASSERT_NE(off_model, nullptr);
  ExpectBitIdentical(want, off);
  EXPECT_EQ(plain->step_graph_stats().launched, 0);
  EXPECT_EQ(plain->ops_recorded(), 0);
}

// --- the test backend itself ------------------------------------------------------------------

TEST(DeferredCaptureBackend, RecordsByValueRunsAtLaunchAndRefusesWhatAGraphCannotHold) {
  DeferredCaptureBackend b(kernels::MakeCpuBackend(1));
  kernels::DeviceBuffer xb = b.Allocate(4 * sizeof(float)), yb = b.Allocate(4 * sizeof(float));
  const float ones[4] = {1, 1, 1, 1};
  ASSERT_EQ(b.CopyToDevice(yb.data(), ones, sizeof(ones)), kernels::KernelStatus::kOk);
  kernels::Mat x{xb.floats(), 1, 4, 4}, y{yb.floats(), 1, 4, 4};
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  EXPECT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kInvalidArgument);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  kernels::Mat moved = x;
  ASSERT_EQ(b.Add(moved, y), kernels::KernelStatus::kOk);
  moved.data = yb.floats();  // changed after the call: the recording keeps what it was given
  EXPECT_EQ(xb.floats()[0], 0.0f) << "a recorded op ran";
  float host[4];
  EXPECT_EQ(b.CopyToHost(host, xb.data(), sizeof(host)), kernels::KernelStatus::kInvalidArgument);
  EXPECT_EQ(b.CopyToDevice(xb.data(), ones, sizeof(ones)), kernels::KernelStatus::kInvalidArgument);
  EXPECT_EQ(b.Synchronize(), kernels::KernelStatus::kInvalidArgument);
  EXPECT_EQ(b.Allocate(64).data(), nullptr);
  EXPECT_EQ(b.refused().size(), 4u);
  ASSERT_EQ(b.EndStepCapture(7), kernels::KernelStatus::kOk);
  EXPECT_EQ(xb.floats()[0], 0.0f);
  ASSERT_EQ(b.LaunchStepGraph(7), kernels::KernelStatus::kOk);
  EXPECT_EQ(xb.floats()[0], 2.0f);
  EXPECT_EQ(yb.floats()[0], 1.0f);
  // The same ops again: an update; other ops under the same key: instantiated anew.
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.EndStepCapture(7), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.EndStepCapture(7), kernels::KernelStatus::kOk);
  EXPECT_EQ(b.step_graph_stats().instantiated, 2);
  EXPECT_EQ(b.step_graph_stats().updated, 1);
  EXPECT_EQ(b.step_graph_stats().launched, 1);
  // A failing op spoils the capture; an abort runs nothing; a free while capturing is a breach.
  b.FailOpOfNextCapture(1);
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  EXPECT_EQ(b.Add(x, y), kernels::KernelStatus::kDeviceError);
  EXPECT_EQ(b.EndStepCapture(8), kernels::KernelStatus::kDeviceError);
  EXPECT_EQ(b.LaunchStepGraph(8), kernels::KernelStatus::kInvalidArgument);
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  ASSERT_EQ(b.Add(x, y), kernels::KernelStatus::kOk);
  b.AbortStepCapture();
  EXPECT_EQ(xb.floats()[0], 2.0f);
  ASSERT_EQ(b.BeginStepCapture(), kernels::KernelStatus::kOk);
  yb = {};
  EXPECT_EQ(b.violations().size(), 1u);
  EXPECT_EQ(b.EndStepCapture(9), kernels::KernelStatus::kDeviceError);
}

}  // namespace
}  // namespace deltaserve::worker
