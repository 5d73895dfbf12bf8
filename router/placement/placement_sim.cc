#include "router/placement/placement_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/placement/expert_split_planner.h"

namespace deltaserve::router {
namespace {

bool Positive(double v) { return std::isfinite(v) && v > 0; }

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// SplitMix64: the deterministic hash behind the expert mapping's spread.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

size_t Cell(const MoeModelShape& s, int64_t layer, int64_t expert) {
  return static_cast<size_t>(layer * s.n_expert + expert);
}

// Per-layer routed-token counts of one step, added into `heat` ([n_layer][n_expert]).
void AddCounts(const ModelTrace::Step& step, const ModelTrace& t,
               std::vector<std::vector<double>>& heat) {
  const int64_t per_layer = step.n_tokens * t.k;
  for (int64_t l = 0; l < t.n_layer; ++l) {
    const int32_t* ids = step.ids.data() + l * per_layer;
    for (int64_t i = 0; i < per_layer; ++i) heat[l][ids[i]] += 1;
  }
}

std::vector<uint8_t> FlagsOf(const common::ExpertPlacement& p, const MoeModelShape& s) {
  std::vector<uint8_t> device(static_cast<size_t>(s.n_layer * s.n_expert), 0);
  for (int64_t l = 0; l < p.n_layer && l < s.n_layer; ++l) {
    for (int32_t e : p.device[l]) device[Cell(s, l, e)] = 1;
  }
  return device;
}

uint64_t DeviceBytes(const std::vector<uint8_t>& device, const MoeModelShape& s) {
  uint64_t bytes = 0;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    for (int64_t e = 0; e < s.n_expert; ++e) {
      if (device[Cell(s, l, e)] != 0) bytes += s.expert_bytes[l];
    }
  }
  return bytes;
}

// Accumulates step costs over the timed steps of one policy.
struct Tally {
  double seconds = 0;
  int64_t tokens = 0;
  int64_t routed = 0;
  int64_t routed_device = 0;
  int64_t host_layers = 0;
  int64_t layer_steps = 0;

  void Add(const StepCost& c, int64_t n_tokens, int64_t n_layer) {
    seconds += c.seconds;
    tokens += n_tokens;
    routed += c.routed;
    routed_device += c.routed_device;
    host_layers += c.host_layers;
    layer_steps += n_layer;
  }
  PolicyResult Result() const {
    PolicyResult r;
    r.seconds = seconds;
    r.tokens = tokens;
    r.tok_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
    r.device_hit_share = routed > 0 ? static_cast<double>(routed_device) / routed : 0;
    r.host_layer_share = layer_steps > 0 ? static_cast<double>(host_layers) / layer_steps : 0;
    return r;
  }
};

// Index of the first timed step: after `warmup` decode steps.
size_t FirstTimedStep(const ModelTrace& t, int64_t warmup) {
  int64_t seen = 0;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    if (!t.steps[i].decode) continue;
    if (seen == warmup) return i;
    ++seen;
  }
  return t.steps.size();
}

PolicyResult RunFixed(const ModelTrace& t, size_t first, const MoeModelShape& s,
                      const MachineProfile& p, const std::vector<uint8_t>& device) {
  Tally tally;
  for (size_t i = first; i < t.steps.size(); ++i) {
    const ModelTrace::Step& step = t.steps[i];
    if (!step.decode) continue;
    tally.Add(CostOfStep(step, s, p, device), step.n_tokens, s.n_layer);
  }
  PolicyResult r = tally.Result();
  r.device_expert_bytes = DeviceBytes(device, s);
  return r;
}

// The router's controller over modelled time (see SimulationOptions): PlanDeviceExpertsByCost
// with the costs the router derives from its settings (`costs`), or without them
// (`per_expert`: PlanDeviceExperts, SimulationResult::dynamic_per_expert).
enum class DynamicPlanner {
  kSplit,       // PlanDeviceExpertsWithSplit: the sizes' split follows the plan (the worker's)
  kFixedSplit,  // PlanDeviceExpertsByCost within the start-up split
  kPerExpert,   // PlanDeviceExperts within the start-up split
};

PolicyResult RunDynamic(const ModelTrace& t, size_t first, const MoeModelShape& s,
                        const MachineProfile& p, common::ExpertSlotClasses classes,
                        std::vector<std::vector<double>> heat, const common::ExpertPlacement& start,
                        const SimulationOptions& o, const std::vector<PlanCosts>& costs,
                        DynamicPlanner planner) {
  const uint64_t budget_bytes = classes.device_bytes();
  PolicyResult r;
  Tally tally;
  std::vector<uint8_t> device = FlagsOf(start, s);
  common::ExpertPlacement target = start;
  std::deque<std::pair<int64_t, int32_t>> pending;  // copies still to make, in plan order
  const double decay_per_s = std::log(2.0) / std::max(o.half_life_s, 1e-9);
  double now = 0;
  double next_plan = 0;  // first plan on the first timed step, from the warm-up counts
  double last_decay = 0;
  uint64_t bytes_moved = 0;

  auto decay_to = [&](double when) {
    const double f = std::exp(-(when - last_decay) * decay_per_s);
    if (f < 1) {
      for (auto& row : heat) {
        for (double& h : row) h *= f;
      }
    }
    last_decay = when;
  };

  for (size_t i = first; i < t.steps.size(); ++i) {
    const ModelTrace::Step& step = t.steps[i];
    if (!step.decode) {
      AddCounts(step, t, heat);
      continue;
    }
    if (now >= next_plan) {
      decay_to(now);
      const ExpertPlan plan =
          planner == DynamicPlanner::kPerExpert
              ? PlanDeviceExperts(heat, target, classes, o.planner)
          : planner == DynamicPlanner::kFixedSplit
              ? PlanDeviceExpertsByCost(heat, target, classes, costs, o.planner)
              : PlanDeviceExpertsWithSplit(heat, target, classes, costs, budget_bytes, o.planner);
      r.whole_layers = 0;
      for (const auto& l : plan.placement.device) {
        r.whole_layers += static_cast<int64_t>(l.size()) == s.n_expert;
      }
      ++r.plans;
      next_plan = now + o.interval_s;
      if (plan.changed) {
        ++r.plans_changed;
        target = plan.placement;
        // The worker re-divides its slot bytes when the placement needs it (the sizes' slots
        // change at once here; the worker may re-copy a few experts at the boundary).
        if (absl::StatusOr<common::ExpertSlotClasses> split =
                common::SplitForPlacement(target, classes, budget_bytes);
            split.ok()) {
          classes = *std::move(split);
        }
        const std::vector<uint8_t> wanted = FlagsOf(target, s);
        // Evictions take effect at once; copies queue, hottest first (as Advance copies them).
        for (size_t c = 0; c < device.size(); ++c) {
          if (device[c] != 0 && wanted[c] == 0) {
            device[c] = 0;
            ++r.moves_out;
          }
        }
        std::vector<std::pair<double, std::pair<int64_t, int32_t>>> in;
        for (int64_t l = 0; l < s.n_layer; ++l) {
          for (int64_t e = 0; e < s.n_expert; ++e) {
            if (wanted[Cell(s, l, e)] != 0 && device[Cell(s, l, e)] == 0) {
              in.push_back({-heat[l][e], {l, static_cast<int32_t>(e)}});
            }
          }
        }
        std::sort(in.begin(), in.end());
        pending.clear();
        for (const auto& [neg_heat, cell] : in) pending.push_back(cell);
      }
    }
    // Advance before the step: at least one expert, then up to the byte budget.
    uint64_t copy = 0;
    while (!pending.empty()) {
      const auto [l, e] = pending.front();
      const uint64_t b = s.expert_bytes[l];
      if (copy > 0 && copy + b > o.move_bytes_per_step) break;
      copy += b;
      device[Cell(s, l, e)] = 1;  // complete once copied: used from this step on
      pending.pop_front();
      ++r.moves_in;
    }
    bytes_moved += copy;
    const StepCost c = CostOfStep(step, s, p, device, copy);
    r.copy_seconds += c.copy_s;
    tally.Add(c, step.n_tokens, s.n_layer);
    now += c.seconds;
    // The step's routes join the heat at its end (the worker counts after the pass).
    decay_to(now);
    AddCounts(step, t, heat);
  }
  PolicyResult out = tally.Result();
  out.plans = r.plans;
  out.plans_changed = r.plans_changed;
  out.whole_layers = r.whole_layers;
  out.moves_in = r.moves_in;
  out.moves_out = r.moves_out;
  out.bytes_moved = bytes_moved;
  out.copy_seconds = r.copy_seconds;
  out.device_expert_bytes = classes.device_bytes();
  out.class_slots = classes.slots;
  return out;
}

}  // namespace

common::ExpertSlotClasses SlotClassesFor(const MoeModelShape& s, uint64_t expert_vram_bytes) {
  std::vector<int32_t> layer_class;
  std::vector<uint64_t> sizes;
  for (uint64_t b : s.expert_bytes) {
    const auto it = std::find(sizes.begin(), sizes.end(), b);
    layer_class.push_back(static_cast<int32_t>(it - sizes.begin()));
    if (it == sizes.end()) sizes.push_back(b);
  }
  return common::SplitExpertBudget(std::move(layer_class), std::move(sizes), s.n_expert,
                                   expert_vram_bytes);
}

uint64_t MoeModelShape::slot_bytes() const {
  uint64_t m = 0;
  for (uint64_t b : expert_bytes) m = std::max(m, b);
  return m;
}

uint64_t MoeModelShape::layer_expert_bytes(int64_t layer) const {
  return expert_bytes[static_cast<size_t>(layer)] * static_cast<uint64_t>(n_expert);
}

uint64_t MoeModelShape::all_expert_bytes() const {
  uint64_t b = 0;
  for (int64_t l = 0; l < n_layer; ++l) b += layer_expert_bytes(l);
  return b;
}

absl::Status ValidateProfile(const MachineProfile& p) {
  const std::pair<const char*, double> figures[] = {
      {"gpu_bandwidth", p.gpu_bytes_per_s},
      {"cpu_bandwidth", p.cpu_bytes_per_s},
      {"cpu_flops", p.cpu_flops},
      {"pcie_bandwidth", p.pcie_bytes_per_s},
  };
  for (const auto& [name, v] : figures) {
    if (!Positive(v)) {
      return Bad(absl::StrCat("profile '", p.name, "': ", name, " must be > 0 (got ", v, ")"));
    }
  }
  if (!std::isfinite(p.layer_sync_s) || p.layer_sync_s < 0) {
    return Bad(absl::StrCat("profile '", p.name, "': layer_sync_us must be >= 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateShape(const MoeModelShape& s) {
  auto bad = [&](absl::string_view why) {
    return Bad(absl::StrCat("model '", s.name, "': ", why));
  };
  if (s.n_layer < 1 || s.n_layer > common::kRoutingTraceMaxLayers)
    return bad("n_layer out of range");
  if (s.n_expert < 1 || s.n_expert > common::kRoutingTraceMaxExperts) {
    return bad("n_expert out of range");
  }
  if (s.k < 1 || s.k > s.n_expert) return bad("k must be in [1, n_expert]");
  if (s.n_embd < 1 || s.expert_params < 1) return bad("n_embd and expert_params must be > 0");
  const auto n = static_cast<size_t>(s.n_layer);
  if (s.expert_bytes.size() != n || s.dense_bytes.size() != n || s.shared_bytes.size() != n) {
    return bad(absl::StrCat("expert_bytes, dense_bytes and shared_bytes need ", n,
                            " entries (one per layer)"));
  }
  for (uint64_t b : s.expert_bytes) {
    if (b == 0) return bad("an expert of 0 bytes");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelTrace> MapTrace(const common::RoutingTrace& trace, const MoeModelShape& shape,
                                    const TraceMapping& mapping) {
  if (absl::Status st = ValidateShape(shape); !st.ok()) return st;
  const common::RoutingTraceHeader& h = trace.header;
  if (absl::Status st = common::ValidateRoutingTraceHeader(h); !st.ok()) return st;
  ModelTrace t;
  t.n_layer = shape.n_layer;
  t.n_expert = shape.n_expert;
  t.k = h.k;
  t.steps.reserve(trace.steps.size());
  for (size_t si = 0; si < trace.steps.size(); ++si) {
    const common::RoutingStep& in = trace.steps[si];
    const int64_t per_layer = in.n_tokens * h.k;
    if (in.n_tokens < 1 || static_cast<int64_t>(in.ids.size()) != h.n_layer * per_layer) {
      return Bad(absl::StrCat("trace step ", si, ": ", in.ids.size(), " ids for ", in.n_tokens,
                              " tokens"));
    }
    ModelTrace::Step out;
    out.n_tokens = in.n_tokens;
    out.decode = in.n_tokens <= mapping.max_decode_tokens;
    out.ids.resize(static_cast<size_t>(shape.n_layer * per_layer));
    for (int64_t l = 0; l < shape.n_layer; ++l) {
      const int64_t tl = l * h.n_layer / shape.n_layer;
      const int32_t* src = in.ids.data() + tl * per_layer;
      int32_t* dst = out.ids.data() + l * per_layer;
      for (int64_t i = 0; i < per_layer; ++i) {
        const int32_t e = src[i];
        if (e < 0 || e >= h.n_expert) {
          return Bad(absl::StrCat("trace step ", si, ": expert id ", e, " out of range"));
        }
        if (h.n_expert == shape.n_expert) {
          dst[i] = e;
          continue;
        }
        const uint64_t key =
            Mix(Mix(Mix(si) ^ static_cast<uint64_t>(l)) ^ static_cast<uint64_t>(i));
        const double u = static_cast<double>(key >> 11) * 0x1p-53;
        const auto m = static_cast<int64_t>((e + u) * static_cast<double>(shape.n_expert) /
                                            static_cast<double>(h.n_expert));
        dst[i] = static_cast<int32_t>(std::clamp<int64_t>(m, 0, shape.n_expert - 1));
      }
    }
    if (out.decode) {
      ++t.decode_steps;
      t.decode_tokens += out.n_tokens;
    }
    t.steps.push_back(std::move(out));
  }
  if (t.decode_steps == 0) {
    return Bad(absl::StrCat("the trace has no decode step (", trace.steps.size(),
                            " steps, none of at most ", mapping.max_decode_tokens, " tokens)"));
  }
  return t;
}

StepCost CostOfStep(const ModelTrace::Step& step, const MoeModelShape& s, const MachineProfile& p,
                    const std::vector<uint8_t>& device, uint64_t copy_bytes) {
  StepCost c;
  const int64_t k = static_cast<int64_t>(step.ids.size()) / (s.n_layer * step.n_tokens);
  const int64_t per_layer = step.n_tokens * k;
  // Tokens per expert in this layer (reused; experts chosen by no token stay 0).
  std::vector<int32_t> tokens(static_cast<size_t>(s.n_expert), 0);
  const double activations_s =
      2.0 * static_cast<double>(step.n_tokens * s.n_embd) * 4.0 / p.pcie_bytes_per_s;
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const int32_t* ids = step.ids.data() + l * per_layer;
    int64_t n_device = 0, n_host = 0, host_pairs = 0;
    for (int64_t i = 0; i < per_layer; ++i) {
      const int32_t e = ids[i];
      const bool on_device = device[Cell(s, l, e)] != 0;
      if (tokens[e]++ == 0) (on_device ? n_device : n_host) += 1;
      if (on_device) {
        ++c.routed_device;
      } else {
        ++host_pairs;
      }
    }
    for (int64_t i = 0; i < per_layer; ++i) tokens[ids[i]] = 0;
    c.routed += per_layer;
    const double eb = static_cast<double>(s.expert_bytes[l]);
    const double pre = static_cast<double>(s.dense_bytes[l]) / p.gpu_bytes_per_s;
    const double gpu_moe =
        (static_cast<double>(s.shared_bytes[l]) + static_cast<double>(n_device) * eb) /
        p.gpu_bytes_per_s;
    c.gpu_s += pre;
    if (n_host == 0) {
      c.gpu_s += gpu_moe;
      continue;
    }
    ++c.host_layers;
    const double host =
        activations_s + static_cast<double>(n_host) * eb / p.cpu_bytes_per_s +
        static_cast<double>(host_pairs) * 2.0 * static_cast<double>(s.expert_params) / p.cpu_flops;
    if (host > gpu_moe) {
      c.host_s += host;
    } else {
      c.gpu_s += gpu_moe;
    }
    c.sync_s += p.layer_sync_s;
  }
  c.gpu_s += static_cast<double>(s.head_bytes) / p.gpu_bytes_per_s;
  c.copy_s = static_cast<double>(copy_bytes) / p.pcie_bytes_per_s;
  c.seconds = c.gpu_s + c.host_s + c.sync_s + c.copy_s;
  return c;
}

std::vector<uint8_t> NCpuMoePlacement(const MoeModelShape& s, int64_t n) {
  std::vector<uint8_t> device(static_cast<size_t>(s.n_layer * s.n_expert), 0);
  for (int64_t l = std::max<int64_t>(n, 0); l < s.n_layer; ++l) {
    std::fill_n(device.begin() + static_cast<std::ptrdiff_t>(Cell(s, l, 0)), s.n_expert, 1);
  }
  return device;
}

uint64_t NCpuMoeDeviceBytes(const MoeModelShape& s, int64_t n) {
  uint64_t b = 0;
  for (int64_t l = std::max<int64_t>(n, 0); l < s.n_layer; ++l) b += s.layer_expert_bytes(l);
  return b;
}

absl::StatusOr<SimulationResult> SimulatePolicies(const ModelTrace& t, const MoeModelShape& s,
                                                  const MachineProfile& p,
                                                  const SimulationOptions& o) {
  if (absl::Status st = ValidateProfile(p); !st.ok()) return st;
  if (o.plan_profile) {
    if (absl::Status st = ValidateProfile(*o.plan_profile); !st.ok()) return st;
  }
  if (absl::Status st = ValidateShape(s); !st.ok()) return st;
  if (t.n_layer != s.n_layer || t.n_expert != s.n_expert) {
    return Bad("the trace is not mapped onto this model's shape");
  }
  if (!Positive(o.interval_s) || !Positive(o.half_life_s)) {
    return Bad("interval and half-life must be > 0 seconds");
  }
  SimulationResult r;
  const common::ExpertSlotClasses classes = SlotClassesFor(s, o.expert_vram_bytes);
  r.n_slots = classes.total_slots();
  r.slot_classes = classes.n_class();
  r.warmup_steps =
      o.warmup_steps > 0 ? std::min(o.warmup_steps, t.decode_steps - 1) : t.decode_steps / 10;
  const size_t first = FirstTimedStep(t, r.warmup_steps);
  for (size_t i = first; i < t.steps.size(); ++i) r.timed_steps += t.steps[i].decode ? 1 : 0;

  // Warm-up counts: every step before the first timed one, prefill included.
  std::vector<std::vector<double>> warm(static_cast<size_t>(s.n_layer),
                                        std::vector<double>(static_cast<size_t>(s.n_expert), 0));
  for (size_t i = 0; i < first; ++i) AddCounts(t.steps[i], t, warm);

  r.all_cpu = RunFixed(t, first, s, p, NCpuMoePlacement(s, s.n_layer));
  r.all_cpu.n_cpu_moe = s.n_layer;
  r.n_cpu_moe = r.all_cpu;
  r.n_cpu_moe_sweep.push_back({s.n_layer, r.all_cpu.tok_s});
  for (int64_t n = s.n_layer - 1; n >= 0; --n) {
    if (NCpuMoeDeviceBytes(s, n) > o.expert_vram_bytes) break;
    PolicyResult pr = RunFixed(t, first, s, p, NCpuMoePlacement(s, n));
    pr.n_cpu_moe = n;
    r.n_cpu_moe_sweep.push_back({n, pr.tok_s});
    if (pr.tok_s > r.n_cpu_moe.tok_s) r.n_cpu_moe = pr;
  }
  const common::ExpertPlacement start = common::HottestExpertPlacement(warm, classes);
  r.static_hot = RunFixed(t, first, s, p, FlagsOf(start, s));
  const MachineProfile& router_machine = o.plan_profile ? *o.plan_profile : p;
  std::vector<PlanCosts> costs;  // per slot class: experts of its size
  for (uint64_t bytes : classes.slot_bytes) {
    costs.push_back(PlanCostsFor(bytes, router_machine.gpu_bytes_per_s,
                                 router_machine.cpu_bytes_per_s, router_machine.layer_sync_s, t.k));
  }
  r.dynamic = RunDynamic(t, first, s, p, classes, warm, start, o, costs, DynamicPlanner::kSplit);
  r.dynamic_fixed_split =
      RunDynamic(t, first, s, p, classes, warm, start, o, costs, DynamicPlanner::kFixedSplit);
  r.dynamic_per_expert =
      RunDynamic(t, first, s, p, classes, warm, start, o, costs, DynamicPlanner::kPerExpert);
  r.all_gpu = RunFixed(t, first, s, p, NCpuMoePlacement(s, 0));
  return r;
}

}  // namespace deltaserve::router
