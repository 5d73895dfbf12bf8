// MoE experts in two tiers on the CUDA backend (label gpu; SKIPPED with the reason where no GPU
// can be used): the synthetic qwen35moe model of tests/worker/expert_tiers_test_model.h (F32
// weights) with its experts in device slots and on the host generates what it generates with
// every expert on the GPU, for static placements (none, even, hottest, random) and for
// placements changed during a batched generation (one expert moved per step); tiered decode steps
// run without CUDA graphs while the untiered model's use them. The kernels of the device side are
// checked on their own in cuda_moe_test (ArenaStacksAndSkippedIds).
//
// Tolerance: logits within 1e-3 of the all-GPU run, the bound cuda_engine_golden_test holds the
// GPU to against the CPU engine for F32 models: here the host tier's experts are computed by the
// CPU (f32), the device tier's over the arena by the GPU (and with an arena of another size than
// the expert count, the grouped FFN may pick its GEMM tiles where the untiered model took GEMV
// items, or the reverse: f16-rounded operands there); and each token's expert outputs are summed
// in another order. Greedy tokens identical: the reference's smallest top-1 margin is asserted
// above twice the tolerance.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/expert_placement.h"
#include "common/gguf_file.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/worker/expert_tiers_test_model.h"
#include "worker/engine/expert_layout.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using common::ExpertPlacement;
using testing::Generate;
using testing::kTestMoeExperts;
using testing::kTestMoeLayers;
using testing::Outcome;

constexpr int64_t kSlots = 12;  // of 32 experts
constexpr double kTolerance = 1e-3;

class CudaExpertTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no GPU on this machine: " << why;
    gpu_ = kernels::MakeCudaBackend(kernels::CudaBackendOptions{}, &why);
    ASSERT_NE(gpu_, nullptr) << why;
    path_ = ::testing::TempDir() + "cuda_expert_tiers_test_" + std::to_string(getpid()) + ".gguf";
    ASSERT_TRUE(testing::WriteTestMoe(path_, WeightMixture::kF32, 11).ok());
    auto file = common::GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    slot_bytes_ = ExpertSlotBytes(**file);
    reference_model_ = Load(ExpertTierOptions{});
    ASSERT_NE(reference_model_, nullptr);
    ASSERT_EQ(reference_model_->expert_tiers(), nullptr);
    reference_ = Generate(*reference_model_);
    ASSERT_FALSE(reference_.tokens.empty());
    ASSERT_GT(reference_.smallest_margin, 2 * kTolerance);
    heat_.assign(kTestMoeLayers, std::vector<double>(kTestMoeExperts));
    for (int64_t l = 0; l < kTestMoeLayers; ++l) {
      for (int64_t e = 0; e < kTestMoeExperts; ++e) {
        heat_[l][e] = static_cast<double>(reference_model_->counters().routed(l, e));
      }
    }
  }
  void TearDown() override {
    if (!path_.empty()) std::remove(path_.c_str());
  }

  std::unique_ptr<Qwen35Model> Load(const ExpertTierOptions& tiers) {
    auto file = common::GgufFile::Open(path_);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return nullptr;
    auto m = Qwen35Model::Load(std::move(*file), *gpu_, tiers);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  ExpertTierOptions Slots(std::optional<ExpertPlacement> initial) const {
    ExpertTierOptions o;
    o.device_bytes = kSlots * slot_bytes_;
    o.initial = std::move(initial);
    o.host_threads = 4;
    return o;
  }

  void ExpectSameAsReference(const Outcome& got, const std::string& what) {
    EXPECT_EQ(got.tokens, reference_.tokens) << what;
    ASSERT_EQ(got.logits.size(), reference_.logits.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < got.logits.size(); ++i) {
      worst = std::max(worst, std::fabs(double{got.logits[i]} - reference_.logits[i]));
    }
    EXPECT_LE(worst, kTolerance) << what;
    std::printf("%s: largest logit difference %g\n", what.c_str(), worst);
  }

  std::unique_ptr<kernels::Backend> gpu_;
  std::string path_;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<Qwen35Model> reference_model_;
  Outcome reference_;
  std::vector<std::vector<double>> heat_;
};

TEST_F(CudaExpertTiersTest, StaticPlacementsGenerateTheSameTokens) {
  ExpertPlacement random = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  random.device = {{0, 3, 5}, {1, 2, 6, 7}, {4}, {0, 2, 5, 6}};
  const std::vector<std::pair<std::string, std::optional<ExpertPlacement>>> cases = {
      {"none on the device", ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts)},
      {"even", std::nullopt},
      {"hottest", common::HottestExpertPlacement(heat_, kSlots)},
      {"random", random},
  };
  for (const auto& [name, initial] : cases) {
    SCOPED_TRACE(name);
    std::unique_ptr<Qwen35Model> model = Load(Slots(initial));
    ASSERT_NE(model, nullptr);
    ASSERT_NE(model->expert_tiers(), nullptr);
    const int64_t before = gpu_->step_graph_stats().launched;
    ExpectSameAsReference(Generate(*model), name);
    EXPECT_EQ(gpu_->step_graph_stats().launched, before) << "a tiered step ran as a graph";
    const ExpertTierStats s = model->expert_tiers()->stats();
    EXPECT_GT(s.routed_total, 0u);
    if (name == "none on the device") {
      EXPECT_EQ(s.routed_device, 0u);
    } else {
      EXPECT_GT(s.routed_device, 0u);
    }
  }
}

TEST_F(CudaExpertTiersTest, MovesDuringABatchedGenerationChangeNothing) {
  std::unique_ptr<Qwen35Model> model = Load(Slots(std::nullopt));
  ASSERT_NE(model, nullptr);
  ExpertTiers* tiers = model->expert_tiers();
  ASSERT_NE(tiers, nullptr);
  const ExpertPlacement hottest = common::HottestExpertPlacement(heat_, kSlots);
  ExpertPlacement other = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  other.device = {{1, 2, 4, 6, 7}, {}, {0, 3, 5}, {1, 4, 6, 7}};
  int64_t most_pending = 0;
  auto between = [&](int step) {
    if (step == 2) {
      ASSERT_TRUE(tiers->SetTarget(hottest, 1).ok());
    } else if (step == 6) {
      ASSERT_TRUE(tiers->SetTarget(other, 2).ok());
    }
    if (step >= 2) {
      ASSERT_TRUE(tiers->Advance(1).ok());
    }
    most_pending = std::max(most_pending, tiers->stats().moves_pending);
  };
  ExpectSameAsReference(Generate(*model, between), "moves during the generation");
  EXPECT_GT(most_pending, 2);
  EXPECT_GT(tiers->stats().moves_in, static_cast<uint64_t>(kSlots));
}

}  // namespace
}  // namespace deltaserve::worker
