// deltaserve-bench-moe-trace: records the routing of a qwen35moe model (typically one written
// by deltaserve-synth --expert-skew) on a workload of conversations, as a routing trace for
// deltaserve-placement-sim (docs/benchmarks.md, "MoE expert placement").
//
//   deltaserve-bench-moe-trace -m MODEL.gguf -o OUT.trace [--conversations 16] [--tokens 2000]
//                              [--prompt-tokens 64] [--topics 8] [--parallel 8] [--seed 1]
//                              [--threads N] [--summary]
//
// Each conversation has one topic (drawn from the seed): its prompt is --prompt-tokens token ids
// from that topic's range of the vocabulary (deltaserve-synth's topics: equal id ranges), then
// --tokens tokens are sampled at temperature 1 from the model's own logits. Conversations run
// --parallel at a time as one batch (each a sequence of its own, so the routing of a token
// depends only on its conversation), and the trace is written one user's workload long:
// conversation after conversation, a prefill record for its prompt then one record per decoded
// token. --summary prints, per layer, the share of routes that went to the 5 % and 25 % most
// used experts (over the whole trace and within conversations).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/routing_trace.h"
#include "common/snapshot_key.h"
#include "kernels/backend.h"
#include "worker/engine/qwen35.h"

namespace deltaserve::worker {
namespace {

struct Options {
  std::string model;
  std::string out;
  int64_t conversations = 16;
  int64_t tokens = 2000;
  int64_t prompt_tokens = 64;
  int64_t topics = 8;
  int64_t parallel = 8;
  int64_t seed = 1;
  int threads = 0;
  bool summary = false;
};

struct Conversation {
  int64_t topic = 0;
  int64_t on_topic = 0;  // decoded tokens in the conversation's topic
  std::vector<int32_t> prompt;
  std::vector<int32_t> prompt_ids;               // [n_layer][prompt][k], in trace layout
  std::vector<std::vector<int32_t>> decode_ids;  // per decoded token: [n_layer][1][k]
};

int Fail(const std::string& why) {
  std::cerr << "deltaserve-bench-moe-trace: " << why << "\n";
  return 1;
}

// Softmax sampling at temperature 1 over the first n_valid logits.
int32_t SampleToken(const float* logits, int64_t n, std::mt19937_64& rng) {
  const float m = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - m));
  double u = std::uniform_real_distribution<double>(0, sum)(rng);
  for (int64_t i = 0; i < n; ++i) {
    u -= std::exp(static_cast<double>(logits[i] - m));
    if (u <= 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(n - 1);
}

// Share of routes on the most used `fraction` of each layer's experts, averaged over layers.
double TopShare(const std::vector<std::vector<int64_t>>& counts, double fraction) {
  double total = 0;
  for (const auto& layer : counts) {
    std::vector<int64_t> c = layer;
    std::sort(c.rbegin(), c.rend());
    const auto n_top = static_cast<size_t>(std::max(1.0, std::round(fraction * c.size())));
    const double all = static_cast<double>(std::accumulate(c.begin(), c.end(), int64_t{0}));
    total +=
        all > 0
            ? static_cast<double>(std::accumulate(c.begin(), c.begin() + n_top, int64_t{0})) / all
            : 0;
  }
  return total / static_cast<double>(counts.size());
}

int Main(int argc, char** argv) {
  Options o;
  bool help = false;
  const std::vector<common::Flag> flags = {
      common::SwitchFlag("--help", &help).Alias("-h").StopsParsing(),
      common::StringFlag("--model", &o.model).Alias("-m").NonEmpty(),
      common::StringFlag("--output", &o.out).Alias("-o").NonEmpty(),
      common::IntegerFlag("--conversations", &o.conversations, 1, 100000).NonEmpty(),
      common::IntegerFlag("--tokens", &o.tokens, 1, 1 << 20).NonEmpty(),
      common::IntegerFlag("--prompt-tokens", &o.prompt_tokens, 1, 1 << 16).NonEmpty(),
      common::IntegerFlag("--topics", &o.topics, 1, 64).NonEmpty(),
      common::IntegerFlag("--parallel", &o.parallel, 1, 256).NonEmpty(),
      common::IntegerFlag("--seed", &o.seed, 0).NonEmpty(),
      common::IntegerFlag("--threads", &o.threads, 0, 256).NonEmpty(),
      common::SwitchFlag("--summary", &o.summary),
  };
  if (std::string err = common::ParseFlags(flags, argc, argv); !err.empty()) return Fail(err);
  if (help || o.model.empty() || o.out.empty()) {
    std::cerr << "usage: deltaserve-bench-moe-trace -m MODEL.gguf -o OUT.trace [--conversations N]"
                 " [--tokens N]\n  [--prompt-tokens N] [--topics N] [--parallel N] [--seed N]"
                 " [--threads N] [--summary]\n";
    return help ? 0 : 2;
  }
  std::unique_ptr<kernels::Backend> backend = kernels::MakeCpuBackend(o.threads);
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(o.model);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  const std::array<uint8_t, 32> fingerprint = common::ModelFingerprint(**file);
  std::string name = o.model.substr(o.model.find_last_of('/') + 1);
  absl::StatusOr<std::unique_ptr<Qwen35Model>> model =
      Qwen35Model::Load(std::move(*file), *backend);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  Qwen35Model& m = **model;
  const common::Qwen35HParams& hp = m.hparams();
  if (!hp.is_moe) return Fail("not a MoE model");
  const int64_t n_layer = hp.n_layer, k = hp.n_expert_used, n_vocab = m.n_vocab();

  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  std::vector<Conversation> convs(static_cast<size_t>(o.conversations));
  for (Conversation& c : convs) {
    c.topic = static_cast<int64_t>(rng() % static_cast<uint64_t>(o.topics));
    const int64_t lo = (c.topic * n_vocab + o.topics - 1) / o.topics;
    const int64_t hi = ((c.topic + 1) * n_vocab + o.topics - 1) / o.topics;
    for (int64_t i = 0; i < o.prompt_tokens; ++i) {
      c.prompt.push_back(static_cast<int32_t>(lo + static_cast<int64_t>(rng() % (hi - lo))));
    }
  }

  // The observer hands [n_layer][T][k] ids of the pass; `route_to` says which conversation each
  // of the T tokens belongs to and whether it is prompt or decode.
  struct Slot {
    size_t conv;
    bool prompt;
    int64_t n;  // tokens of this entry in the pass
  };
  std::vector<Slot> slots;
  m.set_routing_observer([&](absl::Span<const int32_t> ids, int64_t n_tokens, int64_t kk) {
    int64_t token = 0;
    for (const Slot& s : slots) {
      Conversation& c = convs[s.conv];
      std::vector<int32_t>* dst = &c.prompt_ids;
      if (!s.prompt) {
        c.decode_ids.emplace_back();
        dst = &c.decode_ids.back();
      }
      dst->resize(static_cast<size_t>(n_layer * s.n * kk));
      for (int64_t l = 0; l < n_layer; ++l) {
        std::copy_n(ids.begin() + (l * n_tokens + token) * kk, s.n * kk,
                    dst->begin() + l * s.n * kk);
      }
      token += s.n;
    }
  });

  std::vector<float> logits;
  for (size_t first = 0; first < convs.size(); first += static_cast<size_t>(o.parallel)) {
    const size_t last = std::min(convs.size(), first + static_cast<size_t>(o.parallel));
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (size_t i = first; i < last; ++i) {
      absl::StatusOr<std::unique_ptr<SequenceState>> s =
          m.NewSequence(o.prompt_tokens + o.tokens + 1);
      if (!s.ok()) return Fail(std::string(s.status().message()));
      seqs.push_back(std::move(*s));
    }
    std::vector<int32_t> next(last - first);
    // Prompts one conversation at a time (each its own prefill record).
    for (size_t i = first; i < last; ++i) {
      slots = {{i, true, o.prompt_tokens}};
      BatchEntry e{seqs[i - first].get(), convs[i].prompt};
      if (absl::Status s = m.Forward({&e, 1}, logits); !s.ok()) {
        return Fail(std::string(s.message()));
      }
      next[i - first] = SampleToken(logits.data(), n_vocab, rng);
    }
    for (int64_t t = 0; t < o.tokens; ++t) {
      std::vector<BatchEntry> batch;
      slots.clear();
      for (size_t i = first; i < last; ++i) {
        batch.push_back({seqs[i - first].get(), absl::MakeConstSpan(&next[i - first], 1)});
        slots.push_back({i, false, 1});
      }
      if (absl::Status s = m.Forward(batch, logits); !s.ok()) {
        return Fail(std::string(s.message()));
      }
      for (size_t i = first; i < last; ++i) {
        next[i - first] = SampleToken(logits.data() + (i - first) * n_vocab, n_vocab, rng);
        convs[i].on_topic += next[i - first] * o.topics / n_vocab == convs[i].topic ? 1 : 0;
      }
      if (t % 200 == 0) {
        std::cerr << absl::StrFormat("conversations %d-%d: %d/%d tokens\n", first, last - 1, t,
                                     o.tokens);
      }
    }
  }

  common::RoutingTraceHeader h{n_layer, hp.n_expert, k, fingerprint, name};
  absl::StatusOr<std::unique_ptr<common::RoutingTraceWriter>> w =
      common::RoutingTraceWriter::Create(o.out, h);
  if (!w.ok()) return Fail(std::string(w.status().message()));
  std::vector<std::vector<int64_t>> all(n_layer, std::vector<int64_t>(hp.n_expert, 0));
  std::vector<double> within5(n_layer, 0), within25(n_layer, 0);
  for (const Conversation& c : convs) {
    if (absl::Status s = (*w)->Append(c.prompt_ids, o.prompt_tokens, k); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    std::vector<std::vector<int64_t>> mine(n_layer, std::vector<int64_t>(hp.n_expert, 0));
    for (const std::vector<int32_t>& ids : c.decode_ids) {
      if (absl::Status s = (*w)->Append(ids, 1, k); !s.ok()) return Fail(std::string(s.message()));
      for (int64_t l = 0; l < n_layer; ++l) {
        for (int64_t j = 0; j < k; ++j) {
          ++all[l][ids[l * k + j]];
          ++mine[l][ids[l * k + j]];
        }
      }
    }
    for (int64_t l = 0; l < n_layer; ++l) {
      within5[l] += TopShare({mine[l]}, 0.05) / static_cast<double>(convs.size());
      within25[l] += TopShare({mine[l]}, 0.25) / static_cast<double>(convs.size());
    }
  }
  if (absl::Status s = (*w)->Close(); !s.ok()) return Fail(std::string(s.message()));
  int64_t on_topic = 0;
  for (const Conversation& c : convs) on_topic += c.on_topic;
  std::cerr << absl::StrFormat(
      "wrote %s: %d conversations, %d decode steps, %.1f%% of sampled tokens on their "
      "conversation's topic\n",
      o.out, convs.size(), (*w)->steps_written() - convs.size(),
      100.0 * static_cast<double>(on_topic) / static_cast<double>(o.tokens * o.conversations));
  if (o.summary) {
    std::cout << absl::StrFormat(
        "routes on the top 5%% / 25%% of experts per layer: whole trace %.3f / %.3f, within a "
        "conversation %.3f / %.3f\n",
        TopShare(all, 0.05), TopShare(all, 0.25),
        std::accumulate(within5.begin(), within5.end(), 0.0) / static_cast<double>(n_layer),
        std::accumulate(within25.begin(), within25.end(), 0.0) / static_cast<double>(n_layer));
    for (int64_t l = 0; l < n_layer; ++l) {
      std::cout << absl::StrFormat(
          "layer %2d: whole trace top 5%% %.3f top 25%% %.3f; within a conversation %.3f %.3f\n", l,
          TopShare({all[l]}, 0.05), TopShare({all[l]}, 0.25), within5[l], within25[l]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace deltaserve::worker

int main(int argc, char** argv) { return deltaserve::worker::Main(argc, argv); }
