#pragma once
// A small bounded pool of threads for request work that can take long — reading a large body,
// rendering and tokenizing its prompt — so that it never runs on the HTTP server's io threads,
// which every other connection's reads and writes wait on (issue 17: two 3 MB bodies once held
// a small request back 31 s). OpenAiApi hands it the POST bodies above a size; smaller ones
// are handled on the io thread at once, which keeps their latency.
//
//   RequestWorkers workers(/*threads=*/2, /*max_queued=*/64);
//   if (!workers.TrySubmit([ex] { Handle(ex); })) { /* answer 429 with Retry-After */ }

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltaserve::router::api {

class RequestWorkers {
 public:
  // `threads` >= 1 run the tasks in the order they were queued; at most `max_queued` wait.
  RequestWorkers(int threads, size_t max_queued);
  // Finishes the tasks running, drops the queued ones (an HttpExchange dropped unanswered is
  // answered 500 by its destructor) and joins the threads.
  ~RequestWorkers();
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  // Queues `task`; false (and `task` is not run) when max_queued tasks already wait.
  bool TrySubmit(std::function<void()> task);

  // Tasks waiting for a thread right now.
  size_t queued() const;

 private:
  void Run();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace deltaserve::router::api
