// The CUDA matrix products (kernels/cuda/matmul.cu) against double-precision products of the
// exactly decoded weights and against the CPU backend, on every weight type: GEMV batches of
// 1..8 rows, GEMM batches of 9..300 rows (tile edges: 63/64/65 outputs, in not a multiple of
// 256 where the block allows, dense rows not a multiple of 8), Rows/Matrix weight views,
// strided x and y (the padding of y must stay untouched), MatMulGroup equal bit for bit to
// separate MatMuls, GetRows equal bit for bit to the CPU's, and the same refusals as the CPU
// backend. Tolerances: matmul_test_util.h (f32 sums for GEMV; f16 operands for GEMM, checked
// both against the exact product with the f16 bound and against the product of the
// f16-rounded operands with the f32 bound; CPU int8 activations bounded by 0.6 d per value).
// GEMV outputs must moreover equal, bit for bit, the host replay of the warp (gemv.cuh's lane
// loop is DS_HOST_DEVICE), so this file is built without FMA contraction like the decoders.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/quants.h"
#include "kernels/cuda/gemv.cuh"
#include "tests/gpu/gpu_test_support.h"
#include "tests/gpu/matmul_test_util.h"

namespace deltaserve::kernels::gpu_test {
namespace {

constexpr float kSentinel = -7777.0f;

class CudaMatMulTest : public GpuBackendTest {
 protected:
  struct Case {
    WeightType type;
    int64_t in;
    int64_t out;
    int64_t rows;
    int64_t x_pad = 0;      // extra floats per x row
    int64_t y_pad = 0;      // extra floats per y row (must stay kSentinel)
    int64_t matrix = 0;     // use matrix `matrix` of a stack of matrix + 1 ...
    int64_t first_row = 0;  // ... and its rows [first_row, first_row + out)
    int64_t w_offset = 0;   // bytes before the weights in device memory (alignment)
  };

  // GEMV results equal, bit for bit, the host replay of the warp (gemv.cuh GemvLanePartial for
  // 32 lanes, then the butterfly): the same decoders, the same fmaf chain, the same additions.
  // The lane is the one the launcher picks for the device view `gw` (gemv_fast.cuh for Q4_K
  // rows that are 16-byte aligned).
  static void ExpectGemvBitsOfHostReplay(const HostWeights& w, const WeightView& gw, const Case& c,
                                         const std::vector<float>& x, int64_t xs,
                                         const std::vector<float>& y, int64_t ys) {
    const bool fast = cuda::GemvFastEligible(gw.type, gw.data, gw.row_bytes);
    const int nr = static_cast<int>(c.rows);
    const float* xr[cuda::kGemvMaxRows];
    for (int r = 0; r < cuda::kGemvMaxRows; ++r) xr[r] = x.data() + (r < nr ? r : 0) * xs;
    int reported = 0;
    for (int64_t o = 0; o < c.out; ++o) {
      const uint8_t* wrow =
          w.bytes.data() + static_cast<size_t>((c.matrix * w.out + c.first_row + o)) * w.row_bytes;
      float lanes[32][cuda::kGemvMaxRows];
      cuda::DispatchWeightType(c.type, 0, [&](auto tag) {
        for (int lane = 0; lane < 32; ++lane) {
          if (fast) {
            cuda::GemvLaneQ4KFast(wrow, c.in, xr, nr, lane, lanes[lane]);
          } else {
            cuda::GemvLanePartial<decltype(tag)::value>(wrow, c.in, xr, nr, lane, lanes[lane]);
          }
        }
        return 0;
      });
      for (int r = 0; r < nr; ++r) {
        float v[32];
        for (int l = 0; l < 32; ++l) v[l] = lanes[l][r];
        const float want = cuda::ButterflySum(v);
        const float got = y[r * ys + o];
        if (std::memcmp(&want, &got, sizeof(float)) != 0 && reported++ < 5) {
          ADD_FAILURE() << "GEMV bits differ from the host replay at t=" << r << " o=" << o
                        << ": gpu " << got << " replay " << want;
        }
      }
    }
  }

  // Runs one product on both backends and checks it (see the file comment).
  void Check(const Case& c, std::mt19937& rng) {
    const std::string what =
        std::string(TypeName(c.type)) + " in=" + std::to_string(c.in) +
        " out=" + std::to_string(c.out) + " rows=" + std::to_string(c.rows) +
        " x_pad=" + std::to_string(c.x_pad) + " y_pad=" + std::to_string(c.y_pad) +
        " matrix=" + std::to_string(c.matrix) + " first_row=" + std::to_string(c.first_row);
    SCOPED_TRACE(what);
    const HostWeights w =
        MakeHostWeights(c.type, c.in, c.first_row + c.out + 2, c.matrix + 1, 0.5f, rng);
    const int64_t xs = c.in + c.x_pad;
    const int64_t ys = c.out + c.y_pad;
    std::vector<float> x(static_cast<size_t>(c.rows * xs), 0.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int64_t k = 0; k < c.in; ++k) x[t * xs + k] = normal(rng);
    }
    const std::vector<float> y0(static_cast<size_t>(c.rows * ys), kSentinel);

    std::vector<uint8_t> shifted(static_cast<size_t>(c.w_offset), 0);
    shifted.insert(shifted.end(), w.bytes.begin(), w.bytes.end());
    DeviceBuffer wd = Upload(*gpu_, shifted);
    DeviceBuffer xd = Upload(*gpu_, x);
    DeviceBuffer yd = Upload(*gpu_, y0);
    const WeightView gw = w.View(static_cast<uint8_t*>(wd.data()) + c.w_offset)
                              .Matrix(c.matrix)
                              .Rows(c.first_row, c.out);
    Mat gx{xd.floats(), c.rows, c.in, xs};
    Mat gy{yd.floats(), c.rows, c.out, ys};
    ASSERT_EQ(gpu_->MatMul(gw, gx, gy), KernelStatus::kOk);
    const std::vector<float> y = Download<float>(*gpu_, yd.data(), y0.size());

    std::vector<float> yc = y0;
    const WeightView cw = w.View(w.bytes.data()).Matrix(c.matrix).Rows(c.first_row, c.out);
    Mat cx{x.data(), c.rows, c.in, xs};
    Mat cy{yc.data(), c.rows, c.out, ys};
    ASSERT_EQ(cpu_->MatMul(cw, cx, cy), KernelStatus::kOk);

    const bool gemm = c.rows > 8;
    if (!gemm) ExpectGemvBitsOfHostReplay(w, gw, c, x, xs, y, ys);
    int reported = 0;
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int64_t o = 0; o < c.out; ++o) {
        const DotRef r = Dot(c.type, w.Row(c.matrix, c.first_row + o), x.data() + t * xs, c.in);
        const double got = y[t * ys + o];
        const double bound = GpuBound(r, gemm);
        bool ok = std::fabs(got - r.exact) <= bound;
        if (gemm) ok = ok && std::fabs(got - r.f16) <= kF32SumRel * r.abs_wx + 1e-30;
        // The CPU backend (int8 activations for quantized weights) within its own bound.
        const double cpu_bound = bound + r.int8_shift + kF32SumRel * r.abs_wx;
        ok = ok && std::fabs(got - double{yc[t * ys + o]}) <= cpu_bound;
        if (!ok && reported++ < 5) {
          ADD_FAILURE() << "t=" << t << " o=" << o << " gpu=" << got << " exact=" << r.exact
                        << " f16-operands=" << r.f16 << " cpu=" << yc[t * ys + o]
                        << " bound=" << bound << " cpu_bound=" << cpu_bound;
        }
      }
      for (int64_t o = c.out; o < ys; ++o) {
        ASSERT_EQ(y[t * ys + o], kSentinel) << "padding written at t=" << t << " o=" << o;
      }
    }
  }
};

// Reduction lengths per type: a multiple of the block, not of 256 where the block allows.
std::vector<int64_t> Lengths(WeightType type) {
  switch (BlockLayoutOf(type).block_size) {
    case 1:
      return {8, 13, 100, 136};
    case 32:
      return {32, 96, 160};
    default:
      return {256, 512};
  }
}

TEST_F(CudaMatMulTest, GemvBatchesOfOneToEightRowsOnEveryType) {
  std::mt19937 rng(1);
  for (WeightType type : AllWeightTypes()) {
    for (int64_t in : Lengths(type)) {
      for (int64_t rows = 1; rows <= 8; ++rows) Check({type, in, 37, rows}, rng);
    }
  }
}

TEST_F(CudaMatMulTest, GemmBatchesOnEveryTypeAcrossTileEdges) {
  std::mt19937 rng(2);
  for (WeightType type : AllWeightTypes()) {
    for (int64_t in : Lengths(type)) {
      for (int64_t rows : {9, 64, 65}) Check({type, in, 63, rows}, rng);
      Check({type, in, 64, 17}, rng);
      Check({type, in, 65, 130}, rng);
    }
    Check({type, Lengths(type).back(), 200, 300}, rng);
  }
}

TEST_F(CudaMatMulTest, StridedViewsAndWeightSubviews) {
  std::mt19937 rng(3);
  for (WeightType type : AllWeightTypes()) {
    const int64_t in = Lengths(type).back();
    for (int64_t rows : {1, 5, 8, 33}) {
      Check({type, in, 40, rows, /*x_pad=*/3, /*y_pad=*/5}, rng);
      Check({type, in, 40, rows, /*x_pad=*/4, /*y_pad=*/1, /*matrix=*/2, /*first_row=*/7}, rng);
    }
  }
}

// A longer reduction (model-sized rows) on the common model types.
// Q4_K rows take the fast GEMV lane when 16-byte aligned and the general one otherwise (data
// 2 or 8 bytes past an alignment boundary): both checked, each against its own host replay.
TEST_F(CudaMatMulTest, Q4KFastAndGeneralLanes) {
  std::mt19937 rng(8);
  for (int64_t offset : {0, 2, 8}) {
    for (int64_t rows : {1, 3, 8}) {
      Case c{WeightType::kQ4_K, 1024, 50, rows};
      c.w_offset = offset;
      c.first_row = 1;
      Check(c, rng);
    }
  }
}

TEST_F(CudaMatMulTest, ModelSizedRows) {
  std::mt19937 rng(4);
  for (WeightType type : {WeightType::kQ4_K, WeightType::kQ6_K, WeightType::kQ8_0, WeightType::kF16,
                          WeightType::kBF16}) {
    for (int64_t rows : {1, 4, 96}) Check({type, 2048, 96, rows}, rng);
  }
}

TEST_F(CudaMatMulTest, EmptyShapesMatchCpu) {
  // in == 0: y becomes zeros (as on the CPU); rows == 0: nothing happens.
  DeviceBuffer wd = Upload(*gpu_, std::vector<float>(4, 1.0f));
  DeviceBuffer yd = Upload(*gpu_, std::vector<float>(3 * 4, kSentinel));
  DeviceBuffer xd = Upload(*gpu_, std::vector<float>(4, 1.0f));
  WeightView gw{wd.data(), WeightType::kF32, 0, 4, 0, 1};
  Mat gx{xd.floats(), 3, 0, 0};
  Mat gy{yd.floats(), 3, 4, 4};
  ASSERT_EQ(gpu_->MatMul(gw, gx, gy), KernelStatus::kOk);
  for (float v : Download<float>(*gpu_, yd.data(), 12)) EXPECT_EQ(v, 0.0f);
  Mat no_rows{xd.floats(), 0, 0, 0};
  Mat no_rows_y{yd.floats(), 0, 4, 4};
  EXPECT_EQ(gpu_->MatMul(gw, no_rows, no_rows_y), KernelStatus::kOk);
}

// MatMulGroup: every output bit for bit the one MatMul gives (the same kernel computes each
// row the same way in both), for groups of one type, of mixed types, and beyond the 8 products
// of one launch.
TEST_F(CudaMatMulTest, GroupEqualsSeparateProductsBitForBit) {
  std::mt19937 rng(6);
  const std::vector<std::vector<WeightType>> groups = {
      {WeightType::kQ4_K, WeightType::kQ4_K, WeightType::kQ4_K},
      {WeightType::kQ8_0, WeightType::kF16, WeightType::kQ8_0, WeightType::kQ6_K},
      std::vector<WeightType>(11, WeightType::kQ5_K),
      {WeightType::kF32, WeightType::kBF16}};
  for (const auto& types : groups) {
    for (int64_t rows : {1, 3, 8, 9, 70}) {
      SCOPED_TRACE("group of " + std::to_string(types.size()) + ", rows " + std::to_string(rows));
      const int64_t in = 512;
      const int n = static_cast<int>(types.size());
      std::vector<HostWeights> hw;
      std::vector<DeviceBuffer> wd;
      std::vector<WeightView> views;
      std::vector<DeviceBuffer> ygroup;
      std::vector<DeviceBuffer> ysingle;
      std::vector<Mat> yg;
      std::vector<int64_t> outs;
      for (int i = 0; i < n; ++i) {
        const int64_t out = 17 + 23 * i;
        outs.push_back(out);
        hw.push_back(MakeHostWeights(types[i], in, out, 1, 0.5f, rng));
        wd.push_back(Upload(*gpu_, hw.back().bytes));
        views.push_back(hw.back().View(wd.back().data()));
        ygroup.push_back(Upload(*gpu_, std::vector<float>(rows * (out + 2), kSentinel)));
        ysingle.push_back(Upload(*gpu_, std::vector<float>(rows * (out + 2), kSentinel)));
        yg.push_back({ygroup.back().floats(), rows, out, out + 2});
      }
      std::vector<float> x(static_cast<size_t>(rows * in));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x) v = normal(rng);
      DeviceBuffer xd = Upload(*gpu_, x);
      const Mat gx{xd.floats(), rows, in, in};
      ASSERT_EQ(gpu_->MatMulGroup(views.data(), n, gx, yg.data()), KernelStatus::kOk);
      for (int i = 0; i < n; ++i) {
        Mat ys{ysingle[i].floats(), rows, outs[i], outs[i] + 2};
        ASSERT_EQ(gpu_->MatMul(views[i], gx, ys), KernelStatus::kOk);
      }
      for (int i = 0; i < n; ++i) {
        const size_t count = static_cast<size_t>(rows * (outs[i] + 2));
        const std::vector<float> a = Download<float>(*gpu_, ygroup[i].data(), count);
        const std::vector<float> b = Download<float>(*gpu_, ysingle[i].data(), count);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), count * sizeof(float)), 0) << "product " << i;
      }
    }
  }
}

// GetRows decodes with the same decoders as the CPU backend: bit-identical rows; an id out of
// range (which the CPU refuses before writing anything) gives a row of NaN on the GPU.
TEST_F(CudaMatMulTest, GetRowsBitIdenticalToCpuAndNaNForBadIds) {
  std::mt19937 rng(7);
  for (WeightType type : AllWeightTypes()) {
    SCOPED_TRACE(TypeName(type));
    const int64_t in = Lengths(type).back();
    const HostWeights table = MakeHostWeights(type, in, 50, 1, 1.0f, rng);
    const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1};
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t stride = in + 3;
    DeviceBuffer td = Upload(*gpu_, table.bytes);
    DeviceBuffer idd = Upload(*gpu_, ids);
    DeviceBuffer od = Upload(*gpu_, std::vector<float>(n * stride, kSentinel));
    Mat go{od.floats(), n, in, stride};
    ASSERT_EQ(gpu_->GetRows(table.View(td.data()), static_cast<const int32_t*>(idd.data()), n, go),
              KernelStatus::kOk);
    const std::vector<float> got = Download<float>(*gpu_, od.data(), n * stride);
    std::vector<float> want(n * stride, kSentinel);
    Mat co{want.data(), n, in, stride};
    ASSERT_EQ(cpu_->GetRows(table.View(table.bytes.data()), ids.data(), n, co), KernelStatus::kOk);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);

    const std::vector<int32_t> bad = {3, 50, -1};
    DeviceBuffer badd = Upload(*gpu_, bad);
    DeviceBuffer bo = Upload(*gpu_, std::vector<float>(3 * in, 0.0f));
    Mat gbo{bo.floats(), 3, in, in};
    ASSERT_EQ(
        gpu_->GetRows(table.View(td.data()), static_cast<const int32_t*>(badd.data()), 3, gbo),
        KernelStatus::kOk);
    const std::vector<float> rows = Download<float>(*gpu_, bo.data(), 3 * in);
    for (int64_t k = 0; k < in; ++k) {
      EXPECT_EQ(rows[k], table.decoded[3 * in + k]);
      EXPECT_TRUE(std::isnan(rows[in + k]));
      EXPECT_TRUE(std::isnan(rows[2 * in + k]));
    }
  }
}

// Calls the CPU backend refuses are refused by the GPU with the same status (nothing runs, so
// host pointers stand in for device ones).
TEST_F(CudaMatMulTest, RefusesWhatTheCpuRefuses) {
  std::vector<uint8_t> wbytes(RowBytes(WeightType::kQ4_K, 256) * 4, 0);
  std::vector<float> buf(4096, 0.0f);
  const WeightView good{
      wbytes.data(), WeightType::kQ4_K, 256, 4, RowBytes(WeightType::kQ4_K, 256), 1};
  struct Bad {
    const char* what;
    WeightView w;
    Mat x;
    Mat y;
  };
  WeightView unknown = good;
  unknown.type = static_cast<WeightType>(10);  // Q2_K: no kernel
  WeightView stack = good;
  stack.count = 2;
  WeightView short_rows = good;
  short_rows.row_bytes = 100;
  WeightView odd_in = good;
  odd_in.in = 100;
  WeightView null_data = good;
  null_data.data = nullptr;
  const std::vector<Bad> bad = {
      {"x.cols != in", good, {buf.data(), 2, 255, 256}, {buf.data() + 1024, 2, 4, 4}},
      {"y.cols != out", good, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 2, 5, 5}},
      {"rows differ", good, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 3, 4, 4}},
      {"x stride < cols", good, {buf.data(), 2, 256, 200}, {buf.data() + 1024, 2, 4, 4}},
      {"y null", good, {buf.data(), 2, 256, 256}, {nullptr, 2, 4, 4}},
      {"unknown type", unknown, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 2, 4, 4}},
      {"stack", stack, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 2, 4, 4}},
      {"short rows", short_rows, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 2, 4, 4}},
      {"in not a block multiple", odd_in, {buf.data(), 2, 100, 100}, {buf.data() + 1024, 2, 4, 4}},
      {"null weights", null_data, {buf.data(), 2, 256, 256}, {buf.data() + 1024, 2, 4, 4}},
  };
  for (const Bad& b : bad) {
    Mat yc = b.y;
    Mat yg = b.y;
    const KernelStatus want = cpu_->MatMul(b.w, b.x, yc);
    EXPECT_NE(want, KernelStatus::kOk) << b.what;
    EXPECT_EQ(gpu_->MatMul(b.w, b.x, yg), want) << b.what;
    Mat ygroup[2] = {b.y, b.y};
    const WeightView wgroup[2] = {good, b.w};
    Mat ycg[2] = {b.y, b.y};
    ycg[0] = {buf.data() + 2048, b.x.rows, 4, 4};
    ygroup[0] = ycg[0];
    EXPECT_EQ(gpu_->MatMulGroup(wgroup, 2, b.x, ygroup), cpu_->MatMulGroup(wgroup, 2, b.x, ycg))
        << b.what;
  }
  Mat out{buf.data(), 2, 256, 256};
  const int32_t ids[2] = {0, 1};
  Mat out_bad{buf.data(), 3, 256, 256};
  EXPECT_EQ(gpu_->GetRows(good, ids, 2, out_bad), cpu_->GetRows(good, ids, 2, out_bad));
  EXPECT_EQ(gpu_->GetRows(unknown, ids, 2, out), cpu_->GetRows(unknown, ids, 2, out));
  EXPECT_EQ(gpu_->GetRows(good, nullptr, 2, out), cpu_->GetRows(good, nullptr, 2, out));
}

}  // namespace
}  // namespace deltaserve::kernels::gpu_test
