// GET /admin/placement (docs/moe_placement.md, "The admin view"): the placement controller's
// last cycle as JSON, per model, worker and layer: the device-resident experts, the hit share,
// moves, the last plan's time and outcome. Needs an API key with `admin: true` where keys are
// configured (401 without a key, 403 with another one); open where none are, as the rest of
// the router. `?model=NAME` shows one model.
#pragma once

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "router/auth/api_key_authority.h"
#include "router/http/http_message.h"
#include "router/placement/placement_controller.h"

namespace deltaserve::router {

// The view's JSON; `model` empty: every model.
nlohmann::ordered_json PlacementAdminJson(const PlacementController& controller,
                                          std::string_view model = {});

// The endpoint: checks the caller against `authority`, then answers PlacementAdminJson.
http::Response PlacementAdminResponse(const http::Request& request,
                                      const PlacementController& controller,
                                      const auth::ApiKeyAuthority& authority);

}  // namespace deltaserve::router
