#include "router/routing/router_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router {

using common::Sv;

RouterTokenizer::RouterTokenizer(ConfigSource config, const WorkerPool* pool,
                                 TokenizerProvider* tokenizers, const PromptRenderer* renderer)
    : config_(std::move(config)), pool_(pool), tokenizers_(tokenizers), renderer_(renderer) {}

absl::StatusOr<RouterTokenizer::Resolved> RouterTokenizer::Resolve(std::string_view model) const {
  const std::shared_ptr<const RouterConfig> config = config_();
  std::string name(model);
  if (name.empty()) {
    // llama.cpp's /tokenize names no model: fine while there is only one.
    std::vector<std::string> served = pool_->ServedModelNames();
    if (config->models.size() == 1) served = {config->models[0].name};
    if (served.size() != 1) {
      return api::InvalidRequestError(
          "model", "missing_required_parameter",
          absl::StrCat("'model' is required: the router serves ", served.size(), " models"));
    }
    name = served[0];
  }
  absl::StatusOr<std::vector<Candidate>> candidates = ResolveCandidates(name, *config);
  if (!candidates.ok()) return candidates.status();
  bool known = !config->models.empty();
  bool only_upstreams = true;
  for (Candidate& c : *candidates) {
    // An upstream model's tokenizer is the upstream's own: the router has none for it.
    if (c.upstream != nullptr) continue;
    only_upstreams = false;
    known = known || pool_->EverServed(c.served_name);
    for (const ServingWorker& s : pool_->ModelsServing(c.served_name)) {
      if (s.model == nullptr || s.model->tokenizer == nullptr) continue;
      absl::StatusOr<const common::Tokenizer*> tok =
          tokenizers_->Get(*s.model->tokenizer, s.model->tokenizer_digest);
      if (!tok.ok()) {
        return absl::InternalError(absl::StrCat("tokenizer of model '", s.model->name,
                                                "' from its worker is unusable: ",
                                                tok.status().message()));
      }
      return Resolved{std::move(c), s.model, *tok};
    }
  }
  if (only_upstreams) {
    return api::InvalidRequestError(
        "model", "unsupported_value",
        absl::StrCat("'", name,
                     "' is served by an upstream endpoint, whose tokenizer the router does not "
                     "have: token counting and /tokenize need a local model"));
  }
  if (!known) {
    return api::WithErrorDetail(
        absl::NotFoundError(absl::StrCat("The model '", name, "' does not exist")), "model",
        "model_not_found");
  }
  return absl::UnavailableError(
      absl::StrCat("no worker has reported the tokenizer of model '", name, "' yet"));
}

absl::StatusOr<api::TokenizedPrompt> RouterTokenizer::Tokenize(
    const api::CompletionRequest& request) const {
  absl::StatusOr<Resolved> r = Resolve(request.model);
  if (!r.ok()) return r.status();
  api::CompletionRequest copy = request;
  ApplyModelDefaults(r->candidate.defaults, copy);
  absl::StatusOr<RenderedPrompt> rendered = renderer_->Render(copy, *r->model, *r->tokenizer);
  if (!rendered.ok()) return rendered.status();
  return api::TokenizedPrompt{r->candidate.name, std::move(rendered->token_ids),
                              r->model->context_length};
}

absl::StatusOr<api::TokenizedPrompt> RouterTokenizer::TokenizeText(
    std::string_view model, std::string_view text, api::TextTokenizeOptions options) const {
  absl::StatusOr<Resolved> r = Resolve(model);
  if (!r.ok()) return r.status();
  api::TokenizedPrompt out{r->candidate.name, {}, r->model->context_length};
  const deltaserve::v1::Tokenizer& proto = *r->model->tokenizer;
  if (options.add_special && proto.has_special() && proto.special().add_bos() &&
      proto.special().has_bos_id() && proto.special().bos_id() >= 0) {
    out.token_ids.push_back(proto.special().bos_id());
  }
  std::vector<int32_t> ids = r->tokenizer->Encode(text, options.parse_special);
  out.token_ids.insert(out.token_ids.end(), ids.begin(), ids.end());
  return out;
}

absl::StatusOr<std::string> RouterTokenizer::Detokenize(
    std::string_view model, const std::vector<int32_t>& token_ids) const {
  absl::StatusOr<Resolved> r = Resolve(model);
  if (!r.ok()) return r.status();
  const int32_t n_vocab = r->tokenizer->vocab_size();
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] < 0 || token_ids[i] >= n_vocab) {
      return api::InvalidRequestError(
          absl::StrCat("tokens[", i, "]"), "invalid_value",
          absl::StrCat("Token id ", token_ids[i], " is outside the vocabulary of model '",
                       r->candidate.name, "' (", n_vocab, " tokens)"));
    }
  }
  return r->tokenizer->Decode(token_ids);
}

absl::StatusOr<std::vector<std::string>> RouterTokenizer::Pieces(
    std::string_view model, const std::vector<int32_t>& token_ids) const {
  absl::StatusOr<Resolved> r = Resolve(model);
  if (!r.ok()) return r.status();
  std::vector<std::string> out;
  out.reserve(token_ids.size());
  for (int32_t id : token_ids) {
    out.emplace_back(id >= 0 && id < r->tokenizer->vocab_size() ? r->tokenizer->Piece(id) : "");
  }
  return out;
}

}  // namespace deltaserve::router
