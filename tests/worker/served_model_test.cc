// ServedModel on the F32 golden models: a configuration that does not fit is refused with the
// plan's table before any backend memory is taken; one that fits allocates exactly the planned
// KV pages, state slots and workspace, never more backend memory than the plan counts, and serves
// requests through its scheduler with the same greedy tokens as the engine run alone.
#include "worker/sched/served_model.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/test_paths.h"

namespace deltaserve::worker {
namespace {

using ::deltaserve::testing::CollectingSink;
using ::deltaserve::testing::GoldenPath;
using kernels::KernelStatus;
using kernels::Mat;
using ::testing::HasSubstr;

// The CPU backend's kernels with its own allocator, which keeps count: calls, live and peak
// bytes (as requested, like the plan counts them).
class CountingBackend final : public kernels::Backend {
 public:
  CountingBackend() : cpu_(kernels::MakeCpuBackend(2)) {}

  int64_t calls() const { return calls_; }
  uint64_t live() const { return live_; }
  uint64_t peak() const { return peak_; }

  std::string_view name() const override { return cpu_->name(); }
  kernels::DeviceBuffer Allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) return {};
    std::memset(data, 0, rounded);
    ++calls_;
    sizes_[data] = bytes;
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return kernels::DeviceBuffer(data, bytes, &Free, this);
  }
  KernelStatus CopyToDevice(void* d, const void* s, size_t n) override {
    return cpu_->CopyToDevice(d, s, n);
  }
  KernelStatus CopyToHost(void* d, const void* s, size_t n) override {
    return cpu_->CopyToHost(d, s, n);
  }
  const void* ImportWeights(const void* host, size_t n, kernels::DeviceBuffer& storage) override {
    return cpu_->ImportWeights(host, n, storage);
  }
  KernelStatus CopyOnDevice(void* d, const void* s, size_t n) override {
    return cpu_->CopyOnDevice(d, s, n);
  }
  KernelStatus Synchronize() override { return cpu_->Synchronize(); }
  KernelStatus MatMul(const kernels::WeightView& w, const Mat& x, Mat& y) override {
    return cpu_->MatMul(w, x, y);
  }
  KernelStatus GetRows(const kernels::WeightView& t, const int32_t* ids, int64_t n,
                       Mat& out) override {
    return cpu_->GetRows(t, ids, n, out);
  }
  KernelStatus RmsNorm(const Mat& x, kernels::Vec w, float eps, Mat& y) override {
    return cpu_->RmsNorm(x, w, eps, y);
  }
  KernelStatus L2Norm(Mat& x, int64_t group, float eps) override {
    return cpu_->L2Norm(x, group, eps);
  }
  KernelStatus Copy(const Mat& src, Mat& dst) override { return cpu_->Copy(src, dst); }
  KernelStatus Add(Mat& x, const Mat& y) override { return cpu_->Add(x, y); }
  KernelStatus SwiGlu(const Mat& g, const Mat& u, Mat& out) override {
    return cpu_->SwiGlu(g, u, out);
  }
  KernelStatus MulSigmoid(Mat& x, const Mat& gate) override { return cpu_->MulSigmoid(x, gate); }
  KernelStatus RopeNeox(Mat& x, const int32_t* pos, int64_t n_heads, int64_t n_rot,
                        float base) override {
    return cpu_->RopeNeox(x, pos, n_heads, n_rot, base);
  }
  KernelStatus StoreKv(const Mat& k, const Mat& v, const kernels::PagedKvView& kv,
                       int64_t first_pos) override {
    return cpu_->StoreKv(k, v, kv, first_pos);
  }
  KernelStatus PagedAttention(const Mat& q, const kernels::PagedKvView& kv, int64_t n_past,
                              int64_t n_head, int64_t n_head_kv, float scale, Mat& out) override {
    return cpu_->PagedAttention(q, kv, n_past, n_head, n_head_kv, scale, out);
  }
  KernelStatus CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel, float* state,
                                Mat& y) override {
    return cpu_->CausalConv1dSilu(x, w, kernel, state, y);
  }
  KernelStatus GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v, const Mat& g,
                              const Mat& beta, int64_t nk, int64_t nv, int64_t hd, float* state,
                              Mat& out) override {
    return cpu_->GatedDeltaRule(q, k, v, g, beta, nk, nv, hd, state, out);
  }
  KernelStatus GatedRmsNorm(const Mat& x, kernels::Vec w, const Mat& z, float eps,
                            Mat& y) override {
    return cpu_->GatedRmsNorm(x, w, z, eps, y);
  }
  KernelStatus DeltaNetGates(Mat& a, Mat& b, kernels::Vec ssm_a, kernels::Vec dt) override {
    return cpu_->DeltaNetGates(a, b, ssm_a, dt);
  }
  KernelStatus MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* w) override {
    return cpu_->MoeRoute(logits, k, ids, w);
  }
  KernelStatus MoeFfn(const Mat& x, const int32_t* ids, const float* w, int64_t k,
                      const kernels::WeightView& g, const kernels::WeightView& u,
                      const kernels::WeightView& d, Mat& y) override {
    return cpu_->MoeFfn(x, ids, w, k, g, u, d, y);
  }

 private:
  static void Free(void* owner, void* data) {
    auto* self = static_cast<CountingBackend*>(owner);
    self->live_ -= self->sizes_[data];
    self->sizes_.erase(data);
    std::free(data);
  }

  std::unique_ptr<kernels::Backend> cpu_;
  absl::flat_hash_map<void*, size_t> sizes_;
  int64_t calls_ = 0;
  uint64_t live_ = 0, peak_ = 0;
};

ServingOptions Options(int64_t ctx, int n_parallel, uint64_t budget) {
  ServingOptions o;
  o.ctx = ctx;
  o.n_parallel = n_parallel;
  o.page_tokens = 64;
  o.step_tokens = 128;
  o.budget_bytes = budget;
  o.n_threads = 2;
  // f32 like the engine's private sequences, so greedy tokens can be compared with a run alone.
  o.k_type = o.v_type = kernels::WeightType::kF32;
  return o;
}

// The backend bytes the plan counts: weights are mapped, not allocated, on the CPU.
uint64_t PlannedBackendBytes(const ServedModel& m) {
  const MemoryPlan& p = m.plan();
  const ServingOverhead& o = m.overhead();
  const ServingOptions& opt = m.options();
  const uint64_t pages =
      static_cast<uint64_t>(opt.n_parallel) * ((opt.ctx + opt.page_tokens - 1) / opt.page_tokens);
  return p.workspace_bytes + pages * p.page_bytes + opt.n_parallel * p.recurrent.total() +
         o.snapshot_slots + o.zero_slot + o.page_tables;
}

// 262,144 tokens (the trained context) x 64 sequences of f32 KV is 32 GiB on tiny-dense
// (2,048 B/token): far beyond 64 MiB.
TEST(ServedModel, RefusesWhatDoesNotFitWithThePlanBeforeAllocating) {
  for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
    CountingBackend backend;
    absl::StatusOr<std::unique_ptr<ServedModel>> m = ServedModel::Create(
        GoldenPath(std::string(name) + ".gguf"), backend, Options(262144, 64, 64ull << 20));
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_TRUE(absl::IsResourceExhausted(m.status())) << m.status();
    const std::string msg(m.status().message());
    EXPECT_THAT(msg, HasSubstr(std::string(name) + ".gguf: context 262144 x 64 sequences"));
    EXPECT_THAT(msg, HasSubstr("does not fit in RAM 64.00 MiB"));
    EXPECT_THAT(msg, HasSubstr("Largest context per n_parallel"));
    EXPECT_THAT(msg, HasSubstr("max context"));
    EXPECT_THAT(msg, HasSubstr("serving overhead"));
    EXPECT_EQ(backend.calls(), 0) << name << ": backend memory taken before the refusal";
  }
}

TEST(ServedModel, RefusesOptionsOutOfRangeNamingTheField) {
  CountingBackend backend;
  ServingOptions o = Options(256, 1, 1ull << 30);
  o.budget_bytes = 0;
  absl::StatusOr<std::unique_ptr<ServedModel>> m =
      ServedModel::Create(GoldenPath("tiny-dense-f32.gguf"), backend, o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("budget_bytes"));
  o = Options(0, 1, 1ull << 30);
  m = ServedModel::Create(GoldenPath("tiny-dense-f32.gguf"), backend, o);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("ctx"));
  // Beyond the trained context (262,144): refused by the plan's check.
  m = ServedModel::Create(GoldenPath("tiny-dense-f32.gguf"), backend,
                          Options(262145, 1, 1ull << 40));
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(m.status())) << m.status();
  EXPECT_EQ(backend.calls(), 0);
}

TEST(ServedModel, BatchShapeMatchesTheScheduler) {
  ServingOptions o = Options(1000, 4, 1);
  ServingBatchShape s = BatchShapeFor(o);
  EXPECT_EQ(s.scheduler_step_tokens, 128);  // max(128, 4 x (1 + 8))
  EXPECT_EQ(s.max_batch_tokens, 128);
  EXPECT_EQ(s.logits_rows, 4);  // one row per sequence
  o.speculation = true;
  o.ngram.draft_max = 40;
  s = BatchShapeFor(o);
  EXPECT_EQ(s.scheduler_step_tokens, 164);  // 4 x (1 + 40)
  EXPECT_EQ(s.logits_rows, 164);            // every fed position of a drafting sequence
  o.ctx = 20;                               // 4 sequences never hold more than 80 tokens
  s = BatchShapeFor(o);
  EXPECT_EQ(s.max_batch_tokens, 80);
  EXPECT_EQ(s.logits_rows, 80);
}

// Serves greedy requests that fill the cache; the tokens equal the engine's run alone, and
// backend memory matches the plan: exactly the planned pages, slots and workspace after Create,
// and a peak no higher than the plan's backend figures.
TEST(ServedModel, ServesWithinThePlannedBackendMemory) {
  for (const bool speculation : {false, true}) {
    for (const char* name : {"tiny-dense-f32", "tiny-moe-f32"}) {
      SCOPED_TRACE(std::string(name) + (speculation ? " speculation" : ""));
      CountingBackend backend;
      ServingOptions o = Options(200, 3, 256ull << 20);
      o.speculation = speculation;
      absl::StatusOr<std::unique_ptr<ServedModel>> created =
          ServedModel::Create(GoldenPath(std::string(name) + ".gguf"), backend, o);
      ASSERT_TRUE(created.ok()) << created.status();
      ServedModel& m = **created;
      EXPECT_EQ(m.kv_cache().total_pages(), 3 * 4);  // ceil(200 / 64) pages per sequence
      EXPECT_EQ(m.state_slots().total_slots(), speculation ? 6 : 3);
      EXPECT_EQ(m.plan().inputs.max_batch_tokens, m.batch_shape().max_batch_tokens);
      EXPECT_EQ(m.plan().inputs.logits_rows, m.batch_shape().logits_rows);
      EXPECT_EQ(m.plan().inputs.fixed_overhead_bytes, m.overhead().total());
      ASSERT_FALSE(m.eos_token_ids().empty());
      EXPECT_TRUE(m.tokenizer().IsEndOfGeneration(m.eos_token_ids()[0]));
      // After Create: the pools, the slots (and the zeroed source slot), the workspace at its
      // planned size and the page-table buffer, nothing else.
      const uint64_t after_create = backend.live();
      const uint64_t fixed_part = m.plan().workspace_bytes +
                                  m.kv_cache().total_pages() * m.plan().page_bytes +
                                  (m.state_slots().total_slots() + 1) * m.plan().recurrent.total();
      EXPECT_GE(after_create, fixed_part);
      EXPECT_LE(after_create, fixed_part + m.overhead().page_tables);

      // Three requests of ctx tokens each (prompt 180 + 20 generated) and one that waits.
      std::vector<std::vector<int32_t>> prompts;
      std::vector<std::shared_ptr<CollectingSink>> sinks;
      for (int r = 0; r < 4; ++r) {
        std::vector<int32_t> prompt;
        for (int i = 0; i < 180; ++i) prompt.push_back((r * 131 + i * 7 + (i / 9) * 3) % 1900);
        GenerationRequest req;
        req.prompt = prompt;
        req.sampling.temperature = 0.0f;
        req.sampling.ignore_eos = true;
        req.sampling.max_tokens = 20;
        sinks.push_back(std::make_shared<CollectingSink>());
        ASSERT_TRUE(m.scheduler().Submit(std::move(req), sinks.back()).ok());
        prompts.push_back(prompt);
      }
      for (int guard = 0; m.scheduler().busy() && guard < 10000; ++guard) m.scheduler().Step();
      EXPECT_LE(backend.peak(), PlannedBackendBytes(m));
      // Only the page-table buffer may have grown (to the 12 pages of 3 full sequences).
      EXPECT_LE(backend.live(), after_create + m.overhead().page_tables);

      for (int r = 0; r < 4; ++r) {
        ASSERT_TRUE(sinks[r]->result.has_value());
        EXPECT_EQ(sinks[r]->result->reason, EndReason::kLength) << sinks[r]->result->error;
        ASSERT_EQ(sinks[r]->tokens.size(), 20u);
        // The engine alone, one private sequence: greedy argmax of each step.
        absl::StatusOr<std::unique_ptr<SequenceState>> seq = m.model().NewSequence(200);
        ASSERT_TRUE(seq.ok());
        std::vector<float> logits;
        std::vector<int32_t> feed = prompts[r];
        for (int i = 0; i < 20; ++i) {
          BatchEntry e{seq->get(), feed, false};
          ASSERT_TRUE(m.model().Forward({&e, 1}, logits).ok());
          int32_t best = 0;
          for (int32_t t = 1; t < m.n_valid_tokens(); ++t) {
            if (logits[t] > logits[best]) best = t;
          }
          EXPECT_EQ(sinks[r]->tokens[i], best) << "request " << r << " token " << i;
          feed = {best};
        }
      }
    }
  }
}

}  // namespace
}  // namespace deltaserve::worker
