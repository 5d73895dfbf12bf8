// Runs a program as a real child process (no shell) and collects its exit status and output;
// integration tests use it to drive the command-line tools. Every run has a deadline: a child
// that outlives it is killed, and the result says so.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace deltaserve::testing {

// The limit of a run when the caller names none: the tools the tests drive finish in seconds,
// the Python SDK checks within a few minutes on a busy 2-core machine. A longer run names its own.
inline constexpr std::chrono::milliseconds kDefaultProcessTimeout = std::chrono::minutes(10);

// What a finished child process left behind.
struct ProcessResult {
  int exit_code = -1;      // exit status, or 128 + signal number when killed by a signal
  std::string out;         // everything written to stdout
  std::string err;         // everything written to stderr (then a line saying why it was killed)
  bool timed_out = false;  // killed (SIGKILL, exit_code 137) when the timeout passed
};

// Runs argv[0] with arguments argv[1..] (stdin /dev/null) and waits for it and for the end of its
// output, at most `timeout`: then the child and whatever it started (its process group) are
// killed, `timed_out` is set and `err` ends with a line naming the program and the limit. A
// failure to start is reported as exit_code 127 with the reason in `err`.
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = kDefaultProcessTimeout);

}  // namespace deltaserve::testing
