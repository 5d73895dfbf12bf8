#include "router/placement/placement_sim_inputs.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/gguf_writer.h"
#include "nlohmann/json.hpp"
#include "worker/synth/synthetic_model.h"

namespace deltaserve::router {
namespace {

using nlohmann::json;

constexpr double kGB = 1e9;

// ---- The built-in machines (docs/moe_placement.md lists the sources) ----
//
// Host expert bandwidth is the one figure no datasheet gives: what a CPU reaches reading Q4_K
// expert matrices during decode is a fraction of its memory's theoretical bandwidth. That
// fraction is taken from one published end-to-end measurement of exactly this workload and used
// for both machines: Qwen3.5-122B-A10B (Q4_K_L) with every routed expert on the CPU of a Ryzen 9
// 7950X (DDR5-6000, two channels: 96 GB/s theoretical) beside an RTX 4090 decoded 15.65 tok/s
// (r/LocalLLaMA "Hot Experts in your VRAM", April 2026). This cost model gives that figure (15.7)
// when host experts are read at 0.39 of theoretical, 37.4 GB/s (placement_sim_test checks the
// arithmetic). The same post's second point, layer offload with 8 of 48 layers' experts on the
// GPU (--n-cpu-moe 40), measured 17.87 tok/s; the model predicts 18.7 with the same figure, 5 %
// high.
constexpr double kHostExpertEfficiency = 0.39;

// Per layer with host experts the worker submits two copies (activations down, partial sums up)
// and waits once: three CUDA runtime calls of 5-7 us each as measured for cudaMemcpyAsync
// submission (DualPath, arXiv 2602.21548, section 5.2).
constexpr double kLayerSyncSeconds = 3 * 6e-6;

MachineProfile Rtx4090() {
  MachineProfile p;
  p.name = "rtx4090";
  p.gpu_bytes_per_s = 1008 * kGB;  // 21 Gbps GDDR6X x 384 bit (NVIDIA specification)
  p.cpu_bytes_per_s = kHostExpertEfficiency * 96 * kGB;  // DDR5-6000 x 2 channels x 8 bytes
  // 16 Zen 4 cores x 4.5 GHz x 128 int8 operations per cycle (two 256-bit multiply-add ports).
  p.cpu_flops = 16 * 4.5e9 * 128;
  p.pcie_bytes_per_s = 31.5 * kGB;  // PCIe 4.0 x16, one direction
  p.layer_sync_s = kLayerSyncSeconds;
  p.source =
      "RTX 4090 (1008 GB/s) + Ryzen 9 7950X, DDR5-6000 dual channel (96 GB/s theoretical, "
      "host experts at 0.39 of it), PCIe 4.0 x16 (31.5 GB/s), 18 us per layer sync";
  return p;
}

MachineProfile H100() {
  MachineProfile p;
  p.name = "h100";
  p.gpu_bytes_per_s = 3350 * kGB;  // H100 SXM5 HBM3 (NVIDIA datasheet)
  // One socket of a Xeon Platinum 8480+ (Sapphire Rapids): 8 channels of DDR5-4800.
  p.cpu_bytes_per_s = kHostExpertEfficiency * 307.2 * kGB;
  p.cpu_flops = 56 * 2.0e9 * 128;  // 56 cores x 2.0 GHz all-core x 128 int8 ops per cycle
  p.pcie_bytes_per_s = 64 * kGB;   // PCIe 5.0 x16, one direction ("128 GB/s" both ways)
  p.layer_sync_s = kLayerSyncSeconds;
  p.source =
      "H100 SXM5 (3350 GB/s) + one Xeon Platinum 8480+ socket, 8 x DDR5-4800 (307 GB/s "
      "theoretical, host experts at 0.39 of it), PCIe 5.0 x16 (64 GB/s), 18 us per layer sync";
  return p;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in{std::string(path), std::ios::binary};
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open ", what, " file ", path));
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file ", path, " is over 1 MiB"));
  }
  return text;
}

// Reads an object's fields with type and range checks; the first problem is kept.
class Fields {
 public:
  Fields(const json& j, const std::string& where) : j_(j), where_(where) {}

  std::optional<double> Number(const char* key, double min, double max) {
    if (!j_.contains(key)) return std::nullopt;
    const json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < min ||
        v.get<double>() > max) {
      Fail(absl::StrCat("\"", key, "\" must be a number in [", min, ", ", max, "]"));
      return std::nullopt;
    }
    return v.get<double>();
  }
  std::optional<int64_t> Integer(const char* key, int64_t min, int64_t max) {
    if (!j_.contains(key)) return std::nullopt;
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max) {
      Fail(absl::StrCat("\"", key, "\" must be a whole number in [", min, ", ", max, "]"));
      return std::nullopt;
    }
    return v.get<int64_t>();
  }
  std::optional<std::string> Text(const char* key) {
    if (!j_.contains(key)) return std::nullopt;
    if (!j_.at(key).is_string()) {
      Fail(absl::StrCat("\"", key, "\" must be a string"));
      return std::nullopt;
    }
    return j_.at(key).get<std::string>();
  }
  // One number for every layer, or a list of n_layer numbers.
  std::optional<std::vector<uint64_t>> PerLayer(const char* key, int64_t n_layer) {
    if (!j_.contains(key)) return std::nullopt;
    const json& v = j_.at(key);
    constexpr double kMax = 1e12;  // a terabyte per layer is no real model
    auto ok = [&](const json& x) {
      return x.is_number() && x.get<double>() >= 0 && x.get<double>() <= kMax;
    };
    if (ok(v)) {
      return std::vector<uint64_t>(static_cast<size_t>(n_layer),
                                   static_cast<uint64_t>(v.get<double>()));
    }
    if (!v.is_array() || static_cast<int64_t>(v.size()) != n_layer) {
      Fail(absl::StrCat("\"", key, "\" must be a number of bytes or a list of ", n_layer));
      return std::nullopt;
    }
    std::vector<uint64_t> out;
    for (const json& x : v) {
      if (!ok(x)) {
        Fail(absl::StrCat("\"", key, "\" entries must be numbers of bytes in [0, 1e12]"));
        return std::nullopt;
      }
      out.push_back(static_cast<uint64_t>(x.get<double>()));
    }
    return out;
  }
  absl::Status status() const { return status_; }

 private:
  void Fail(std::string why) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(where_, ": ", why));
  }
  const json& j_;
  std::string where_;
  absl::Status status_;
};

absl::StatusOr<json> ParseObject(std::string_view text, const std::string& where) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
  }
  return j;
}

bool IsJsonPath(const std::string& s) { return absl::EndsWith(s, ".json"); }

}  // namespace

std::vector<std::string> BuiltInProfiles() { return {"rtx4090", "h100"}; }
std::vector<std::string> BuiltInModels() { return {"35b-a3b", "122b-a10b"}; }

absl::StatusOr<MoeModelShape> ShapeOfSynthPreset(const std::string& name) {
  absl::StatusOr<worker::SynthPreset> preset = worker::FindPreset(name);
  if (!preset.ok()) return preset.status();
  if (!preset->is_moe()) {
    return absl::InvalidArgumentError(absl::StrCat("preset '", name, "' is not a MoE model"));
  }
  // Real checkpoints have 248,320 embedding and head rows (MODEL_SPEC 1.2).
  absl::StatusOr<worker::ModelPlan> plan = worker::PlanModel(
      *preset, worker::WeightMixture::kQ4_K_M, worker::kQwen35VocabRows, /*n_layer=*/0);
  if (!plan.ok()) return plan.status();
  MoeModelShape s;
  s.name = absl::StrCat("qwen3.5-", name, "-q4_k_m");
  s.n_layer = preset->n_layer;
  s.n_expert = preset->n_expert;
  s.k = preset->n_expert_used;
  s.n_embd = preset->n_embd;
  s.expert_params = 3 * preset->n_embd * preset->n_ff_expert;
  s.expert_bytes.assign(static_cast<size_t>(s.n_layer), 0);
  s.dense_bytes.assign(static_cast<size_t>(s.n_layer), 0);
  s.shared_bytes.assign(static_cast<size_t>(s.n_layer), 0);
  for (const worker::PlannedTensor& t : plan->tensors) {
    absl::StatusOr<uint64_t> bytes = common::GgufTensorByteSize(t.type, t.ne);
    if (!bytes.ok()) return bytes.status();
    if (t.layer < 0) {
      // The embedding is read one row per token: not counted. The head and its norm are.
      if (t.name != "token_embd.weight") s.head_bytes += *bytes;
      continue;
    }
    const auto l = static_cast<size_t>(t.layer);
    if (t.expert_stack) {
      s.expert_bytes[l] += *bytes / static_cast<uint64_t>(preset->n_expert);
    } else if (absl::StrContains(t.name, "_shexp")) {
      s.shared_bytes[l] += *bytes;
    } else {
      s.dense_bytes[l] += *bytes;
    }
  }
  return s;
}

absl::StatusOr<MachineProfile> ParseProfileJson(std::string_view text, const std::string& where) {
  absl::StatusOr<json> j = ParseObject(text, where);
  if (!j.ok()) return j.status();
  Fields f(*j, where);
  MachineProfile p;
  const std::optional<std::string> base = f.Text("base");
  if (base.has_value()) {
    if (*base == "rtx4090") {
      p = Rtx4090();
    } else if (*base == "h100") {
      p = H100();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown base profile '", *base, "' (one of rtx4090, h100)"));
    }
    p.name = std::string(where);
    p.source = absl::StrCat(p.source, "; overridden by ", where);
  } else {
    p.name = std::string(where);
  }
  if (auto v = f.Text("name")) p.name = *v;
  if (auto v = f.Text("source")) p.source = *v;
  if (auto v = f.Number("gpu_bandwidth_gbs", 1e-3, 1e6)) p.gpu_bytes_per_s = *v * kGB;
  if (auto v = f.Number("cpu_bandwidth_gbs", 1e-3, 1e6)) p.cpu_bytes_per_s = *v * kGB;
  if (auto v = f.Number("cpu_tflops", 1e-6, 1e6)) p.cpu_flops = *v * 1e12;
  if (auto v = f.Number("pcie_bandwidth_gbs", 1e-3, 1e6)) p.pcie_bytes_per_s = *v * kGB;
  if (auto v = f.Number("layer_sync_us", 0, 1e6)) p.layer_sync_s = *v * 1e-6;
  if (!f.status().ok()) return f.status();
  if (absl::Status s = ValidateProfile(p); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", s.message(), base.has_value() ? "" : " (or give \"base\")"));
  }
  return p;
}

absl::StatusOr<MoeModelShape> ParseModelShapeJson(std::string_view text, const std::string& where) {
  absl::StatusOr<json> j = ParseObject(text, where);
  if (!j.ok()) return j.status();
  Fields f(*j, where);
  MoeModelShape s;
  if (const std::optional<std::string> base = f.Text("base")) {
    absl::StatusOr<MoeModelShape> b = ShapeOfSynthPreset(*base);
    if (!b.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", b.status().message()));
    s = *b;
  }
  if (auto v = f.Text("name")) s.name = *v;
  if (s.name.empty()) s.name = std::string(where);
  if (auto v = f.Integer("n_layer", 1, common::kRoutingTraceMaxLayers)) s.n_layer = *v;
  if (auto v = f.Integer("n_expert", 1, common::kRoutingTraceMaxExperts)) s.n_expert = *v;
  if (auto v = f.Integer("k", 1, common::kRoutingTraceMaxK)) s.k = *v;
  if (auto v = f.Integer("n_embd", 1, 1 << 20)) s.n_embd = *v;
  if (auto v = f.Integer("expert_params", 1, int64_t{1} << 40)) s.expert_params = *v;
  if (auto v = f.Number("head_bytes", 0, 1e12)) s.head_bytes = static_cast<uint64_t>(*v);
  // A changed layer count without new per-layer lists keeps the base's first layer's figures.
  auto resize = [&](std::vector<uint64_t>& v) {
    if (static_cast<int64_t>(v.size()) != s.n_layer) {
      const uint64_t fill = v.empty() ? 0 : v.front();
      v.assign(static_cast<size_t>(s.n_layer), fill);
    }
  };
  resize(s.expert_bytes);
  resize(s.dense_bytes);
  resize(s.shared_bytes);
  if (auto v = f.PerLayer("expert_bytes", s.n_layer)) s.expert_bytes = *v;
  if (auto v = f.PerLayer("dense_bytes", s.n_layer)) s.dense_bytes = *v;
  if (auto v = f.PerLayer("shared_bytes", s.n_layer)) s.shared_bytes = *v;
  if (!f.status().ok()) return f.status();
  if (absl::Status st = ValidateShape(s); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", st.message()));
  }
  return s;
}

absl::StatusOr<MachineProfile> LoadProfile(const std::string& name) {
  if (name == "rtx4090") return Rtx4090();
  if (name == "h100") return H100();
  if (!IsJsonPath(name)) {
    return absl::NotFoundError(absl::StrCat("unknown profile '", name, "' (one of ",
                                            absl::StrJoin(BuiltInProfiles(), ", "),
                                            ", or a FILE.json)"));
  }
  absl::StatusOr<std::string> text = ReadFile(name, "profile");
  if (!text.ok()) return text.status();
  return ParseProfileJson(*text, name);
}

absl::StatusOr<MoeModelShape> LoadModelShape(const std::string& name) {
  if (!IsJsonPath(name)) {
    for (const std::string& m : BuiltInModels()) {
      if (m == name) return ShapeOfSynthPreset(name);
    }
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "' (one of ",
                                            absl::StrJoin(BuiltInModels(), ", "),
                                            ", or a FILE.json)"));
  }
  absl::StatusOr<std::string> text = ReadFile(name, "model");
  if (!text.ok()) return text.status();
  return ParseModelShapeJson(*text, name);
}

}  // namespace deltaserve::router
