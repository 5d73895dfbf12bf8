#include "tests/support/test_paths.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace deltaserve::testing {

std::string GoldenDir() {
  if (const char* env = std::getenv("DELTASERVE_GOLDEN_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return DELTASERVE_DEFAULT_GOLDEN_DIR;
}

std::string GoldenPath(const std::string& name) {
  std::string path = absl::StrCat(GoldenDir(), "/", name);
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "golden file missing: " << path
                  << " (set DELTASERVE_GOLDEN_DIR to the shared/golden directory)";
  }
  return path;
}

std::string FixturesDir() {
  if (const char* env = std::getenv("DELTASERVE_FIXTURES_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  return DELTASERVE_DEFAULT_FIXTURES_DIR;
}

std::string FixturesPath(const std::string& name) {
  std::string path = absl::StrCat(FixturesDir(), "/", name);
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << "fixture file missing: " << path
                  << " (set DELTASERVE_FIXTURES_DIR to the shared/fixtures directory)";
  }
  return path;
}

std::string BinaryPath(const std::string& relative) {
  // The environment variable lets prebuilt test binaries run from another place (a bundle
  // carried to a GPU machine, bench/gpu/pack.sh).
  if (const char* env = std::getenv("DELTASERVE_BINARY_DIR"); env != nullptr && *env != '\0') {
    return absl::StrCat(env, "/", relative);
  }
  return absl::StrCat(DELTASERVE_BINARY_DIR, "/", relative);
}

}  // namespace deltaserve::testing
