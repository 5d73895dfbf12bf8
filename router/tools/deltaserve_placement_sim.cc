// deltaserve-placement-sim: replays a routing trace through a machine's cost model and prints, as
// one JSON object, the decode tokens per second of each MoE expert placement policy at one
// expert VRAM budget (docs/moe_placement.md, "The placement simulator").
//
//   deltaserve-placement-sim --trace FILE | --synthetic-trace [--skew S ...]
//                            --profile rtx4090|h100|FILE.json --expert-vram SIZE
//                            [--model 35b-a3b|122b-a10b|FILE.json] [policy options]
//
// Exit status: 0 with the JSON on stdout; 2 for a bad command line; 1 for a trace, profile or
// model that cannot be read or simulated (the message on stderr names it).
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/routing_trace.h"
#include "common/str_util.h"
#include "nlohmann/json.hpp"
#include "router/placement/placement_sim.h"
#include "router/placement/placement_sim_inputs.h"
#include "router/placement/placement_sim_trace.h"
#include "worker/cache/memory_plan.h"

namespace deltaserve::router {
namespace {

using nlohmann::ordered_json;

struct Options {
  std::string trace;
  bool synthetic = false;
  SyntheticTraceOptions synth;
  std::string profile;
  std::string plan_profile;  // the machine the router's placement settings describe
  std::string model = "35b-a3b";
  uint64_t expert_vram = 0;
  bool expert_vram_given = false;
  SimulationOptions sim;
  TraceMapping mapping;
  bool allow_truncated = false;
  bool sweep = false;
  std::string write_trace;  // also write the (synthetic) trace here
};

constexpr const char* kUsage =
    "usage: deltaserve-placement-sim (--trace FILE | --synthetic-trace [--skew S] [--topics N]\n"
    "                                 [--topic-steps N] [--steps N] [--seed N])\n"
    "                                --profile rtx4090|h100|FILE.json --expert-vram SIZE\n"
    "                                [--model 35b-a3b|122b-a10b|FILE.json] [options]\n"
    "\n"
    "Replays the routing of a trace (recorded by a worker with --record-routing FILE, or drawn\n"
    "from a Zipf model with --synthetic-trace) through a cost model of the machine and prints\n"
    "one JSON object: modelled decode tok/s for all experts on the CPU (all_cpu), llama.cpp's\n"
    "--n-cpu-moe N with the best N that fits the VRAM (n_cpu_moe), a static hot list learnt in\n"
    "the warm-up (static) and the router's dynamic plan (dynamic), with hit shares and moves.\n";

std::string DoubleFlag(std::string_view v, double* out, double min, const char* flag) {
  double d = 0;
  if (!absl::SimpleAtod(common::Sv(v), &d) || !(d >= min) || d > 1e12) {
    return absl::StrCat(flag, " '", common::Sv(v), "' is not a number >= ", min);
  }
  *out = d;
  return "";
}

std::vector<common::Flag> FlagTable(Options& o, bool& help) {
  using common::CustomFlag;
  using common::IntegerFlag;
  auto size = [](uint64_t* out) {
    return [out](std::string_view v) -> std::string {
      absl::StatusOr<uint64_t> b = worker::ParseByteSize(v);
      if (!b.ok()) return std::string(b.status().message());
      *out = *b;
      return "";
    };
  };
  return {
      common::SwitchFlag("--help", &help).Alias("-h").StopsParsing(),
      common::StringFlag("--trace", &o.trace).NonEmpty(),
      common::SwitchFlag("--synthetic-trace", &o.synthetic),
      CustomFlag("--skew",
                 [&o](std::string_view v) { return DoubleFlag(v, &o.synth.skew, 0, "--skew"); })
          .NonEmpty(),
      IntegerFlag("--topics", &o.synth.topics, 1, 4096).NonEmpty(),
      IntegerFlag("--topic-steps", &o.synth.topic_steps, 1, int64_t{1} << 30).NonEmpty(),
      IntegerFlag("--steps", &o.synth.steps, 1, int64_t{1} << 24).NonEmpty(),
      CustomFlag("--seed",
                 [&o](std::string_view v) -> std::string {
                   return absl::SimpleAtoi(common::Sv(v), &o.synth.seed)
                              ? ""
                              : "--seed needs an unsigned integer";
                 })
          .NonEmpty(),
      common::StringFlag("--profile", &o.profile).NonEmpty(),
      common::StringFlag("--plan-profile", &o.plan_profile).NonEmpty(),
      common::StringFlag("--model", &o.model).NonEmpty(),
      CustomFlag("--expert-vram",
                 [&o, size](std::string_view v) {
                   o.expert_vram_given = true;
                   return size(&o.expert_vram)(v);
                 })
          .NonEmpty(),
      IntegerFlag("--warmup-steps", &o.sim.warmup_steps, 1, int64_t{1} << 40).NonEmpty(),
      CustomFlag(
          "--interval",
          [&o](std::string_view v) { return DoubleFlag(v, &o.sim.interval_s, 1e-3, "--interval"); })
          .NonEmpty(),
      CustomFlag("--half-life",
                 [&o](std::string_view v) {
                   return DoubleFlag(v, &o.sim.half_life_s, 1e-3, "--half-life");
                 })
          .NonEmpty(),
      CustomFlag("--hysteresis",
                 [&o](std::string_view v) {
                   return DoubleFlag(v, &o.sim.planner.hysteresis, 0, "--hysteresis");
                 })
          .NonEmpty(),
      CustomFlag("--min-gain",
                 [&o](std::string_view v) {
                   return DoubleFlag(v, &o.sim.planner.min_gain, 0, "--min-gain");
                 })
          .NonEmpty(),
      CustomFlag("--count-noise",
                 [&o](std::string_view v) {
                   if (v != "shrink" && v != "keep") {
                     return std::string("--count-noise takes shrink or keep");
                   }
                   o.sim.planner.shrink_count_noise = v == "shrink";
                   return std::string();
                 })
          .NonEmpty(),
      CustomFlag("--replan-gain",
                 [&o](std::string_view v) {
                   return DoubleFlag(v, &o.sim.planner.replan_gain, 0, "--replan-gain");
                 })
          .NonEmpty(),
      CustomFlag("--move-bytes", size(&o.sim.move_bytes_per_step)).NonEmpty(),
      IntegerFlag("--max-decode-tokens", &o.mapping.max_decode_tokens, 1,
                  common::kRoutingStepMaxTokens)
          .NonEmpty(),
      common::SwitchFlag("--allow-truncated", &o.allow_truncated),
      common::SwitchFlag("--sweep", &o.sweep),
      common::StringFlag("--write-trace", &o.write_trace).NonEmpty(),
  };
}

int Usage(const std::string& why) {
  const std::string_view usage(kUsage);
  std::cerr << "deltaserve-placement-sim: " << why << "\n"
            << usage.substr(0, usage.find("\n\n") + 1)  // the synopsis
            << "(deltaserve-placement-sim --help says more)\n";
  return common::kExitUsage;
}

int Fail(const absl::Status& s) {
  std::cerr << "deltaserve-placement-sim: " << s.message() << "\n";
  return 1;
}

ordered_json PolicyJson(const PolicyResult& p) {
  ordered_json j;
  j["tok_s"] = p.tok_s;
  j["device_hit_share"] = p.device_hit_share;
  j["host_layer_share"] = p.host_layer_share;
  j["device_expert_bytes"] = p.device_expert_bytes;
  j["modelled_seconds"] = p.seconds;
  j["tokens"] = p.tokens;
  return j;
}

int Main(int argc, char** argv) {
  Options o;
  bool help = false;
  if (std::string err = common::ParseFlags(FlagTable(o, help), argc, argv); !err.empty()) {
    return Usage(err);
  }
  if (help) {
    std::cout << kUsage << "\n" << common::FlagHelp(FlagTable(o, help));
    std::cout << "Options: --skew S (Zipf exponent, default 1), --topics N (8), --topic-steps N\n"
                 "(2000 decode steps per conversation), --steps N (20000), --seed N;\n"
                 "--warmup-steps N (a tenth of the decode steps), --interval SECONDS (30),\n"
                 "--half-life SECONDS (60), --hysteresis H (0.25), --min-gain TOKENS (1),\n"
                 "--replan-gain F (0.02: a reorganisation is taken when its modelled step is\n"
                 "that much shorter; 0.002 when it keeps more layers whole),\n"
                 "--count-noise shrink|keep (shrink, as the router does: plan from counts with\n"
                 "their counting noise shrunk away),\n"
                 "--plan-profile NAME|FILE.json (the machine the router's placement costs\n"
                 "describe; default: --profile),\n"
                 "--move-bytes SIZE (64MiB copied between steps), --max-decode-tokens N (64:\n"
                 "longer passes are prefill, counted as heat, not timed), --allow-truncated (a\n"
                 "trace whose last record is cut short), --sweep (tok/s of every --n-cpu-moe N),\n"
                 "--write-trace FILE (save the trace, e.g. a synthetic one, to replay later).\n";
    return 0;
  }
  if (o.trace.empty() == !o.synthetic) {
    return Usage("give exactly one of --trace FILE and --synthetic-trace");
  }
  if (o.profile.empty()) return Usage("--profile is required (rtx4090, h100 or FILE.json)");
  if (!o.expert_vram_given) return Usage("--expert-vram SIZE is required (e.g. 12GiB)");

  absl::StatusOr<MachineProfile> profile = LoadProfile(o.profile);
  if (!profile.ok()) return Fail(profile.status());
  if (!o.plan_profile.empty()) {
    absl::StatusOr<MachineProfile> planned = LoadProfile(o.plan_profile);
    if (!planned.ok()) return Fail(planned.status());
    o.sim.plan_profile = *std::move(planned);
  }
  absl::StatusOr<MoeModelShape> shape = LoadModelShape(o.model);
  if (!shape.ok()) return Fail(shape.status());

  common::RoutingTrace trace;
  if (o.synthetic) {
    o.synth.n_layer = shape->n_layer;
    o.synth.n_expert = shape->n_expert;
    o.synth.k = shape->k;
    absl::StatusOr<common::RoutingTrace> t = SyntheticRoutingTrace(o.synth);
    if (!t.ok()) return Fail(t.status());
    trace = std::move(*t);
  } else {
    absl::StatusOr<common::RoutingTrace> t =
        common::ReadRoutingTrace(o.trace, {.allow_truncated_tail = o.allow_truncated});
    if (!t.ok()) return Fail(t.status());
    trace = std::move(*t);
  }
  if (!o.write_trace.empty()) {
    absl::StatusOr<std::unique_ptr<common::RoutingTraceWriter>> w =
        common::RoutingTraceWriter::Create(o.write_trace, trace.header);
    if (!w.ok()) return Fail(w.status());
    for (const common::RoutingStep& step : trace.steps) {
      if (absl::Status s = (*w)->Append(step.ids, step.n_tokens, trace.header.k); !s.ok()) {
        return Fail(s);
      }
    }
    if (absl::Status s = (*w)->Close(); !s.ok()) return Fail(s);
  }
  absl::StatusOr<ModelTrace> mapped = MapTrace(trace, *shape, o.mapping);
  if (!mapped.ok()) return Fail(mapped.status());
  o.sim.expert_vram_bytes = o.expert_vram;
  absl::StatusOr<SimulationResult> r = SimulatePolicies(*mapped, *shape, *profile, o.sim);
  if (!r.ok()) return Fail(r.status());

  ordered_json out;
  out["all_cpu"] = r->all_cpu.tok_s;
  out["n_cpu_moe"] = r->n_cpu_moe.tok_s;
  out["static"] = r->static_hot.tok_s;
  out["dynamic"] = r->dynamic.tok_s;
  out["all_gpu"] = r->all_gpu.tok_s;
  out["dynamic_vs_n_cpu_moe"] = r->n_cpu_moe.tok_s > 0 ? r->dynamic.tok_s / r->n_cpu_moe.tok_s : 0;
  out["expert_vram"] = o.expert_vram;
  out["slots"] = r->n_slots;
  out["slot_classes"] = r->slot_classes;
  ordered_json& tr = out["trace"];
  tr["source"] = o.synthetic ? "synthetic" : o.trace;
  tr["model_name"] = trace.header.model_name;
  tr["n_layer"] = trace.header.n_layer;
  tr["n_expert"] = trace.header.n_expert;
  tr["k"] = trace.header.k;
  tr["steps"] = trace.steps.size();
  tr["decode_steps"] = mapped->decode_steps;
  tr["warmup_steps"] = r->warmup_steps;
  tr["timed_steps"] = r->timed_steps;
  if (trace.truncated_tail_bytes > 0) tr["truncated_tail_bytes"] = trace.truncated_tail_bytes;
  if (o.synthetic) {
    tr["skew"] = o.synth.skew;
    tr["topics"] = o.synth.topics;
    tr["topic_steps"] = o.synth.topic_steps;
    tr["seed"] = o.synth.seed;
  }
  if (trace.header.n_layer != shape->n_layer || trace.header.n_expert != shape->n_expert) {
    tr["mapping"] = absl::StrFormat(
        "model layer l replays trace layer l*%d/%d; expert e -> floor((e+u)*%d/%d), u hashed",
        trace.header.n_layer, shape->n_layer, shape->n_expert, trace.header.n_expert);
  }
  ordered_json& m = out["model"];
  m["name"] = shape->name;
  m["n_layer"] = shape->n_layer;
  m["n_expert"] = shape->n_expert;
  m["k"] = shape->k;
  m["slot_bytes"] = shape->slot_bytes();
  m["all_expert_bytes"] = shape->all_expert_bytes();
  ordered_json& p = out["profile"];
  p["name"] = profile->name;
  p["gpu_bandwidth_gbs"] = profile->gpu_bytes_per_s / 1e9;
  p["cpu_bandwidth_gbs"] = profile->cpu_bytes_per_s / 1e9;
  p["cpu_tflops"] = profile->cpu_flops / 1e12;
  p["pcie_bandwidth_gbs"] = profile->pcie_bytes_per_s / 1e9;
  p["layer_sync_us"] = profile->layer_sync_s * 1e6;
  p["source"] = profile->source;
  ordered_json& pol = out["policies"];
  pol["all_cpu"] = PolicyJson(r->all_cpu);
  pol["n_cpu_moe"] = PolicyJson(r->n_cpu_moe);
  pol["n_cpu_moe"]["n"] = r->n_cpu_moe.n_cpu_moe;
  pol["static"] = PolicyJson(r->static_hot);
  pol["dynamic"] = PolicyJson(r->dynamic);
  ordered_json& d = pol["dynamic"];
  d["plans"] = r->dynamic.plans;
  d["plans_changed"] = r->dynamic.plans_changed;
  d["moves_in"] = r->dynamic.moves_in;
  d["moves_out"] = r->dynamic.moves_out;
  d["bytes_moved"] = r->dynamic.bytes_moved;
  d["copy_seconds"] = r->dynamic.copy_seconds;
  d["interval_s"] = o.sim.interval_s;
  d["half_life_s"] = o.sim.half_life_s;
  d["hysteresis"] = o.sim.planner.hysteresis;
  d["whole_layers"] = r->dynamic.whole_layers;
  d["class_slots"] = r->dynamic.class_slots;
  const MachineProfile& planned = o.sim.plan_profile ? *o.sim.plan_profile : *profile;
  d["plan_profile"] = planned.name;
  pol["all_gpu"] = PolicyJson(r->all_gpu);
  ordered_json& pe = pol["dynamic_per_expert"];
  pe = PolicyJson(r->dynamic_per_expert);
  pe["note"] = "the same loop planning hottest experts first, without the cost model";
  pe["plans_changed"] = r->dynamic_per_expert.plans_changed;
  pe["moves_in"] = r->dynamic_per_expert.moves_in;
  ordered_json& fs = pol["dynamic_fixed_split"];
  fs = PolicyJson(r->dynamic_fixed_split);
  fs["note"] = "the same loop with each expert size's slots fixed at the start-up split";
  fs["whole_layers"] = r->dynamic_fixed_split.whole_layers;
  fs["class_slots"] = r->dynamic_fixed_split.class_slots;
  if (o.sweep) {
    ordered_json& s = out["n_cpu_moe_sweep"];
    s = ordered_json::array();
    for (const auto& [n, tok_s] : r->n_cpu_moe_sweep) s.push_back({{"n", n}, {"tok_s", tok_s}});
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace deltaserve::router

int main(int argc, char** argv) { return deltaserve::router::Main(argc, argv); }
