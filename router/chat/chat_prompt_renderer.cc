#include "router/chat/chat_prompt_renderer.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "router/api/api_error.h"
#include "router/chat/chat_output_shaper.h"
#include "router/chat/chat_template_context.h"
#include "router/chat/message_boundaries.h"
#include "router/chat/output_constraint_request.h"
#include "router/chat/qwen_chat_template.h"

namespace deltaserve::router::chat {
namespace {

using json = nlohmann::ordered_json;

// The text of special token `id`, or "" when there is none.
std::string TokenString(const common::Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) return "";
  return std::string(tokenizer.TokenText(id));
}

// A template's failure on these messages is the client's (400): its own raise_exception with
// the template's words, else the engine's message naming the line.
absl::Status RenderError(const absl::Status& status, const std::string& model) {
  if (common::IsRaisedByTemplate(status)) {
    return api::InvalidRequestError("messages", "invalid_value", std::string(status.message()));
  }
  return api::InvalidRequestError(
      "messages", "invalid_value",
      absl::StrCat("The chat template of model '", model,
                   "' cannot render these messages: ", status.message()));
}

}  // namespace

ChatPromptRenderer::ChatPromptRenderer(std::string default_template)
    : default_template_(std::move(default_template)) {}

absl::StatusOr<std::shared_ptr<const common::ChatTemplate>> ChatPromptRenderer::Parsed(
    const std::string& source) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(source);
  if (it != cache_.end()) return it->second;
  absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(source);
  absl::StatusOr<std::shared_ptr<const common::ChatTemplate>> entry =
      parsed.ok() ? absl::StatusOr<std::shared_ptr<const common::ChatTemplate>>(
                        std::make_shared<const common::ChatTemplate>(std::move(*parsed)))
                  : absl::StatusOr<std::shared_ptr<const common::ChatTemplate>>(parsed.status());
  // Templates come from a handful of model files; a bound keeps a misbehaving worker from
  // growing the cache without end.
  if (cache_.size() >= 64) cache_.clear();
  cache_.emplace(source, entry);
  return entry;
}

absl::StatusOr<RenderedPrompt> ChatPromptRenderer::Render(
    const api::CompletionRequest& request, const ModelState& model,
    const common::Tokenizer& tokenizer) const {
  if (request.endpoint != api::Endpoint::kChatCompletions) {
    return completions_.Render(request, model, tokenizer);
  }
  const std::string& source = !request.chat_template_override.empty()
                                  ? request.chat_template_override
                              : !default_template_.empty() ? default_template_
                                                           : model.chat_template;
  const v1::SpecialTokens* special = model.tokenizer != nullptr && model.tokenizer->has_special()
                                         ? &model.tokenizer->special()
                                         : nullptr;
  const int32_t bos_id = special != nullptr && special->has_bos_id() ? special->bos_id() : -1;
  const int32_t eos_id = special != nullptr && special->has_eos_id() ? special->eos_id() : -1;
  const TemplateTokens tokens{TokenString(tokenizer, bos_id), TokenString(tokenizer, eos_id)};

  common::MarkedText text;
  if (!source.empty()) {
    absl::StatusOr<std::shared_ptr<const common::ChatTemplate>> tmpl = Parsed(source);
    if (!tmpl.ok()) {
      return absl::InternalError(absl::StrCat(
          "the chat template of model '", model.name, "' does not parse (", tmpl.status().message(),
          "); give the model a chat_template file in the router config"));
    }
    std::vector<std::string> router_keys;
    absl::StatusOr<json> context = BuildTemplateContext(request, tokens, &router_keys);
    if (!context.ok()) return context.status();
    absl::StatusOr<common::MarkedText> rendered = (*tmpl)->RenderMarked(*context, router_keys);
    if (!rendered.ok()) return RenderError(rendered.status(), model.name);
    text = std::move(*rendered);
  } else {
    {
      absl::MutexLock lock(&mu_);
      if (fallback_logged_.insert(model.name).second) {
        std::fprintf(stderr,
                     "chat: model '%s' reports no chat template; rendering with the built-in "
                     "Qwen3 template\n",
                     model.name.c_str());
      }
    }
    ChatOptions options;
    options.enable_thinking = request.enable_thinking.value_or(true);
    options.tools_json = request.tools_json;
    absl::StatusOr<common::MarkedText> rendered = RenderChatMarked(request.messages, options);
    if (!rendered.ok()) return rendered.status();
    text = std::move(*rendered);
  }

  RenderedPrompt out;
  absl::StatusOr<std::optional<v1::OutputConstraint>> constraint = RequestOutputConstraint(
      request, source.empty() ? common::grammar::ToolCallFormat::kJson : ToolCallFormatOf(source));
  if (!constraint.ok()) return constraint.status();
  out.output_constraint = std::move(*constraint);
  if (out.output_constraint) {
    // Thinking on and no block opened by the prompt: a template that leaves opening <think> to
    // the model (Qwen3's), unless it closed an empty block itself (thinking off).
    std::string_view tail = text.text;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
    out.output_constraint->set_reasoning_may_open(request.enable_thinking.value_or(true) &&
                                                  !PromptOpensThink(text.text) &&
                                                  !tail.ends_with("</think>"));
  }
  // A template that writes the BOS text itself (Llama) must not get a second one.
  const bool add_bos = special != nullptr && special->add_bos() && bos_id >= 0 &&
                       !(source.empty() ? false : text.text.starts_with(tokens.bos_token));
  if (add_bos) out.token_ids.push_back(bos_id);
  const std::vector<int32_t> ids =
      EncodeChatPrompt(tokenizer, text, request.allow_special_tokens_in_content);
  out.token_ids.insert(out.token_ids.end(), ids.begin(), ids.end());
  if (out.token_ids.empty()) {
    return api::InvalidRequestError("messages", "invalid_value", "The rendered prompt is empty");
  }
  const TurnEndTokens turn_end = FindTurnEndTokens(tokenizer, model.tokenizer.get());
  if (turn_end.eot_id >= 0) out.stop_token_ids.push_back(turn_end.eot_id);
  out.message_boundaries = MessageBoundaries(out.token_ids, turn_end.eot_id, turn_end.newline_id);
  if (turn_end.eot_id >= 0) {
    out.turn_end_token_ids.push_back(turn_end.eot_id);
    if (turn_end.newline_id >= 0) out.turn_end_token_ids.push_back(turn_end.newline_id);
  }

  OutputParseOptions options;
  if (!request.tools_json.empty()) {
    // Linear, unlike json::parse on ordered_json (common/json_reader.h, issue 17).
    absl::StatusOr<json> tools =
        common::ReadOrderedJson(request.tools_json, common::kNoJsonReadLimits);
    options.tools = tools.ok() ? *std::move(tools) : json(nullptr);
  }
  options.prompt_opened_think = PromptOpensThink(text.text);
  // toolcalls.md's orphan `</think>` comes from a generation prompt that ended with "<think>\n":
  // the router knows its prompt, so that is the opened case above. After a prompt that did not
  // open a block, output without `<think>` is the answer and streams as it comes, rather than
  // being held to the end for a `</think>` real models do not write there.
  options.allow_orphan_think_close = false;
  options.parse_tool_calls = request.tool_choice_json != "\"none\"";
  const bool parallel = request.parallel_tool_calls;
  out.output_shaper = [options, parallel](bool whole_output) -> std::unique_ptr<OutputShaper> {
    return std::make_unique<ChatOutputShaper>(options, whole_output, parallel);
  };
  return out;
}

}  // namespace deltaserve::router::chat
