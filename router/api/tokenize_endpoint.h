#pragma once
// The router's tokenizer endpoints, in the shapes llama.cpp's server and vLLM answer, and
// GET /v1/models/{id}:
//   POST /tokenize    {"model"?, "prompt" | "content", "add_special"? | "add_special_tokens"?,
//                      "parse_special"?, "with_pieces"?}  or  {"model", "messages", "tools"?,
//                      "chat_template_kwargs"?, "add_generation_prompt"?}
//                     → {"tokens": [ids] (or [{"id","piece"}] with_pieces), "count",
//                        "max_model_len", "model"}
//   POST /detokenize  {"model"?, "tokens": [ids]} → {"prompt": text, "content": text, "model"}
// Messages are rendered exactly as a chat completion would render them (PromptTokenizer), so
// "count" is that request's prompt_tokens. Errors are OpenAI-shaped (api_error.h). Access
// follows the API keys as GET /v1/models does (CheckModelAccess). docs/router.md.

#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "router/api/openai_api.h"
#include "router/api/prompt_tokenizer.h"
#include "router/api/router_state.h"
#include "router/http/http_exchange.h"

namespace deltaserve::router::api {

// OK when `gate` is null or lets the caller (`authorization`: the Authorization header's value)
// see `model` (empty: only the key is checked); else the gate's Unauthenticated (401) or
// PermissionDenied (403) naming the model.
absl::Status CheckModelAccess(const ModelListGate* gate, std::string_view authorization,
                              std::string_view model);

void HandleTokenize(std::shared_ptr<http::HttpExchange> exchange, const PromptTokenizer* tokenizer,
                    const ModelListGate* gate);
void HandleDetokenize(std::shared_ptr<http::HttpExchange> exchange,
                      const PromptTokenizer* tokenizer, const ModelListGate* gate);

// GET /v1/models/{id}: the model card of `id` ({"id","object":"model","created","owned_by"}), or
// 404 model_not_found for an id that GET /v1/models would not list to this caller.
http::Response ModelById(const http::Request& request, std::string_view id,
                         const RouterState& state, const ModelListGate* gate);

}  // namespace deltaserve::router::api
