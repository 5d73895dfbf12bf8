// deltaserve-worker as a real process on 127.0.0.1 (a free port chosen by the worker) with a
// golden model, driven through real gRPC (label integration):
// - GetWorkerInfo describes the model (tokenizer equal to the GGUF's, memory plan, load);
// - Generate streams token events then one final event whose usage counts the tokens streamed,
//   and greedy tokens equal the engine's own greedy tokens for the prompt (the scheduler test
//   compares against the engine run alone; here the same reference through the process);
// - a stop string ends the stream before it (OpenAI semantics), with finish reason STOP;
// - a client cancel frees the sequence's pages at once (the load in GetWorkerInfo);
// - errors: unknown model NOT_FOUND, bad sampling INVALID_ARGUMENT, too long OUT_OF_RANGE;
// - SIGTERM drains: the running stream still completes, then the process exits 0;
// - bad flags (the --redis* ones included), an unreadable model and a port in use exit non-zero
//   with a message;
// - /metrics answers with the counters;
// - n > 1 choices: events tagged by choice, one final each, the prompt computed once (the
//   worker's metrics), each choice equal to a one-choice call with seed + i, a stop string
//   ending one choice only, bad n refused, a cancel freeing every choice.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "deltaserve/v1/worker.grpc.pb.h"
#include "common/gguf_file.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_features.h"
#include "tests/support/child_process.h"
#include "tests/support/http_get.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_paths.h"
#include "worker/engine/qwen35.h"
#include "worker/sampling/sampler.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;
using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::HttpGet;
using std::chrono::seconds;

struct Worker {
  std::unique_ptr<ChildProcess> proc;
  std::string address;
  int metrics_port = -1;
  std::unique_ptr<pb::Worker::Stub> stub;
};

// `default_parallel`: without the --parallel 2 below (the worker's own default, auto).
Worker StartWorker(std::vector<std::string> extra = {}, bool default_parallel = false) {
  Worker w;
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model",
                                   "tiny=" + GoldenPath("tiny-dense-f32.gguf"),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--threads",
                                   "2",
                                   "--ctx",
                                   "256",
                                   "--parallel",
                                   "2",
                                   "--ram",
                                   "2GiB",
                                   "--cache-type-k",
                                   "f32",
                                   "--cache-type-v",
                                   "f32",
                                   "--page-tokens",
                                   "16",
                                   "--metrics-port",
                                   "0"};
  if (default_parallel) {
    auto at = std::find(argv.begin(), argv.end(), "--parallel");
    argv.erase(at, at + 2);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  w.proc = std::make_unique<ChildProcess>(argv);
  EXPECT_TRUE(w.proc->started());
  std::optional<std::string> line = w.proc->WaitForLine("listening on ", seconds(60));
  EXPECT_TRUE(line.has_value()) << w.proc->err();
  if (!line) return w;
  w.address = line->substr(line->find("listening on ") + 13);
  if (auto m = w.proc->WaitForLine("metrics on 127.0.0.1:", seconds(5))) {
    const std::string s = m->substr(m->find("127.0.0.1:") + 10);
    w.metrics_port = std::stoi(s.substr(0, s.find('/')));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  w.stub = pb::Worker::NewStub(
      grpc::CreateCustomChannel(w.address, grpc::InsecureChannelCredentials(), args));
  return w;
}

// n ordinary token ids (below 1510; the tiny vocabulary has 2048), all different.
std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(10 + (i * 37) % 1500);
  return p;
}

struct Streamed {
  std::vector<int32_t> tokens;
  std::string text;
  int token_events = 0;
  std::optional<pb::FinalEvent> final_event;
  grpc::Status status;
};

Streamed RunGenerate(pb::Worker::Stub& stub, const pb::GenerateRequest& req,
                     grpc::ClientContext* ctx = nullptr) {
  grpc::ClientContext local;
  if (ctx == nullptr) ctx = &local;
  ctx->AddMetadata("x-request-id", "test-" + std::to_string(req.prompt_token_ids_size()));
  Streamed out;
  auto reader = stub.Generate(ctx, req);
  pb::GenerateEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_token_event()) {
      ++out.token_events;
      for (int32_t t : ev.token_event().token_ids()) out.tokens.push_back(t);
      out.text += ev.token_event().text();
    } else if (ev.has_final_event()) {
      EXPECT_FALSE(out.final_event.has_value()) << "two final events";
      out.final_event = ev.final_event();
    }
  }
  out.status = reader->Finish();
  return out;
}

pb::GenerateRequest Greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  pb::GenerateRequest r;
  r.set_model("tiny");
  for (int32_t t : prompt) r.add_prompt_token_ids(t);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

std::vector<int32_t> EngineGreedy(const std::vector<int32_t>& prompt, int n) {
  auto backend = kernels::MakeCpuBackend(1);
  auto model = Qwen35Model::Load(GoldenPath("tiny-dense-f32.gguf"), *backend);
  EXPECT_TRUE(model.ok());
  auto seq = (*model)->NewSequence(static_cast<int64_t>(prompt.size()) + n);
  std::vector<int32_t> out, feed = prompt;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    BatchEntry e{seq->get(), feed, false};
    EXPECT_TRUE((*model)->Forward({&e, 1}, logits).ok());
    out.push_back(Argmax(logits, static_cast<int32_t>((*model)->n_vocab())));
    feed = {out.back()};
  }
  return out;
}

TEST(DeltaserveWorkerTest, InfoGenerateStopCancelErrorsMetrics) {
  Worker w = StartWorker();
  ASSERT_NE(w.stub, nullptr);

  // GetWorkerInfo with the tokenizer.
  pb::WorkerInfoRequest info_req;
  info_req.set_include_tokenizer(true);
  pb::WorkerInfo info;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(w.stub->GetWorkerInfo(&ctx, info_req, &info).ok());
  }
  ASSERT_EQ(info.models_size(), 1);
  const pb::ModelInfo& m = info.models(0);
  EXPECT_EQ(m.name(), "tiny");
  EXPECT_EQ(m.context_length(), 256);
  EXPECT_EQ(m.tokenizer().tokens_size(), m.n_vocab());
  EXPECT_EQ(m.tokenizer().model(), "gpt2");
  {
    // Every token text and merge equals the GGUF's own arrays, read here independently.
    auto file = common::GgufFile::Open(GoldenPath("tiny-dense-f32.gguf"));
    ASSERT_TRUE(file.ok()) << file.status();
    auto tokens = (*file)->GetArray("tokenizer.ggml.tokens");
    auto merges = (*file)->GetArray("tokenizer.ggml.merges");
    ASSERT_TRUE(tokens.ok() && merges.ok());
    ASSERT_EQ(static_cast<uint64_t>(m.tokenizer().tokens_size()), (*tokens)->ArraySize());
    for (int i = 0; i < m.tokenizer().tokens_size(); ++i) {
      ASSERT_EQ(m.tokenizer().tokens(i), *(*tokens)->ArrayString(i)) << "token " << i;
    }
    ASSERT_EQ(static_cast<uint64_t>(m.tokenizer().merges_size()), (*merges)->ArraySize());
    for (int i = 0; i < m.tokenizer().merges_size(); ++i) {
      ASSERT_EQ(m.tokenizer().merges(i), *(*merges)->ArrayString(i)) << "merge " << i;
    }
  }
  EXPECT_FALSE(m.tokenizer_digest().empty());
  EXPECT_GT(m.memory_plan().kv_bytes_per_token(), 0u);
  EXPECT_EQ(m.load().free_kv_pages(), m.load().total_kv_pages());

  // Greedy generation equals the engine's greedy loop; usage counts what was streamed.
  const std::vector<int32_t> prompt = Prompt(20);
  Streamed g = RunGenerate(*w.stub, Greedy(prompt, 24));
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  ASSERT_TRUE(g.final_event.has_value());
  EXPECT_EQ(g.final_event->finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(g.final_event->usage().prompt_tokens(), 20);
  EXPECT_EQ(g.final_event->usage().completion_tokens(), 24);
  EXPECT_EQ(g.tokens, EngineGreedy(prompt, 24));
  EXPECT_GT(g.token_events, 1);  // streamed, not one batch at the end

  // A stop string taken from the middle of that text ends the stream before it (24 greedy
  // tokens of this model are always more than 8 bytes: the check must not be skipped).
  ASSERT_GT(g.text.size(), 8u) << g.text;
  {
    const std::string stop = g.text.substr(g.text.size() / 2, 3);
    pb::GenerateRequest r = Greedy(prompt, 24);
    r.mutable_sampling()->add_stop_strings(stop);
    Streamed s = RunGenerate(*w.stub, r);
    ASSERT_TRUE(s.final_event.has_value());
    EXPECT_EQ(s.final_event->finish_reason(), pb::FINISH_REASON_STOP);
    EXPECT_EQ(s.final_event->matched_stop_string(), stop);
    EXPECT_EQ(s.text, g.text.substr(0, g.text.find(stop)));
  }

  // Client cancel: the pages come back.
  {
    grpc::ClientContext ctx;
    auto reader = w.stub->Generate(&ctx, Greedy(Prompt(40), 200));
    pb::GenerateEvent ev;
    ASSERT_TRUE(reader->Read(&ev));  // generation is under way
    ctx.TryCancel();
    while (reader->Read(&ev)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  bool freed = false;
  for (int i = 0; i < 100 && !freed; ++i) {
    grpc::ClientContext ctx;
    pb::WorkerInfo now;
    ASSERT_TRUE(w.stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &now).ok());
    freed = now.models(0).load().free_kv_pages() == now.models(0).load().total_kv_pages() &&
            now.models(0).load().running_sequences() == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed);

  // Errors, with the gRPC codes the router maps to HTTP statuses.
  pb::GenerateRequest unknown = Greedy(prompt, 4);
  unknown.set_model("nope");
  EXPECT_EQ(RunGenerate(*w.stub, unknown).status.error_code(), grpc::StatusCode::NOT_FOUND);
  pb::GenerateRequest bad = Greedy(prompt, 4);
  bad.mutable_sampling()->set_top_p(-1.0f);
  EXPECT_EQ(RunGenerate(*w.stub, bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const Streamed too_long = RunGenerate(*w.stub, Greedy(Prompt(250), 10));
  EXPECT_EQ(too_long.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_NE(too_long.status.error_message().find("256"), std::string::npos);

  // Reasoning budget: a prompt ending in an open <think> (2024 in the golden vocabulary) and a
  // budget of 0: the worker writes `</think>` and the blank line first (as the vocabulary
  // tokenizes them), then the model continues as a greedy run of the prompt plus those tokens.
  {
    std::vector<int32_t> think = Prompt(12);
    think.push_back(2024);
    pb::GenerateRequest r = Greedy(think, 6);
    r.set_reasoning_budget(0);
    const Streamed s = RunGenerate(*w.stub, r);
    ASSERT_TRUE(s.status.ok()) << s.status.error_message();
    EXPECT_EQ(s.text.substr(0, 10), "</think>\n\n") << s.text;
    ASSERT_GE(s.tokens.size(), 3u);
    std::vector<int32_t> context = think;
    context.insert(context.end(), s.tokens.begin(), s.tokens.begin() + 3);
    const std::vector<int32_t> rest = EngineGreedy(context, 3);
    EXPECT_EQ(std::vector<int32_t>(s.tokens.begin() + 3, s.tokens.end()), rest);
    ASSERT_TRUE(s.final_event.has_value());
    EXPECT_EQ(s.final_event->usage().reasoning_tokens(), 0);  // the block closed at once
    // A budget of 4: the usage counts the tokens before the `</think>` (2025) the stream
    // carries, the markers and the answer after them not included.
    pb::GenerateRequest four = Greedy(think, 9);
    four.set_reasoning_budget(4);
    const Streamed t = RunGenerate(*w.stub, four);
    ASSERT_TRUE(t.status.ok()) << t.status.error_message();
    const auto close = std::find(t.tokens.begin(), t.tokens.end(), 2025);
    ASSERT_NE(close, t.tokens.end());
    ASSERT_TRUE(t.final_event.has_value());
    EXPECT_EQ(t.final_event->usage().reasoning_tokens(), close - t.tokens.begin());
    EXPECT_EQ(t.final_event->usage().reasoning_tokens(), 4);
    EXPECT_EQ(t.final_event->usage().completion_tokens(), 9);
    // No block open and none generated: nothing is reasoning.
    const Streamed plain = RunGenerate(*w.stub, Greedy(Prompt(12), 6));
    ASSERT_TRUE(plain.final_event.has_value());
    ASSERT_EQ(std::count(plain.tokens.begin(), plain.tokens.end(), 2025), 0);
    EXPECT_EQ(plain.final_event->usage().reasoning_tokens(), 0);
    pb::GenerateRequest negative = Greedy(think, 6);
    negative.set_reasoning_budget(-1);
    EXPECT_EQ(RunGenerate(*w.stub, negative).status.error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  // Metrics.
  ASSERT_GE(w.metrics_port, 0);
  const std::string metrics = HttpGet(w.metrics_port, "/metrics");
  EXPECT_NE(metrics.find("200 OK"), std::string::npos);
  EXPECT_NE(metrics.find("deltaserve_worker_requests_total"), std::string::npos);
  EXPECT_NE(metrics.find("deltaserve_model_free_kv_pages{model=\"tiny\"}"), std::string::npos);
  EXPECT_NE(HttpGet(w.metrics_port, "/other").find("404"), std::string::npos);

  // The request id reached the worker's log.
  EXPECT_NE(w.proc->err().find("request id=test-20 model=tiny"), std::string::npos);
}

TEST(DeltaserveWorkerTest, SigtermDrainsRunningStreams) {
  Worker w = StartWorker();
  ASSERT_NE(w.stub, nullptr);
  grpc::ClientContext ctx;
  auto reader = w.stub->Generate(&ctx, Greedy(Prompt(30), 120));
  pb::GenerateEvent ev;
  ASSERT_TRUE(reader->Read(&ev));
  w.proc->Signal(SIGTERM);
  std::optional<pb::FinalEvent> final_event;
  int completion = 0;
  for (bool more = true; more;) {
    if (ev.has_token_event()) completion += ev.token_event().token_ids_size();
    if (ev.has_final_event()) final_event = ev.final_event();
    more = reader->Read(&ev);
  }
  EXPECT_TRUE(reader->Finish().ok());
  ASSERT_TRUE(final_event.has_value());
  EXPECT_EQ(final_event->finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(completion, 120);
  EXPECT_EQ(w.proc->Wait(seconds(30)), 0) << w.proc->err();
  EXPECT_NE(w.proc->err().find("draining"), std::string::npos);
}

// A metric's value for model `model` in a /metrics answer; -1 when absent.
double MetricValue(const std::string& metrics, const std::string& name, const std::string& model) {
  const std::string key = name + "{model=\"" + model + "\"} ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + key.size()));
}

// One call's events split by choice_index.
struct Choices {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> text;
  std::vector<std::optional<pb::FinalEvent>> finals;
  int finals_seen = 0;
  grpc::Status status;
};

Choices RunChoices(pb::Worker::Stub& stub, const pb::GenerateRequest& req, int n) {
  grpc::ClientContext ctx;
  Choices out;
  out.tokens.resize(n);
  out.text.resize(n);
  out.finals.resize(n);
  auto reader = stub.Generate(&ctx, req);
  pb::GenerateEvent ev;
  while (reader->Read(&ev)) {
    const int c = ev.has_token_event() ? ev.token_event().choice_index()
                                       : ev.final_event().choice_index();
    EXPECT_TRUE(c >= 0 && c < n) << c;
    if (c < 0 || c >= n) continue;
    EXPECT_FALSE(out.finals[c].has_value()) << "an event of choice " << c << " after its final";
    if (ev.has_token_event()) {
      for (int32_t t : ev.token_event().token_ids()) out.tokens[c].push_back(t);
      out.text[c] += ev.token_event().text();
    } else if (ev.has_final_event()) {
      out.finals[c] = ev.final_event();
      ++out.finals_seen;
    }
  }
  out.status = reader->Finish();
  return out;
}

// A worker started without --parallel: auto, which on a CPU with memory to spare is the cap
// of 4, printed at start; four requests at once run together (the engine steps of the four
// are about those of one, not four times as many) and n = 4 is served, not refused.
TEST(DeltaserveWorkerTest, DefaultParallelIsAutoAndServesFourAtOnce) {
  Worker w = StartWorker({}, /*default_parallel=*/true);
  ASSERT_NE(w.stub, nullptr);
  ASSERT_GE(w.metrics_port, 0);
  EXPECT_NE(w.proc->err().find("tiny: --parallel auto: 4 sequences at once"), std::string::npos)
      << w.proc->err();
  {
    grpc::ClientContext ctx;
    pb::WorkerInfo info;
    ASSERT_TRUE(w.stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &info).ok());
    ASSERT_EQ(info.models_size(), 1);
    EXPECT_EQ(info.models(0).max_parallel_sequences(), 4);
  }
  constexpr int kTokens = 64;
  const char* steps = "deltaserve_model_steps_total";
  const double before = MetricValue(HttpGet(w.metrics_port, "/metrics"), steps, "tiny");
  std::vector<Streamed> out(4);
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] { out[i] = RunGenerate(*w.stub, Greedy(Prompt(20 + i), kTokens)); });
    }
    for (std::thread& t : threads) t.join();
  }
  const double after = MetricValue(HttpGet(w.metrics_port, "/metrics"), steps, "tiny");
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(out[i].status.ok()) << i << ": " << out[i].status.error_message();
    EXPECT_EQ(out[i].tokens.size(), static_cast<size_t>(kTokens)) << i;
  }
  // One at a time they would take at least 4 x kTokens steps.
  EXPECT_LT(after - before, 2.0 * kTokens + 8) << "the four requests did not run together";
  pb::GenerateRequest with_n = Greedy(Prompt(30), 8);
  with_n.mutable_sampling()->set_temperature(1.0f);
  with_n.set_n(4);
  const Choices c = RunChoices(*w.stub, with_n, 4);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finals_seen, 4);
  // Beyond what the worker could ever run at once: refused with the number.
  pb::GenerateRequest too_many = with_n;
  too_many.set_n(5);
  const Streamed s = RunGenerate(*w.stub, too_many);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.status.error_message().find("4"), std::string::npos) << s.status.error_message();
}

TEST(DeltaserveWorkerTest, ChoicesForkAfterOnePrefill) {
  // tiny-dense-q8_0 decodes a batch of up to 8 rows with the same bits as one row on AVX-512
  // VNNI (scheduler_fork_test), so each choice equals a one-choice call with its seed there.
  Worker w = StartWorker({"--parallel", "4", "--model", "q8=" + GoldenPath("tiny-dense-q8_0.gguf")});
  ASSERT_NE(w.stub, nullptr);
  ASSERT_GE(w.metrics_port, 0);
  constexpr int kN = 4;
  pb::GenerateRequest req = Greedy(Prompt(30), 16);
  req.set_model("q8");
  req.mutable_sampling()->set_temperature(1.0f);
  req.mutable_sampling()->set_seed(42);
  const std::string before = HttpGet(w.metrics_port, "/metrics");
  pb::GenerateRequest with_n = req;
  with_n.set_n(kN);
  const Choices c = RunChoices(*w.stub, with_n, kN);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finals_seen, kN);
  const std::string after = HttpGet(w.metrics_port, "/metrics");
  // The prompt was computed once and three choices were forked from it.
  const char* computed = "deltaserve_model_prompt_tokens_computed_total";
  const char* forked = "deltaserve_model_forked_sequences_total";
  EXPECT_EQ(MetricValue(after, computed, "q8") - MetricValue(before, computed, "q8"), 30);
  EXPECT_EQ(MetricValue(after, forked, "q8") - MetricValue(before, forked, "q8"), kN - 1);
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(c.finals[i].has_value()) << i;
    EXPECT_EQ(c.finals[i]->finish_reason(), pb::FINISH_REASON_LENGTH);
    EXPECT_EQ(c.finals[i]->seed(), 42u + i);
    EXPECT_EQ(c.finals[i]->usage().prompt_tokens(), 30);
    EXPECT_EQ(c.finals[i]->usage().completion_tokens(), 16);
    EXPECT_EQ(c.tokens[i].size(), 16u);
    if (kernels::DetectedCpuFeatures().avx512vnni) {
      pb::GenerateRequest one = req;
      one.mutable_sampling()->set_seed(42 + i);
      const Streamed alone = RunGenerate(*w.stub, one);
      EXPECT_EQ(c.tokens[i], alone.tokens) << "choice " << i;
      EXPECT_EQ(c.text[i], alone.text) << "choice " << i;
    }
  }
  EXPECT_NE(c.tokens[0], c.tokens[1]);

  // A stop string found in one choice's text ends that choice only.
  std::string stop;
  size_t cut = std::string::npos;
  for (size_t k = 1; k + 3 <= c.text[1].size() && stop.empty(); ++k) {
    const std::string s = c.text[1].substr(k, 3);
    bool elsewhere = c.text[1].find(s) < k;
    for (int i : {0, 2, 3}) elsewhere |= c.text[i].find(s) != std::string::npos;
    if (!elsewhere && s.find('\xEF') == std::string::npos) {
      stop = s;
      cut = k;
    }
  }
  EXPECT_FALSE(stop.empty()) << "no 3-byte piece of choice 1's text is only there";
  if (!stop.empty()) {
    pb::GenerateRequest stopped = with_n;
    stopped.mutable_sampling()->add_stop_strings(stop);
    const Choices s = RunChoices(*w.stub, stopped, kN);
    ASSERT_TRUE(s.status.ok());
    ASSERT_TRUE(s.finals[1].has_value());
    EXPECT_EQ(s.finals[1]->finish_reason(), pb::FINISH_REASON_STOP);
    EXPECT_EQ(s.finals[1]->matched_stop_string(), stop);
    EXPECT_EQ(s.text[1], c.text[1].substr(0, cut));
    for (int i : {0, 2, 3}) {
      ASSERT_TRUE(s.finals[i].has_value());
      EXPECT_EQ(s.finals[i]->finish_reason(), pb::FINISH_REASON_LENGTH) << i;
      EXPECT_EQ(s.text[i], c.text[i]) << i;
    }
  }

  // n out of range, or above --parallel: INVALID_ARGUMENT naming n, no events.
  for (int bad : {0, 5, 17}) {
    pb::GenerateRequest r = req;
    r.set_n(bad);
    const Streamed s = RunGenerate(*w.stub, r);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(s.status.error_message().substr(0, 3), "n: ") << s.status.error_message();
    EXPECT_EQ(s.token_events, 0);
  }

  // A client cancel ends every choice and frees their slots and pages.
  {
    grpc::ClientContext ctx;
    pb::GenerateRequest long_run = with_n;
    long_run.mutable_sampling()->set_max_tokens(200);
    auto reader = w.stub->Generate(&ctx, long_run);
    pb::GenerateEvent ev;
    ASSERT_TRUE(reader->Read(&ev));
    ctx.TryCancel();
    while (reader->Read(&ev)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  for (int i = 0; i < 600; ++i) {
    grpc::ClientContext ctx;
    pb::WorkerInfoRequest info_req;
    info_req.add_models("q8");
    pb::WorkerInfo info;
    ASSERT_TRUE(w.stub->GetWorkerInfo(&ctx, info_req, &info).ok());
    const pb::ModelLoad& load = info.models(0).load();
    if (load.free_state_slots() == load.total_state_slots() &&
        load.free_kv_pages() == load.total_kv_pages()) {
      break;
    }
    ASSERT_LT(i, 599) << "the cancelled choices still hold memory";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(DeltaserveWorkerTest, BadStartsExitNonZeroWithAMessage) {
  using ::deltaserve::testing::RunProcess;
  const std::string bin = BinaryPath("worker/deltaserve-worker");
  auto bad_flag = RunProcess({bin, "--model", "x=" + GoldenPath("tiny-dense-f32.gguf"), "--wat"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  auto no_queue =
      RunProcess({bin, "--model", "x=" + GoldenPath("tiny-dense-f32.gguf"), "--max-waiting", "0"});
  EXPECT_EQ(no_queue.exit_code, 2);
  EXPECT_NE(no_queue.err.find("--max-waiting needs a count >= 1"), std::string::npos)
      << no_queue.err;
  EXPECT_NE(bad_flag.err.find("unknown argument '--wat'"), std::string::npos);
  // The Redis tier's flags: each bad value is refused before anything loads, with a message that
  // names the flag and never echoes a password.
  const std::vector<std::pair<std::vector<std::string>, std::string>> redis_cases = {
      {{"--redis", "http://127.0.0.1:6379"}, "--redis: "},
      {{"--redis", "redis://:s3cret@127.0.0.1:notaport"}, "--redis: "},
      {{"--redis"}, "--redis needs a URL"},
      {{"--redis-timeout", "0"}, "--redis-timeout needs milliseconds"},
      {{"--redis-timeout", "abc"}, "--redis-timeout needs milliseconds"},
      {{"--redis-min-rate", "0"}, "--redis-min-rate needs MB/s"},
      {{"--redis-min-rate", "100001"}, "--redis-min-rate needs MB/s"},
      {{"--redis-ttl", "0"}, "--redis-ttl needs seconds"},
      {{"--redis-max-bytes", "12XB"}, "--redis-max-bytes: "},
      {{"--redis-max-bytes", "100"}, "--redis-max-bytes must be at least 4KiB"},
      {{"--redis-compression", "lz4"}, "--redis-compression needs none or zstd"},
  };
  for (const auto& [flags, message] : redis_cases) {
    std::vector<std::string> argv = {bin, "--model", "x=" + GoldenPath("tiny-dense-f32.gguf")};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 2) << flags[0] << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
  }
  auto no_model = RunProcess({bin, "--model", "x=/nonexistent.gguf", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.err.find("/nonexistent.gguf"), std::string::npos) << no_model.err;
  auto too_big = RunProcess({bin, "--model", "x=" + GoldenPath("tiny-dense-f32.gguf"), "--ram",
                             "1MiB", "--listen", "127.0.0.1:0"});
  EXPECT_EQ(too_big.exit_code, 1);
  EXPECT_NE(too_big.err.find("does not fit"), std::string::npos) << too_big.err;

  // A port in use: hold one with a plain socket.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string busy = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto in_use = RunProcess({bin, "--model", "x=" + GoldenPath("tiny-dense-f32.gguf"), "--ram",
                            "2GiB", "--ctx", "128", "--listen", busy});
  ::close(fd);
  EXPECT_EQ(in_use.exit_code, 1);
  EXPECT_NE(in_use.err.find("cannot listen on " + busy), std::string::npos) << in_use.err;
}

}  // namespace
}  // namespace deltaserve::worker
