#include "worker/service/request_from_proto.h"

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {

namespace pb = ::deltaserve::v1;

absl::StatusOr<common::grammar::OutputConstraintSpec> ConstraintFromProto(
    const pb::OutputConstraint& c) {
  using Spec = common::grammar::OutputConstraintSpec;
  Spec spec;
  auto read_calls = [&spec](const pb::ToolCallConstraint& calls) -> absl::Status {
    switch (calls.format()) {
      case pb::TOOL_CALL_FORMAT_QWEN_XML:
        spec.format = common::grammar::ToolCallFormat::kQwenXml;
        break;
      case pb::TOOL_CALL_FORMAT_JSON:
        spec.format = common::grammar::ToolCallFormat::kJson;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "tool call format ", static_cast<int>(calls.format()), " is not known"));
    }
    spec.parallel = calls.parallel();
    for (const pb::ToolFunction& f : calls.functions()) {
      spec.functions.push_back({f.name(), f.parameters_schema()});
    }
    return absl::OkStatus();
  };
  switch (c.kind_case()) {
    case pb::OutputConstraint::kJsonSchema:
      spec.kind = Spec::Kind::kJsonSchema;
      spec.schema_json = c.json_schema().schema();
      spec.strict = c.json_schema().strict();
      break;
    case pb::OutputConstraint::kJsonObject:
      spec.kind = Spec::Kind::kJsonObject;
      break;
    case pb::OutputConstraint::kRegex:
      spec.kind = Spec::Kind::kRegex;
      spec.regex = c.regex();
      break;
    case pb::OutputConstraint::kToolCall:
      spec.kind = Spec::Kind::kToolCall;
      if (absl::Status st = read_calls(c.tool_call()); !st.ok()) return st;
      break;
    default:
      return absl::InvalidArgumentError("no constraint kind is set (or it is not known)");
  }
  if (c.has_or_tool_call() &&
      (spec.kind == Spec::Kind::kJsonSchema || spec.kind == Spec::Kind::kJsonObject)) {
    spec.or_calls = true;
    if (absl::Status st = read_calls(c.or_tool_call()); !st.ok()) return st;
  }
  return spec;
}

SamplingParams SamplingFromProto(const pb::SamplingParams& p) {
  SamplingParams s;
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_k()) s.top_k = p.top_k();
  if (p.has_top_p()) s.top_p = p.top_p();
  if (p.has_min_p()) s.min_p = p.min_p();
  if (p.has_presence_penalty()) s.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) s.frequency_penalty = p.frequency_penalty();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  if (p.has_repetition_last_n()) s.repetition_last_n = p.repetition_last_n();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias[id] = bias;
  if (p.has_seed()) s.seed = p.seed();
  if (p.has_max_tokens()) s.max_tokens = p.max_tokens();
  s.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  s.ignore_eos = p.ignore_eos();
  s.top_logprobs = p.top_logprobs();
  return s;
}

}  // namespace deltaserve::worker
