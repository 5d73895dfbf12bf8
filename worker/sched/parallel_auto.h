// `--parallel auto` (the worker's default): how many sequences a model serves at once when the
// user does not say. The largest count up to the device kind's cap whose memory plan fits the
// budget at --ctx (KV cache and state slots grow with the count; weights, workspace and
// overheads do not), as llama-server picks its slot count and vLLM sizes its batch from memory.
// A MoE model on a device whose experts would not all fit keeps at least half of them in device
// memory: the count stops where the routed experts would lose more (docs/worker.md,
// "Sequences at once").
//
//   ServingOptions o = ...;  o.n_parallel = kParallelAuto;
//   absl::StatusOr<ParallelChoice> c = ResolveAutoParallel(path, o, /*host_memory=*/true);
//   o.n_parallel = c->n_parallel;   // c->Describe() for the start-up line
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "worker/sched/served_model.h"

namespace deltaserve::worker {

// ServingOptions::n_parallel value meaning `--parallel auto`.
inline constexpr int kParallelAuto = 0;

// The caps per device kind: a CPU decodes few sequences at once before each one slows (and
// llama-server's automatic slot count is 4); a GPU batches many.
inline constexpr int kParallelAutoCapCpu = 4;
inline constexpr int kParallelAutoCapDevice = 16;

struct ParallelChoice {
  int n_parallel = 1;
  int cap = 1;
  bool memory_bound = false;  // fewer than the cap because the budget (or the experts) said so
  bool fits = true;           // false: not even one sequence fits (Create will refuse, saying why)
  std::string Describe(const ServingOptions& options) const;
};

// The count for `options` (whose n_parallel is kParallelAuto; parallel_auto_cap the cap), by
// planning each count from the cap down with ServedModel::Plan. Errors other than the budget's
// (a file that cannot be read) are returned.
absl::StatusOr<ParallelChoice> ResolveAutoParallel(const std::string& path,
                                                   const ServingOptions& options,
                                                   bool host_memory);

}  // namespace deltaserve::worker
