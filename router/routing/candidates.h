#pragma once
// Model-name resolution for routing: a client's `model` (a model name or an alias) becomes the
// ordered list of candidates the router tries — an alias's chain (aliases inside a chain are
// expanded in place), or the model alone — each with the name workers serve it under and its
// per-model sampling defaults. Pure functions over a RouterConfig snapshot.
//
//   ASSIGN_OR_RETURN(std::vector<Candidate> c, ResolveCandidates(request.model, *config));
//   api::CompletionRequest r = request;
//   ApplyModelDefaults(c[0].defaults, r);

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/api/completion_request.h"
#include "router/config/router_config.h"

namespace deltaserve::router {

// One model the router may send a request to.
struct Candidate {
  std::string name;         // the name clients see (GenerationStart::model when it answers)
  std::string served_name;  // ModelInfo.name on the workers
  ModelDefaults defaults;
  // An upstream model (docs/upstreams.md): served by this external endpoint, not by workers.
  // Points into the RouterConfig snapshot the candidates were resolved from.
  const UpstreamConfig* upstream = nullptr;
};

// The candidates for `model_or_alias`, in the order to try them, without duplicates.
// - An alias: its chain; a chain entry that is itself an alias is expanded in place (depth
//   at most 8; entries already listed are skipped).
// - A configured model or upstream: that one alone.
// - With `config.models` empty every non-alias name is a candidate served under the same name
//   (whether a worker serves it is the caller's question).
// Unknown names: NotFound with param "model" and code "model_not_found" (HTTP 404). A chain
// entry naming neither a model nor an alias (with `config.models` non-empty) is skipped.
absl::StatusOr<std::vector<Candidate>> ResolveCandidates(std::string_view model_or_alias,
                                                         const RouterConfig& config);

// True when `name` is an alias in `config`.
bool IsAlias(std::string_view name, const RouterConfig& config);

// Fills the request's unset sampling fields (temperature, top_p, top_k, min_p,
// repetition_penalty) and enable_thinking from `defaults`. max_tokens is not touched: the
// backend clamps ModelDefaults::max_tokens to the context, which it only knows per worker.
void ApplyModelDefaults(const ModelDefaults& defaults, api::CompletionRequest& request);

}  // namespace deltaserve::router
