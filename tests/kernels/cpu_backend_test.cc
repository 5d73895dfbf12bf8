// CpuBackend through the Backend interface: memory (alignment, zero fill, copies, zero-copy
// weight import) and shape checking — every op refuses inconsistent shapes with
// kInvalidArgument before touching memory. The ops' numerics are tested per file (norm_ops_test,
// attention_test, ...); cpu_backend_layer_test runs whole layers through this interface.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "tests/kernels/op_test_support.h"

namespace deltaserve::kernels {
namespace {

using testing::HostMat;

TEST(CpuBackendTest, AllocatesAlignedZeroedMemory) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  EXPECT_EQ(backend->name(), "cpu");
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{1000}, size_t{1} << 20}) {
    DeviceBuffer buf = backend->Allocate(bytes);
    ASSERT_NE(buf.data(), nullptr) << bytes;
    EXPECT_EQ(buf.bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u) << bytes;
    const auto* p = static_cast<const uint8_t*>(buf.data());
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << bytes << " " << i;
  }
  EXPECT_EQ(backend->Synchronize(), KernelStatus::kOk);
}

TEST(CpuBackendTest, CopiesRoundTripAndWeightsAreImportedWithoutCopy) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(1);
  std::vector<float> host(100);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  DeviceBuffer buf = backend->Allocate(host.size() * sizeof(float));
  ASSERT_EQ(backend->CopyToDevice(buf.data(), host.data(), host.size() * 4), KernelStatus::kOk);
  std::vector<float> back(100, -1.0f);
  ASSERT_EQ(backend->CopyToHost(back.data(), buf.data(), back.size() * 4), KernelStatus::kOk);
  EXPECT_EQ(back, host);
  EXPECT_EQ(backend->CopyToDevice(nullptr, host.data(), 4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(backend->CopyToHost(back.data(), nullptr, 4), KernelStatus::kInvalidArgument);
  EXPECT_EQ(backend->CopyToHost(nullptr, nullptr, 0), KernelStatus::kOk);

  DeviceBuffer storage;
  EXPECT_EQ(backend->ImportWeights(host.data(), host.size() * 4, storage), host.data());
  EXPECT_EQ(storage.data(), nullptr);
}

TEST(CpuBackendTest, EveryOpRefusesMismatchedShapes) {
  std::unique_ptr<Backend> backend = MakeCpuBackend(2);
  Backend& b = *backend;
  const KernelStatus bad = KernelStatus::kInvalidArgument;
  HostMat a(4, 8), a2(4, 8), wrong_cols(4, 9), wrong_rows(3, 8), one(4, 1);
  Mat am = a.mat(), a2m = a2.mat(), wc = wrong_cols.mat(), wr = wrong_rows.mat();
  std::vector<float> w8(8, 1.0f), w_big(8 * 9, 0.1f);
  const Vec v8{w8.data(), 8}, v7{w8.data(), 7};
  const WeightView w{w_big.data(), WeightType::kF32, 8, 9, 8 * 4, 1};
  const int32_t ids[4] = {0, 1, 2, 3};

  // dense algebra
  EXPECT_EQ(b.MatMul(w, a.mat(), am), bad);           // y.cols != w.out
  EXPECT_EQ(b.MatMul(w, wrong_cols.mat(), wc), bad);  // x.cols != w.in
  HostMat y9(3, 9);
  Mat y9m = y9.mat();
  EXPECT_EQ(b.MatMul(w, a.mat(), y9m), bad);  // rows differ
  EXPECT_EQ(b.GetRows(w, ids, 4, wc), bad);   // out.cols != table.in
  EXPECT_EQ(b.GetRows(w, ids, 3, am), bad);   // out.rows != n
  EXPECT_EQ(b.RmsNorm(a.mat(), v7, 1e-6f, am), bad);
  EXPECT_EQ(b.RmsNorm(a.mat(), v8, 1e-6f, wr), bad);
  EXPECT_EQ(b.L2Norm(am, 3, 1e-6f), bad);
  EXPECT_EQ(b.Copy(a.mat(), wc), bad);
  EXPECT_EQ(b.Add(am, wrong_rows.mat()), bad);
  EXPECT_EQ(b.SwiGlu(a.mat(), wrong_cols.mat(), am), bad);
  EXPECT_EQ(b.MulSigmoid(am, wrong_cols.mat()), bad);

  // attention layers
  std::vector<int32_t> pos(4, 0);
  EXPECT_EQ(b.RopeNeox(am, pos.data(), 3, 4, 1e4f), bad);                      // 4 rows, 3 heads
  EXPECT_EQ(b.RopeNeox(am, pos.data(), 1, 10, 1e4f), bad);                     // n_rot > head_dim
  PagedKvView no_cache;  // no pools, no page table
  EXPECT_EQ(b.PagedAttention(a.mat(), no_cache, 0, 2, 2, 1.0f, a2m), bad);
  EXPECT_EQ(b.StoreKv(a.mat(), a.mat(), no_cache, 0), bad);

  // DeltaNet layers
  std::vector<float> conv_w(8 * 4), conv_state(3 * 8), state(2 * 4 * 4);
  EXPECT_EQ(b.CausalConv1dSilu(a.mat(), conv_w.data(), 4, conv_state.data(), wc), bad);
  EXPECT_EQ(b.CausalConv1dSilu(a.mat(), conv_w.data(), 4, nullptr, am), bad);
  HostMat g(4, 2), beta(4, 2), g_bad(4, 3);
  EXPECT_EQ(b.GatedDeltaRule(a.mat(), a.mat(), a.mat(), g_bad.mat(), beta.mat(), 2, 2, 4,
                             state.data(), a2m),
            bad);
  EXPECT_EQ(b.GatedDeltaRule(a.mat(), a.mat(), wrong_cols.mat(), g.mat(), beta.mat(), 2, 2, 4,
                             state.data(), a2m),
            bad);
  EXPECT_EQ(b.GatedRmsNorm(a.mat(), v8, wrong_rows.mat(), 1e-6f, a2m), bad);
  Mat gm = g.mat(), bm = beta.mat(), gbad = g_bad.mat();
  EXPECT_EQ(b.DeltaNetGates(gm, gbad, Vec{w8.data(), 2}, Vec{w8.data(), 2}), bad);
  EXPECT_EQ(b.DeltaNetGates(gm, bm, Vec{w8.data(), 3}, Vec{w8.data(), 2}), bad);

  // mixture of experts
  std::vector<int32_t> route_ids(4 * 9);
  std::vector<float> route_w(4 * 9);
  EXPECT_EQ(b.MoeRoute(a.mat(), 9, route_ids.data(), route_w.data()), bad);
  std::vector<float> experts(2 * 8 * 8, 0.1f);
  const WeightView ex{experts.data(), WeightType::kF32, 8, 8, 8 * 4, 2};
  std::vector<int32_t> moe_ids = {0, 1, 1, 0, 0, 1, 1, 2};  // 2 is out of range
  const std::vector<float> moe_w(8, 0.5f);
  EXPECT_EQ(b.MoeFfn(a.mat(), moe_ids.data(), moe_w.data(), 2, ex, ex, ex, a2m), bad);
  moe_ids[7] = 1;
  EXPECT_EQ(b.MoeFfn(a.mat(), moe_ids.data(), moe_w.data(), 2, ex, ex, ex, wc), bad);

  // Nothing above wrote into its output.
  for (HostMat* m : {&a, &a2, &wrong_cols, &wrong_rows}) {
    for (int64_t r = 0; r < m->rows(); ++r) {
      for (int64_t c = 0; c < m->cols(); ++c) ASSERT_EQ(m->at(r, c), 0.0f);
    }
  }
}

}  // namespace
}  // namespace deltaserve::kernels
