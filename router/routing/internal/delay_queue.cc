#include "router/routing/internal/delay_queue.h"

#include <utility>

#include "absl/time/clock.h"

namespace deltaserve::router::internal {

DelayQueue::DelayQueue() : thread_([this] { Loop(); }) {}

DelayQueue::~DelayQueue() { Shutdown(); }

void DelayQueue::RunAfter(absl::Duration delay, std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      tasks_.emplace(absl::Now() + delay, std::move(task));
      cv_.notify_all();
      return;
    }
  }
  task();
}

void DelayQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void DelayQueue::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (tasks_.empty()) {
      if (stopping_) return;
      cv_.wait(lock);
      continue;
    }
    auto first = tasks_.begin();
    if (!stopping_ && first->first > absl::Now()) {
      cv_.wait_for(lock, absl::ToChronoNanoseconds(first->first - absl::Now()));
      continue;
    }
    std::function<void()> task = std::move(first->second);
    tasks_.erase(first);
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace deltaserve::router::internal
