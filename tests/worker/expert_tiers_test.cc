// ArenaExpertTiers (worker/engine/expert_tiers.h) on the strict device (memory that behaves like
// a GPU's), over a small synthetic qwen35moe file (expert_tiers_test_model.h): the slot layout
// against the file's tensor table, placements refused without a change, moves a bounded number of
// bytes per Advance (at least one expert), slots holding exactly the file's bytes of their
// expert, evictions at once and freed slots reused, a target replaced half-way, the statistics,
// and the host tier's thread.
#include "worker/engine/expert_tiers.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/gguf_file.h"
#include "common/qwen35_hparams.h"
#include "gtest/gtest.h"
#include "tests/support/strict_device_backend.h"
#include "tests/worker/expert_tiers_test_model.h"
#include "worker/engine/expert_layout.h"

namespace deltaserve::worker {
namespace {

using common::ExpertPlacement;
using ::deltaserve::testing::StrictDeviceBackend;
using testing::kTestMoeExperts;
using testing::kTestMoeLayers;

class ExpertTiersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Q4_K_M: the layers' down stacks differ in type (Q6_K on UseMoreBits layers), so experts of
    // different layers have different sizes.
    path_ = new std::string(::testing::TempDir() + "expert_tiers_test_" + std::to_string(getpid()) +
                            ".gguf");
    ASSERT_TRUE(testing::WriteTestMoe(*path_, WeightMixture::kQ4_K_M, 7).ok());
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }

  void SetUp() override {
    auto file = common::GgufFile::Open(*path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = std::move(*file);
    auto hp = common::ReadQwen35HParams(*file_);
    ASSERT_TRUE(hp.ok()) << hp.status();
    hp_ = *hp;
    auto layout = ExpertSlotLayoutOf(*file_, hp_);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    // The mechanics tests below use one class for every layer (slots of the largest expert's
    // size, as one arena for every size would be); SlotsPerSize tests the per-size arenas.
    single_ = layout_;
    ExpertSlotClass one;
    for (const ExpertSlotClass& c : layout_.classes) {
      one.gate_bytes = std::max(one.gate_bytes, c.gate_bytes);
      one.up_bytes = std::max(one.up_bytes, c.up_bytes);
      one.down_bytes = std::max(one.down_bytes, c.down_bytes);
    }
    auto round_up = [](uint64_t n) {
      return (n + kExpertSlotAlign - 1) / kExpertSlotAlign * kExpertSlotAlign;
    };
    one.up_at = round_up(one.gate_bytes);
    one.down_at = one.up_at + round_up(one.up_bytes);
    one.slot_bytes = one.down_at + round_up(one.down_bytes);
    single_.classes = {one};
    single_.layer_class.assign(static_cast<size_t>(kTestMoeLayers), 0);
  }

  // The host stacks of every layer, pointing into the file's mapping.
  std::vector<ExpertStacks> HostStacks() const {
    std::vector<ExpertStacks> out;
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      ExpertStacks s;
      kernels::WeightView* views[] = {&s.gate, &s.up, &s.down};
      const char* parts[] = {"gate", "up", "down"};
      for (int i = 0; i < 3; ++i) {
        const auto* t =
            file_->FindTensor("blk." + std::to_string(l) + ".ffn_" + parts[i] + "_exps.weight");
        kernels::WeightView& v = *views[i];
        v.type = static_cast<kernels::WeightType>(t->type);
        v.in = t->ne[0];
        v.out = t->ne[1];
        v.count = t->ne[2];
        const kernels::BlockLayout b = kernels::BlockLayoutOf(v.type);
        v.row_bytes = static_cast<size_t>(v.in / b.block_size * b.block_bytes);
        v.data = file_->TensorData(*t).data();
      }
      out.push_back(s);
    }
    return out;
  }

  // Tiers over the one-class layout with `n_slots` slots.
  std::unique_ptr<ArenaExpertTiers> Make(StrictDeviceBackend& device, int64_t n_slots) {
    auto t = ArenaExpertTiers::Create(
        device, single_, HostStacks(),
        common::ExpertSlotClasses::Single(kTestMoeLayers, n_slots, single_.slot_bytes), 1);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // The bytes of `layer`'s expert in its device slot equal the file's, matrix by matrix.
  void ExpectSlotHolds(StrictDeviceBackend& device, ArenaExpertTiers& tiers, int64_t layer,
                       int32_t expert) {
    const int32_t slot = tiers.SlotTable(layer)[expert];
    ASSERT_GE(slot, 0);
    const ExpertStacks dev = tiers.DeviceStacks(layer);
    const ExpertStacks& host = tiers.HostStacks(layer);
    const std::pair<const kernels::WeightView*, const kernels::WeightView*> parts[] = {
        {&dev.gate, &host.gate}, {&dev.up, &host.up}, {&dev.down, &host.down}};
    for (const auto& [d, h] : parts) {
      const kernels::WeightView dm = d->Matrix(slot), hm = h->Matrix(expert);
      const size_t bytes = hm.out * hm.row_bytes;
      std::vector<uint8_t> got(bytes);
      ASSERT_EQ(device.CopyToHost(got.data(), dm.data, bytes), kernels::KernelStatus::kOk);
      EXPECT_EQ(std::memcmp(got.data(), hm.data, bytes), 0)
          << "layer " << layer << " expert " << expert << " slot " << slot;
    }
  }

  static std::string* path_;
  std::unique_ptr<common::GgufFile> file_;
  common::Qwen35HParams hp_;
  ExpertSlotLayout layout_;
  ExpertSlotLayout single_;
};

std::string* ExpertTiersTest::path_ = nullptr;

TEST_F(ExpertTiersTest, LayoutComesFromTheTensorTable) {
  EXPECT_EQ(layout_.n_layer, kTestMoeLayers);
  EXPECT_EQ(layout_.n_expert, kTestMoeExperts);
  uint64_t routed = 0;
  uint64_t most[3] = {0, 0, 0};
  std::vector<uint64_t> per_layer;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    uint64_t expert = 0;
    int i = 0;
    for (const char* part : {"gate", "up", "down"}) {
      const auto* t =
          file_->FindTensor("blk." + std::to_string(l) + ".ffn_" + part + "_exps.weight");
      ASSERT_NE(t, nullptr);
      routed += t->n_bytes;
      expert += t->n_bytes / kTestMoeExperts;
      most[i] = std::max(most[i], t->n_bytes / kTestMoeExperts);
      ++i;
    }
    per_layer.push_back(expert);
  }
  EXPECT_EQ(layout_.expert_bytes, per_layer);
  // Q4_K_M: some layers' down stacks are Q6_K, others Q4_K: experts differ in size by layer.
  EXPECT_NE(*std::min_element(per_layer.begin(), per_layer.end()),
            *std::max_element(per_layer.begin(), per_layer.end()));
  EXPECT_EQ(layout_.routed_bytes, routed);
  // One class per distinct (gate, up, down) size, each slot exactly its matrices rounded up.
  ASSERT_EQ(layout_.layer_class.size(), static_cast<size_t>(kTestMoeLayers));
  ASSERT_EQ(layout_.classes.size(), 2u);
  uint64_t largest = 0;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    const ExpertSlotClass& c = layout_.ClassOf(l);
    EXPECT_EQ(c.gate_bytes + c.up_bytes + c.down_bytes, per_layer[l]) << l;
    EXPECT_EQ(c.gate_at, 0u);
    EXPECT_GE(c.up_at, c.gate_bytes);
    EXPECT_GE(c.down_at, c.up_at + c.up_bytes);
    EXPECT_GE(c.slot_bytes, c.down_at + c.down_bytes);
    EXPECT_LT(c.slot_bytes, per_layer[l] + 3 * kExpertSlotAlign);
    for (uint64_t at : {c.up_at, c.down_at, c.slot_bytes}) EXPECT_EQ(at % kExpertSlotAlign, 0u);
    for (int64_t m = 0; m < kTestMoeLayers; ++m) {
      EXPECT_EQ(layout_.layer_class[l] == layout_.layer_class[m], per_layer[l] == per_layer[m]);
    }
    largest = std::max(largest, c.slot_bytes);
  }
  EXPECT_EQ(layout_.slot_bytes, largest);
  EXPECT_GE(layout_.slot_bytes, most[0] + most[1] + most[2]);
  EXPECT_EQ(ExpertSlotBytes(*file_), layout_.slot_bytes);

  // A dense model has no layout.
  common::Qwen35HParams dense = hp_;
  dense.is_moe = false;
  EXPECT_EQ(ExpertSlotLayoutOf(*file_, dense).status().code(), absl::StatusCode::kInvalidArgument);
}

// Per expert size: the budget holds as many experts as their exact slot sizes allow, each class
// in its own region of one arena with its own stride; a placement may divide the arena's bytes
// anew (never beyond them).
TEST_F(ExpertTiersTest, SlotsPerSize) {
  ASSERT_EQ(layout_.classes.size(), 2u);
  std::vector<int64_t> experts(2, 0);
  std::vector<uint64_t> sizes;
  uint64_t all = 0;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) experts[layout_.layer_class[l]] += kTestMoeExperts;
  for (size_t c = 0; c < 2; ++c) {
    sizes.push_back(layout_.classes[c].slot_bytes);
    all += experts[c] * sizes[c];
  }
  const uint64_t small = std::min(sizes[0], sizes[1]), large = std::max(sizes[0], sizes[1]);
  for (uint64_t budget : {uint64_t{0}, small - 1, small, 3 * large + 1, all / 2, all - 1, all}) {
    const common::ExpertSlotClasses slots = layout_.SlotsFor(budget);
    ASSERT_EQ(slots.slots.size(), 2u);
    EXPECT_EQ(slots.slot_bytes, sizes);
    EXPECT_LE(slots.device_bytes(), budget) << budget;
    for (size_t c = 0; c < 2; ++c) {
      EXPECT_LE(slots.slots[c], experts[c]) << budget;
      // No class could take one more slot within the budget.
      if (slots.slots[c] < experts[c]) {
        EXPECT_LT(budget - slots.device_bytes(), sizes[c]) << budget;
      }
      // Each class at least its bytes' share.
      const double share = static_cast<double>(budget) * experts[c] * sizes[c] / all;
      EXPECT_GE(slots.slots[c], static_cast<int64_t>(share / sizes[c])) << budget;
    }
  }
  // Exact bytes: the routed experts' slot bytes hold every expert, one byte less all but one;
  // slots of the largest size would hold fewer.
  EXPECT_EQ(layout_.SlotsFor(all).total_slots(), kTestMoeLayers * kTestMoeExperts);
  EXPECT_EQ(layout_.SlotsFor(all - 1).total_slots(), kTestMoeLayers * kTestMoeExperts - 1);
  EXPECT_LT(static_cast<int64_t>((all - 1) / large), kTestMoeLayers * kTestMoeExperts - 1);

  // Three slots of class 0, two of class 1, in one arena.
  StrictDeviceBackend device(1);
  common::ExpertSlotClasses slots = layout_.SlotsFor(0);
  slots.slots = {3, 2};
  auto made = ArenaExpertTiers::Create(device, layout_, HostStacks(), slots, 1);
  ASSERT_TRUE(made.ok()) << made.status();
  ArenaExpertTiers& tiers = **made;
  EXPECT_EQ(device.live_allocations(), 1u);
  EXPECT_EQ(tiers.n_slots(), 5);
  EXPECT_EQ(tiers.arena_bytes(), 3 * sizes[0] + 2 * sizes[1]);
  EXPECT_EQ(tiers.slot_budget_bytes(), 3 * sizes[0] + 2 * sizes[1]);
  EXPECT_EQ(tiers.slot_classes().slots, (std::vector<int64_t>{3, 2}));
  const std::vector<int64_t> layers0 = slots.LayersOf(0), layers1 = slots.LayersOf(1);
  ASSERT_FALSE(layers0.empty());
  ASSERT_FALSE(layers1.empty());
  ExpertPlacement fits = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  fits.device[layers0[0]] = {1, 5};
  fits.device[layers0.back()].push_back(7);
  if (layers0.size() == 1) fits.device[layers0[0]] = {1, 5, 7};
  fits.device[layers1[0]] = {0};
  fits.device[layers1.back()].push_back(6);
  if (layers1.size() == 1) fits.device[layers1[0]] = {0, 6};
  ASSERT_TRUE(tiers.SetTarget(fits, 1).ok());
  ASSERT_TRUE(tiers.Advance(~uint64_t{0}).ok());
  EXPECT_EQ(tiers.Current(), fits);
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    const ExpertStacks d = tiers.DeviceStacks(l);
    const int32_t c = layout_.layer_class[l];
    EXPECT_EQ(d.down.matrix_stride, sizes[c]) << l;
    EXPECT_EQ(d.down.count, slots.slots[c]) << l;
    for (int32_t e : fits.device[l]) ExpectSlotHolds(device, tiers, l, e);
  }
  // More experts than the arena's bytes hold (all of class 1's slots and four more of the
  // larger size): refused, nothing changes.
  const size_t big = sizes[0] >= sizes[1] ? 0 : 1, little = 1 - big;
  const std::vector<int64_t>& big_layers = big == 0 ? layers0 : layers1;
  const std::vector<int64_t>& little_layers = big == 0 ? layers1 : layers0;
  ExpertPlacement over = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  for (int32_t e = 0; e < 4; ++e) over.device[big_layers[0]].push_back(e);
  over.device[little_layers[0]] = {0, 1};
  ASSERT_GT(4 * sizes[big] + 2 * sizes[little], tiers.arena_bytes());
  const absl::StatusOr<ExpertMoves> r = tiers.SetTarget(over, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_NE(r.status().message().find("the budget holds"), std::string::npos) << r.status();
  EXPECT_EQ(tiers.Target(), fits);
  EXPECT_EQ(tiers.Current(), fits);
  EXPECT_EQ(tiers.stats().generation, 1u);

  // As many experts of the smaller size as the bytes hold beside one of the larger: the arena
  // is divided anew (the larger size's region shrinks to one slot, the smaller's grows), the
  // experts at the moved boundary are copied again, and every slot holds its expert's bytes.
  const auto n_little = static_cast<int64_t>((tiers.arena_bytes() - sizes[big]) / sizes[little]);
  ASSERT_GT(n_little, slots.slots[little]);
  ExpertPlacement lopsided = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  lopsided.device[big_layers[0]] = fits.device[big_layers[0]].empty()
                                       ? std::vector<int32_t>{0}
                                       : std::vector<int32_t>{fits.device[big_layers[0]][0]};
  int64_t placed = 0;
  for (int64_t l : little_layers) {
    for (int32_t e = 0; e < kTestMoeExperts && placed < n_little; ++e, ++placed) {
      lopsided.device[l].push_back(e);
    }
  }
  ASSERT_EQ(placed, n_little);
  ASSERT_TRUE(tiers.SetTarget(lopsided, 3).ok());
  EXPECT_EQ(tiers.slot_classes().slots, slots.slots);  // until Advance divides it
  ASSERT_TRUE(tiers.Advance(~uint64_t{0}).ok());
  EXPECT_EQ(tiers.Current(), lopsided);
  EXPECT_EQ(tiers.stats().moves_pending, 0);
  const common::ExpertSlotClasses now = tiers.slot_classes();
  EXPECT_EQ(now.slots[little], n_little);
  EXPECT_EQ(now.slots[big], 1);
  EXPECT_EQ(now.total_slots(), tiers.n_slots());
  EXPECT_LE(now.device_bytes(), tiers.arena_bytes());
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    EXPECT_EQ(tiers.DeviceStacks(l).down.count, now.slots[layout_.layer_class[l]]) << l;
    for (int32_t e : lopsided.device[l]) ExpectSlotHolds(device, tiers, l, e);
  }
  // And back: the first division holds `fits` again.
  ASSERT_TRUE(tiers.SetTarget(fits, 4).ok());
  ASSERT_TRUE(tiers.Advance(~uint64_t{0}).ok());
  EXPECT_EQ(tiers.Current(), fits);
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    for (int32_t e : fits.device[l]) ExpectSlotHolds(device, tiers, l, e);
  }
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_F(ExpertTiersTest, RefusedPlacementsChangeNothing) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 5);
  ASSERT_NE(tiers, nullptr);
  EXPECT_EQ(tiers->n_slots(), 5);
  EXPECT_EQ(tiers->slot_bytes(), single_.slot_bytes);
  ExpertPlacement good = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  good.device[0] = {1, 4};
  good.device[3] = {0};
  ASSERT_TRUE(tiers->SetTarget(good, 3).ok());
  ASSERT_TRUE(tiers->Advance(1).ok());
  const ExpertPlacement current = tiers->Current();
  const ExpertTierStats before = tiers->stats();

  struct Bad {
    const char* what;
    ExpertPlacement p;
    absl::StatusCode code;
  };
  std::vector<Bad> bad;
  ExpertPlacement p = good;
  p.device[1] = {static_cast<int32_t>(kTestMoeExperts)};
  bad.push_back({"unknown expert", p, absl::StatusCode::kInvalidArgument});
  p = good;
  p.device[1] = {-1};
  bad.push_back({"negative expert", p, absl::StatusCode::kInvalidArgument});
  p = good;
  p.device[2] = {3, 3};
  bad.push_back({"duplicate", p, absl::StatusCode::kInvalidArgument});
  p = ExpertPlacement::Empty(kTestMoeLayers + 1, kTestMoeExperts);
  bad.push_back({"unknown layer", p, absl::StatusCode::kInvalidArgument});
  p = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts + 1);
  bad.push_back({"other expert count", p, absl::StatusCode::kInvalidArgument});
  p = good;
  p.device[2] = {0, 1, 2};  // 6 experts, 5 slots
  bad.push_back({"over budget", p, absl::StatusCode::kResourceExhausted});
  for (const Bad& b : bad) {
    const absl::StatusOr<ExpertMoves> r = tiers->SetTarget(b.p, 9);
    EXPECT_EQ(r.status().code(), b.code) << b.what << ": " << r.status();
    EXPECT_EQ(tiers->Target(), good) << b.what;
    EXPECT_EQ(tiers->Current(), current) << b.what;
    const ExpertTierStats after = tiers->stats();
    EXPECT_EQ(after.generation, 3u) << b.what;
    EXPECT_EQ(after.moves_pending, before.moves_pending) << b.what;
    EXPECT_EQ(after.moves_in, before.moves_in) << b.what;
  }
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_F(ExpertTiersTest, MovesCopyTheFileBytesABoundedAmountPerAdvance) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 6);
  ASSERT_NE(tiers, nullptr);
  EXPECT_EQ(tiers->Current(), ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts));
  ExpertPlacement target = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  target.device[0] = {2, 7};
  target.device[1] = {0};
  target.device[2] = {5};
  target.device[3] = {1, 6};
  absl::StatusOr<ExpertMoves> moves = tiers->SetTarget(target, 1);
  ASSERT_TRUE(moves.ok()) << moves.status();
  EXPECT_EQ(moves->moves_in, 6);
  EXPECT_EQ(moves->moves_out, 0);
  uint64_t want_bytes = 0;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    want_bytes += target.device[l].size() * layout_.expert_bytes[l];
  }
  EXPECT_EQ(moves->bytes_to_copy, want_bytes);
  EXPECT_EQ(tiers->stats().moves_pending, 6);
  // Nothing moves before Advance: the forward pass still computes everything on the host.
  EXPECT_EQ(tiers->Current().size(), 0);

  // max_bytes 1: one expert per call, whatever its size; Current grows one expert at a time.
  uint64_t copied = 0;
  for (int call = 1; call <= 6; ++call) {
    absl::StatusOr<uint64_t> n = tiers->Advance(1);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_GT(*n, 0u);
    copied += *n;
    EXPECT_EQ(tiers->Current().size(), call);
    EXPECT_EQ(tiers->stats().moves_pending, 6 - call);
  }
  EXPECT_EQ(copied, want_bytes);
  EXPECT_EQ(*tiers->Advance(1), 0u);  // nothing left
  EXPECT_EQ(tiers->Current(), target);
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    for (int32_t e : target.device[l]) ExpectSlotHolds(device, *tiers, l, e);
  }
  // Every slot is used once.
  std::vector<int32_t> slots;
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    for (int32_t e = 0; e < kTestMoeExperts; ++e) {
      if (tiers->SlotTable(l)[e] >= 0) slots.push_back(tiers->SlotTable(l)[e]);
    }
  }
  std::sort(slots.begin(), slots.end());
  EXPECT_EQ(slots, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  ExpertTierStats s = tiers->stats();
  EXPECT_EQ(s.moves_in, 6u);
  EXPECT_EQ(s.bytes_moved, want_bytes);
  EXPECT_EQ(s.generation, 1u);

  // A large max_bytes moves several experts in one call: evictions (layer 0's 2 and 7, layer
  // 3's 6) take effect in that call and their slots take the new experts.
  ExpertPlacement next = target;
  next.device[0] = {3};
  next.device[2] = {4, 5};
  next.device[3] = {1, 2};
  moves = tiers->SetTarget(next, 2);
  ASSERT_TRUE(moves.ok()) << moves.status();
  EXPECT_EQ(moves->moves_in, 3);
  EXPECT_EQ(moves->moves_out, 3);
  EXPECT_EQ(tiers->stats().moves_pending, 6);
  absl::StatusOr<uint64_t> n = tiers->Advance(~uint64_t{0});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, moves->bytes_to_copy);
  EXPECT_EQ(tiers->Current(), next);
  for (int64_t l = 0; l < kTestMoeLayers; ++l) {
    for (int32_t e : next.device[l]) ExpectSlotHolds(device, *tiers, l, e);
  }
  s = tiers->stats();
  EXPECT_EQ(s.moves_in, 9u);
  EXPECT_EQ(s.moves_out, 3u);
  EXPECT_EQ(s.moves_pending, 0);
  EXPECT_EQ(s.generation, 2u);
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_F(ExpertTiersTest, ATargetReplacedHalfWayIsReachedAndEvictionsAreImmediate) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 4);
  ASSERT_NE(tiers, nullptr);
  ExpertPlacement first = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  first.device[1] = {0, 1, 2, 3};
  ASSERT_TRUE(tiers->SetTarget(first, 1).ok());
  ASSERT_TRUE(tiers->Advance(1).ok());
  ASSERT_TRUE(tiers->Advance(1).ok());
  ASSERT_EQ(tiers->Current().device[1], (std::vector<int32_t>{0, 1}));
  // The new target keeps 1, drops 0 (and 2, 3, never copied), adds layer 2's 6.
  ExpertPlacement second = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  second.device[1] = {1};
  second.device[2] = {6};
  absl::StatusOr<ExpertMoves> moves = tiers->SetTarget(second, 2);
  ASSERT_TRUE(moves.ok());
  EXPECT_EQ(moves->moves_in, 1);
  EXPECT_EQ(moves->moves_out, 1);
  EXPECT_EQ(moves->bytes_to_copy, layout_.expert_bytes[2]);
  ASSERT_TRUE(tiers->Advance(1).ok());
  EXPECT_EQ(tiers->Current(), second);
  EXPECT_EQ(tiers->SlotTable(1)[0], -1);
  ExpectSlotHolds(device, *tiers, 1, 1);
  ExpectSlotHolds(device, *tiers, 2, 6);
  EXPECT_EQ(tiers->stats().moves_pending, 0);
  // An empty target evicts everything in the next call, copying nothing.
  ASSERT_TRUE(tiers->SetTarget(ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts), 3).ok());
  EXPECT_EQ(*tiers->Advance(1 << 20), 0u);
  EXPECT_EQ(tiers->Current().size(), 0);
  EXPECT_EQ(tiers->stats().moves_out, 3u);
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_F(ExpertTiersTest, TargetsFromAnotherThreadWhileMovesRun) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 8);
  ASSERT_NE(tiers, nullptr);
  ExpertPlacement a = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  ExpertPlacement b = a;
  for (int32_t e = 0; e < 4; ++e) {
    a.device[0].push_back(e);
    a.device[1].push_back(e + 4);
    b.device[2].push_back(e);
    b.device[3].push_back(e + 4);
  }
  std::thread setter([&] {
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(tiers->SetTarget(i % 2 == 0 ? a : b, static_cast<uint64_t>(i)).ok());
      (void)tiers->Current();
      (void)tiers->stats();
    }
  });
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(tiers->Advance(1).ok());
  setter.join();
  // The last target (b, generation 199) is reached by the engine thread.
  for (int i = 0; i < 20 && tiers->stats().moves_pending > 0; ++i) {
    ASSERT_TRUE(tiers->Advance(1).ok());
  }
  EXPECT_EQ(tiers->Current(), b);
  EXPECT_EQ(tiers->stats().generation, 199u);
  for (int64_t l = 2; l < 4; ++l) {
    for (int32_t e : b.device[l]) ExpectSlotHolds(device, *tiers, l, e);
  }
  EXPECT_TRUE(device.violations().empty()) << device.Report();
}

TEST_F(ExpertTiersTest, NoSlotsMeansEveryExpertOnTheHost) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 0);
  ASSERT_NE(tiers, nullptr);
  EXPECT_EQ(device.live_allocations(), 0u);  // no arena
  ExpertPlacement one = ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts);
  one.device[0] = {0};
  EXPECT_EQ(tiers->SetTarget(one, 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(tiers->SetTarget(ExpertPlacement::Empty(kTestMoeLayers, kTestMoeExperts), 1).ok());
  EXPECT_EQ(*tiers->Advance(1), 0u);
}

TEST_F(ExpertTiersTest, HostJobsRunOnTheHostThread) {
  StrictDeviceBackend device(1);
  auto tiers = Make(device, 1);
  ASSERT_NE(tiers, nullptr);
  for (int i = 0; i < 3; ++i) {
    std::thread::id ran_on;
    tiers->StartHost([&](kernels::Backend& host) {
      ran_on = std::this_thread::get_id();
      EXPECT_TRUE(host.host_memory());
      return i == 1 ? kernels::KernelStatus::kInvalidArgument : kernels::KernelStatus::kOk;
    });
    const kernels::KernelStatus s = tiers->WaitHost();
    EXPECT_EQ(s, i == 1 ? kernels::KernelStatus::kInvalidArgument : kernels::KernelStatus::kOk);
    EXPECT_NE(ran_on, std::this_thread::get_id());
  }
}

}  // namespace
}  // namespace deltaserve::worker
