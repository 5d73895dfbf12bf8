// Internal to router/placement's planners (expert_planner.cc, expert_split_planner.cc): the heat
// matrix as they read it, and one size class's layers cut out as a model of their own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/expert_placement.h"

namespace deltaserve::router::internal {

// Heat as the planner uses it: counts come from workers over the network and are summed, so a
// NaN, infinity or negative value means nothing trustworthy; it plans as 0 (never preferred,
// never protected).
inline double CleanHeat(double h) { return std::isfinite(h) && h > 0 ? h : 0.0; }

// Layers, experts (the longest row) and the total clean heat of a [layer][expert] matrix.
struct HeatShape {
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  double total = 0;
};
inline HeatShape ShapeOf(const std::vector<std::vector<double>>& heat) {
  HeatShape s;
  s.n_layer = static_cast<int64_t>(heat.size());
  for (const auto& row : heat) {
    s.n_expert = std::max(s.n_expert, static_cast<int64_t>(row.size()));
    for (double h : row) s.total += CleanHeat(h);
  }
  return s;
}

// Whether `current` has the heat's shape (else planning starts from nothing resident).
inline bool PlacementFits(const common::ExpertPlacement& current, int64_t n_layer,
                          int64_t n_expert) {
  return current.n_layer == n_layer && current.n_expert == n_expert &&
         static_cast<int64_t>(current.device.size()) == n_layer;
}

// The rows of `layers` (one size class) as a model of their own: their heat, and their part of
// `current` (empty when it does not fit).
struct LayerSlice {
  std::vector<std::vector<double>> heat;
  common::ExpertPlacement current;
};
inline LayerSlice SliceLayers(const std::vector<std::vector<double>>& heat,
                              const common::ExpertPlacement& current, bool current_fits,
                              const std::vector<int64_t>& layers, int64_t n_expert) {
  LayerSlice s;
  s.current = common::ExpertPlacement::Empty(static_cast<int64_t>(layers.size()), n_expert);
  for (size_t i = 0; i < layers.size(); ++i) {
    s.heat.push_back(heat[static_cast<size_t>(layers[i])]);
    if (current_fits) s.current.device[i] = current.device[static_cast<size_t>(layers[i])];
  }
  return s;
}

}  // namespace deltaserve::router::internal
