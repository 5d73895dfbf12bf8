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

// Directory of the shared input fixtures (chat templates, tool-call cases):
// $DELTASERVE_FIXTURES_DIR, else the configure-time default (../shared/fixtures beside the
// checkout).
std::string FixturesDir();

// Absolute path of fixture file `name`; the calling test fails (ADD_FAILURE) when it is missing:
// fixture tests never skip.
std::string FixturesPath(const std::string& name);

// Path of a program built in this build tree, e.g. BinaryPath("common/deltaserve-gguf");
// $DELTASERVE_BINARY_DIR, when set, replaces the build tree (prebuilt binaries elsewhere).
std::string BinaryPath(const std::string& relative);

}  // namespace deltaserve::testing
