// Where tests find their data and the binaries they run.
#pragma once

#include <string>

namespace deltaserve::testing {

// Directory of the golden reference data: $DELTASERVE_GOLDEN_DIR, else the configure-time
// default (../shared/golden beside the checkout).
std::string GoldenDir();

// Absolute path of golden file `name`; the calling test fails (ADD_FAILURE) when it is missing:
// golden tests never skip.
std::string GoldenPath(const std::string& name);

// Path of a program built in this build tree, e.g. BinaryPath("common/deltaserve-gguf").
std::string BinaryPath(const std::string& relative);

}  // namespace deltaserve::testing
