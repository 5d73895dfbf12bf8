#include "tests/router/scripted_worker.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/byte_level.h"
#include "common/expert_placement.h"

namespace deltaserve::router::testing {

namespace v1 = ::deltaserve::v1;

class ScriptedWorker::Service final : public v1::Worker::Service {
 public:
  explicit Service(ScriptedWorker* owner) : w_(owner) {}

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override {
    ++w_->generate_calls_;
    GenerateScript script;
    bool draining;
    {
      std::lock_guard<std::mutex> lock(w_->mu_);
      w_->last_request_ = *request;
      w_->requests_.push_back(*request);
      if (!w_->queued_.empty()) {
        w_->script_ = w_->queued_.front();
        if (w_->queued_.size() > 1) w_->queued_.erase(w_->queued_.begin());
      }
      auto it = context->client_metadata().find("x-request-id");
      w_->last_request_id_metadata_ = it == context->client_metadata().end()
                                          ? ""
                                          : std::string(it->second.data(), it->second.size());
      script = w_->script_;
      draining = w_->draining_;
    }
    if (draining) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining");
    if (script.refuse != grpc::StatusCode::OK) {
      return grpc::Status(script.refuse, "scripted refusal");
    }
    bool served = false;
    {
      std::lock_guard<std::mutex> lock(w_->mu_);
      for (const ScriptedModel& m : w_->models_) served |= m.name == request->model();
    }
    if (!served) return grpc::Status(grpc::StatusCode::NOT_FOUND, "model not served");
    const int n_choices = request->has_n() ? std::max(1, request->n()) : 1;
    int sent = 0;
    for (const std::string& piece : script.pieces) {
      if (sent == script.break_after) return grpc::Status(script.break_code, "scripted break");
      for (int choice = 0; choice < n_choices; ++choice) {
        v1::GenerateEvent event;
        v1::TokenEvent* t = event.mutable_token_event();
        const int32_t id = piece.empty() ? 0 : static_cast<unsigned char>(piece[0]);
        t->add_token_ids(id);
        t->set_text(n_choices > 1 ? std::to_string(choice) + ":" + piece : piece);
        t->set_choice_index(choice);
        if (request->sampling().logprobs()) {
          v1::TokenLogprobs* lp = t->add_logprobs();
          lp->mutable_chosen()->set_token_id(id);
          lp->mutable_chosen()->set_logprob(-0.5f);
          for (int k = 0; k < request->sampling().top_logprobs(); ++k) {
            v1::TokenLogprob* top = lp->add_top();
            top->set_token_id('a' + k);
            top->set_logprob(-1.0f - k);
          }
        }
        if (!writer->Write(event)) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
      }
      ++sent;
      if (script.hold_after_first && sent == 1) {
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (context->IsCancelled()) {
          std::lock_guard<std::mutex> lock(w_->mu_);
          w_->cancel_seen_ = true;
          w_->cv_.notify_all();
        }
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      if (script.hold_until_release && sent == 1) {
        std::unique_lock<std::mutex> lock(w_->mu_);
        w_->cv_.wait_for(lock, std::chrono::seconds(20),
                         [&] { return w_->released_ || context->IsCancelled(); });
      }
    }
    int32_t reasoning = script.reasoning_tokens;
    if (reasoning < 0) {
      reasoning = 0;
      std::string text;
      for (int i = 0; i < sent; ++i) text += script.pieces[i];
      const size_t close = text.find("</think>");
      const size_t open = text.find("<think>");
      const size_t begin = open < close ? open + 7 : 0;
      size_t at = 0;
      for (int i = 0; i < sent && close != std::string::npos; ++i) {
        const size_t end = at + script.pieces[i].size();
        if (at >= begin && end <= close) ++reasoning;
        at = end;
      }
    }
    for (int choice = 0; choice < n_choices; ++choice) {
      v1::GenerateEvent final_event;
      v1::FinalEvent* f = final_event.mutable_final_event();
      f->set_finish_reason(choice == script.error_choice ? v1::FINISH_REASON_ERROR : script.finish);
      f->set_choice_index(choice);
      f->mutable_usage()->set_prompt_tokens(request->prompt_token_ids_size());
      f->mutable_usage()->set_cached_prompt_tokens(script.cached_prompt_tokens);
      f->mutable_usage()->set_completion_tokens(sent);
      f->mutable_usage()->set_reasoning_tokens(reasoning);
      if (!writer->Write(final_event)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetWorkerInfo(grpc::ServerContext* /*context*/, const v1::WorkerInfoRequest* request,
                             v1::WorkerInfo* info) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    if (w_->info_fails_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted outage");
    info->set_worker_id(w_->address());
    info->set_device("cpu");
    info->set_draining(w_->draining_);
    if (request->include_tokenizer()) ++w_->tokenizer_fetches_;
    for (const ScriptedModel& m : w_->models_) {
      if (request->models_size() > 0 &&
          std::find(request->models().begin(), request->models().end(), m.name) ==
              request->models().end()) {
        continue;
      }
      v1::ModelInfo* mi = info->add_models();
      mi->set_name(m.name);
      mi->set_architecture(m.architecture);
      mi->set_context_length(m.context_length);
      mi->set_n_vocab(m.tokenizer != nullptr ? m.tokenizer->tokens_size() : 256);
      mi->set_max_parallel_sequences(m.max_parallel);
      mi->set_tokenizer_digest(m.tokenizer_digest);
      mi->set_chat_template(m.chat_template);
      mi->mutable_load()->set_running_sequences(m.running);
      mi->mutable_load()->set_waiting_sequences(m.waiting);
      mi->mutable_load()->set_free_kv_pages(m.free_kv_pages);
      mi->mutable_load()->set_total_kv_pages(m.total_kv_pages);
      mi->set_snapshot_key_root(m.snapshot_key_root);
      for (uint64_t prefix : m.snapshot_key_prefixes) {
        mi->mutable_load()->add_snapshot_key_prefixes(prefix);
      }
      if (request->include_tokenizer()) {
        *mi->mutable_tokenizer() = m.tokenizer != nullptr ? *m.tokenizer : ByteTokenizer();
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status GetExpertStats(grpc::ServerContext* /*context*/,
                              const v1::ExpertStatsRequest* request,
                              v1::ExpertStats* out) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    if (w_->expert_stats_fail_) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted statistics outage");
    }
    v1::ExpertStats* stats = w_->StatsLocked(request->model());
    if (stats == nullptr) return UnknownModel(request->model());
    *out = *stats;
    return grpc::Status::OK;
  }

  grpc::Status SetExpertPlacement(grpc::ServerContext* /*context*/,
                                  const v1::SetExpertPlacementRequest* request,
                                  v1::SetExpertPlacementResponse* response) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    w_->placement_requests_.push_back(*request);
    if (w_->placement_refusal_ != grpc::StatusCode::OK) {
      return grpc::Status(w_->placement_refusal_, "scripted placement refusal");
    }
    v1::ExpertStats* stats = w_->StatsLocked(request->model());
    if (stats == nullptr) return UnknownModel(request->model());
    // The check a worker makes (worker/engine/expert_tiers.h uses the same function).
    common::ExpertPlacement target =
        common::ExpertPlacement::Empty(stats->n_layer(), stats->n_expert());
    for (const v1::LayerExperts& le : request->layers()) {
      if (le.layer() < 0 || le.layer() >= stats->n_layer()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "layer " + std::to_string(le.layer()) + " is not in the model");
      }
      target.device[static_cast<size_t>(le.layer())].assign(le.device_experts().begin(),
                                                            le.device_experts().end());
    }
    absl::Status valid = common::ValidateExpertPlacement(target, stats->device_slots());
    if (!valid.ok()) {
      return grpc::Status(static_cast<grpc::StatusCode>(valid.code()),
                          std::string(valid.message()));
    }
    int32_t moves_in = 0, moves_out = 0;
    for (v1::LayerExperts& le : *stats->mutable_layers()) {
      const auto& want = target.device[static_cast<size_t>(le.layer())];
      for (int32_t e : want) {
        moves_in += std::find(le.device_experts().begin(), le.device_experts().end(), e) ==
                    le.device_experts().end();
      }
      for (int32_t e : le.device_experts()) {
        moves_out += std::find(want.begin(), want.end(), e) == want.end();
      }
      if (!w_->placements_pending_) le.mutable_device_experts()->Assign(want.begin(), want.end());
    }
    if (w_->placements_pending_) {
      stats->set_moves_pending(moves_in + moves_out);
    } else {
      stats->set_moves_in(stats->moves_in() + static_cast<uint64_t>(moves_in));
      stats->set_moves_out(stats->moves_out() + static_cast<uint64_t>(moves_out));
      stats->set_moves_pending(0);
    }
    stats->set_placement_generation(request->generation());
    response->set_moves_in(moves_in);
    response->set_moves_out(moves_out);
    return grpc::Status::OK;
  }

 private:
  grpc::Status UnknownModel(const std::string& model) const {
    for (const ScriptedModel& m : w_->models_) {
      if (m.name == model) {
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "not a MoE model");
      }
    }
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "model not served");
  }

  ScriptedWorker* w_;
};

ScriptedWorker::ScriptedWorker(std::vector<ScriptedModel> models)
    : service_(std::make_unique<Service>(this)), models_(std::move(models)) {}

ScriptedWorker::~ScriptedWorker() { Stop(); }

void ScriptedWorker::Start(int port, const std::string& host) {
  grpc::ServerBuilder builder;
  int chosen = 0;
  host_ = host;
  builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(),
                           &chosen);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  port_ = chosen;
}

void ScriptedWorker::Stop() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
}

void ScriptedWorker::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  released_ = true;
  cv_.notify_all();
}

std::string ScriptedWorker::address() const { return host_ + ":" + std::to_string(port_); }

void ScriptedWorker::SetScript(GenerateScript script) {
  std::lock_guard<std::mutex> lock(mu_);
  script_ = std::move(script);
}
void ScriptedWorker::SetScripts(std::vector<GenerateScript> scripts) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_ = std::move(scripts);
}
void ScriptedWorker::SetModels(std::vector<ScriptedModel> models) {
  std::lock_guard<std::mutex> lock(mu_);
  models_ = std::move(models);
}
void ScriptedWorker::SetDraining(bool draining) {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = draining;
}
void ScriptedWorker::SetInfoFails(bool fails) {
  std::lock_guard<std::mutex> lock(mu_);
  info_fails_ = fails;
}

v1::ExpertStats* ScriptedWorker::StatsLocked(const std::string& model) {
  for (auto& [name, stats] : expert_stats_) {
    if (name == model) return &stats;
  }
  return nullptr;
}
void ScriptedWorker::SetExpertStats(const std::string& model, v1::ExpertStats stats) {
  std::lock_guard<std::mutex> lock(mu_);
  stats.set_model(model);
  if (v1::ExpertStats* s = StatsLocked(model)) {
    *s = std::move(stats);
  } else {
    expert_stats_.emplace_back(model, std::move(stats));
  }
}
v1::ExpertStats ScriptedWorker::expert_stats(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, stats] : expert_stats_) {
    if (name == model) return stats;
  }
  return v1::ExpertStats();
}
void ScriptedWorker::SetExpertStatsFails(bool fails) {
  std::lock_guard<std::mutex> lock(mu_);
  expert_stats_fail_ = fails;
}
void ScriptedWorker::SetPlacementRefusal(grpc::StatusCode code) {
  std::lock_guard<std::mutex> lock(mu_);
  placement_refusal_ = code;
}
void ScriptedWorker::SetPlacementsPending(bool pending) {
  std::lock_guard<std::mutex> lock(mu_);
  placements_pending_ = pending;
}
std::vector<v1::SetExpertPlacementRequest> ScriptedWorker::placement_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return placement_requests_;
}

v1::GenerateRequest ScriptedWorker::last_request() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_request_;
}
std::vector<v1::GenerateRequest> ScriptedWorker::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}
std::string ScriptedWorker::last_request_id_metadata() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_request_id_metadata_;
}

bool ScriptedWorker::WaitForCancel(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return cancel_seen_; });
}

v1::Tokenizer ScriptedWorker::ByteTokenizer() {
  v1::Tokenizer t;
  t.set_model("gpt2");
  t.set_pre("qwen35");
  for (int b = 0; b < 256; ++b) {
    t.add_tokens(common::ByteLevelEncode(std::string(1, static_cast<char>(b))));
    t.add_token_types(v1::TOKEN_TYPE_NORMAL);
  }
  return t;
}

}  // namespace deltaserve::router::testing
