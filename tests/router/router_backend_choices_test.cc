// RouterBackend with n > 1 choices over real gRPC on 127.0.0.1 against ScriptedWorker (a TEST
// DOUBLE of deltaserve.v1.Worker that, for GenerateRequest.n > 1, sends every piece once per
// choice as "<choice>:<piece>" with its choice_index and one final event per choice). Checks
// that n reaches the worker, deltas keep their choice, the end lists every choice with the
// prompt counted once and completions summed, n above every worker's --parallel is a 400 naming
// n before any call, and what a failing choice or worker does: after the first streamed token
// the whole request errors; before it (non-streamed) the whole call is retried elsewhere.
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/api/api_error.h"
#include "router/routing/router_backend.h"
#include "tests/router/router_backend_fixture.h"
#include "tests/router/scripted_worker.h"

namespace deltaserve::router {
namespace {

namespace v1 = ::deltaserve::v1;
using testing::Chat;
using testing::GenerateScript;
using testing::Model;
using testing::RouterBackendTest;
using testing::ScriptedWorker;

TEST_F(RouterBackendTest, ChoicesKeepTheirIndexAndTheEndListsEachOnce) {
  ScriptedWorker& w = AddWorker({Model("m")});
  StartRouter();
  for (bool stream : {false, true}) {
    api::CompletionRequest request = Chat("m", "0123456789");
    request.n = 3;
    request.stream = stream;
    auto o = Run(request);
    ASSERT_TRUE(o->end.has_value()) << (o->error ? o->error->ToString() : "");
    EXPECT_EQ(w.last_request().n(), 3);
    EXPECT_EQ(o->starts, 1);
    ASSERT_EQ(o->choice_text.size(), 3u);
    for (int c = 0; c < 3; ++c) {
      const std::string p = std::to_string(c) + ":";
      EXPECT_EQ(o->choice_text[c], p + "Hel" + p + "lo" + p + "!") << c;
    }
    ASSERT_EQ(o->end->choices.size(), 3u);
    for (const api::ChoiceEnd& e : o->end->choices) {
      EXPECT_EQ(e.finish_reason, api::FinishReason::kStop);
    }
    EXPECT_EQ(o->end->usage.prompt_tokens, 10);     // the shared prompt, once
    EXPECT_EQ(o->end->usage.completion_tokens, 9);  // 3 tokens per choice
  }
  // One choice: no n on the wire, no per-choice list.
  auto one = Run(Chat("m", "0123456789"));
  ASSERT_TRUE(one->end.has_value());
  EXPECT_FALSE(w.last_request().has_n());
  EXPECT_TRUE(one->end->choices.empty());
}

TEST_F(RouterBackendTest, ChoicesBeyondEveryWorkersParallelAreA400NamingN) {
  ScriptedWorker& w = AddWorker({Model("m")});  // max_parallel 4
  StartRouter();
  api::CompletionRequest request = Chat("m", "hi");
  request.n = 5;
  auto o = Run(request);
  ASSERT_TRUE(o->error.has_value());
  EXPECT_EQ(o->error->code(), absl::StatusCode::kInvalidArgument) << o->error->ToString();
  EXPECT_EQ(api::ErrorParam(*o->error), "n");
  // The numbers: what was asked and what a worker of the model can ever run at once.
  EXPECT_THAT(std::string(o->error->message()),
              ::testing::AllOf(::testing::HasSubstr("n=5"), ::testing::HasSubstr("the 4 sequences")))
      << o->error->ToString();
  EXPECT_EQ(w.generate_calls(), 0);
}

TEST_F(RouterBackendTest, AFailingChoiceEndsAllOrRetriesTheWholeCall) {
  ScriptedWorker& bad = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& good = AddWorker({Model("m", 3, 0)});
  GenerateScript failing;
  failing.error_choice = 1;
  bad.SetScript(failing);
  StartRouter();
  // Streamed: the client has tokens of every choice when choice 1 fails: an error for all.
  api::CompletionRequest streamed = Chat("m", "hi");
  streamed.n = 2;
  streamed.stream = true;
  auto o = Run(streamed);
  ASSERT_TRUE(o->error.has_value());
  EXPECT_FALSE(o->end.has_value());
  EXPECT_EQ(good.generate_calls(), 0);
  // Not streamed: nothing reached the client, so the call (every choice) runs again elsewhere.
  api::CompletionRequest whole = Chat("m", "hi");
  whole.n = 2;
  auto o2 = Run(whole);
  ASSERT_TRUE(o2->end.has_value()) << (o2->error ? o2->error->ToString() : "");
  EXPECT_EQ(good.generate_calls(), 1);
  EXPECT_EQ(good.last_request().n(), 2);
  EXPECT_EQ(o2->choice_text[0], "0:Hel0:lo0:!");
  EXPECT_EQ(o2->choice_text[1], "1:Hel1:lo1:!");
  EXPECT_EQ(pool_->metrics().discarded_partials(), 1);
}

TEST_F(RouterBackendTest, AWorkerCutMidwayEndsEveryStreamedChoice) {
  ScriptedWorker& w = AddWorker({Model("m", 0, 0)});
  ScriptedWorker& other = AddWorker({Model("m", 3, 0)});
  GenerateScript broken;
  broken.break_after = 2;  // two pieces of each choice, then the stream is cut
  broken.break_code = grpc::StatusCode::UNAVAILABLE;
  w.SetScript(broken);
  StartRouter();
  api::CompletionRequest request = Chat("m", "hi");
  request.n = 2;
  request.stream = true;
  auto o = Run(request);
  EXPECT_EQ(o->choice_text[0], "0:Hel0:lo");
  EXPECT_EQ(o->choice_text[1], "1:Hel1:lo");
  ASSERT_TRUE(o->error.has_value());
  EXPECT_EQ(o->error->code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(o->end.has_value());
  EXPECT_EQ(other.generate_calls(), 0);  // the client has tokens: no retry
}

}  // namespace
}  // namespace deltaserve::router
