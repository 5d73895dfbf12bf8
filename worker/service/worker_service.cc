#include "worker/service/worker_service.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_log.h"
#include "common/streaming_detokenizer.h"
#include "common/str_util.h"
#include "worker/service/reasoning_counter.h"
#include "worker/service/stop_strings.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;

grpc::StatusCode GrpcCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case absl::StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case absl::StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case absl::StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case absl::StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case absl::StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    default: return grpc::StatusCode::INTERNAL;
  }
}

std::string RequestId(const grpc::CallbackServerContext& ctx, const pb::GenerateRequest& r) {
  if (!r.request_id().empty()) return r.request_id();
  const auto& md = ctx.client_metadata();
  auto it = md.find("x-request-id");
  return it == md.end() ? std::string("-") : std::string(it->second.data(), it->second.size());
}

// The scheduler handle of a call, set once Submit returned; a cancel that comes earlier (the
// client went away, a stop string matched in the first tokens) is applied when it is set.
class CancelHandle {
 public:
  void Set(Scheduler* sched, uint64_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    sched_ = sched;
    handle_ = handle;
    if (pending_) sched_->Cancel(handle_);
    for (int choice : pending_choices_) sched_->CancelChoice(handle_, choice);
  }
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    if (sched_ != nullptr) {
      sched_->Cancel(handle_);
    } else {
      pending_ = true;
    }
  }
  // Ends one choice of an n > 1 call (a stop string matched in its text).
  void CancelChoice(int choice) {
    std::lock_guard<std::mutex> lock(mu_);
    if (sched_ != nullptr) {
      sched_->CancelChoice(handle_, choice);
    } else {
      pending_choices_.push_back(choice);
    }
  }

 private:
  std::mutex mu_;
  Scheduler* sched_ = nullptr;
  uint64_t handle_ = 0;
  bool pending_ = false;
  std::vector<int> pending_choices_;
};

class GenerateReactor;

// What the scheduler's thread and the gRPC reactor share: the events not yet written. The
// scheduler pushes; the reactor writes one at a time and calls Finish exactly once: after the
// final event is written, or when the client cancelled or a write failed. Outlives both.
struct EventQueue {
  std::mutex mu;
  std::deque<pb::GenerateEvent> events;
  bool writing = false;
  bool final_queued = false;  // every choice's FinalEvent is queued
  int finals_expected = 1;    // GenerateRequest.n
  int finals_queued = 0;
  bool finished = false;  // Finish called (or about to be): no more writes
  GenerateReactor* reactor = nullptr;  // null once the call is done
  CancelHandle cancel;
};

class GenerateReactor : public grpc::ServerWriteReactor<pb::GenerateEvent> {
 public:
  GenerateReactor(std::shared_ptr<EventQueue> queue, std::atomic<int64_t>* active)
      : queue_(std::move(queue)), active_(active) {
    ++*active_;
  }

  // Called by whoever queued an event: starts a write when none is in flight. The reactor stays
  // alive meanwhile: OnDone needs Finish, and Finish is never called while `writing`.
  static void Kick(const std::shared_ptr<EventQueue>& q) {
    GenerateReactor* r = nullptr;
    const pb::GenerateEvent* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(q->mu);
      if (q->reactor == nullptr || q->finished || q->writing || q->events.empty()) return;
      q->writing = true;
      r = q->reactor;
      next = &q->events.front();  // deque: stays valid while more are pushed at the back
    }
    r->StartWrite(next);
  }

  void OnWriteDone(bool ok) override {
    bool finish = false;
    grpc::Status status = grpc::Status::OK;
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->writing = false;
      queue_->events.pop_front();
      if (!ok || queue_->finished) {
        // A failed write, or OnCancel ran while this write was in flight and left Finish to us.
        finish = true;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      } else if (queue_->events.empty() && queue_->final_queued) {
        finish = true;
      }
      queue_->finished |= finish;
    }
    if (!ok) queue_->cancel.Cancel();
    if (finish) {
      Finish(status);
    } else {
      Kick(queue_);
    }
  }

  void OnCancel() override {
    queue_->cancel.Cancel();
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      if (!queue_->finished && !queue_->writing) {
        queue_->finished = true;
        finish = true;
      } else {
        queue_->finished = true;  // OnWriteDone finishes
      }
    }
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->reactor = nullptr;
    }
    --*active_;
    delete this;
  }

 private:
  std::shared_ptr<EventQueue> queue_;
  std::atomic<int64_t>* active_;
};

// Receives the scheduler's output for one choice of a call (on the scheduler's thread):
// detokenizes, matches stop strings, counts the reasoning tokens among those sent, and queues
// the events, tagged with the choice's index.
class StreamSink : public GenerationSink {
 public:
  StreamSink(std::shared_ptr<EventQueue> queue, const common::Tokenizer& tokenizer,
             std::vector<std::string> stops, std::string request_id, std::string model,
             WorkerCounters* counters, uint64_t seed, ReasoningCounter reasoning, int choice = 0,
             int n_choices = 1)
      : choice_(choice),
        n_choices_(n_choices),
        queue_(std::move(queue)),
        tokenizer_(tokenizer),
        detok_(tokenizer),
        stops_(std::move(stops)),
        request_id_(std::move(request_id)),
        model_(std::move(model)),
        counters_(counters),
        seed_(seed),
        reasoning_(reasoning) {}

  void OnTokens(absl::Span<const GeneratedToken> tokens) override {
    if (stops_.matched()) return;
    pb::GenerateEvent ev;
    pb::TokenEvent* te = ev.mutable_token_event();
    std::string text;
    for (const GeneratedToken& t : tokens) {
      te->add_token_ids(t.token);
      if (t.logprobs) {
        pb::TokenLogprobs* lp = te->add_logprobs();
        lp->mutable_chosen()->set_token_id(t.token);
        lp->mutable_chosen()->set_logprob(t.logprobs->logprob);
        for (const TokenLogprob& alt : t.logprobs->top) {
          pb::TokenLogprob* a = lp->add_top();
          a->set_token_id(alt.token);
          a->set_logprob(alt.logprob);
        }
      }
      reasoning_.Feed(t.token, IsBlankText(tokenizer_.Piece(t.token)));
      text += stops_.Push(detok_.Push(t.token));
      if (stops_.matched()) break;
    }
    te->set_text(text);
    te->set_choice_index(choice_);
    Push(std::move(ev));
    // The scheduler ends the choice with kCancelled (only this one of several).
    if (stops_.matched()) {
      if (n_choices_ > 1) {
        queue_->cancel.CancelChoice(choice_);
      } else {
        queue_->cancel.Cancel();
      }
    }
  }

  void OnFinish(const GenerationResult& r) override {
    pb::GenerateEvent tail;
    if (!stops_.matched()) {
      std::string rest = stops_.Push(detok_.Flush());
      rest += stops_.Flush();
      if (!rest.empty()) {
        tail.mutable_token_event()->set_text(rest);
        tail.mutable_token_event()->set_choice_index(choice_);
        Push(std::move(tail));
      }
    }
    pb::GenerateEvent ev;
    pb::FinalEvent* f = ev.mutable_final_event();
    pb::FinishReason reason = pb::FINISH_REASON_STOP;
    switch (r.reason) {
      case EndReason::kStop: reason = pb::FINISH_REASON_STOP; break;
      case EndReason::kLength: reason = pb::FINISH_REASON_LENGTH; break;
      case EndReason::kCancelled: reason = pb::FINISH_REASON_CANCELLED; break;
      case EndReason::kError: reason = pb::FINISH_REASON_ERROR; break;
    }
    if (stops_.matched()) {
      reason = pb::FINISH_REASON_STOP;
      f->set_matched_stop_string(std::string(stops_.matched_string()));
    }
    f->set_finish_reason(reason);
    if (!r.error.ok()) f->set_message(std::string(r.error.message()));
    f->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(r.prompt_tokens));
    f->mutable_usage()->set_cached_prompt_tokens(static_cast<int32_t>(r.cached_prompt_tokens));
    f->mutable_usage()->set_completion_tokens(static_cast<int32_t>(r.completion_tokens));
    f->mutable_usage()->set_reasoning_tokens(static_cast<int32_t>(reasoning_.count()));
    f->mutable_timings()->set_queue_ms(r.queue_ms);
    f->mutable_timings()->set_prefill_ms(r.prefill_ms);
    f->mutable_timings()->set_decode_ms(r.decode_ms);
    f->mutable_timings()->set_time_to_first_token_ms(r.first_token_ms);
    f->set_seed(seed_);
    f->set_choice_index(choice_);
    // The choices share one prompt: counted once.
    if (choice_ == 0) counters_->prompt_tokens += r.prompt_tokens;
    counters_->completion_tokens += r.completion_tokens;
    if (reason == pb::FINISH_REASON_ERROR) ++counters_->requests_failed;
    if (reason == pb::FINISH_REASON_CANCELLED) ++counters_->requests_cancelled;
    // One log line per request (stderr, common/request_log.h; the id comes from the router).
    common::RequestLogLine line("request");
    line.Str("id", request_id_)
        .Str("model", model_)
        .Str("finish", pb::FinishReason_Name(reason))
        .Int("prompt", r.prompt_tokens)
        .Int("cached", r.cached_prompt_tokens)
        .Str("cached_from", r.cached_from == SnapshotSource::kRemote ? "redis"
                            : r.cached_from == SnapshotSource::kRam  ? "ram"
                                                                     : "none")
        .Int("completion", r.completion_tokens)
        .Int("reasoning", reasoning_.count())
        .Num("queue_ms", r.queue_ms)
        .Num("ttft_ms", r.first_token_ms)
        .Num("restore_ms", r.restore_ms)
        .Num("prefill_ms", r.prefill_ms)
        .Num("decode_ms", r.decode_ms)
        .Int("preemptions", r.preemptions);
    if (n_choices_ > 1) line.Int("choice", choice_);
    if (!r.error.ok()) line.Str("error", std::string(r.error.message()));
    common::WriteLogLine(line.Render(common::RequestLogFormat()));
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->final_queued = ++queue_->finals_queued >= queue_->finals_expected;
      queue_->events.push_back(std::move(ev));
    }
    GenerateReactor::Kick(queue_);
  }

 private:
  void Push(pb::GenerateEvent ev) {
    {
      std::lock_guard<std::mutex> lock(queue_->mu);
      queue_->events.push_back(std::move(ev));
    }
    GenerateReactor::Kick(queue_);
  }

  int choice_, n_choices_;
  std::shared_ptr<EventQueue> queue_;
  const common::Tokenizer& tokenizer_;
  common::StreamingDetokenizer detok_;
  StopStringMatcher stops_;
  std::string request_id_, model_;
  WorkerCounters* counters_;
  uint64_t seed_;
  ReasoningCounter reasoning_;  // over the tokens sent (Usage.reasoning_tokens)
};

// A reactor that ends the call at once with an error.
class RefusedReactor : public grpc::ServerWriteReactor<pb::GenerateEvent> {
 public:
  explicit RefusedReactor(grpc::Status s) { Finish(std::move(s)); }
  void OnDone() override { delete this; }
};

// Submits `g` and ties the call to the sequence; when the scheduler refuses, ends the call with
// the refusal's status (unless the client already ended it). Runs on a gRPC thread or, after a
// Redis lookup, on a fetch thread.
void SubmitGeneration(ServedModel& model, GenerationRequest g,
                      const std::shared_ptr<EventQueue>& queue,
                      std::vector<std::shared_ptr<GenerationSink>> sinks,
                      const std::string& model_name, WorkerCounters& counters) {
  const std::string id = g.id;
  absl::StatusOr<uint64_t> handle = model.scheduler().Submit(std::move(g), std::move(sinks));
  if (!handle.ok()) {
    ++counters.requests_failed;
    std::fprintf(stderr, "request id=%s model=%s refused: %s\n", id.c_str(), model_name.c_str(),
                 std::string(handle.status().message()).c_str());
    GenerateReactor* reactor = nullptr;
    {
      std::lock_guard<std::mutex> lock(queue->mu);
      queue->events.clear();
      // Nothing was submitted, so no write is in flight; whoever sets `finished` calls Finish.
      if (!queue->finished && queue->reactor != nullptr) reactor = queue->reactor;
      queue->finished = true;
    }
    if (reactor != nullptr) {
      reactor->Finish(
          grpc::Status(GrpcCode(handle.status()), std::string(handle.status().message())));
    }
    return;
  }
  queue->cancel.Set(&model.scheduler(), *handle);
  GenerateReactor::Kick(queue);  // events may already be queued
}

}  // namespace

WorkerService::WorkerService(std::string worker_id, std::string device,
                             std::map<std::string, ServedModel*> models)
    : worker_id_(std::move(worker_id)), device_(std::move(device)), models_(std::move(models)) {}

grpc::ServerWriteReactor<pb::GenerateEvent>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const pb::GenerateRequest* request) {
  ++counters_.requests;
  if (draining_) {
    ++counters_.requests_failed;
    return new RefusedReactor(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining"));
  }
  auto it = models_.find(request->model());
  if (it == models_.end()) {
    ++counters_.requests_failed;
    return new RefusedReactor(grpc::Status(
        grpc::StatusCode::NOT_FOUND, absl::StrCat("model '", request->model(), "' is not served here")));
  }
  ServedModel& model = *it->second;
  const std::string id = RequestId(*context, *request);
  const int n_choices = request->has_n() ? request->n() : 1;
  if (n_choices < 1 || n_choices > kMaxChoices) {
    ++counters_.requests_failed;
    return new RefusedReactor(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("n: ", n_choices, " choices asked; between 1 and ", kMaxChoices,
                     " are allowed")));
  }
  GenerationRequest g;
  g.id = id;
  g.prompt.assign(request->prompt_token_ids().begin(), request->prompt_token_ids().end());
  g.sampling = SamplingFromProto(request->sampling());
  g.logprobs = request->sampling().logprobs();
  g.message_boundaries.assign(request->message_boundaries().begin(),
                              request->message_boundaries().end());
  g.turn_end_tokens.assign(request->turn_end_token_ids().begin(),
                           request->turn_end_token_ids().end());
  for (int32_t t : g.turn_end_tokens) {
    // Fed to the model after the output: ids outside the vocabulary would be refused there, so
    // such a list is dropped here (it only steers caching).
    if (t < 0 || t >= model.model().n_vocab()) {
      g.turn_end_tokens.clear();
      break;
    }
  }
  const int32_t budget = request->has_reasoning_budget() ? request->reasoning_budget()
                                                         : model.options().reasoning_budget;
  if (request->has_reasoning_budget() && budget < 0) {
    ++counters_.requests_failed;
    return new RefusedReactor(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                           "reasoning_budget must be >= 0"));
  }
  // Counts each choice's reasoning tokens for its usage; nothing without markup.
  ReasoningCounter reasoning(-1, -1, false);
  if (const ReasoningTokens& rt = model.reasoning_tokens(); rt.start >= 0) {
    // The markers serve the budget and the output constraint's start alike.
    g.reasoning_budget = budget;
    g.reasoning_start_token = rt.start;
    g.reasoning_end_tokens = rt.end;
    g.reasoning_open = PromptOpensReasoning(g.prompt, rt.start, rt.end.front());
    reasoning = ReasoningCounter(rt.start, rt.end.front(), g.reasoning_open);
  }
  if (request->has_output_constraint()) {
    absl::StatusOr<common::grammar::OutputConstraintSpec> spec =
        ConstraintFromProto(request->output_constraint());
    absl::StatusOr<std::shared_ptr<common::grammar::CompiledGrammar>> grammar =
        spec.ok()
            ? model.grammar_cache().Get(*spec)
            : absl::StatusOr<std::shared_ptr<common::grammar::CompiledGrammar>>(spec.status());
    if (!grammar.ok()) {
      ++counters_.requests_failed;
      return new RefusedReactor(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("output_constraint: ", grammar.status().message())));
    }
    g.grammar = std::move(*grammar);
    g.trie = model.token_trie();
    g.grammar_after_reasoning = request->output_constraint().after_reasoning();
    g.grammar_reasoning_may_open = request->output_constraint().reasoning_may_open();
  }
  if (!g.sampling.seed.has_value()) {
    // Drawn here so the final event can report it (the sampler would draw its own otherwise).
    static std::atomic<uint64_t> counter{0x9E3779B97F4A7C15ull};
    g.sampling.seed = std::hash<std::string>()(id) ^ (counter += 0x9E3779B97F4A7C15ull);
  }
  const uint64_t seed = *g.sampling.seed;
  std::vector<std::string> stops(request->sampling().stop_strings().begin(),
                                 request->sampling().stop_strings().end());
  auto queue = std::make_shared<EventQueue>();
  queue->finals_expected = n_choices;
  // One sink per choice: its own detokenizer and stop strings; choice i samples with seed + i
  // (scheduler_fork.cc) and reports it.
  std::vector<std::shared_ptr<GenerationSink>> sinks;
  for (int i = 0; i < n_choices; ++i) {
    sinks.push_back(std::make_shared<StreamSink>(
        queue, model.tokenizer(), stops, i == 0 ? id : absl::StrCat(id, "#", i), request->model(),
        &counters_, seed + static_cast<uint64_t>(i), reasoning, i, n_choices));
  }
  auto* reactor = new GenerateReactor(queue, &active_streams_);
  {
    std::lock_guard<std::mutex> lock(queue->mu);
    queue->reactor = reactor;
  }
  if (RedisSnapshotTier* tier_ptr = redis_tier(request->model()); tier_ptr != nullptr) {
    RedisSnapshotTier& tier = *tier_ptr;
    if (std::optional<RedisLookupPlan> plan = tier.PlanLookup(g.prompt, g.message_boundaries)) {
      // Redis may hold a longer prefix than RAM: the lookup runs on the tier's fetch threads,
      // which then submit, so a slow Redis never holds a gRPC thread. The reactor is returned
      // now; an early cancel is kept by the CancelHandle until Submit returns.
      auto pending = std::make_shared<GenerationRequest>(std::move(g));
      tier.FetchAsync(std::move(*plan), [&model, pending, queue, sinks, counters = &counters_,
                                         model_name = request->model()](
                                            std::shared_ptr<const SnapshotImage> image) {
        pending->remote_snapshot = std::move(image);
        SubmitGeneration(model, std::move(*pending), queue, sinks, model_name, *counters);
      });
      return reactor;
    }
  }
  SubmitGeneration(model, std::move(g), queue, std::move(sinks), request->model(), counters_);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::GetWorkerInfo(grpc::CallbackServerContext* context,
                                                       const pb::WorkerInfoRequest* request,
                                                       pb::WorkerInfo* response) {
  response->set_worker_id(worker_id_);
  response->set_device(device_);
  response->set_draining(draining_);
  for (auto& [name, model] : models_) {
    if (!request->models().empty() &&
        std::find(request->models().begin(), request->models().end(), name) ==
            request->models().end()) {
      continue;
    }
    DescribeModel(name, *model, request->include_tokenizer(), *response->add_models());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Drain(grpc::CallbackServerContext* context,
                                               const pb::DrainRequest* request,
                                               pb::DrainResponse* response) {
  response->set_already_draining(draining_.exchange(true));
  int32_t running = 0, waiting = 0;
  for (auto& [name, model] : models_) {
    const SchedulerStats s = model->scheduler().stats();
    running += static_cast<int32_t>(s.running);
    waiting += static_cast<int32_t>(s.waiting);
  }
  response->set_running_sequences(running);
  response->set_waiting_sequences(waiting);
  if (request->exit_when_idle()) exit_requested_ = true;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace deltaserve::worker
