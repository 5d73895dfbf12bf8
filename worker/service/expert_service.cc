// WorkerService's expert RPCs (GetExpertStats, SetExpertPlacement) and the per-model state and
// metrics behind them (expert_service.h).
#include "worker/service/expert_service.h"

#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/snapshot_key.h"
#include "worker/service/worker_service.h"

namespace deltaserve::worker {
namespace {

namespace pb = ::deltaserve::v1;

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case absl::StatusCode::kOk: return grpc::Status::OK;
    case absl::StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case absl::StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case absl::StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case absl::StatusCode::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case absl::StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    default: break;
  }
  return grpc::Status(code, std::string(s.message()));
}

// The served model's placement state, or NOT_FOUND / FAILED_PRECONDITION.
absl::StatusOr<ModelExperts*> Find(const WorkerService& service, const std::string& name) {
  auto m = service.models().find(name);
  if (m == service.models().end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' is not served here"));
  }
  if (!m->second->model().hparams().is_moe) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' is dense (qwen35): it has no experts to place"));
  }
  auto e = service.model_experts().find(name);
  if (e == service.model_experts().end() || e->second == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "': this worker keeps no expert statistics for it"));
  }
  return e->second;
}

}  // namespace

ModelExperts::ModelExperts(ServedModel& model, ExpertTiers* tiers,
                           const ModelExpertsOptions& options)
    : model_(model),
      tiers_(tiers),
      options_(options),
      heat_(model.model().counters(), options.half_life_seconds, options.clock) {
  const std::array<uint8_t, 32> fp = common::ModelFingerprint(model.model().file());
  for (uint8_t b : fp) absl::StrAppendFormat(&fingerprint_hex_, "%02x", b);
  if (tiers_ != nullptr) startup_source_ = kStartupEven;
}

int64_t ModelExperts::n_layer() const { return model_.model().hparams().n_layer; }
int64_t ModelExperts::n_expert() const { return model_.model().hparams().n_expert; }

common::ExpertPlacement ModelExperts::DeviceExperts() const {
  if (tiers_ != nullptr) return tiers_->Current();
  common::ExpertPlacement p = common::ExpertPlacement::Empty(n_layer(), n_expert());
  if (options_.device_backend) {
    for (auto& layer : p.device) {
      for (int32_t e = 0; e < static_cast<int32_t>(n_expert()); ++e) layer.push_back(e);
    }
  }
  return p;
}

void ModelExperts::MarkServingStart() {
  if (tiers_ == nullptr) return;  // the engine's counters were reset after the warm-up
  const ExpertTierStats s = tiers_->stats();
  routed_base_total_ = s.routed_total;
  routed_base_device_ = s.routed_device;
}

uint64_t ModelExperts::routed_total() const {
  if (tiers_ != nullptr) {
    const uint64_t n = tiers_->stats().routed_total, base = routed_base_total_;
    return n >= base ? n - base : n;
  }
  const ForwardCounters& c = model_.model().counters();
  uint64_t n = 0;
  for (int64_t l = 0; l < c.n_layer(); ++l) {
    for (int64_t e = 0; e < c.n_expert(); ++e) n += c.routed(l, e);
  }
  return n;
}

uint64_t ModelExperts::routed_device() const {
  if (tiers_ != nullptr) {
    const uint64_t n = tiers_->stats().routed_device, base = routed_base_device_;
    return n >= base ? n - base : n;
  }
  return options_.device_backend ? routed_total() : 0;
}

void ModelExperts::FillStats(const std::string& name, pb::ExpertStats& out) {
  const common::Qwen35HParams& hp = model_.model().hparams();
  out.set_model(name);
  out.set_model_fingerprint(fingerprint_hex_);
  out.set_n_layer(static_cast<int32_t>(hp.n_layer));
  out.set_n_expert(static_cast<int32_t>(hp.n_expert));
  out.set_n_expert_used(static_cast<int32_t>(hp.n_expert_used));
  const common::ExpertPlacement device = DeviceExperts();
  out.set_tiered(tiers_ != nullptr);
  if (tiers_ != nullptr) {
    out.set_slot_bytes(tiers_->slot_bytes());
    const common::ExpertSlotClasses classes = tiers_->slot_classes();  // one read: consistent
    out.set_device_slots(static_cast<int32_t>(classes.total_slots()));
    out.set_slot_budget_bytes(tiers_->slot_budget_bytes());
    out.set_device_budget_bytes(options_.device_budget_bytes > 0 ? options_.device_budget_bytes
                                                                 : classes.device_bytes());
    for (int32_t c = 0; c < classes.n_class(); ++c) {
      pb::ExpertSlotClass* k = out.add_slot_classes();
      k->set_slot_bytes(classes.slot_bytes[static_cast<size_t>(c)]);
      k->set_device_slots(static_cast<int32_t>(classes.slots[static_cast<size_t>(c)]));
      for (int64_t l : classes.LayersOf(c)) k->add_layers(static_cast<int32_t>(l));
    }
    const ExpertTierStats s = tiers_->stats();
    out.set_routed_total(routed_total());
    out.set_routed_device(routed_device());
    out.set_moves_in(s.moves_in);
    out.set_moves_out(s.moves_out);
    out.set_bytes_moved(s.bytes_moved);
    out.set_moves_pending(static_cast<int32_t>(s.moves_pending));
    out.set_placement_generation(s.generation);
  } else {
    out.set_device_slots(static_cast<int32_t>(device.size()));
    out.set_device_budget_bytes(options_.device_budget_bytes);
    out.set_routed_total(routed_total());
    out.set_routed_device(routed_device());
  }
  out.set_startup_source(startup_source_);
  out.set_half_life_seconds(heat_.half_life_seconds());
  const ExpertHeat::Reading r = heat_.Read();
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    pb::LayerExperts* layer = out.add_layers();
    layer->set_layer(static_cast<int32_t>(l));
    if (l < static_cast<int64_t>(device.device.size())) {
      for (int32_t e : device.device[static_cast<size_t>(l)]) layer->add_device_experts(e);
    }
    if (l < static_cast<int64_t>(r.decayed.size())) {
      for (double d : r.decayed[static_cast<size_t>(l)]) layer->add_decayed_tokens(d);
      for (uint64_t t : r.total[static_cast<size_t>(l)]) layer->add_total_tokens(t);
    }
  }
}

absl::StatusOr<common::ExpertPlacement> ModelExperts::PlacementFromRequest(
    const pb::SetExpertPlacementRequest& request) const {
  common::ExpertPlacement p = common::ExpertPlacement::Empty(n_layer(), n_expert());
  std::set<int32_t> seen;
  for (const pb::LayerExperts& l : request.layers()) {
    if (l.layer() < 0 || l.layer() >= n_layer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l.layer(), " is not in [0, ", n_layer(), ")"));
    }
    if (!seen.insert(l.layer()).second) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l.layer(), " is listed twice"));
    }
    p.device[static_cast<size_t>(l.layer())].assign(l.device_experts().begin(),
                                                    l.device_experts().end());
  }
  return p;
}

absl::StatusOr<ExpertMoves> ModelExperts::SetPlacement(
    const pb::SetExpertPlacementRequest& request) {
  if (tiers_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", request.model(), "' keeps every expert in ",
        options_.device_backend ? "device" : "host",
        " memory on this worker (no expert tiers: a CPU worker, or an --expert-vram that holds "
        "them all): there is nothing to place"));
  }
  absl::StatusOr<common::ExpertPlacement> target = PlacementFromRequest(request);
  if (!target.ok()) return target.status();
  absl::StatusOr<ExpertMoves> moves = tiers_->SetTarget(*target, request.generation());
  if (!moves.ok()) return moves.status();
  model_.scheduler().ExpertMovesQueued();
  std::fprintf(stderr,
               "deltaserve-worker: %s: expert placement %llu: %lld experts in device memory, "
               "%lld to move in (%s bytes), %lld out\n",
               request.model().c_str(), static_cast<unsigned long long>(request.generation()),
               static_cast<long long>(target->size()), static_cast<long long>(moves->moves_in),
               absl::StrCat(moves->bytes_to_copy).c_str(),
               static_cast<long long>(moves->moves_out));
  return moves;
}

grpc::ServerUnaryReactor* WorkerService::GetExpertStats(grpc::CallbackServerContext* context,
                                                        const pb::ExpertStatsRequest* request,
                                                        pb::ExpertStats* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ModelExperts*> experts = Find(*this, request->model());
  if (!experts.ok()) {
    reactor->Finish(ToGrpc(experts.status()));
    return reactor;
  }
  (*experts)->FillStats(request->model(), *response);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::SetExpertPlacement(
    grpc::CallbackServerContext* context, const pb::SetExpertPlacementRequest* request,
    pb::SetExpertPlacementResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ModelExperts*> experts = Find(*this, request->model());
  absl::StatusOr<ExpertMoves> moves =
      experts.ok() ? (*experts)->SetPlacement(*request) : experts.status();
  if (!moves.ok()) {
    reactor->Finish(ToGrpc(moves.status()));
    return reactor;
  }
  response->set_moves_in(static_cast<int32_t>(moves->moves_in));
  response->set_moves_out(static_cast<int32_t>(moves->moves_out));
  response->set_bytes_to_copy(moves->bytes_to_copy);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void WriteExpertMetrics(const WorkerService& service, common::PrometheusText& out) {
  struct Row {
    std::string name;
    ModelExperts* experts;
    ExpertTierStats tier;  // zero without tiers
    int64_t slots;
    int64_t move_failures;
  };
  std::vector<Row> rows;
  for (const auto& [name, experts] : service.model_experts()) {
    if (experts == nullptr) continue;
    Row r{name, experts, {}, 0, experts->model().scheduler().stats().expert_move_failures};
    if (ExpertTiers* t = experts->tiers()) {
      r.tier = t->stats();
      r.slots = t->n_slots();
    } else {
      r.slots = experts->DeviceExperts().size();
    }
    r.tier.routed_total = experts->routed_total();
    r.tier.routed_device = experts->routed_device();
    rows.push_back(std::move(r));
  }
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  for (const Row& r : rows) {
    out.Counter("deltaserve_model_expert_routed_total",
                "MoE: routed (token, expert) pairs since load (each token goes to k experts).",
                {{"model", r.name}}, d(r.tier.routed_total));
  }
  for (const Row& r : rows) {
    out.Counter("deltaserve_model_expert_routed_device_total",
                "MoE: routed (token, expert) pairs served by an expert in device memory; "
                "rate() over rate(deltaserve_model_expert_routed_total) is the VRAM share.",
                {{"model", r.name}}, d(r.tier.routed_device));
  }
  for (const Row& r : rows) {
    for (const char* dir : {"in", "out"}) {
      out.Counter("deltaserve_model_expert_moves_total",
                  "MoE: experts moved into device memory (in) or evicted from it (out).",
                  {{"model", r.name}, {"direction", dir}},
                  d(dir[0] == 'i' ? r.tier.moves_in : r.tier.moves_out));
    }
  }
  for (const Row& r : rows) {
    out.Counter("deltaserve_model_expert_moved_bytes_total",
                "MoE: bytes of expert weights copied into device memory (start-up included).",
                {{"model", r.name}}, d(r.tier.bytes_moved));
  }
  for (const Row& r : rows) {
    out.Gauge("deltaserve_model_expert_moves_pending",
              "MoE: expert moves still needed to reach the last placement.", {{"model", r.name}},
              static_cast<double>(r.tier.moves_pending));
  }
  for (const Row& r : rows) {
    out.Gauge("deltaserve_model_expert_device_slots",
              "MoE: experts the device budget holds (all experts without tiers on a GPU, 0 on "
              "the CPU).",
              {{"model", r.name}}, static_cast<double>(r.slots));
  }
  for (const Row& r : rows) {
    out.Gauge("deltaserve_model_expert_placement_generation",
              "MoE: generation of the last placement applied (0: the start-up placement).",
              {{"model", r.name}}, d(r.tier.generation));
  }
  for (const Row& r : rows) {
    out.Counter("deltaserve_model_expert_move_failures_total",
                "MoE: expert migrations that failed between steps (degraded: logged; the experts "
                "stay where they are until the next placement).",
                {{"model", r.name}}, static_cast<double>(r.move_failures));
  }
  for (const Row& r : rows) {
    out.Gauge("deltaserve_model_expert_startup_placement_info",
              "MoE: always 1; source is where the start-up placement came from: saved (Redis), "
              "warmup, even, or all (no tiers).",
              {{"model", r.name}, {"source", r.experts->startup_source()}}, 1);
  }
  for (const Row& r : rows) {
    out.Counter("deltaserve_model_expert_saved_placement_errors_total",
                "MoE: saved placements not used at start-up (degraded: logged): Redis failed "
                "(redis) or the record was refused (invalid).",
                {{"model", r.name}, {"reason", "redis"}}, d(r.experts->saved_redis_errors()));
    out.Counter("deltaserve_model_expert_saved_placement_errors_total",
                "MoE: saved placements not used at start-up (degraded: logged): Redis failed "
                "(redis) or the record was refused (invalid).",
                {{"model", r.name}, {"reason", "invalid"}}, d(r.experts->saved_invalid()));
  }
}

}  // namespace deltaserve::worker
