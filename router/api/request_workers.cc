#include "router/api/request_workers.h"

#include <algorithm>
#include <utility>

namespace deltaserve::router::api {

RequestWorkers::RequestWorkers(int threads, size_t max_queued) : max_queued_(max_queued) {
  const int n = std::max(1, threads);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
}

RequestWorkers::~RequestWorkers() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  ready_.notify_all();
  for (std::thread& t : threads_) t.join();
  // `dropped` goes out of scope here, outside the lock: destroying a task may answer its
  // exchange.
}

bool RequestWorkers::TrySubmit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return true;
}

size_t RequestWorkers::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void RequestWorkers::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // As on the io threads (connection.cc), a task that throws leaves its exchange to be
    // answered 500 when it is dropped; the pool thread lives on.
    try {
      task();
    } catch (...) {
    }
  }
}

}  // namespace deltaserve::router::api
