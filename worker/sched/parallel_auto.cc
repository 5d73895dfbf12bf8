#include "worker/sched/parallel_auto.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {

std::string ParallelChoice::Describe(const ServingOptions& options) const {
  std::string why;
  if (!fits) {
    why = "not even one sequence fits the budget";
  } else if (memory_bound) {
    why = absl::StrCat("what the ", options.budget_name, " budget fits at --ctx ", options.ctx,
                       " (cap ", cap, ")");
  } else {
    why = absl::StrCat("the cap for this device kind; the ", options.budget_name,
                       " budget fits more at --ctx ", options.ctx);
  }
  return absl::StrCat("--parallel auto: ", n_parallel, " sequence", n_parallel == 1 ? "" : "s",
                      " at once (", why, "; --parallel N sets it)");
}

absl::StatusOr<ParallelChoice> ResolveAutoParallel(const std::string& path,
                                                   const ServingOptions& options,
                                                   bool host_memory) {
  ParallelChoice choice;
  choice.cap = std::max(1, options.parallel_auto_cap);
  bool any_fits = false;  // some count fits, though none keeps half the experts
  for (int n = choice.cap; n >= 1; --n) {
    ServingOptions o = options;
    o.n_parallel = n;
    absl::StatusOr<PlannedServing> planned = ServedModel::Plan(path, o, host_memory);
    if (!planned.ok()) {
      if (planned.status().code() == absl::StatusCode::kResourceExhausted) continue;
      return planned.status();
    }
    const ExpertSplit& e = planned->plan.inputs.experts;
    if (e.applies && !e.all_on_device && e.n_slots * 2 < e.n_experts()) {
      any_fits = true;
      continue;
    }
    choice.n_parallel = n;
    choice.memory_bound = n < choice.cap;
    return choice;
  }
  // Every count that fits leaves most experts in host memory: one sequence keeps the most on
  // the device. None fits: one, and Create refuses with the plan.
  choice.n_parallel = 1;
  choice.memory_bound = true;
  choice.fits = any_fits;
  return choice;
}

}  // namespace deltaserve::worker
