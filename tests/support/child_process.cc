#include "tests/support/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace deltaserve::testing {

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
  int fds[2];
  if (argv.empty() || ::pipe2(fds, O_CLOEXEC) != 0) return;
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, STDIN_FILENO);
    ::execv(args[0], args.data());
    _exit(127);
  }
  ::close(fds[1]);
  if (pid_ < 0) {
    ::close(fds[0]);
    return;
  }
  err_fd_ = fds[0];
  reader_ = std::thread([this] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(err_fd_, buf, sizeof(buf));
      std::lock_guard<std::mutex> lock(mu_);
      if (n <= 0) {
        err_closed_ = true;
        cv_.notify_all();
        return;
      }
      err_.append(buf, static_cast<size_t>(n));
      cv_.notify_all();
    }
  });
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
  if (reader_.joinable()) reader_.join();
  if (err_fd_ >= 0) ::close(err_fd_);
}

std::optional<std::string> ChildProcess::WaitForLine(const std::string& needle,
                                                     std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  std::optional<std::string> line;
  cv_.wait_for(lock, timeout, [&] {
    const size_t at = err_.find(needle);
    if (at != std::string::npos) {
      const size_t begin = err_.rfind('\n', at);
      const size_t end = err_.find('\n', at);
      if (end == std::string::npos) return false;  // the line is not complete yet
      line = err_.substr(begin == std::string::npos ? 0 : begin + 1,
                         end - (begin == std::string::npos ? 0 : begin + 1));
      return true;
    }
    return err_closed_;
  });
  return line;
}

std::string ChildProcess::err() const {
  std::lock_guard<std::mutex> lock(mu_);
  return err_;
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  if (exit_code_ || pid_ <= 0) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // The reader may not have drained the pipe yet: without this, err() right after an exit
      // can miss the child's last message (seen: an empty err() of a child that printed its
      // refusal and exited 2). A grandchild that inherited stderr may keep it open, so the wait
      // is bounded.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(5), [&] { return err_closed_; });
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace deltaserve::testing
