// The placement simulator's machines and models (docs/moe_placement.md, "The placement
// simulator"): the built-in profiles (an RTX 4090 desktop, an H100 server), each figure with its
// published source, and the built-in model shapes (Qwen3.5 35B-A3B and 122B-A10B at Q4_K_M,
// computed from deltaserve-synth's tensor plan for those presets, so the bytes are what a Q4_K_M
// file of that model stores). Either can come from a JSON file instead, whole or as overrides of
// a built-in ("base"). Files are user input: every field is type- and range-checked.
//
//   ASSIGN_OR_RETURN(MachineProfile p, LoadProfile("rtx4090"));   // or "my-box.json"
//   ASSIGN_OR_RETURN(MoeModelShape m, LoadModelShape("122b-a10b"));
//
// Profile JSON (every field optional when "base" is given; bandwidths in GB/s = 1e9 bytes/s):
//   {"base": "rtx4090", "name": "my-box", "gpu_bandwidth_gbs": 1008, "cpu_bandwidth_gbs": 40,
//    "cpu_tflops": 9.2, "pcie_bandwidth_gbs": 31.5, "layer_sync_us": 18, "source": "..."}
// Model JSON (bytes; a per-layer field is one number for every layer or a list of n_layer):
//   {"base": "35b-a3b", "name": "...", "n_layer": 40, "n_expert": 256, "k": 8, "n_embd": 2048,
//    "expert_params": 3145728, "expert_bytes": 1769472, "dense_bytes": [...],
//    "shared_bytes": 1769472, "head_bytes": 320000000}
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/placement/placement_sim.h"

namespace deltaserve::router {

// The built-in profile names ("rtx4090", "h100") and model names ("35b-a3b", "122b-a10b").
std::vector<std::string> BuiltInProfiles();
std::vector<std::string> BuiltInModels();

// A built-in name, or a path to a JSON file (anything ending in ".json"). NotFound for an
// unknown name (listing the built-in ones) or a missing file; InvalidArgument naming the field
// for a bad file.
absl::StatusOr<MachineProfile> LoadProfile(const std::string& name_or_file);
absl::StatusOr<MoeModelShape> LoadModelShape(const std::string& name_or_file);

// The same from JSON text (`where` names the source in messages).
absl::StatusOr<MachineProfile> ParseProfileJson(std::string_view text, const std::string& where);
absl::StatusOr<MoeModelShape> ParseModelShapeJson(std::string_view text, const std::string& where);

// A deltaserve-synth MoE preset's shape at Q4_K_M ("35b-a3b", "122b-a10b").
absl::StatusOr<MoeModelShape> ShapeOfSynthPreset(const std::string& preset);

}  // namespace deltaserve::router
