#include "tests/worker/snapshot_workers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <limits>
#include <thread>

#include "absl/strings/numbers.h"
#include "gtest/gtest.h"
#include "tests/support/http_get.h"
#include "tests/support/test_paths.h"

namespace deltaserve::worker::harness {
namespace {

using ::deltaserve::testing::BinaryPath;
using ::deltaserve::testing::ChildProcess;
using ::deltaserve::testing::GoldenPath;
using ::deltaserve::testing::HttpGet;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

}  // namespace

Worker StartWorker(const std::string& gguf, std::vector<std::string> extra) {
  Worker w;
  std::vector<std::string> argv = {BinaryPath("worker/deltaserve-worker"),
                                   "--model",
                                   "tiny=" + GoldenPath(gguf),
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--threads",
                                   "1",
                                   "--ctx",
                                   "1280",
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
  w.stub = pb::Worker::NewStub(grpc::CreateChannel(w.address, grpc::InsecureChannelCredentials()));
  pb::WorkerInfo info;
  grpc::ClientContext ctx;
  EXPECT_TRUE(w.stub->GetWorkerInfo(&ctx, pb::WorkerInfoRequest(), &info).ok());
  if (info.models_size() == 1 && !info.models(0).snapshot_key_root().empty()) {
    w.root = *common::SnapshotKeyFromBytes(info.models(0).snapshot_key_root());
  }
  return w;
}

pb::GenerateRequest Request(const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& boundaries, int max_tokens) {
  pb::GenerateRequest r;
  r.set_model("tiny");
  for (int32_t t : prompt) r.add_prompt_token_ids(t);
  for (int32_t b : boundaries) r.add_message_boundaries(b);
  for (int32_t t : kTurnEnd) r.add_turn_end_token_ids(t);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

Streamed Call(Worker& w, const pb::GenerateRequest& req) {
  const Clock::time_point t0 = Clock::now();
  grpc::ClientContext ctx;
  // A call that never ends fails with DEADLINE_EXCEEDED (the calls here take seconds at most).
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Streamed out;
  auto reader = w.stub->Generate(&ctx, req);
  pb::GenerateEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_token_event()) {
      for (int32_t t : ev.token_event().token_ids()) out.tokens.push_back(t);
    } else if (ev.has_final_event()) {
      out.cached = ev.final_event().usage().cached_prompt_tokens();
    }
  }
  out.status = reader->Finish();
  out.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return out;
}

double Metric(const Worker& w, const std::string& series) {
  const std::string text = HttpGet(w.metrics_port, "/metrics");
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "the worker at " << w.address << " does not export " << series
                  << "; its /metrics:\n"
                  << text;
    return std::numeric_limits<double>::quiet_NaN();
  }
  const size_t start = at + series.size() + 2;
  const std::string value = text.substr(start, text.find('\n', start) - start);
  double v = 0;
  if (!absl::SimpleAtod(value, &v)) {
    ADD_FAILURE() << series << " has the value '" << value << "', not a number";
    return std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

std::string Series(const std::string& name, const std::string& labels) {
  return name + "{model=\"tiny\"" + (labels.empty() ? "" : "," + labels) + "}";
}
std::string Errors(const std::string& op) {
  return Series("deltaserve_model_snapshot_redis_errors_total", "op=\"" + op + "\"");
}
std::string Rejected(const std::string& reason) {
  return Series("deltaserve_model_snapshot_rejected_total", "reason=\"" + reason + "\"");
}

std::string RedisKey(const common::SnapshotKey& root, const std::vector<int32_t>& tokens) {
  const int64_t at[] = {static_cast<int64_t>(tokens.size())};
  return "ds:snap:v1:" + common::SnapshotKeysAt(root, tokens, at)->front().Hex();
}

std::vector<int32_t> Prefix(const std::vector<int32_t>& tokens, size_t n) {
  return std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n));
}

std::unique_ptr<common::RedisClient> Client(const std::string& url) {
  auto o = common::ParseRedisUrl(url);
  EXPECT_TRUE(o.ok()) << o.status();
  auto c = common::RedisClient::Create(*o, absl::Seconds(5));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

// Milliseconds until `key` exists (polled every millisecond), or -1 after 5 s.
double WaitForKey(common::RedisClient& redis, const std::string& key) {
  const Clock::time_point t0 = Clock::now();
  while (Clock::now() - t0 < seconds(5)) {
    const std::string names[] = {key};
    auto len = redis.StrLens(names);
    if (len.ok() && (*len)[0] > 0) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return -1;
}

// Runs the next turn of `conv` on `w` and on `cold`: same tokens; appends the reply.
Streamed Turn(Worker& w, Worker& cold, Conversation& conv, const std::string& what) {
  const pb::GenerateRequest req = conv.Next();
  Streamed got = Call(w, req);
  EXPECT_TRUE(got.status.ok()) << what << ": " << got.status.error_message();
  const Streamed ref = Call(cold, req);
  EXPECT_TRUE(ref.status.ok()) << what;
  EXPECT_EQ(got.tokens, ref.tokens) << what;
  EXPECT_EQ(got.tokens.size(), static_cast<size_t>(kReply)) << what;
  conv.AddReply(got.tokens);
  return got;
}

}  // namespace deltaserve::worker::harness
