#include "router/api/tokenize_endpoint.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"
#include "router/api/request_parser.h"

namespace deltaserve::router::api {
namespace {

using internal::Dump;
using internal::Member;
using internal::ReadBool;
using internal::ReadString;
using internal::TypeError;
using json = nlohmann::ordered_json;

absl::StatusOr<std::string> Tokenize(std::string_view body, std::string_view authorization,
                                     const PromptTokenizer& tokenizer, const ModelListGate* gate) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  std::optional<std::string> model;
  DS_RETURN_IF_ERROR(ReadString(*doc, "model", "model", &model));
  std::optional<bool> with_pieces;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "with_pieces", "with_pieces", &with_pieces));
  // Every field is type-checked whichever form the body takes, so a bad one is a 400 either way.
  std::optional<bool> generation_prompt;
  DS_RETURN_IF_ERROR(
      ReadBool(*doc, "add_generation_prompt", "add_generation_prompt", &generation_prompt));
  std::optional<std::string> text, content;
  DS_RETURN_IF_ERROR(ReadString(*doc, "prompt", "prompt", &text));
  DS_RETURN_IF_ERROR(ReadString(*doc, "content", "content", &content));
  if (!text) text = std::move(content);
  TextTokenizeOptions options;
  std::optional<bool> add_special, add_special_tokens, parse_special;
  DS_RETURN_IF_ERROR(ReadBool(*doc, "add_special", "add_special", &add_special));
  DS_RETURN_IF_ERROR(
      ReadBool(*doc, "add_special_tokens", "add_special_tokens", &add_special_tokens));
  DS_RETURN_IF_ERROR(ReadBool(*doc, "parse_special", "parse_special", &parse_special));
  options.add_special = add_special_tokens.value_or(add_special.value_or(true));
  options.parse_special = parse_special.value_or(true);

  absl::StatusOr<TokenizedPrompt> tokens;
  if (Member(*doc, "messages") != nullptr) {
    if (!generation_prompt.value_or(true)) {
      return InvalidRequestError("add_generation_prompt", "unsupported_value",
                                 "only add_generation_prompt true is supported: messages are "
                                 "rendered as a chat completion renders them");
    }
    // The chat completion parser: the same fields (tools, chat_template_kwargs, ...) and checks.
    absl::StatusOr<CompletionRequest> request = ParseChatCompletionRequest(body);
    if (!request.ok()) return request.status();
    DS_RETURN_IF_ERROR(CheckModelAccess(gate, authorization, request->model));
    tokens = tokenizer.Tokenize(*request);
  } else {
    if (!text) {
      return InvalidRequestError("prompt", "missing_required_parameter",
                                 "'prompt' (or 'content', or 'messages') is required");
    }
    // Without a model the key is still checked (401) before any work.
    DS_RETURN_IF_ERROR(CheckModelAccess(gate, authorization, model.value_or("")));
    tokens = tokenizer.TokenizeText(model.value_or(""), *text, options);
    // Without a model named, the one model served: its access is checked once known.
    if (tokens.ok() && !model) {
      DS_RETURN_IF_ERROR(CheckModelAccess(gate, authorization, tokens->model));
    }
  }
  if (!tokens.ok()) return tokens.status();
  json ids = json::array();
  if (with_pieces.value_or(false)) {
    absl::StatusOr<std::vector<std::string>> pieces =
        tokenizer.Pieces(tokens->model, tokens->token_ids);
    if (!pieces.ok()) return pieces.status();
    for (size_t i = 0; i < tokens->token_ids.size(); ++i) {
      ids.push_back({{"id", tokens->token_ids[i]}, {"piece", (*pieces)[i]}});
    }
  } else {
    for (int32_t id : tokens->token_ids) ids.push_back(id);
  }
  return Dump({{"tokens", std::move(ids)},
               {"count", tokens->token_ids.size()},
               {"max_model_len", tokens->max_model_len},
               {"model", tokens->model}});
}

absl::StatusOr<std::string> Detokenize(std::string_view body, std::string_view authorization,
                                       const PromptTokenizer& tokenizer,
                                       const ModelListGate* gate) {
  absl::StatusOr<json> doc = internal::ParseJsonObject(body, RequestJsonLimits(body.size()));
  if (!doc.ok()) return doc.status();
  std::optional<std::string> model;
  DS_RETURN_IF_ERROR(ReadString(*doc, "model", "model", &model));
  const json* tokens = Member(*doc, "tokens");
  if (tokens == nullptr) {
    return InvalidRequestError("tokens", "missing_required_parameter", "'tokens' is required");
  }
  if (!tokens->is_array()) return TypeError("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    std::optional<int64_t> id = internal::AsInt((*tokens)[i]);
    if (!id || *id < 0 || *id > INT32_MAX) {
      return InvalidRequestError(absl::StrCat("tokens[", i, "]"), "invalid_value",
                                 "token ids must be integers in [0, 2^31)");
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  DS_RETURN_IF_ERROR(CheckModelAccess(gate, authorization, model.value_or("")));
  absl::StatusOr<std::string> text = tokenizer.Detokenize(model.value_or(""), ids);
  if (!text.ok()) return text.status();
  return Dump({{"prompt", *text}, {"content", *text}, {"model", model.value_or("")}});
}

using Handler = absl::StatusOr<std::string> (*)(std::string_view, std::string_view,
                                                const PromptTokenizer&, const ModelListGate*);

void Run(Handler handler, const std::shared_ptr<http::HttpExchange>& exchange,
         const PromptTokenizer* tokenizer, const ModelListGate* gate) {
  const http::Request& request = exchange->request();
  absl::StatusOr<std::string> body =
      tokenizer == nullptr
          ? absl::StatusOr<std::string>(absl::UnavailableError("tokenizing is not available"))
          : handler(request.body, request.Header("authorization"), *tokenizer, gate);
  exchange->Respond(body.ok() ? http::Response::Json(200, std::move(*body))
                              : ApiErrorResponse(ApiErrorFromStatus(body.status())));
}

}  // namespace

absl::Status CheckModelAccess(const ModelListGate* gate, std::string_view authorization,
                              std::string_view model) {
  if (gate == nullptr) return absl::OkStatus();
  absl::StatusOr<std::function<bool(std::string_view)>> visible = gate->Visible(authorization);
  if (!visible.ok()) return visible.status();
  if (model.empty() || (*visible)(model)) return absl::OkStatus();
  return WithErrorDetail(
      absl::PermissionDeniedError(
          absl::StrCat("This API key may not use the model '", std::string(model), "'")),
      "model", "model_not_allowed");
}

void HandleTokenize(std::shared_ptr<http::HttpExchange> exchange, const PromptTokenizer* tokenizer,
                    const ModelListGate* gate) {
  Run(&Tokenize, exchange, tokenizer, gate);
}

void HandleDetokenize(std::shared_ptr<http::HttpExchange> exchange,
                      const PromptTokenizer* tokenizer, const ModelListGate* gate) {
  Run(&Detokenize, exchange, tokenizer, gate);
}

http::Response ModelById(const http::Request& request, std::string_view id,
                         const RouterState& state, const ModelListGate* gate) {
  std::function<bool(std::string_view)> visible;
  if (gate != nullptr) {
    absl::StatusOr<std::function<bool(std::string_view)>> v =
        gate->Visible(request.Header("authorization"));
    if (!v.ok()) return ApiErrorResponse(ApiErrorFromStatus(v.status()));
    visible = std::move(*v);
  }
  for (const ModelCard& m : state.Models()) {
    if (m.id != id || (visible && !visible(m.id))) continue;
    return http::Response::Json(200, Dump({{"id", m.id},
                                           {"object", "model"},
                                           {"created", m.created},
                                           {"owned_by", m.owned_by}}));
  }
  return ApiErrorResponse(ApiErrorFromStatus(WithErrorDetail(
      absl::NotFoundError(absl::StrCat("The model '", std::string(id), "' does not exist")),
      "model", "model_not_found")));
}

}  // namespace deltaserve::router::api
