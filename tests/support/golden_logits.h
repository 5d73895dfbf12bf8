// The golden models' llama.cpp reference (../shared/golden/<name>.json + its .logits.bin) and
// the engine runs compared against it, shared by the CPU golden test
// (tests/golden/engine_golden_test.cc) and the GPU one (tests/gpu/cuda_engine_golden_test.cc).
// Header-only: each test links the engine and nlohmann already.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::testing {

struct GoldenSequence {
  std::string name;
  std::vector<int32_t> tokens;
  std::vector<int> positions;  // the rows recorded, in order
  int64_t offset_floats = 0;   // where they start in GoldenModel::logits
};

struct GoldenGreedy {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::vector<std::vector<std::pair<int, float>>> step_top;  // top-5 before each choice
};

struct GoldenModel {
  int64_t n_vocab = 0;
  std::vector<GoldenSequence> sequences;
  std::vector<GoldenGreedy> greedy;
  std::vector<float> logits;  // the whole .logits.bin
};

// Reads <name>.json and its logits file; a logits file of the wrong size is a test failure and
// NaN rows (every comparison fails, nothing reads past the end).
inline GoldenModel LoadGolden(const std::string& name) {
  GoldenModel g;
  std::ifstream in(GoldenPath(name + ".json"));
  const nlohmann::json doc = nlohmann::json::parse(in);
  g.n_vocab = doc.at("n_vocab");
  for (const auto& s : doc.at("sequences")) {
    g.sequences.push_back({s.at("name"), s.at("tokens").get<std::vector<int32_t>>(),
                           s.at("positions").get<std::vector<int>>(), s.at("offset_floats")});
  }
  for (const auto& gr : doc.at("greedy")) {
    GoldenGreedy gg;
    gg.prompt = gr.at("prompt_tokens").get<std::vector<int32_t>>();
    gg.generated = gr.at("generated_tokens").get<std::vector<int32_t>>();
    for (const auto& step : gr.at("steps")) {
      std::vector<std::pair<int, float>> top;
      for (const auto& t : step.at("top")) top.emplace_back(t[0].get<int>(), t[1].get<float>());
      gg.step_top.push_back(std::move(top));
    }
    g.greedy.push_back(std::move(gg));
  }
  const std::string bin_name = doc.at("logits_file").get<std::string>();
  std::ifstream bin(GoldenPath(bin_name), std::ios::binary);
  bin.seekg(0, std::ios::end);
  const std::streamoff bytes = bin ? static_cast<std::streamoff>(bin.tellg()) : -1;
  // The file must hold exactly the rows the JSON describes: [rows of every sequence][n_vocab] f32.
  size_t want_floats = 0;
  for (const GoldenSequence& s : g.sequences) {
    want_floats = std::max(want_floats, static_cast<size_t>(s.offset_floats) +
                                            s.positions.size() * static_cast<size_t>(g.n_vocab));
  }
  if (bytes != static_cast<std::streamoff>(want_floats * sizeof(float))) {
    ADD_FAILURE() << bin_name << " has " << bytes << " bytes; " << name << ".json describes "
                  << want_floats * sizeof(float);
    g.logits.assign(want_floats, std::nanf(""));
    return g;
  }
  g.logits.resize(want_floats);
  bin.seekg(0);
  bin.read(reinterpret_cast<char*>(g.logits.data()),
           static_cast<std::streamsize>(g.logits.size() * sizeof(float)));
  if (bin.gcount() != static_cast<std::streamsize>(want_floats * sizeof(float))) {
    ADD_FAILURE() << "short read of " << bin_name;
  }
  return g;
}

inline int ArgmaxRow(const float* row, int64_t n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return m;
}

// Logits of every token of `tokens`, fed as one sequence in chunks of `chunk` tokens.
inline std::vector<float> RunChunked(worker::Qwen35Model& model, const std::vector<int32_t>& tokens,
                                     size_t chunk) {
  auto seq = model.NewSequence(static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(seq.ok()) << seq.status();
  std::vector<float> all, part;
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    const worker::BatchEntry e{seq->get(), absl::Span<const int32_t>(tokens.data() + i, n), true};
    absl::Status s = model.Forward({&e, 1}, part);
    EXPECT_TRUE(s.ok()) << s;
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace deltaserve::testing
