// What a request asks the worker to constrain its output to (docs/structured_outputs.md, "The
// API"): `response_format` json_object / json_schema, or a `tool_choice` that forces a call
// ("required": one or more calls of the declared tools; a named function: exactly one call of
// it) in the model's own call markup; with `response_format` and tools under `tool_choice:
// "auto"`, the document or instead calls (OutputConstraint.or_tool_call), so that an agent asked
// for structured output can still call its tools. Built by the prompt renderers, which know the model's
// template and so its call format, and checked by compiling it as the worker will: a parameters
// schema the call grammar cannot enforce is a 400 naming the keyword, param
// `tools[i].function.parameters`, before any worker is involved.
//
//   ASSIGN_OR_RETURN(auto constraint, RequestOutputConstraint(request, ToolCallFormatOf(tmpl)));
//   if (constraint) rendered.output_constraint = *constraint;
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/output_constraint.h"
#include "deltaserve/v1/worker.pb.h"
#include "router/api/completion_request.h"

namespace deltaserve::router::chat {

// The call format a chat template writes: Qwen XML where its text has "<function=" (Qwen3.5,
// Qwen3-Coder), else the JSON body in <tool_call> (Qwen3, Qwen2.5, and the built-in template).
common::grammar::ToolCallFormat ToolCallFormatOf(std::string_view chat_template);

// The request's constraint, or nullopt for none (text output, tool_choice auto/none). The
// constraint starts after a reasoning block the prompt left open (after_reasoning). Errors are
// 400s (api::InvalidRequestError) naming the parameter.
absl::StatusOr<std::optional<deltaserve::v1::OutputConstraint>> RequestOutputConstraint(
    const api::CompletionRequest& request, common::grammar::ToolCallFormat format);

}  // namespace deltaserve::router::chat
