// RecurrentStateSlots and RecurrentSlot (worker/cache/recurrent_state_slots.h) on the CPU
// backend: acquire / release and exhaustion, a slot zeroed whenever it is acquired, the layout
// of conv window and delta state per layer, Copy as snapshot and restore, and the slot size
// against MODEL_SPEC §4.2 (whose table counts a 16-bit conv window; ours is f32, so the conv part
// doubles).
#include "worker/cache/recurrent_state_slots.h"

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace deltaserve::worker {
namespace {

using ::testing::HasSubstr;

// 3 DeltaNet layers, conv window 3 x 8 channels, delta state 2 heads of 4 x 4.
constexpr RecurrentStateLayout kLayout{/*n_layers=*/3, /*conv_floats=*/24, /*delta_floats=*/32};

class RecurrentStateSlotsTest : public ::testing::Test {
 protected:
  std::shared_ptr<RecurrentStateSlots> MakeSlots(int n) {
    auto slots = RecurrentStateSlots::Create(*backend_, kLayout, n);
    EXPECT_TRUE(slots.ok()) << slots.status();
    return slots.ok() ? *slots : nullptr;
  }

  // Fills every float of a slot's state with a value that names slot tag, layer and index.
  static void Fill(const RecurrentState& s, float tag) {
    for (int l = 0; l < kLayout.n_layers; ++l) {
      for (int64_t i = 0; i < kLayout.conv_floats; ++i) s.conv(l)[i] = Value(tag, l, i, true);
      for (int64_t i = 0; i < kLayout.delta_floats; ++i) s.delta(l)[i] = Value(tag, l, i, false);
    }
  }
  static float Value(float tag, int layer, int64_t i, bool conv) {
    return tag + 100.0f * layer + static_cast<float>(i) + (conv ? 0.5f : 0.25f);
  }
  static bool Holds(const RecurrentState& s, float tag) {
    for (int l = 0; l < kLayout.n_layers; ++l) {
      for (int64_t i = 0; i < kLayout.conv_floats; ++i) {
        if (s.conv(l)[i] != Value(tag, l, i, true)) return false;
      }
      for (int64_t i = 0; i < kLayout.delta_floats; ++i) {
        if (s.delta(l)[i] != Value(tag, l, i, false)) return false;
      }
    }
    return true;
  }
  static bool IsZero(const RecurrentState& s) {
    for (int l = 0; l < kLayout.n_layers; ++l) {
      for (int64_t i = 0; i < kLayout.conv_floats; ++i) {
        if (s.conv(l)[i] != 0.0f) return false;
      }
      for (int64_t i = 0; i < kLayout.delta_floats; ++i) {
        if (s.delta(l)[i] != 0.0f) return false;
      }
    }
    return true;
  }

  std::unique_ptr<kernels::Backend> backend_ = kernels::MakeCpuBackend(1);
};

TEST_F(RecurrentStateSlotsTest, AcquireUntilExhaustedThenReleaseMakesRoom) {
  auto slots = MakeSlots(3);
  ASSERT_NE(slots, nullptr);
  EXPECT_EQ(slots->total_slots(), 3);
  EXPECT_EQ(slots->free_slots(), 3);
  std::set<int> taken;
  for (int i = 0; i < 3; ++i) {
    auto s = slots->Acquire();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(*s, i) << "a fresh pool hands out slots in order";
    taken.insert(*s);
  }
  EXPECT_EQ(slots->free_slots(), 0);
  auto none = slots->Acquire();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("all 3 recurrent state slots"));

  slots->Release(1);
  EXPECT_EQ(slots->free_slots(), 1);
  slots->Release(1);  // a double release is ignored, not a second free entry
  slots->Release(-1);
  slots->Release(3);
  EXPECT_EQ(slots->free_slots(), 1);
  auto again = slots->Acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 1);
  EXPECT_EQ(slots->free_slots(), 0);
}

TEST_F(RecurrentStateSlotsTest, RecurrentSlotReturnsItsSlotOnDestruction) {
  auto slots = MakeSlots(2);
  ASSERT_NE(slots, nullptr);
  auto a = RecurrentSlot::Acquire(slots);
  auto b = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->index(), (*b)->index());
  EXPECT_EQ(RecurrentSlot::Acquire(slots).status().code(), absl::StatusCode::kResourceExhausted);
  const int index = (*a)->index();
  a->reset();
  EXPECT_EQ(slots->free_slots(), 1);
  auto c = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->index(), index);

  // A slot keeps its pool alive.
  std::weak_ptr<RecurrentStateSlots> weak = slots;
  slots.reset();
  b->reset();
  EXPECT_FALSE(weak.expired());
  c->reset();
  EXPECT_TRUE(weak.expired());
}

TEST_F(RecurrentStateSlotsTest, AcquiredSlotIsZeroEvenAfterAPreviousSequenceUsedIt) {
  auto slots = MakeSlots(1);
  ASSERT_NE(slots, nullptr);
  {
    auto s = RecurrentSlot::Acquire(slots);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(IsZero(**s));
    Fill(**s, 1.0f);
    EXPECT_TRUE(Holds(**s, 1.0f));
  }
  auto s = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(IsZero(**s)) << "the previous sequence's state must not leak into a new one";
  Fill(**s, 2.0f);
  ASSERT_TRUE(slots->Zero((*s)->index()).ok());
  EXPECT_TRUE(IsZero(**s));
}

TEST_F(RecurrentStateSlotsTest, LayersAreConvThenDeltaBackToBackWithoutOverlap) {
  auto slots = MakeSlots(2);
  ASSERT_NE(slots, nullptr);
  const int64_t per_layer = kLayout.conv_floats + kLayout.delta_floats;
  const float* base = slots->conv(0, 0);
  for (int slot = 0; slot < 2; ++slot) {
    for (int l = 0; l < kLayout.n_layers; ++l) {
      EXPECT_EQ(slots->conv(slot, l) - base, (slot * kLayout.n_layers + l) * per_layer);
      EXPECT_EQ(slots->delta(slot, l) - slots->conv(slot, l), kLayout.conv_floats);
    }
  }
  // Filling one slot leaves the other untouched.
  auto a = RecurrentSlot::Acquire(slots), b = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(a.ok() && b.ok());
  Fill(**a, 3.0f);
  EXPECT_TRUE(IsZero(**b));
  EXPECT_EQ((*a)->conv(2), slots->conv((*a)->index(), 2));
  EXPECT_EQ((*a)->delta(1), slots->delta((*a)->index(), 1));
}

TEST_F(RecurrentStateSlotsTest, SnapshotAndRestoreRoundTrip) {
  auto slots = MakeSlots(3);
  ASSERT_NE(slots, nullptr);
  auto live = RecurrentSlot::Acquire(slots), snapshot = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(live.ok() && snapshot.ok());
  Fill(**live, 10.0f);
  ASSERT_TRUE((*live)->CopyTo(**snapshot).ok());
  EXPECT_TRUE(Holds(**snapshot, 10.0f));

  Fill(**live, 20.0f);  // speculative tokens advance the live state
  EXPECT_TRUE(Holds(**snapshot, 10.0f)) << "a snapshot is a copy, not an alias";
  ASSERT_TRUE((*live)->CopyFrom(**snapshot).ok());  // rejected: roll back
  EXPECT_TRUE(Holds(**live, 10.0f));

  // A fork: a third slot continues from the same state independently.
  auto fork = RecurrentSlot::Acquire(slots);
  ASSERT_TRUE(fork.ok());
  ASSERT_TRUE((*fork)->CopyFrom(**live).ok());
  Fill(**fork, 30.0f);
  EXPECT_TRUE(Holds(**live, 10.0f));
  EXPECT_TRUE(Holds(**fork, 30.0f));

  ASSERT_TRUE(slots->Copy((*live)->index(), (*live)->index()).ok()) << "self copy is a no-op";
  EXPECT_TRUE(Holds(**live, 10.0f));
  const absl::Status bad = slots->Copy(0, 3);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("no slot 0 or 3"));
  EXPECT_EQ(slots->Copy(-1, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RecurrentStateSlotsTest, CreateRejectsNegativeSizes) {
  for (const RecurrentStateLayout& bad :
       {RecurrentStateLayout{-1, 1, 1}, RecurrentStateLayout{1, -1, 1},
        RecurrentStateLayout{1, 1, -1}}) {
    EXPECT_EQ(RecurrentStateSlots::Create(*backend_, bad, 1).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(RecurrentStateSlots::Create(*backend_, kLayout, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = RecurrentStateSlots::Create(*backend_, kLayout, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->Acquire().status().code(), absl::StatusCode::kResourceExhausted);
}

// MODEL_SPEC §1.2 / §4.2: GDN layers, conv channels C = 2*Hk*128 + Hv*128, kernel 4 (a window
// of 3), delta state Hv x 128 x 128. The spec's "Total" column counts the conv window in 16 bits;
// the slots keep it in f32, so a slot is Recurrent + 2 x Conv16.
TEST(RecurrentStateLayoutTest, SlotBytesMatchModelSpec) {
  struct Row {
    const char* model;
    int n_gdn;
    int64_t hk, hv;
    uint64_t recurrent_f32, conv_16bit;  // MODEL_SPEC §4.2 columns
  };
  const Row rows[] = {
      {"0.8B", 18, 16, 16, 18'874'368, 663'552},
      {"9B", 24, 16, 32, 50'331'648, 1'179'648},
      {"27B", 48, 16, 48, 150'994'944, 2'949'120},
      {"35B-A3B", 30, 16, 32, 62'914'560, 1'474'560},
  };
  for (const Row& r : rows) {
    const int64_t channels = 2 * r.hk * 128 + r.hv * 128;
    const RecurrentStateLayout layout{r.n_gdn, 3 * channels, r.hv * 128 * 128};
    const RecurrentStateLayout delta_only{r.n_gdn, 0, r.hv * 128 * 128};
    EXPECT_EQ(delta_only.bytes(), r.recurrent_f32) << r.model;
    EXPECT_EQ(layout.bytes(), r.recurrent_f32 + 2 * r.conv_16bit) << r.model;
  }
  // Spelled out for the smallest model: 18 x 16 x 128 x 128 x 4 = 18,874,368 B of delta state,
  // 18 x 3 x 6144 x 4 = 1,327,104 B of f32 conv window; 20,201,472 B (19.3 MiB) per sequence.
  EXPECT_EQ((RecurrentStateLayout{18, 3 * 6144, 16 * 128 * 128}.bytes()), 20'201'472u);
}

}  // namespace
}  // namespace deltaserve::worker
