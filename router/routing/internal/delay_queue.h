#pragma once
// One thread that runs tasks after a delay: the jittered backoff between a failed attempt and
// the next one, without blocking a gRPC callback thread or the HTTP strand. Tasks run one at
// a time in deadline order. Shutdown() runs every pending task at once and joins; a task
// posted after it runs inline on the caller's thread.

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace deltaserve::router::internal {

class DelayQueue {
 public:
  DelayQueue();
  ~DelayQueue();  // Shutdown()
  DelayQueue(const DelayQueue&) = delete;
  DelayQueue& operator=(const DelayQueue&) = delete;

  void RunAfter(absl::Duration delay, std::function<void()> task);
  void Shutdown();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<absl::Time, std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace deltaserve::router::internal
