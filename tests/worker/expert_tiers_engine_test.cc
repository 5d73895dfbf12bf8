// A qwen35moe model with its experts in two tiers (worker/engine/expert_tiers.h) computes what the
// same model with every expert on the device computes: on the strict device (memory that behaves
// like a GPU's), a small synthetic model (expert_tiers_test_model.h) generates greedily for a
// batch of three sequences (one prefill pass of all three prompts, then decode steps of all three)
// with its experts placed in device slots in many ways: none, an even spread, the hottest, a random
// set, whole layers, no slots at all, all but one; and with placements changed in the middle of
// the generation, the moves taking several steps (Advance between steps with a small byte budget),
// refused placements changing nothing. Greedy tokens must be identical and logits within the
// tolerance below. Also: the routed stacks are not copied to the device (the strict device's
// allocations), Memory(), the routing observer and the counts of routed pairs, step graphs off
// for a tiered model (the deferred-capture backend), and no tiers on host memory.
//
// Tolerance. Both tiers compute each expert with the same kernels (the host tier's CPU backend is
// the one inside the strict device) on the same gathered rows, so each expert's output is the
// same bits; what changes is how a token's k weighted expert outputs are summed: per tier in slot
// or expert order, then the two partial sums added (backend.h MoeFfn), i.e. the rounding of at
// most k + 1 f32 additions per value per layer, ~2^-24 relative each. Through the following
// layers' products that stays ~1e-6 relative in f32 (the F32 model: logits within 1e-4 of the
// untiered ones, whose magnitude is ~1-10); with quantized weights the CPU quantizes activations
// to int8 (matmul.h), where such a difference can move one activation across a rounding step: a
// change of one step d = amax/127 of its block in that input, which moves the next products by
// ~d/sqrt(256) and the logits by ~1e-3 (Q4_K_M: within 1e-2, a few such flips). Seen: ~5e-6 for
// both. Greedy tokens are compared exactly: the generation is deterministic, and the reference's
// smallest top-1 margin must exceed twice the tolerance (asserted), so a tolerated difference
// cannot change a token.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/expert_placement.h"
#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/support/deferred_capture_backend.h"
#include "tests/support/strict_device_backend.h"
#include "tests/worker/expert_tiers_test_model.h"
#include "worker/engine/expert_layout.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

using common::ExpertPlacement;
using ::deltaserve::testing::DeferredCaptureBackend;
using ::deltaserve::testing::StrictDeviceBackend;
using testing::Generate;
using testing::kTestMoeExperts;
using testing::kTestMoeLayers;
using testing::kTestMoeUsed;
using testing::Outcome;

constexpr int64_t kSlots = 12;  // of 32 experts

class ExpertTiersEngineTest : public ::testing::TestWithParam<WeightMixture> {
 protected:
  void SetUp() override {
    StrictDeviceBackend::InstallFaultReporter();
    path_ = ::testing::TempDir() + "expert_tiers_engine_test_" + std::to_string(getpid()) + "_" +
            std::string(MixtureName(GetParam())) + ".gguf";
    ASSERT_TRUE(testing::WriteTestMoe(path_, GetParam(), 11).ok());
    auto file = common::GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    slot_bytes_ = ExpertSlotBytes(**file);
    ASSERT_GT(slot_bytes_, 0u);
    auto hp = common::ReadQwen35HParams(**file);
    ASSERT_TRUE(hp.ok()) << hp.status();
    auto layout = ExpertSlotLayoutOf(**file, *hp);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    // Q4_K_M stores some layers' down projections in Q6_K: two expert sizes, two arenas.
    ASSERT_EQ(layout_.classes.size(), GetParam() == WeightMixture::kQ4_K_M ? 2u : 1u);
    // The reference: every expert on the device (no tiers).
    device_ = std::make_unique<StrictDeviceBackend>(2);
    reference_model_ = Load(*device_, ExpertTierOptions{});
    ASSERT_NE(reference_model_, nullptr);
    ASSERT_EQ(reference_model_->expert_tiers(), nullptr);
    reference_ = Generate(*reference_model_);
    ASSERT_FALSE(reference_.tokens.empty());
    std::printf("smallest top-1 margin of the reference: %g\n", reference_.smallest_margin);
    ASSERT_GT(reference_.smallest_margin, 2 * Tolerance());
    // Heat for the hottest placement: the reference's routing counts.
    heat_.assign(kTestMoeLayers, std::vector<double>(kTestMoeExperts));
    for (int64_t l = 0; l < kTestMoeLayers; ++l) {
      for (int64_t e = 0; e < kTestMoeExperts; ++e) {
        heat_[l][e] = static_cast<double>(reference_model_->counters().routed(l, e));
      }
    }
  }
  void TearDown() override {
    if (device_ != nullptr) {
      EXPECT_TRUE(device_->violations().empty()) << device_->Report();
    }
    std::remove(path_.c_str());
  }

  std::unique_ptr<Qwen35Model> Load(kernels::Backend& backend, const ExpertTierOptions& tiers) {
    auto file = common::GgufFile::Open(path_);
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return nullptr;
    auto m = Qwen35Model::Load(std::move(*file), backend, tiers);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }

  // A budget of n and a half slots of the largest expert's size (more experts of smaller sizes).
  static uint64_t BytesFor(int64_t n, uint64_t slot) {
    return static_cast<uint64_t>(n) * slot + slot / 2;
  }
  common::ExpertSlotClasses Classes(int64_t n) const {
    return layout_.SlotsFor(BytesFor(n, slot_bytes_));
  }
  ExpertTierOptions Slots(int64_t n, std::optional<ExpertPlacement> initial = std::nullopt) {
    return Bytes(BytesFor(n, slot_bytes_), std::move(initial));
  }
  ExpertTierOptions Bytes(uint64_t bytes, std::optional<ExpertPlacement> initial = std::nullopt) {
    ExpertTierOptions o;
    o.device_bytes = bytes;
    o.initial = std::move(initial);
    o.host_threads = 2;
    return o;
  }

  double Tolerance() const { return GetParam() == WeightMixture::kF32 ? 1e-4 : 1e-2; }

  void ExpectSameAsReference(const Outcome& got, const std::string& what) {
    EXPECT_EQ(got.tokens, reference_.tokens) << what;
    ASSERT_EQ(got.logits.size(), reference_.logits.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < got.logits.size(); ++i) {
      worst = std::max(worst, std::fabs(double{got.logits[i]} - reference_.logits[i]));
    }
    EXPECT_LE(worst, Tolerance()) << what;
    std::printf("%s: largest logit difference %g\n", what.c_str(), worst);
  }

  // The (layer, expert) pairs in `order` that each class's slots hold, first come first.
  static ExpertPlacement InOrder(const std::vector<std::pair<int64_t, int32_t>>& order,
                                 const common::ExpertSlotClasses& classes) {
    ExpertPlacement p = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
    std::vector<int64_t> left = classes.slots;
    for (const auto& [l, e] : order) {
      int64_t& room = left[static_cast<size_t>(classes.layer_class[static_cast<size_t>(l)])];
      if (room > 0) {
        p.device[l].push_back(e);
        --room;
      }
    }
    for (auto& l : p.device) std::sort(l.begin(), l.end());
    return p;
  }
  static std::vector<std::pair<int64_t, int32_t>> LayerMajor() {
    std::vector<std::pair<int64_t, int32_t>> all;
    for (int64_t l = 0; l < kTestMoeLayers; ++l) {
      for (int32_t e = 0; e < kTestMoeExperts; ++e) all.emplace_back(l, e);
    }
    return all;
  }
  // Random experts filling every class's slots.
  static ExpertPlacement Random(uint32_t seed, const common::ExpertSlotClasses& classes) {
    std::mt19937 rng(seed);
    std::vector<std::pair<int64_t, int32_t>> all = LayerMajor();
    std::shuffle(all.begin(), all.end(), rng);
    return InOrder(all, classes);
  }

  std::string path_;
  uint64_t slot_bytes_ = 0;
  ExpertSlotLayout layout_;
  std::unique_ptr<StrictDeviceBackend> device_;
  std::unique_ptr<Qwen35Model> reference_model_;
  Outcome reference_;
  std::vector<std::vector<double>> heat_;
};

TEST_P(ExpertTiersEngineTest, EveryStaticPlacementGeneratesTheSameTokens) {
  const common::ExpertSlotClasses classes = Classes(kSlots);
  // Every routed expert's exact slot bytes but one: all experts but one on the device.
  uint64_t all_bytes = 0;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    all_bytes += kTestMoeExperts * layout_.ClassOf(l).slot_bytes;
  }
  const common::ExpertSlotClasses all_but_one_classes = layout_.SlotsFor(all_bytes - 1);
  ASSERT_EQ(all_but_one_classes.total_slots(), kTestMoeLayers * kTestMoeExperts - 1);
  struct Case {
    std::string name;
    uint64_t bytes;
    std::optional<ExpertPlacement> initial;
    common::ExpertSlotClasses classes;
  };
  const uint64_t bytes = BytesFor(kSlots, slot_bytes_);
  const std::vector<Case> cases = {
      {"none on the device", bytes, ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts),
       classes},
      {"no slots", 0, std::nullopt, layout_.SlotsFor(0)},
      {"even (the default)", bytes, std::nullopt, classes},
      {"hottest", bytes, common::HottestExpertPlacement(heat_, classes), classes},
      {"random", bytes, Random(5, classes), classes},
      {"whole layers", bytes, InOrder(LayerMajor(), classes), classes},
      {"all but one", all_bytes - 1, InOrder(LayerMajor(), all_but_one_classes),
       all_but_one_classes},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StrictDeviceBackend device(2);
    std::unique_ptr<Qwen35Model> model = Load(device, Bytes(c.bytes, c.initial));
    ASSERT_NE(model, nullptr);
    ExpertTiers* tiers = model->expert_tiers();
    ASSERT_NE(tiers, nullptr);
    EXPECT_EQ(tiers->n_slots(), c.classes.total_slots());
    EXPECT_EQ(tiers->slot_classes(), c.classes);
    const ExpertPlacement placed = tiers->Current();
    if (c.initial.has_value()) {
      EXPECT_EQ(placed, *c.initial);
    } else {
      EXPECT_EQ(placed, common::EvenExpertPlacement(kTestMoeLayers, kTestMoeExperts, c.classes));
    }
    // The routing observer sees every layer's ids; the device share counts the placed ones.
    uint64_t observed_pairs = 0, observed_on_device = 0;
    model->set_routing_observer([&](absl::Span<const int32_t> ids, int64_t n_tokens, int64_t k) {
      ASSERT_EQ(k, kTestMoeUsed);
      ASSERT_EQ(ids.size(), static_cast<size_t>(kTestMoeLayers * n_tokens * k));
      for (int64_t l = 0; l < kTestMoeLayers; ++l) {
        for (int64_t i = 0; i < n_tokens * k; ++i) {
          ++observed_pairs;
          if (placed.Contains(l, ids[l * n_tokens * k + i])) ++observed_on_device;
        }
      }
    });
    const ExpertTierStats before = tiers->stats();
    ExpectSameAsReference(Generate(*model), c.name);
    const ExpertTierStats s = tiers->stats();
    EXPECT_GT(observed_pairs, 0u);
    EXPECT_EQ(s.routed_total - before.routed_total, observed_pairs);
    EXPECT_EQ(s.routed_device - before.routed_device, observed_on_device);
    if (placed.size() == 0) {
      EXPECT_EQ(observed_on_device, 0u);
    }
    EXPECT_EQ(s.moves_pending, 0);
    EXPECT_EQ(s.moves_in, static_cast<uint64_t>(placed.size()));  // the start-up copies
    EXPECT_TRUE(device.violations().empty()) << device.Report();
  }
}

TEST_P(ExpertTiersEngineTest, RoutedStacksStayInHostMemory) {
  const ModelMemory all = reference_model_->Memory();
  StrictDeviceBackend device(2);
  std::unique_ptr<Qwen35Model> model = Load(device, Slots(kSlots));
  ASSERT_NE(model, nullptr);
  const ModelMemory tiered = model->Memory();
  const common::ExpertSlotClasses classes = Classes(kSlots);
  EXPECT_EQ(all.expert_slots, 0);
  EXPECT_EQ(all.host_expert_bytes, 0u);
  EXPECT_EQ(tiered.expert_slots, classes.total_slots());
  EXPECT_GE(classes.total_slots(), kSlots);
  EXPECT_EQ(tiered.expert_slot_bytes, slot_bytes_);
  EXPECT_EQ(all.expert_slot_bytes, slot_bytes_);
  EXPECT_EQ(tiered.routed_expert_bytes, all.routed_expert_bytes);
  EXPECT_EQ(tiered.host_expert_bytes, all.routed_expert_bytes);
  ASSERT_EQ(tiered.expert_bytes_per_layer.size(), static_cast<size_t>(kTestMoeLayers));
  uint64_t per_layer_total = 0;
  for (uint64_t b : tiered.expert_bytes_per_layer) per_layer_total += b * kTestMoeExperts;
  EXPECT_EQ(per_layer_total, all.routed_expert_bytes);
  EXPECT_EQ(tiered.weight_bytes,
            all.weight_bytes - all.routed_expert_bytes + classes.device_bytes());
  // What the device really holds after loading (weights, the arena; nothing per sequence yet):
  // the routed stacks were not copied in.
  StrictDeviceBackend plain(2);
  std::unique_ptr<Qwen35Model> untiered = Load(plain, ExpertTierOptions{});
  ASSERT_NE(untiered, nullptr);
  EXPECT_EQ(plain.allocated_bytes() - device.allocated_bytes(),
            all.routed_expert_bytes - classes.device_bytes());
}

TEST_P(ExpertTiersEngineTest, PlacementsChangedDuringTheGenerationMoveOverSeveralSteps) {
  StrictDeviceBackend device(2);
  std::unique_ptr<Qwen35Model> model = Load(device, Slots(kSlots));
  ASSERT_NE(model, nullptr);
  ExpertTiers* tiers = model->expert_tiers();
  ASSERT_NE(tiers, nullptr);
  const common::ExpertSlotClasses classes = Classes(kSlots);
  const ExpertPlacement hottest = common::HottestExpertPlacement(heat_, classes);
  const ExpertPlacement random = Random(9, classes);
  ASSERT_NE(hottest, tiers->Current());
  // One expert per Advance: max_bytes 1 (at least one expert per call).
  std::vector<int64_t> pending_seen;
  std::vector<ExpertPlacement> used;
  auto between = [&](int step) {
    if (step == 2) {
      ASSERT_TRUE(tiers->SetTarget(hottest, 1).ok());
    } else if (step == 6) {
      ASSERT_TRUE(tiers->SetTarget(random, 2).ok());  // before the hottest is reached
    }
    if (step >= 2) {
      ASSERT_TRUE(tiers->Advance(1).ok());
      pending_seen.push_back(tiers->stats().moves_pending);
    }
    used.push_back(tiers->Current());
  };
  ExpectSameAsReference(Generate(*model, between), "moves during the generation");
  // The moves really spanned steps: placements differed from step to step, with moves pending.
  std::sort(used.begin(), used.end(),
            [](const ExpertPlacement& a, const ExpertPlacement& b) { return a.device < b.device; });
  EXPECT_GE(std::unique(used.begin(), used.end()) - used.begin(), 5);
  EXPECT_GT(*std::max_element(pending_seen.begin(), pending_seen.end()), 2);
  const ExpertTierStats s = tiers->stats();
  EXPECT_EQ(s.generation, 2u);
  EXPECT_GE(s.moves_in, static_cast<uint64_t>(kSlots) + 8);  // at least kSlots slots
  EXPECT_GT(s.moves_out, 0u);
  // The rest of the moves, then a generation on the final placement.
  while (tiers->stats().moves_pending > 0) ASSERT_TRUE(tiers->Advance(1 << 20).ok());
  EXPECT_EQ(tiers->Current(), random);
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_P(ExpertTiersEngineTest, ANewDivisionOfTheArenaDuringTheGenerationChangesNoOutput) {
  StrictDeviceBackend device(2);
  std::unique_ptr<Qwen35Model> model = Load(device, Slots(kSlots));
  ASSERT_NE(model, nullptr);
  ExpertTiers* tiers = model->expert_tiers();
  ASSERT_NE(tiers, nullptr);
  const common::ExpertSlotClasses classes = Classes(kSlots);
  const uint64_t bytes = tiers->slot_budget_bytes();
  ASSERT_EQ(bytes, classes.device_bytes());
  // Every byte of the arena to one size: as many of its experts as fit, layer by layer.
  auto all_to = [&](int32_t c) {
    ExpertPlacement p = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
    int64_t n = static_cast<int64_t>(bytes / classes.slot_bytes[static_cast<size_t>(c)]);
    for (int64_t l : classes.LayersOf(c)) {
      for (int32_t e = 0; e < kTestMoeExperts && n > 0; ++e, --n) p.device[l].push_back(e);
    }
    return p;
  };
  const ExpertPlacement first = all_to(0), last = all_to(classes.n_class() - 1);
  std::vector<std::vector<int64_t>> divisions;
  auto between = [&](int step) {
    if (step == 2) {
      ASSERT_TRUE(tiers->SetTarget(first, 1).ok());
    } else if (step == 6) {
      ASSERT_TRUE(tiers->SetTarget(last, 2).ok());  // before the first is reached
    }
    if (step >= 2) {
      ASSERT_TRUE(tiers->Advance(1).ok());
    }
    const common::ExpertSlotClasses now = tiers->slot_classes();
    EXPECT_LE(now.device_bytes(), bytes);
    if (divisions.empty() || divisions.back() != now.slots) divisions.push_back(now.slots);
  };
  ExpectSameAsReference(Generate(*model, between), "the arena divided anew during the generation");
  while (tiers->stats().moves_pending > 0) ASSERT_TRUE(tiers->Advance(1 << 20).ok());
  EXPECT_EQ(tiers->Current(), last);
  if (classes.n_class() > 1) {
    // Three divisions: the start-up one, all to the first size, all to the last.
    EXPECT_EQ(divisions.size(), 3u);
    EXPECT_EQ(tiers->slot_classes().slots.back(), last.size());
  }
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_P(ExpertTiersEngineTest, RefusedPlacementsChangeNothing) {
  StrictDeviceBackend device(2);
  const common::ExpertSlotClasses classes = Classes(kSlots);
  std::unique_ptr<Qwen35Model> model = Load(device, Slots(kSlots, Random(3, classes)));
  ASSERT_NE(model, nullptr);
  ExpertTiers* tiers = model->expert_tiers();
  ASSERT_NE(tiers, nullptr);
  const ExpertPlacement placed = tiers->Current();
  auto between = [&](int step) {
    if (step != 3) return;
    ExpertPlacement unknown_layer = ExpertPlacement::Empty(kTestMoeLayers + 1, kTestMoeExperts);
    ExpertPlacement unknown_expert = placed;
    unknown_expert.device[1].push_back(kTestMoeExperts);
    ExpertPlacement over =
        common::EvenExpertPlacement(kTestMoeLayers, kTestMoeExperts, classes.total_slots() + 1);
    // More experts of one size than the arena's bytes hold (the slots of every size together):
    // refused as well.
    ExpertPlacement lopsided = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
    const auto too_many = static_cast<int64_t>(classes.device_bytes() / classes.slot_bytes[0]) + 1;
    int64_t n = 0;
    for (int64_t l : classes.LayersOf(0)) {
      for (int32_t e = 0; e < kTestMoeExperts && n < too_many; ++e, ++n) {
        lopsided.device[l].push_back(e);
      }
    }
    if (n == too_many) {
      EXPECT_EQ(tiers->SetTarget(lopsided, 7).status().code(),
                absl::StatusCode::kResourceExhausted);
    }
    EXPECT_EQ(tiers->SetTarget(unknown_layer, 7).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(tiers->SetTarget(unknown_expert, 7).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(tiers->SetTarget(over, 7).status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(*tiers->Advance(1 << 30), 0u);
    EXPECT_EQ(tiers->Current(), placed);
    EXPECT_EQ(tiers->Target(), placed);
    EXPECT_EQ(tiers->stats().generation, 0u);
    EXPECT_EQ(tiers->stats().moves_pending, 0);
  };
  ExpectSameAsReference(Generate(*model, between), "refusals during the generation");
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_P(ExpertTiersEngineTest, TieredModelsRunWithoutStepGraphs) {
  // The same backend captures the untiered model's decode steps (so the check below can fail).
  {
    DeferredCaptureBackend capture(std::make_unique<StrictDeviceBackend>(2));
    std::unique_ptr<Qwen35Model> model = Load(capture, ExpertTierOptions{});
    ASSERT_NE(model, nullptr);
    ExpectSameAsReference(Generate(*model), "untiered, step graphs");
    EXPECT_GT(capture.step_graph_stats().launched, 0);
  }
  DeferredCaptureBackend capture(std::make_unique<StrictDeviceBackend>(2));
  std::unique_ptr<Qwen35Model> model = Load(capture, Slots(kSlots));
  ASSERT_NE(model, nullptr);
  ASSERT_NE(model->expert_tiers(), nullptr);
  EXPECT_TRUE(model->step_graphs());
  ExpectSameAsReference(Generate(*model), "tiered on a capturing backend");
  EXPECT_EQ(capture.step_graph_stats().launched, 0);
  EXPECT_EQ(capture.ops_recorded(), 0);
  EXPECT_TRUE(capture.refused().empty());
  EXPECT_TRUE(capture.violations().empty());
}

TEST_P(ExpertTiersEngineTest, NoTiersOnHostMemoryOrWhenEveryExpertFits) {
  std::unique_ptr<kernels::Backend> cpu = kernels::MakeCpuBackend(2);
  std::unique_ptr<Qwen35Model> on_cpu = Load(*cpu, Slots(kSlots));
  ASSERT_NE(on_cpu, nullptr);
  EXPECT_EQ(on_cpu->expert_tiers(), nullptr);
  EXPECT_EQ(on_cpu->Memory().expert_slots, 0);
  StrictDeviceBackend device(2);
  std::unique_ptr<Qwen35Model> fits =
      Load(device, Slots(kTestMoeLayers * kTestMoeExperts));  // every expert has a slot
  ASSERT_NE(fits, nullptr);
  EXPECT_EQ(fits->expert_tiers(), nullptr);
  ExpectSameAsReference(Generate(*fits), "every expert fits");
  // A start-up placement the budget cannot hold is refused by Load, naming it.
  auto file = common::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  auto refused =
      Qwen35Model::Load(std::move(*file), device,
                        Slots(2, common::EvenExpertPlacement(kTestMoeLayers, kTestMoeExperts,
                                                             Classes(2).total_slots() + 1)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(refused.status().message()).find("start-up expert placement"),
            std::string::npos)
      << refused.status();
}

INSTANTIATE_TEST_SUITE_P(Mixtures, ExpertTiersEngineTest,
                         ::testing::Values(WeightMixture::kF32, WeightMixture::kQ4_K_M),
                         [](const ::testing::TestParamInfo<WeightMixture>& i) {
                           return std::string(i.param == WeightMixture::kF32 ? "F32" : "Q4_K_M");
                         });

}  // namespace
}  // namespace deltaserve::worker
