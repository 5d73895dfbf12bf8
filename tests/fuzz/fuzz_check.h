#pragma once
// The property check of the router's fuzz targets: a violated property aborts, which libFuzzer
// reports as a crash and saves the input that caused it (crash-* beside the corpus).

#include <cstdio>
#include <cstdlib>

namespace deltaserve::fuzz {

// Aborts with "<target>: violated: <what>" on stderr when `ok` is false.
inline void Check(bool ok, const char* target, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: violated: %s\n", target, what);
    std::abort();
  }
}

}  // namespace deltaserve::fuzz
