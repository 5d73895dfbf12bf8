// GgmlTypeTraits against ggml's block structs. The expected sizes are spelled out from the field
// lists of the structs in ggml/src/ggml-common.h (QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 =
// QK8_1 = QK4_NL = QK_MXFP4 = 32, QK_K = 256, K_SCALE_SIZE = 12, ggml_half = 2 bytes) and the
// type ids and names from ggml.h `enum ggml_type` / ggml.c `type_traits[].type_name`, so a typo
// in the table in common/ggml_types.cc shows up as a disagreement with an independent sum.
#include "common/ggml_types.h"

#include <set>
#include <string_view>

#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

constexpr int64_t kHalf = 2;  // ggml_half
constexpr int64_t kQK = 32;
constexpr int64_t kQK_K = 256;
constexpr int64_t kScaleSize = 12;  // K_SCALE_SIZE

struct Expected {
  uint32_t id;
  std::string_view name;
  int64_t block_size;
  int64_t type_size;
};

// {id, name, elements per block, bytes per block = sum of the struct's fields}.
constexpr Expected kGgml[] = {
    {0, "f32", 1, 4},
    {1, "f16", 1, 2},
    {2, "q4_0", kQK, kHalf + kQK / 2},                                    // d, qs
    {3, "q4_1", kQK, 2 * kHalf + kQK / 2},                                // d, m, qs
    {6, "q5_0", kQK, kHalf + 4 + kQK / 2},                                // d, qh[4], qs
    {7, "q5_1", kQK, 2 * kHalf + 4 + kQK / 2},                            // d, m, qh[4], qs
    {8, "q8_0", kQK, kHalf + kQK},                                        // d, qs
    {9, "q8_1", kQK, 2 * kHalf + kQK},                                    // d, s, qs
    {10, "q2_K", kQK_K, kQK_K / 16 + kQK_K / 4 + 2 * kHalf},              // scales, qs, d, dmin
    {11, "q3_K", kQK_K, kQK_K / 8 + kQK_K / 4 + 12 + kHalf},              // hmask, qs, scales, d
    {12, "q4_K", kQK_K, 2 * kHalf + kScaleSize + kQK_K / 2},              // d, dmin, scales, qs
    {13, "q5_K", kQK_K, 2 * kHalf + kScaleSize + kQK_K / 8 + kQK_K / 2},  // + qh
    {14, "q6_K", kQK_K, kQK_K / 2 + kQK_K / 4 + kQK_K / 16 + kHalf},      // ql, qh, scales, d
    {15, "q8_K", kQK_K, 4 + kQK_K + 2 * (kQK_K / 16)},            // float d, qs, int16 bsums
    {16, "iq2_xxs", kQK_K, kHalf + 2 * (kQK_K / 8)},              // d, uint16 qs
    {17, "iq2_xs", kQK_K, kHalf + 2 * (kQK_K / 8) + kQK_K / 32},  // d, qs, scales
    {18, "iq3_xxs", kQK_K, kHalf + 3 * kQK_K / 8},                // d, qs
    {19, "iq1_s", kQK_K, kHalf + kQK_K / 8 + 2 * (kQK_K / 32)},   // d, qs, uint16 qh
    {20, "iq4_nl", kQK, kHalf + kQK / 2},                         // d, qs
    {21, "iq3_s", kQK_K, kHalf + kQK_K / 4 + kQK_K / 32 + kQK_K / 8 + kQK_K / 64},
    {22, "iq2_s", kQK_K, kHalf + kQK_K / 4 + kQK_K / 32 + kQK_K / 32},  // d, qs, qh, scales
    {23, "iq4_xs", kQK_K, kHalf + 2 + kQK_K / 64 + kQK_K / 2},          // d, scales_h, scales_l, qs
    {24, "i8", 1, 1},
    {25, "i16", 1, 2},
    {26, "i32", 1, 4},
    {27, "i64", 1, 8},
    {28, "f64", 1, 8},
    {29, "iq1_m", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32},  // qs, qh, scales
    {30, "bf16", 1, 2},
    {34, "tq1_0", kQK_K, (kQK_K - 4 * kQK_K / 64) / 5 + kQK_K / 64 + kHalf},  // qs, qh, d
    {35, "tq2_0", kQK_K, kQK_K / 4 + kHalf},                                  // qs, d
    {39, "mxfp4", kQK, 1 + kQK / 2},                                          // e, qs
};

TEST(GgmlTypesTest, BlockLayoutMatchesGgmlStructs) {
  for (const Expected& e : kGgml) {
    SCOPED_TRACE(e.name);
    std::optional<GgmlTypeTraits> t = GgmlTypeTraitsFor(e.id);
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(static_cast<uint32_t>(t->type), e.id);
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->block_size, e.block_size);
    EXPECT_EQ(t->type_size, e.type_size);
    EXPECT_EQ(GgmlTypeName(t->type), e.name);
    EXPECT_EQ(TraitsOf(t->type).type_size, e.type_size);
  }
}

TEST(GgmlTypesTest, WellKnownSizesAsPublished) {
  // Bits per weight that llama.cpp's docs quote: q8_0 8.5, q4_K 4.5, q6_K 6.5625, q5_0 5.5.
  EXPECT_EQ(GgmlTypeTraitsFor(8)->type_size * 8 * 10000 / GgmlTypeTraitsFor(8)->block_size, 85000);
  EXPECT_EQ(TraitsOf(GgmlType::kQ4_K).type_size * 8 * 10000 / 256, 45000);
  EXPECT_EQ(TraitsOf(GgmlType::kQ6_K).type_size * 8 * 10000 / 256, 65625);
  EXPECT_EQ(TraitsOf(GgmlType::kQ5_0).type_size * 8 * 10000 / 32, 55000);
}

TEST(GgmlTypesTest, RemovedAndUnknownIdsAreRejected) {
  std::set<uint32_t> known;
  for (const Expected& e : kGgml) known.insert(e.id);
  // ggml.h: 4 and 5 were Q4_2/Q4_3, 31-33 Q4_0_4_4/4_8/8_8, 36-38 IQ4_NL_4_4/4_8/8_8; all removed.
  for (uint32_t id = 0; id < 64; ++id) {
    EXPECT_EQ(GgmlTypeTraitsFor(id).has_value(), known.count(id) == 1) << id;
  }
  EXPECT_FALSE(GgmlTypeTraitsFor(0xFFFFFFFFu).has_value());
  EXPECT_EQ(known.size(), 32u);
}

TEST(GgmlTypesTest, SupportedTypesAreTheOnesDeltaServeComputesWith) {
  // The weight types of the golden files (f32, q8_0, q4_K, q6_K, q5_0) must be loadable.
  for (GgmlType t :
       {GgmlType::kF32, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ5_0}) {
    EXPECT_TRUE(TraitsOf(t).supported) << GgmlTypeName(t);
  }
  EXPECT_FALSE(TraitsOf(GgmlType::kIQ2_XXS).supported);
}

}  // namespace
}  // namespace deltaserve::common
