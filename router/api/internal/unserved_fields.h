#pragma once
// Request fields for things DeltaServe does not have (stored completions, service tiers, audio,
// web search, code-execution containers, server-side context editing, ...): each is accepted only
// as the value whose documented meaning DeltaServe already delivers (its default, or what asks
// for nothing), and refused with a 400 naming it otherwise, so no field is silently ignored
// (docs/api_fields.md). Private to router/api.

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::api::internal {

// OpenAI's safety_identifier (chat, Responses): a string; the request's user for the logs when
// `user` was not sent.
absl::Status ReadSafetyIdentifier(const nlohmann::ordered_json& doc, CompletionRequest* r);

// OpenAI's service_tier (chat, Responses): "auto" and "default" pass (there is one tier);
// "flex", "priority" and "scale" are 400 unsupported_value, anything else invalid_value.
absl::Status CheckOpenAiServiceTier(const nlohmann::ordered_json& doc);

// The chat completion fields with nothing behind them here: store (false only), metadata
// (string pairs; attached to a stored completion, and none is stored), modalities (["text"]),
// audio, prediction, web_search_options, functions, function_call (refused when sent),
// prompt_cache_key (a string: a caching hint).
absl::Status CheckChatUnservedFields(const nlohmann::ordered_json& doc);

// Anthropic's fields for Anthropic-side services: service_tier ("auto", "standard_only"),
// speed ("standard"), context_management (only the clear_thinking edit that keeps all thinking,
// what Claude Code sends: nothing is edited), container, mcp_servers (non-empty) and
// inference_geo refused.
absl::Status CheckAnthropicUnservedFields(const nlohmann::ordered_json& doc);

}  // namespace deltaserve::router::api::internal
