#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace deltaserve::testing {

ProcessResult RunProcess(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  ProcessResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.exit_code = 127;
    result.err = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  // No input: in a process group of its own (below) a child reading a terminal would be stopped.
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // A process group of its own, so that a timeout also ends what the child started (a Python
  // check's own subprocesses), which would otherwise keep the pipes open.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    result.exit_code = 127;
    result.err = std::string("posix_spawn ") + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  auto ms_left = [&deadline] {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
  };
  // Drain both pipes together so a child filling one of them cannot block.
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0 && !result.timed_out) {
    if (Clock::now() >= deadline) {
      result.timed_out = true;
      break;
    }
    const int ready = poll(fds, 2, ms_left());
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  // The pipes closed (or the time ran out); the child may still run with them closed.
  bool killed = false;
  auto kill_group = [&] {
    kill(-pid, SIGKILL);  // pid is its group's id (POSIX_SPAWN_SETPGROUP with 0)
    killed = true;
  };
  if (result.timed_out) kill_group();
  int status = 0;
  bool reaped = false;
  for (;;) {
    const pid_t r = waitpid(pid, &status, killed ? 0 : WNOHANG);
    if (r == pid) {
      reaped = true;
      break;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (Clock::now() >= deadline) {
      result.timed_out = true;
      kill_group();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, ms_left())));
  }
  if (reaped) {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (result.timed_out) {
    const int64_t ms = timeout.count();
    const std::string limit =
        ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
    result.err += "\n[RunProcess: " + argv[0] + " killed after " + limit +
                  ": it, or a process it started, was still running]\n";
  }
  return result;
}

}  // namespace deltaserve::testing
