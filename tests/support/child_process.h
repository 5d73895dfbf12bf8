// A long-running child process for integration tests (a worker, a router): started without a
// shell, its stderr collected by a thread so a test can wait for a line ("listening on ..."),
// then signalled and reaped. The destructor kills a child that is still running.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace deltaserve::testing {

// See the file comment.
class ChildProcess {
 public:
  // Starts argv[0] with argv[1..]; check started().
  explicit ChildProcess(const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  // The child's process id (e.g. for a command the test hands to another program to signal it).
  pid_t pid() const { return pid_; }
  // The first stderr line containing `needle`, waiting up to `timeout`; nullopt on timeout or
  // when the child closed stderr (exited) first.
  std::optional<std::string> WaitForLine(const std::string& needle,
                                         std::chrono::milliseconds timeout);
  // Everything written to stderr so far.
  std::string err() const;
  void Signal(int sig);
  // Waits for the exit, then for the child's stderr to be read to its end (err() is then
  // complete, up to 5 s more when a grandchild holds the pipe); the exit code (128 + signal
  // when killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  std::optional<int> exit_code_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string err_;
  bool err_closed_ = false;
  std::thread reader_;
};

}  // namespace deltaserve::testing
