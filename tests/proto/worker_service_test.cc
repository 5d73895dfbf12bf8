// Integration test of the deltaserve.v1.Worker contract over real gRPC on 127.0.0.1: an
// in-process grpc::Server (port chosen by gRPC) runs a small test double of the Worker service
// and grpc++'s built-in health service; a client calls Generate and reads the stream, checks
// grpc.health.v1.Health answers SERVING (NOT_SERVING after Drain), sees a client cancel reach
// the server (ServerContext::IsCancelled), and measures a full-tokenizer WorkerInfo against
// gRPC's default 4 MiB receive limit (proto/README.md). The double is a test double only: the
// real service is worker/service/.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deltaserve/v1/worker.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"

namespace deltaserve::proto_test {
namespace {

namespace v1 = ::deltaserve::v1;
namespace health = ::grpc::health::v1;

constexpr char kWorkerServiceName[] = "deltaserve.v1.Worker";
constexpr char kEchoModel[] = "echo";        // streams the prompt back, one token per event
constexpr char kEndlessModel[] = "endless";  // streams one token, then waits for a cancel
// A Qwen3.5-sized vocabulary (248,320 entries) with 12-byte tokens and merges: ~6.5 MB on the
// wire, over gRPC's default 4 MiB receive limit. Qwen3's 151,936-token vocabulary measures
// 3.65 MB (../shared/golden/qwen3-vocab-qwen35pre.gguf), already 87% of that limit.
constexpr int kLargeVocab = 248320;
// The receive limit proto/README.md asks Worker clients to set.
constexpr int kRecommendedMaxReceiveBytes = 64 << 20;

// Test double of the Worker service: enough behaviour to exercise the contract's shapes.
class TestDoubleWorker final : public v1::Worker::Service {
 public:
  // Set once the server is built: Drain flips the service's health status through it.
  void set_health(grpc::HealthCheckServiceInterface* health) { health_ = health; }

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override {
    RecordRequestIdMetadata(*context);
    if (draining_.load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining");
    }
    if (request->prompt_token_ids().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "prompt_token_ids: empty");
    }
    if (request->model() == kEndlessModel) return GenerateUntilCancelled(context, writer);
    if (request->model() != kEchoModel) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("model not served: ", request->model()));
    }

    const int max_tokens = request->sampling().has_max_tokens() ? request->sampling().max_tokens()
                                                                : request->prompt_token_ids_size();
    int generated = 0;
    for (int32_t id : request->prompt_token_ids()) {
      if (generated == max_tokens) break;
      v1::GenerateEvent event;
      event.mutable_token_event()->add_token_ids(id);
      event.mutable_token_event()->set_text(absl::StrCat("t", id, " "));
      if (!writer->Write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
      ++generated;
    }
    v1::GenerateEvent final_event;
    v1::FinalEvent* final_message = final_event.mutable_final_event();
    final_message->set_finish_reason(generated == max_tokens ? v1::FINISH_REASON_LENGTH
                                                             : v1::FINISH_REASON_STOP);
    final_message->mutable_usage()->set_prompt_tokens(request->prompt_token_ids_size());
    final_message->mutable_usage()->set_completion_tokens(generated);
    final_message->mutable_timings()->set_queue_ms(0.25);
    writer->Write(final_event);
    return grpc::Status::OK;
  }

  grpc::Status GetWorkerInfo(grpc::ServerContext* /*context*/, const v1::WorkerInfoRequest* request,
                             v1::WorkerInfo* info) override {
    info->set_worker_id("test-double");
    info->set_device("cpu");
    info->set_draining(draining_.load());
    v1::ModelInfo* model = info->add_models();
    model->set_name(kEchoModel);
    model->set_n_vocab(kLargeVocab);
    model->set_tokenizer_digest("test-digest-1");
    model->mutable_load()->set_total_state_slots(4);
    if (request->include_tokenizer()) {
      v1::Tokenizer* tokenizer = model->mutable_tokenizer();
      tokenizer->set_model("gpt2");
      tokenizer->set_pre("qwen35");
      for (int i = 0; i < kLargeVocab; ++i) {
        tokenizer->add_tokens(absl::StrFormat("tok%09d", i));               // 12 bytes
        tokenizer->add_merges(absl::StrFormat("m%010dx", 1000000000 + i));  // 12 bytes
        tokenizer->add_token_types(v1::TOKEN_TYPE_NORMAL);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Drain(grpc::ServerContext* /*context*/, const v1::DrainRequest* /*request*/,
                     v1::DrainResponse* response) override {
    response->set_already_draining(draining_.exchange(true));
    // The contract: a draining worker is NOT_SERVING to health checkers, so routers and
    // load balancers stop sending it work.
    if (health_ != nullptr) health_->SetServingStatus(kWorkerServiceName, false);
    return grpc::Status::OK;
  }

  // Notified when a Generate handler observed ServerContext::IsCancelled().
  absl::Notification& cancel_seen() { return cancel_seen_; }
  // Notified when the endless Generate has written its first token.
  absl::Notification& endless_started() { return endless_started_; }

  std::string last_request_id_metadata() {
    absl::MutexLock lock(&mutex_);
    return last_request_id_metadata_;
  }

 private:
  grpc::Status GenerateUntilCancelled(grpc::ServerContext* context,
                                      grpc::ServerWriter<v1::GenerateEvent>* writer) {
    v1::GenerateEvent event;
    event.mutable_token_event()->add_token_ids(1);
    writer->Write(event);
    endless_started_.Notify();
    // A real worker would decode here; it checks IsCancelled between steps and frees the
    // sequence at once. Bounded so a broken cancel path fails the test instead of hanging it.
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (!context->IsCancelled()) {
      if (absl::Now() > give_up) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no cancel seen");
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    cancel_seen_.Notify();
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by client");
  }

  void RecordRequestIdMetadata(const grpc::ServerContext& context) {
    const auto& metadata = context.client_metadata();
    const auto it = metadata.find("x-request-id");
    absl::MutexLock lock(&mutex_);
    last_request_id_metadata_ =
        it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
  }

  grpc::HealthCheckServiceInterface* health_ = nullptr;
  std::atomic<bool> draining_{false};
  absl::Notification cancel_seen_;
  absl::Notification endless_started_;
  absl::Mutex mutex_;
  std::string last_request_id_metadata_ ABSL_GUARDED_BY(mutex_);
};

class WorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0) << "gRPC did not bind 127.0.0.1:0";
    grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
    ASSERT_NE(health, nullptr) << "grpc++ built-in health service missing";
    health->SetServingStatus(kWorkerServiceName, true);
    service_.set_health(health);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  std::shared_ptr<grpc::Channel> Channel(int max_receive_bytes = -1) const {
    grpc::ChannelArguments args;
    if (max_receive_bytes > 0) args.SetMaxReceiveMessageSize(max_receive_bytes);
    return grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), args);
  }

  static void SetDeadline(grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }

  health::HealthCheckResponse::ServingStatus Health(const std::string& service,
                                                    grpc::StatusCode* code = nullptr) {
    auto stub = health::Health::NewStub(Channel());
    grpc::ClientContext context;
    SetDeadline(context);
    health::HealthCheckRequest request;
    request.set_service(service);
    health::HealthCheckResponse response;
    const grpc::Status status = stub->Check(&context, request, &response);
    if (code != nullptr) *code = status.error_code();
    return response.status();
  }

  TestDoubleWorker service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(WorkerServiceTest, GenerateStreamsTokenEventsThenOneFinalEvent) {
  auto stub = v1::Worker::NewStub(Channel());
  grpc::ClientContext context;
  SetDeadline(context);
  context.AddMetadata("x-request-id", "chatcmpl-abc");
  v1::GenerateRequest request;
  request.set_request_id("chatcmpl-abc");
  request.set_model(kEchoModel);
  for (int32_t id : {9707, 1879, 0, 151645}) request.add_prompt_token_ids(id);
  request.mutable_sampling()->set_max_tokens(3);

  auto reader = stub->Generate(&context, request);
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<v1::GenerateEvent> finals;
  v1::GenerateEvent event;
  while (reader->Read(&event)) {
    if (event.has_token_event()) {
      EXPECT_TRUE(finals.empty()) << "token event after the final event";
      tokens.insert(tokens.end(), event.token_event().token_ids().begin(),
                    event.token_event().token_ids().end());
      text += event.token_event().text();
    } else if (event.has_final_event()) {
      finals.push_back(event);
    }
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();

  EXPECT_EQ(tokens, (std::vector<int32_t>{9707, 1879, 0}));
  EXPECT_EQ(text, "t9707 t1879 t0 ");
  ASSERT_EQ(finals.size(), 1u);
  const v1::FinalEvent& final_event = finals[0].final_event();
  EXPECT_EQ(final_event.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(final_event.usage().prompt_tokens(), 4);
  EXPECT_EQ(final_event.usage().completion_tokens(), 3);
  EXPECT_DOUBLE_EQ(final_event.timings().queue_ms(), 0.25);
  EXPECT_EQ(service_.last_request_id_metadata(), "chatcmpl-abc");
}

TEST_F(WorkerServiceTest, RefusedGenerateIsAStatusWithoutEvents) {
  auto stub = v1::Worker::NewStub(Channel());
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GenerateRequest request;
  request.set_model("no-such-model");
  request.add_prompt_token_ids(1);
  auto reader = stub->Generate(&context, request);
  v1::GenerateEvent event;
  EXPECT_FALSE(reader->Read(&event));
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "model not served: no-such-model");
}

TEST_F(WorkerServiceTest, HealthServiceAnswersServing) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  EXPECT_EQ(Health("", &code), health::HealthCheckResponse::SERVING);
  EXPECT_EQ(code, grpc::StatusCode::OK);
  EXPECT_EQ(Health(kWorkerServiceName, &code), health::HealthCheckResponse::SERVING);
  EXPECT_EQ(code, grpc::StatusCode::OK);
  Health("deltaserve.v1.NoSuchService", &code);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND);
}

TEST_F(WorkerServiceTest, DrainTurnsHealthNotServingAndRefusesGenerate) {
  auto stub = v1::Worker::NewStub(Channel());
  for (bool expect_already : {false, true}) {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::DrainResponse response;
    ASSERT_TRUE(stub->Drain(&context, v1::DrainRequest(), &response).ok());
    EXPECT_EQ(response.already_draining(), expect_already);
  }
  EXPECT_EQ(Health(kWorkerServiceName), health::HealthCheckResponse::NOT_SERVING);

  grpc::ClientContext context;
  SetDeadline(context);
  v1::GenerateRequest request;
  request.set_model(kEchoModel);
  request.add_prompt_token_ids(1);
  auto reader = stub->Generate(&context, request);
  v1::GenerateEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(WorkerServiceTest, ClientCancelReachesTheServer) {
  auto stub = v1::Worker::NewStub(Channel());
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GenerateRequest request;
  request.set_model(kEndlessModel);
  request.add_prompt_token_ids(1);
  auto reader = stub->Generate(&context, request);

  v1::GenerateEvent event;
  ASSERT_TRUE(reader->Read(&event));
  ASSERT_TRUE(event.has_token_event());
  ASSERT_TRUE(service_.endless_started().WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(service_.cancel_seen().HasBeenNotified());

  context.TryCancel();
  EXPECT_TRUE(service_.cancel_seen().WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the server never saw ServerContext::IsCancelled()";
  while (reader->Read(&event)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(WorkerServiceTest, FullTokenizerNeedsTheRecommendedReceiveLimit) {
  v1::WorkerInfoRequest with_tokenizer;
  with_tokenizer.set_include_tokenizer(true);

  {  // Load polls (no tokenizer) fit any channel.
    auto stub = v1::Worker::NewStub(Channel());
    grpc::ClientContext context;
    SetDeadline(context);
    v1::WorkerInfo info;
    ASSERT_TRUE(stub->GetWorkerInfo(&context, v1::WorkerInfoRequest(), &info).ok());
    ASSERT_EQ(info.models_size(), 1);
    EXPECT_FALSE(info.models(0).has_tokenizer());
    EXPECT_EQ(info.models(0).tokenizer_digest(), "test-digest-1");
    EXPECT_LT(info.ByteSizeLong(), 1024u);
  }
  {  // gRPC's default 4 MiB receive limit refuses a Qwen3.5-sized tokenizer.
    auto stub = v1::Worker::NewStub(Channel());
    grpc::ClientContext context;
    SetDeadline(context);
    v1::WorkerInfo info;
    EXPECT_EQ(stub->GetWorkerInfo(&context, with_tokenizer, &info).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {  // With the README's limit it arrives whole.
    auto stub = v1::Worker::NewStub(Channel(kRecommendedMaxReceiveBytes));
    grpc::ClientContext context;
    SetDeadline(context);
    v1::WorkerInfo info;
    const grpc::Status status = stub->GetWorkerInfo(&context, with_tokenizer, &info);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(info.models_size(), 1);
    EXPECT_EQ(info.models(0).tokenizer().tokens_size(), kLargeVocab);
    EXPECT_EQ(info.models(0).tokenizer().tokens(12345), "tok000012345");
    EXPECT_GT(info.ByteSizeLong(), size_t{4} << 20);
  }
}

}  // namespace
}  // namespace deltaserve::proto_test
