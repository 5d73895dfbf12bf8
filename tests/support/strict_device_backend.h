// The tests' device: the `sim` device of kernels/sim/sim_backend.h (the CPU backend's math on
// memory that behaves like a GPU's: PROT_NONE outside ops, guard pages, every pointer argument
// checked, weights copied) with the settings and the report tests use: no capacity, a call from
// a thread other than the one that made it recorded as a violation (tests step the scheduler on
// the test thread), name() "strict", and Report() for a failure message. What the checks find and
// how a host access outside an op faults: sim_backend.h.
//
//   auto strict = std::make_unique<StrictDeviceBackend>(/*n_threads=*/2);
//   auto model = Qwen35Model::Load(path, *strict);        // weights copied into strict memory
//   ... Forward, scheduler, snapshots ...
//   EXPECT_TRUE(strict->violations().empty()) << strict->Report();
#pragma once

#include <string>
#include <string_view>

#include "kernels/sim/sim_backend.h"

namespace deltaserve::testing {

class StrictDeviceBackend final : public kernels::SimDeviceBackend {
 public:
  // `n_threads` threads for the wrapped CPU backend.
  explicit StrictDeviceBackend(int n_threads)
      : SimDeviceBackend(kernels::SimDeviceOptions{.n_threads = n_threads, .single_thread = true}) {}

  // The violations as one text, for a test's failure message: their count and the first 20 (an
  // engine bug repeats once per layer and pass).
  std::string Report() const;

  std::string_view name() const override { return "strict"; }
};

}  // namespace deltaserve::testing
