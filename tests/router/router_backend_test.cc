// Integration tests of routing over real gRPC on 127.0.0.1: WorkerPool polls in-process
// ScriptedWorker servers (a TEST DOUBLE of deltaserve.v1.Worker, scripted_worker.h) and
// RouterBackend streams their Generate calls to a recording observer. Covers worker choice
// (least loaded, session affinity), the context-length skip, alias fallback and retries before
// the first token, the circuit breaker, errors after the first token, cancel reaching the
// worker, and the statuses the API turns into 400/404/429/503. The test renderer concatenates
// message texts and the test vocabulary is one token per byte, so a prompt's token count is
// its byte count.
#include "router/routing/router_backend.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "router/api/api_error.h"
#include "router/routing/routing_state.h"
#include "router/routing/worker_pool.h"
#include "tests/router/router_backend_fixture.h"
#include "tests/router/scripted_worker.h"

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;
using testing::Chat;
using testing::GenerateScript;
using testing::Model;
using testing::Msg;
using testing::RecordingObserver;
using testing::RouterBackendTest;
using testing::ScriptedModel;
using testing::ScriptedWorker;

TEST_F(RouterBackendTest, LeastLoadedWorkerAnswersAndEventsMapToTheObserver) {
  ScriptedWorker& busy = AddWorker({Model("m", 4, 2)});
  ScriptedWorker& idle = AddWorker({Model("m", 1, 0)});
  StartRouter();
  auto o = Run(Chat("m", "0123456789"));
  ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
  EXPECT_EQ(busy.generate_calls(), 0);
  EXPECT_EQ(idle.generate_calls(), 1);
  EXPECT_EQ(o->starts, 1);
  EXPECT_EQ(o->model, "m");
  EXPECT_EQ(o->text, "Hello!");
  EXPECT_EQ(o->tokens, 3);
  EXPECT_EQ(o->end->finish_reason, api::FinishReason::kStop);
  EXPECT_EQ(o->end->usage.prompt_tokens, 10);  // one byte token per character
  EXPECT_EQ(o->end->usage.completion_tokens, 3);
  EXPECT_EQ(o->terminals, 1);
}

TEST_F(RouterBackendTest, GenerateRequestCarriesDefaultsStopsLogprobsAndRequestId) {
  ScriptedWorker& w = AddWorker({Model("served-m")});
  GenerateScript script;
  script.finish = v1::FINISH_REASON_LENGTH;
  script.cached_prompt_tokens = 4;
  w.SetScript(script);
  RouterConfig config;
  config.models = {{"chat", "served-m", {}}};
  config.models[0].defaults.temperature = 0.25;
  config.models[0].defaults.top_k = 20;
  StartRouter(config);
  api::CompletionRequest r = Chat("chat", "0123456789");
  r.request_id = "req-abc";
  r.sampling.top_p = 0.5;
  r.sampling.seed = 42;
  r.stop = {"END"};
  r.logprobs = true;
  r.top_logprobs = 2;
  auto o = Run(r);
  ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
  const v1::GenerateRequest g = w.last_request();
  EXPECT_EQ(g.model(), "served-m");
  EXPECT_EQ(g.request_id(), "req-abc");
  EXPECT_EQ(w.last_request_id_metadata(), "req-abc");
  EXPECT_EQ(g.prompt_token_ids_size(), 10);
  EXPECT_EQ(g.prompt_token_ids(0), '0');
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.25f);  // the model's default
  EXPECT_EQ(g.sampling().top_k(), 20);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.5f);  // the request's own value
  EXPECT_FALSE(g.sampling().has_min_p());
  EXPECT_EQ(g.sampling().seed(), 42u);
  EXPECT_EQ(g.sampling().max_tokens(), 4096 - 10);  // no max_tokens: the rest of the context
  ASSERT_EQ(g.sampling().stop_strings_size(), 1);
  EXPECT_EQ(g.sampling().stop_strings(0), "END");
  ASSERT_EQ(g.sampling().stop_token_ids_size(), 1);  // from the renderer
  EXPECT_EQ(g.sampling().stop_token_ids(0), 7);
  EXPECT_TRUE(g.sampling().logprobs());
  EXPECT_EQ(g.sampling().top_logprobs(), 2);

  EXPECT_EQ(o->model, "chat");  // the client-facing name
  EXPECT_EQ(o->end->finish_reason, api::FinishReason::kLength);
  EXPECT_EQ(o->end->usage.cached_tokens, 4);
  ASSERT_EQ(o->logprobs.size(), 3u);
  EXPECT_EQ(o->logprobs[0].token, "H");  // token id 'H' in the byte vocabulary
  EXPECT_FLOAT_EQ(o->logprobs[0].logprob, -0.5f);
  ASSERT_EQ(o->logprobs[0].top.size(), 2u);
  EXPECT_EQ(o->logprobs[0].top[1].token, "b");
  EXPECT_FLOAT_EQ(o->logprobs[0].top[1].logprob, -2.0f);
}

TEST_F(RouterBackendTest, SessionAffinityKeepsAConversationOnOneWorker) {
  for (int i = 0; i < 3; ++i) AddWorker({Model("m")});
  options_.affinity_key = AffinityKey;
  StartRouter();
  for (int turn = 0; turn < 5; ++turn) {
    api::CompletionRequest r = Chat("m", "the same opening question");
    for (int k = 0; k < turn; ++k) {
      r.messages.push_back(Msg("assistant", "answer"));
      r.messages.push_back(Msg("user", "follow-up " + std::to_string(k)));
    }
    ASSERT_TRUE(Run(r)->end.has_value());
  }
  int max_calls = 0;
  for (const auto& w : workers_) max_calls = std::max(max_calls, w->generate_calls());
  EXPECT_EQ(max_calls, 5);  // every turn on the same worker
  for (int c = 0; c < 30; ++c)
    ASSERT_TRUE(Run(Chat("m", "conversation " + std::to_string(c)))->end);
  int used = 0;
  for (const auto& w : workers_) used += w->generate_calls() > 0 ? 1 : 0;
  EXPECT_GE(used, 2);  // different conversations spread
}

TEST_F(RouterBackendTest, CandidateWhoseContextIsTooSmallIsSkippedBeforeTrying) {
  ScriptedWorker& small = AddWorker({Model("small", 0, 0, 64)});
  ScriptedWorker& big = AddWorker({Model("big", 3, 0, 4096)});
  RouterConfig config;
  config.aliases = {{"fast", {"small", "big"}}};
  StartRouter(config);
  auto o = Run(Chat("fast", std::string(100, 'x')));
  ASSERT_TRUE(o->end.has_value());
  EXPECT_EQ(o->model, "big");
  EXPECT_EQ(small.generate_calls(), 0);
  EXPECT_EQ(big.generate_calls(), 1);

  // Nothing holds 100 + 5000 tokens: 400 with the numbers, no worker called.
  api::CompletionRequest r = Chat("fast", std::string(100, 'x'));
  r.max_tokens = 5000;
  o = Run(r);
  ASSERT_TRUE(o->error.has_value());
  EXPECT_EQ(o->error->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(api::ApiErrorFromStatus(*o->error).http_status, 400);
  EXPECT_EQ(api::ErrorCode(*o->error), "context_length_exceeded");
  EXPECT_NE(o->error->message().find("4096"), std::string::npos) << o->error->message();
  EXPECT_NE(o->error->message().find("5100"), std::string::npos) << o->error->message();
  EXPECT_EQ(big.generate_calls(), 1);
  EXPECT_EQ(pool_->metrics().rejections(kRejectContext), 1);
}

TEST_F(RouterBackendTest, AliasFallsBackWhenThePrimaryFailsBeforeTheFirstToken) {
  ScriptedWorker& primary = AddWorker({Model("primary")});
  ScriptedWorker& backup = AddWorker({Model("backup")});
  GenerateScript down;
  down.refuse = grpc::StatusCode::UNAVAILABLE;
  primary.SetScript(down);
  RouterConfig config;
  config.aliases = {{"a", {"primary", "backup"}}};
  StartRouter(config);
  auto o = Run(Chat("a", "hi"));
  ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
  EXPECT_EQ(o->model, "backup");  // OnStart names what answered
  EXPECT_EQ(o->text, "Hello!");
  EXPECT_EQ(primary.generate_calls(), 1);
  EXPECT_EQ(backup.generate_calls(), 1);
  EXPECT_EQ(pool_->metrics().fallbacks(), 1);
  EXPECT_EQ(pool_->metrics().worker(primary.address()).failures, 1);
}

TEST_F(RouterBackendTest, FailedWorkerIsRetriedOnAnotherWorkerOfTheSameModel) {
  ScriptedWorker& first = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& second = AddWorker({Model("m", 2, 0)});
  GenerateScript broken;
  broken.refuse = grpc::StatusCode::INTERNAL;
  first.SetScript(broken);
  StartRouter();
  auto o = Run(Chat("m", "hi"));
  ASSERT_TRUE(o->end.has_value());
  EXPECT_EQ(first.generate_calls(), 1);
  EXPECT_EQ(second.generate_calls(), 1);
  EXPECT_EQ(pool_->metrics().retries(), 1);
  EXPECT_EQ(pool_->metrics().fallbacks(), 0);
}

TEST_F(RouterBackendTest, CircuitOpensAfterFailuresAndClosesAfterTheOpenPeriod) {
  ScriptedWorker& flaky = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& steady = AddWorker({Model("m", 3, 0)});
  GenerateScript down;
  down.refuse = grpc::StatusCode::UNAVAILABLE;
  flaky.SetScript(down);
  RouterConfig config;
  config.routing.circuit_failures = 2;
  // Long enough that the checks of the open circuit below are done before it half-opens, on a
  // loaded machine under ASan too.
  config.routing.circuit_open_ms = 2000;
  StartRouter(config);
  ASSERT_TRUE(Run(Chat("m", "1"))->end.has_value());
  ASSERT_TRUE(Run(Chat("m", "2"))->end.has_value());
  EXPECT_EQ(flaky.generate_calls(), 2);
  EXPECT_EQ(pool_->metrics().worker(flaky.address()).circuit_opens, 1);
  EXPECT_EQ(pool_->Snapshot()[0].circuit, CircuitState::kOpen);
  // Open: the least loaded worker is passed over without a call.
  ASSERT_TRUE(Run(Chat("m", "3"))->end.has_value());
  EXPECT_EQ(flaky.generate_calls(), 2);
  EXPECT_EQ(steady.generate_calls(), 3);

  flaky.SetScript(GenerateScript{});  // healthy again
  // After 2 s the circuit is half-open; the next health poll is the trial that closes it.
  EXPECT_TRUE(
      WaitForWorker(0, [](const WorkerSnapshot& s) { return s.circuit == CircuitState::kClosed; }));
  ASSERT_TRUE(Run(Chat("m", "4"))->end.has_value());
  EXPECT_EQ(flaky.generate_calls(), 3);
}

TEST_F(RouterBackendTest, ErrorAfterTheFirstTokenEndsTheStreamWithOnError) {
  ScriptedWorker& w = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& other = AddWorker({Model("m", 3, 0)});
  GenerateScript script;
  script.break_after = 2;
  w.SetScript(script);
  StartRouter();
  api::CompletionRequest request = Chat("m", "hi");
  request.stream = true;  // the client has the first tokens: too late to retry
  auto o = Run(request);
  EXPECT_EQ(o->starts, 1);
  EXPECT_EQ(o->text, "Hello");
  ASSERT_TRUE(o->error.has_value());
  EXPECT_EQ(o->error->code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(o->end.has_value());
  EXPECT_EQ(other.generate_calls(), 0);  // no retry once tokens were sent
  EXPECT_EQ(pool_->metrics().errors_after_start(), 1);
}

TEST_F(RouterBackendTest, NonStreamingRequestWhoseWorkerFailsMidwayIsRetriedFromScratch) {
  ScriptedWorker& w = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& other = AddWorker({Model("m", 3, 0)});
  GenerateScript broken;
  broken.pieces = {"par", "tial", "never sent"};
  broken.break_after = 2;
  broken.break_code = grpc::StatusCode::UNAVAILABLE;  // what a killed worker's stream gives
  w.SetScript(broken);
  StartRouter();
  auto o = Run(Chat("m", "hi"));  // stream = false
  ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
  EXPECT_FALSE(o->error.has_value());
  EXPECT_EQ(o->starts, 1);
  EXPECT_EQ(o->text, "Hello!");  // only the second worker's answer, none of the dropped pieces
  EXPECT_EQ(o->tokens, 3);
  EXPECT_EQ(w.generate_calls(), 1);
  EXPECT_EQ(other.generate_calls(), 1);
  EXPECT_EQ(pool_->metrics().discarded_partials(), 1);
  EXPECT_EQ(pool_->metrics().errors_after_start(), 0);
  EXPECT_EQ(pool_->metrics().retries(), 1);

  // A worker that ends the sequence with an ERROR final event after tokens: also retried.
  GenerateScript failing;
  failing.pieces = {"x", "y"};
  failing.finish = deltaserve::v1::FINISH_REASON_ERROR;
  w.SetScript(failing);
  other.SetScript(GenerateScript{});
  auto o2 = Run(Chat("m", "again"));
  ASSERT_TRUE(o2->end.has_value()) << (o2->error ? o2->error->ToString() : "");
  EXPECT_EQ(o2->text, "Hello!");
  EXPECT_EQ(pool_->metrics().discarded_partials(), 2);
}

TEST_F(RouterBackendTest, NonStreamingRequestFailsOnlyWhenEveryAttemptFailsMidway) {
  ScriptedWorker& a = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& b = AddWorker({Model("m", 1, 0)});
  GenerateScript broken;
  broken.break_after = 1;
  broken.break_code = grpc::StatusCode::UNAVAILABLE;
  a.SetScript(broken);
  b.SetScript(broken);
  RouterConfig config;
  config.routing.max_attempts = 2;
  StartRouter(config);
  auto o = Run(Chat("m", "hi"));
  ASSERT_TRUE(o->error.has_value());
  EXPECT_EQ(o->error->code(), absl::StatusCode::kUnavailable);  // an HTTP 503, no partial body
  EXPECT_EQ(o->starts, 0);
  EXPECT_EQ(o->text, "");
  EXPECT_EQ(a.generate_calls() + b.generate_calls(), 2);
}

TEST_F(RouterBackendTest, CancelReachesTheWorker) {
  ScriptedWorker& w = AddWorker({Model("m")});
  GenerateScript script;
  script.hold_after_first = true;
  w.SetScript(script);
  StartRouter();
  auto o = std::make_shared<RecordingObserver>();
  api::CompletionRequest request = Chat("m", "hi");
  request.stream = true;  // a non-streaming request delivers no token before the end
  std::unique_ptr<api::GenerationHandle> handle = backend_->Generate(request, o);
  ASSERT_TRUE(o->WaitTokens(1));
  handle->Cancel();
  handle->Cancel();                     // idempotent
  EXPECT_TRUE(w.WaitForCancel(30000));  // ServerContext::IsCancelled on the worker
  ASSERT_TRUE(o->WaitDone());
  EXPECT_EQ(o->terminals, 1);
  EXPECT_TRUE(o->error.has_value());
}

TEST_F(RouterBackendTest, StatusesForUnknownUnavailableSaturatedAndRefused) {
  ScriptedWorker& gone = AddWorker({Model("gone")});
  ScriptedWorker& full = AddWorker({Model("full", 4, 100)});
  ScriptedWorker& strict = AddWorker({Model("strict")});
  ScriptedWorker& queue = AddWorker({Model("queue")});
  GenerateScript invalid;
  invalid.refuse = grpc::StatusCode::INVALID_ARGUMENT;
  strict.SetScript(invalid);
  GenerateScript exhausted;
  exhausted.refuse = grpc::StatusCode::RESOURCE_EXHAUSTED;
  queue.SetScript(exhausted);
  RouterConfig config;
  config.models = {{"gone", "", {}}, {"full", "", {}}, {"strict", "", {}}, {"queue", "", {}}};
  StartRouter(config);
  gone.Stop();
  ASSERT_TRUE(WaitForWorker(0, [](const WorkerSnapshot& s) { return !s.reachable; }));

  auto status_of = [&](const std::string& model) {
    auto o = Run(Chat(model, "hi"));
    EXPECT_TRUE(o->error.has_value()) << model;
    EXPECT_EQ(o->starts, 0) << model;
    return o->error.value_or(absl::OkStatus());
  };
  EXPECT_EQ(api::ApiErrorFromStatus(status_of("nope")).http_status, 404);
  EXPECT_EQ(api::ApiErrorFromStatus(status_of("gone")).http_status, 503);
  EXPECT_EQ(api::ApiErrorFromStatus(status_of("full")).http_status, 429);
  EXPECT_EQ(full.generate_calls(), 0);
  EXPECT_EQ(api::ApiErrorFromStatus(status_of("strict")).http_status, 400);
  EXPECT_EQ(strict.generate_calls(), 1);  // passed on, not retried
  EXPECT_EQ(api::ApiErrorFromStatus(status_of("queue")).http_status, 429);
  EXPECT_EQ(queue.generate_calls(), 1);  // one worker: nothing else to try
  EXPECT_EQ(pool_->metrics().rejections(kRejectUnknownModel), 1);
  EXPECT_EQ(pool_->metrics().rejections(kRejectNoWorker), 1);
}

TEST_F(RouterBackendTest, TokenizerFetchedOncePerDigestAndDrainingWorkerIsSkipped) {
  ScriptedWorker& a = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& b = AddWorker({Model("m", 2, 0)});
  StartRouter();
  ASSERT_TRUE(pool_->WaitForFirstPolls(absl::Seconds(30), 4));
  EXPECT_EQ(a.tokenizer_fetches() + b.tokenizer_fetches(), 1);
  EXPECT_EQ(pool_->metrics().tokenizer_fetches(), 1);

  a.SetDraining(true);
  ASSERT_TRUE(WaitForWorker(0, [](const WorkerSnapshot& s) { return s.draining; }));
  ASSERT_TRUE(Run(Chat("m", "hi"))->end.has_value());
  EXPECT_EQ(a.generate_calls(), 0);
  EXPECT_EQ(b.generate_calls(), 1);

  RoutingState state([this] { return config_; }, pool_.get(), 1700000000);
  ASSERT_EQ(state.Models().size(), 1u);
  EXPECT_EQ(state.Models()[0].id, "m");
  EXPECT_TRUE(state.Ready().ready);
  EXPECT_EQ(state.Ready().detail, "1 of 2 workers ready");
  api::PrometheusText text;
  state.WriteMetrics(text);
  EXPECT_NE(text.text().find("deltaserve_router_worker_draining{worker=\"" + a.address() + "\"} 1"),
            std::string::npos)
      << text.text();
}

TEST_F(RouterBackendTest, RestartedWorkerIsUsedAgain) {
  ScriptedWorker& a = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& b = AddWorker({Model("m", 2, 0)});
  RouterConfig config;
  config.routing.circuit_open_ms = 300;  // failed polls of the stopped worker open its circuit
  StartRouter(config);
  const int port = a.port();
  a.Stop();
  ASSERT_TRUE(WaitForWorker(0, [](const WorkerSnapshot& s) { return !s.reachable; }));
  ASSERT_TRUE(Run(Chat("m", "1"))->end.has_value());  // known down: b answers
  EXPECT_EQ(b.generate_calls(), 1);
  a.Start(port);
  ASSERT_EQ(a.port(), port);
  ASSERT_TRUE(WaitForWorker(0, [](const WorkerSnapshot& s) {
    return s.reachable && s.circuit == CircuitState::kClosed;
  }));
  ASSERT_TRUE(Run(Chat("m", "2"))->end.has_value());
  EXPECT_EQ(a.generate_calls(), 1);
}

// A reload removes the only worker while a stream runs on it: the stream runs to its end. The
// channel's last user is then that stream, ended on a gRPC callback thread; the pool, not that
// thread, lets the channel go. (gRPC 1.51 destroys its callback completion queue with the last
// channel that used it; destroyed from the queue's own polling thread, the queue is freed twice:
// ASan aborts, or the heap is corrupt. The next round's new channel can take the queue first,
// so three rounds.)
TEST_F(RouterBackendTest, AWorkerRemovedByAReloadFinishesTheStreamItRuns) {
  StartRouter();  // no workers yet
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    ScriptedWorker& w = AddWorker({Model("m")});
    GenerateScript held;
    held.hold_until_release = true;
    w.SetScript(held);
    pool_->SetWorkers({{w.address()}});
    ASSERT_TRUE(WaitForWorker(0, [](const WorkerSnapshot& s) {
      return s.reachable && !s.models.empty() && s.models[0]->tokenizer != nullptr;
    }));
    auto o = std::make_shared<RecordingObserver>();
    api::CompletionRequest request = Chat("m", "hi");
    request.stream = true;
    handle_ = backend_->Generate(request, o);
    ASSERT_TRUE(o->WaitTokens(1));
    pool_->SetWorkers({});
    EXPECT_EQ(pool_->WorkerCount(), 0);
    w.Release();
    ASSERT_TRUE(o->WaitDone());
    ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
    EXPECT_EQ(o->text, "Hello!");
    EXPECT_EQ(w.generate_calls(), 1);
    ASSERT_TRUE(WaitUntil([&] { return backend_->active_generations() == 0; }));
  }
}

}  // namespace
}  // namespace deltaserve::router
