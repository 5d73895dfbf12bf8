// --target idle of deltaserve-bench-router: many streamed completions opened through the router
// and held open, each one watched so that one ending early is counted (bench/router_load.h).
#include <algorithm>
#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/router_load.h"

namespace deltaserve::bench {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Counts shared by the idle streams (io thread only).
struct IdleCounts {
  int opened = 0;        // 200 and a first event seen
  int failed = 0;        // could not open (connect error, non-200, closed before an event)
  int dropped = 0;       // opened, then closed or errored before we closed it
  bool closing = false;  // we are closing them: errors from now on are ours
  int pending = 0;       // being opened
};

class IdleStream : public std::enable_shared_from_this<IdleStream> {
 public:
  IdleStream(asio::io_context& io, const std::string* request, IdleCounts* counts,
             std::function<void()> on_settled)
      : socket_(io), request_(request), counts_(counts), on_settled_(std::move(on_settled)) {}

  void Open(const tcp::endpoint& to) {
    socket_.async_connect(to, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return self->Settle(false, "connect: " + ec.message());
      asio::async_write(self->socket_, asio::buffer(*self->request_),
                        [self](boost::system::error_code ec2, size_t) {
                          if (ec2) return self->Settle(false, "write: " + ec2.message());
                          self->Read();
                        });
    });
  }
  void Close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

 private:
  void Read() {
    socket_.async_read_some(
        asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
          if (ec) {
            if (!self->settled_) return self->Settle(false, "read: " + ec.message());
            if (!self->counts_->closing) {
              ++self->counts_->dropped;
              std::cerr << "idle: a held stream ended: " << ec.message() << "\n";
            }
            return;
          }
          if (!self->settled_) {
            self->data_.append(self->chunk_.data(), n);
            const size_t header_end = self->data_.find("\r\n\r\n");
            if (header_end != std::string::npos) {
              if (self->data_.compare(0, 12, "HTTP/1.1 200") != 0) {
                return self->Settle(false, "status: " + self->data_.substr(0, 12));
              }
              if (self->data_.find("data: ", header_end) != std::string::npos) {
                self->data_.clear();
                self->Settle(true, "");
              }
            }
          }
          self->Read();  // keep watching: an end during the hold is a drop
        });
  }

  void Settle(bool ok, const std::string& why) {
    if (settled_) return;
    settled_ = true;
    --counts_->pending;
    if (ok) {
      ++counts_->opened;
    } else {
      if (counts_->failed++ < 5) std::cerr << "idle: open failed: " << why << "\n";
    }
    on_settled_();
  }

  tcp::socket socket_;
  const std::string* request_;
  IdleCounts* counts_;
  std::function<void()> on_settled_;
  bool settled_ = false;
  std::string data_;
  std::array<char, 4096> chunk_;
};

}  // namespace

int RunIdleStreams(const RouterLoadFlags& f) {
  asio::io_context io;
  const std::string request = CompletionRequest(f, f.address, /*stream=*/true);
  const tcp::endpoint to = Endpoint(f.address);
  IdleCounts counts;
  std::vector<std::shared_ptr<IdleStream>> streams;
  streams.reserve(f.clients);
  const ProcSample before = SampleProc(f.watch_pid);
  const Clock::time_point t0 = Clock::now();
  int next = 0;
  std::function<void()> open_more = [&] {
    while (next < f.clients && counts.pending < f.open_window) {
      ++counts.pending;
      streams.push_back(std::make_shared<IdleStream>(io, &request, &counts, open_more));
      streams.back()->Open(to);
      ++next;
    }
    if (next == f.clients && counts.pending == 0) io.stop();
  };
  asio::post(io, open_more);
  io.run();
  io.restart();
  const double open_s = Seconds(Clock::now() - t0);
  std::cerr << "idle: " << counts.opened << " open, " << counts.failed << " failed, in "
            << absl::StrFormat("%.2f", open_s) << " s; holding " << f.hold_s << " s\n";
  const ProcSample opened = SampleProc(f.watch_pid);
  // Hold: the io thread keeps reading, so a stream that ends is counted as dropped.
  std::thread io_thread([&] {
    auto guard = asio::make_work_guard(io);
    io.run();
  });
  int64_t peak_rss = opened.rss_kib;
  const Clock::time_point hold_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(f.hold_s));
  while (Clock::now() < hold_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    peak_rss = std::max(peak_rss, SampleProc(f.watch_pid).rss_kib);
  }
  const ProcSample held = SampleProc(f.watch_pid);
  asio::post(io, [&] {
    counts.closing = true;
    for (auto& s : streams) s->Close();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  io.stop();
  io_thread.join();
  // dropped is read after the io thread ended; it only changes there.
  std::cout << absl::StrFormat(
                   "{\"target\":\"idle\",\"clients\":%d,\"opened\":%d,\"failed\":%d,\"dropped\":%d,"
                   "\"open_seconds\":%.3f,\"hold_seconds\":%.1f,\"rss_kib_before\":%d,"
                   "\"rss_kib_held\":%d,\"rss_kib_peak\":%d,\"cpu_s_opening\":%.3f,"
                   "\"cpu_cores_holding\":%.4f}",
                   f.clients, counts.opened, counts.failed, counts.dropped, open_s, f.hold_s,
                   before.rss_kib, held.rss_kib, peak_rss, opened.cpu_s - before.cpu_s,
                   (held.cpu_s - opened.cpu_s) / f.hold_s)
            << std::endl;
  return counts.opened == f.clients && counts.dropped == 0 ? 0 : 3;
}

}  // namespace deltaserve::bench
