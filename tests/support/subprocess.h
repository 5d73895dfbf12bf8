// Runs a program as a real child process (no shell) and collects its exit status and output;
// integration tests use it to drive the command-line tools.
#pragma once

#include <string>
#include <vector>

namespace deltaserve::testing {

// What a finished child process left behind.
struct ProcessResult {
  int exit_code = -1;  // exit status, or 128 + signal number when killed by a signal
  std::string out;     // everything written to stdout
  std::string err;     // everything written to stderr
};

// Runs argv[0] with arguments argv[1..] and waits for it. A failure to start is reported as
// exit_code 127 with the reason in `err`.
ProcessResult RunProcess(const std::vector<std::string>& argv);

}  // namespace deltaserve::testing
