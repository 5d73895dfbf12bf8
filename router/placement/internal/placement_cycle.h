// What one cycle of the placement loop (router/placement/placement_controller.h) keeps per worker
// and per group of workers with the same weights, and its log lines; shared by
// placement_controller.cc (the loop, settings, calls to the workers, views and metrics),
// placement_controller_stats.cc (gathering each model's statistics from its workers) and
// placement_controller_plan.cc (planning and pushing each group's placements, the Redis record).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/expert_placement.h"
#include "deltaserve/v1/worker.pb.h"
#include "router/placement/placement_controller.h"

namespace deltaserve::router {

struct PlacementController::Polled {
  std::string address;
  deltaserve::v1::ExpertStats stats;
  common::ExpertPlacement current;        // the device set it reported
  std::vector<std::vector<double>> heat;  // its decayed counts, [n_layer][n_expert], cleaned
  PlacementWorkerView* view = nullptr;    // its entry in the model's view
};

struct PlacementController::Group {
  std::string fingerprint;
  int64_t n_layer = 0;
  int64_t n_expert = 0;
  std::vector<Polled*> workers;
};

namespace internal {

// The placement loop's log lines (stderr); failures log on their transitions, not per cycle.
inline void LogPlacement(const std::string& line) {
  std::fprintf(stderr, "placement: %s\n", line.c_str());
}

}  // namespace internal
}  // namespace deltaserve::router
