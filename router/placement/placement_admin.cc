#include "router/placement/placement_admin.h"

#include <utility>

#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "router/api/api_error.h"

namespace deltaserve::router {
namespace {

using json = nlohmann::ordered_json;

// A share in [0, 1], or null when there was nothing to share.
json Share(double v) { return v < 0 ? json(nullptr) : json(v); }

json WorkerJson(const PlacementWorkerView& w) {
  json layers = json::array();
  for (const PlacementLayerView& l : w.layers) {
    layers.push_back({{"layer", l.layer},
                      {"device_experts", l.device_experts},
                      {"recent_hit_share", Share(l.recent_hit_share)}});
  }
  json classes = json::array();
  for (const PlacementSlotClassView& c : w.slot_classes) {
    const json planned = c.planned_slots >= 0 ? json(c.planned_slots) : json(nullptr);
    classes.push_back({{"slot_bytes", c.slot_bytes},
                       {"slots", c.slots},
                       {"used", c.used},
                       {"planned_slots", planned},
                       {"layers", c.layers}});
  }
  const json budget = w.slot_budget_bytes > 0 ? json(w.slot_budget_bytes) : json(nullptr);
  return {{"address", w.address},
          {"outcome", w.outcome},
          {"model_fingerprint", w.model_fingerprint},
          {"tiered", w.tiered},
          {"device_slots", w.device_slots},
          {"slot_classes", std::move(classes)},
          {"slot_budget_bytes", budget},
          {"hit_share", Share(w.hit_share)},
          {"routed_total", w.routed_total},
          {"routed_device", w.routed_device},
          {"moves", {{"in", w.moves_in}, {"out", w.moves_out}, {"pending", w.moves_pending}}},
          {"planned_moves", {{"in", w.planned_moves_in}, {"out", w.planned_moves_out}}},
          {"planned_whole_layers", w.planned_whole_layers >= 0 ? json(w.planned_whole_layers)
                                                                : json(nullptr)},
          {"moe_step_us",
           {{"planned", w.planned_moe_step_us >= 0 ? json(w.planned_moe_step_us) : json(nullptr)},
            {"current",
             w.current_moe_step_us >= 0 ? json(w.current_moe_step_us) : json(nullptr)}}},
          {"generation", w.generation},
          {"startup_source", w.startup_source},
          {"layers", std::move(layers)}};
}

// The value of `name` in a query string ("model=a&x=1"), or "".
std::string QueryValue(std::string_view query, std::string_view name) {
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(query.data(), query.size()), '&')) {
    const size_t eq = part.find('=');
    if (eq != absl::string_view::npos &&
        part.substr(0, eq) == absl::string_view(name.data(), name.size())) {
      return std::string(part.substr(eq + 1));
    }
  }
  return "";
}

}  // namespace

json PlacementAdminJson(const PlacementController& controller, std::string_view model) {
  const PlacementSettings s = controller.settings();
  json models = json::array();
  for (const PlacementModelView& m : controller.Views()) {
    if (!model.empty() && m.model != model) continue;
    json workers = json::array();
    for (const PlacementWorkerView& w : m.workers) workers.push_back(WorkerJson(w));
    models.push_back({{"model", m.model},
                      {"last_plan_time", absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                                          absl::FromUnixMillis(m.last_plan_unix_ms),
                                                          absl::UTCTimeZone())},
                      {"last_plan_unix_ms", m.last_plan_unix_ms},
                      {"outcome", m.outcome},
                      {"fleet_hit_share", Share(m.fleet_hit_share)},
                      {"redis", m.redis},
                      {"prior", m.prior},
                      {"workers", std::move(workers)}});
  }
  return {{"enabled", s.enabled},
          {"interval_seconds", s.interval_seconds},
          {"hysteresis", s.hysteresis},
          {"min_gain", s.min_gain},
          {"device_bandwidth_gbs", s.device_bandwidth_gbs},
          {"host_bandwidth_gbs", s.host_bandwidth_gbs},
          {"layer_sync_us", s.layer_sync_us},
          {"redis", controller.StoreDescription()},
          {"models", std::move(models)}};
}

http::Response PlacementAdminResponse(const http::Request& request,
                                      const PlacementController& controller,
                                      const auth::ApiKeyAuthority& authority) {
  absl::StatusOr<auth::ApiKeyIdentity> who =
      authority.Authenticate(request.Header("authorization"));
  absl::Status allowed = who.ok() ? authority.AuthorizeAdmin(*who) : who.status();
  if (!allowed.ok()) return api::ApiErrorResponse(api::ApiErrorFromStatus(allowed));
  const json body = PlacementAdminJson(controller, QueryValue(request.query, "model"));
  return http::Response::Json(200, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace deltaserve::router
