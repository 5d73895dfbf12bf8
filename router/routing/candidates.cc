#include "router/routing/candidates.h"

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"

namespace deltaserve::router {
namespace {

constexpr int kMaxAliasDepth = 8;

const AliasConfig* FindAlias(std::string_view name, const RouterConfig& config) {
  for (const AliasConfig& a : config.aliases) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const ModelConfig* FindModel(std::string_view name, const RouterConfig& config) {
  for (const ModelConfig& m : config.models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const UpstreamConfig* FindUpstream(std::string_view name, const RouterConfig& config) {
  for (const UpstreamConfig& u : config.upstreams) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

Candidate FromUpstream(const UpstreamConfig& u) {
  Candidate c{u.name, u.model, {}};
  c.upstream = &u;
  return c;
}

Candidate FromModel(const ModelConfig& m) {
  return Candidate{m.name, m.served_name.empty() ? m.name : m.served_name, m.defaults};
}

}  // namespace

bool IsAlias(std::string_view name, const RouterConfig& config) {
  return FindAlias(name, config) != nullptr;
}

absl::StatusOr<std::vector<Candidate>> ResolveCandidates(std::string_view model_or_alias,
                                                         const RouterConfig& config) {
  std::vector<Candidate> out;
  auto add = [&](Candidate c) {
    for (const Candidate& have : out) {
      if (have.name == c.name) return;
    }
    out.push_back(std::move(c));
  };
  // Models are looked up before aliases inside a chain, aliases before models at the top: a
  // name that is both is a configuration mistake the config validator reports.
  std::function<void(const AliasConfig&, int)> expand = [&](const AliasConfig& alias, int depth) {
    for (const std::string& entry : alias.chain) {
      if (const ModelConfig* m = FindModel(entry, config)) {
        add(FromModel(*m));
      } else if (const UpstreamConfig* u = FindUpstream(entry, config)) {
        add(FromUpstream(*u));
      } else if (const AliasConfig* inner = FindAlias(entry, config)) {
        if (depth < kMaxAliasDepth && inner != &alias) expand(*inner, depth + 1);
      } else if (config.models.empty()) {
        add(Candidate{entry, entry, {}});
      }
    }
  };
  if (const AliasConfig* alias = FindAlias(model_or_alias, config)) {
    expand(*alias, 1);
  } else if (const ModelConfig* m = FindModel(model_or_alias, config)) {
    add(FromModel(*m));
  } else if (const UpstreamConfig* u = FindUpstream(model_or_alias, config)) {
    add(FromUpstream(*u));
  } else if (config.models.empty() && !model_or_alias.empty()) {
    add(Candidate{std::string(model_or_alias), std::string(model_or_alias), {}});
  }
  if (out.empty()) {
    return api::WithErrorDetail(absl::NotFoundError(absl::StrCat(
                                    "The model '", common::Sv(model_or_alias), "' does not exist")),
                                "model", "model_not_found");
  }
  return out;
}

void ApplyModelDefaults(const ModelDefaults& defaults, api::CompletionRequest& request) {
  api::SamplingParams& s = request.sampling;
  if (!s.temperature) s.temperature = defaults.temperature;
  if (!s.top_p) s.top_p = defaults.top_p;
  if (!s.top_k) s.top_k = defaults.top_k;
  if (!s.min_p) s.min_p = defaults.min_p;
  if (!s.repetition_penalty) s.repetition_penalty = defaults.repetition_penalty;
  if (!request.enable_thinking) request.enable_thinking = defaults.enable_thinking;
  if (request.chat_template_override.empty() && defaults.chat_template) {
    request.chat_template_override = *defaults.chat_template;
  }
  // Config only: a client cannot ask for its text to become markup.
  request.allow_special_tokens_in_content =
      defaults.allow_special_tokens_in_content.value_or(false);
}

}  // namespace deltaserve::router
