// Helpers shared by the CPU op tests: owned f32 matrices that hand out Mat views (optionally
// with padded rows, so that every op is also exercised on strided views), seeded random fills,
// and an element-wise closeness check against double-precision references.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"

namespace deltaserve::kernels::testing {

// A [rows][cols] f32 matrix whose rows are `stride` floats apart (stride >= cols; the padding
// holds a sentinel so that writes past `cols` are caught by PaddingIntact()).
class HostMat {
 public:
  static constexpr float kSentinel = -12345.0f;

  HostMat(int64_t rows, int64_t cols, int64_t pad = 0)
      : rows_(rows),
        cols_(cols),
        stride_(cols + pad),
        data_(static_cast<size_t>(rows * (cols + pad)), kSentinel) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) at(r, c) = 0.0f;
    }
  }

  Mat mat() { return {data_.data(), rows_, cols_, stride_}; }
  float& at(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * stride_ + c)]; }
  float at(int64_t r, int64_t c) const { return data_[static_cast<size_t>(r * stride_ + c)]; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  // True when no op wrote into the row padding.
  bool PaddingIntact() const {
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t c = cols_; c < stride_; ++c) {
        if (data_[static_cast<size_t>(r * stride_ + c)] != kSentinel) return false;
      }
    }
    return true;
  }

 private:
  int64_t rows_, cols_, stride_;
  std::vector<float> data_;
};

// Deterministic random numbers for the tests (fixed seeds: failures reproduce).
class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  float Normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(gen_); }
  float Uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  void FillNormal(HostMat& m, float sigma = 1.0f) {
    for (int64_t r = 0; r < m.rows(); ++r) {
      for (int64_t c = 0; c < m.cols(); ++c) m.at(r, c) = Normal(sigma);
    }
  }
  void FillUniform(HostMat& m, float lo, float hi) {
    for (int64_t r = 0; r < m.rows(); ++r) {
      for (int64_t c = 0; c < m.cols(); ++c) m.at(r, c) = Uniform(lo, hi);
    }
  }
  std::vector<float> NormalVector(int64_t n, float sigma = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = Normal(sigma);
    return v;
  }

 private:
  std::mt19937 gen_;
};

// Expects |actual - expected| <= abs_tol + rel_tol * |expected| for every element of a
// [rows][cols] result; reports the first few offenders and the worst error.
inline void ExpectClose(const HostMat& actual, const std::vector<double>& expected, double abs_tol,
                        double rel_tol, const std::string& what) {
  ASSERT_EQ(expected.size(), static_cast<size_t>(actual.rows() * actual.cols())) << what;
  int failures = 0;
  double worst = 0.0;
  for (int64_t r = 0; r < actual.rows(); ++r) {
    for (int64_t c = 0; c < actual.cols(); ++c) {
      const double e = expected[static_cast<size_t>(r * actual.cols() + c)];
      const double a = actual.at(r, c);
      const double err = std::fabs(a - e);
      worst = std::max(worst, err);
      if (!(err <= abs_tol + rel_tol * std::fabs(e)) && ++failures <= 5) {
        ADD_FAILURE() << what << ": [" << r << "][" << c << "] = " << a << ", expected " << e;
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": worst abs error " << worst;
}

}  // namespace deltaserve::kernels::testing
