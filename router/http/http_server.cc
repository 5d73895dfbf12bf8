#include "router/http/http_server.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/http/internal/connection.h"
#include "router/http/internal/server_core.h"

namespace deltaserve::router::http {
namespace asio = boost::asio;
using boost::system::error_code;

namespace internal {

// The listening socket and its accept loop, on a strand of its own.
class Acceptor : public std::enable_shared_from_this<Acceptor> {
 public:
  explicit Acceptor(std::shared_ptr<ServerCore> core)
      : core_(std::move(core)),
        strand_(asio::make_strand(core_->ioc)),
        acceptor_(strand_),
        retry_(strand_) {}

  absl::Status Listen(const std::string& address, uint16_t port, uint16_t* bound) {
    error_code ec;
    auto ip = asio::ip::make_address(address, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("bad listen address '", address, "'"));
    asio::ip::tcp::endpoint ep(ip, port);
    std::string where = absl::StrCat(address, ":", port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (ec == asio::error::address_in_use) {
      return absl::AlreadyExistsError(
          absl::StrCat("cannot listen on ", where, ": address already in use"));
    }
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
    *bound = acceptor_.local_endpoint(ec).port();
    return absl::OkStatus();
  }

  void Accept() {
    acceptor_.async_accept(
        asio::make_strand(core_->ioc),
        [self = shared_from_this()](const error_code& ec, asio::ip::tcp::socket socket) {
          self->OnAccept(ec, std::move(socket));
        });
  }

  void Close() {
    asio::post(strand_, [self = shared_from_this()] {
      error_code ignored;
      self->acceptor_.close(ignored);
      self->retry_.cancel();
    });
  }

 private:
  void OnAccept(const error_code& ec, asio::ip::tcp::socket socket) {
    if (core_->stopping || !acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: keep the server up and try again shortly.
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([self = shared_from_this()](const error_code& e) {
        if (!e) self->Accept();
      });
      return;
    }
    std::make_shared<Connection>(core_, std::move(socket))->Start();
    Accept();
  }

  std::shared_ptr<ServerCore> core_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_;
};

}  // namespace internal

Response DefaultErrorResponse(int status, std::string_view message) {
  nlohmann::json err = {{"error",
                         {{"message", message},
                          {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                          {"param", nullptr},
                          {"code", status}}}};
  return Response::Json(status, err.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

namespace {
struct WorkGuardHolder {
  explicit WorkGuardHolder(asio::io_context& ioc) : guard(asio::make_work_guard(ioc)) {}
  asio::executor_work_guard<asio::io_context::executor_type> guard;
};
}  // namespace

HttpServer::HttpServer(HttpServerOptions options)
    : core_(std::make_shared<internal::ServerCore>(std::move(options))) {}

HttpServer::~HttpServer() { Stop(absl::ZeroDuration()); }

void HttpServer::Route(std::string method, std::string path, Handler handler) {
  core_->routes[std::move(path)][std::move(method)] = std::move(handler);
}

void HttpServer::RouteSync(std::string method, std::string path,
                           std::function<Response(const Request&)> handler) {
  Route(std::move(method), std::move(path),
        [h = std::move(handler)](std::shared_ptr<HttpExchange> ex) {
          ex->Respond(h(ex->request()));
        });
}

absl::Status HttpServer::Start() {
  if (started_) return absl::FailedPreconditionError("HttpServer::Start called twice");
  auto acceptor = std::make_shared<internal::Acceptor>(core_);
  absl::Status st = acceptor->Listen(core_->options.address, core_->options.port, &bound_port_);
  if (!st.ok()) return st;
  started_ = true;
  acceptor_ = acceptor;
  work_guard_ = std::make_shared<WorkGuardHolder>(core_->ioc);
  acceptor->Accept();
  int n = std::max(1, core_->options.threads);
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([core = core_] { core->ioc.run(); });
  }
  return absl::OkStatus();
}

size_t HttpServer::connection_count() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->connections.size();
}

void HttpServer::Stop(absl::Duration grace) {
  if (!started_ || stopped_) return;
  stopped_ = true;
  core_->stopping = true;
  std::static_pointer_cast<internal::Acceptor>(acceptor_)->Close();

  auto for_each_connection = [this](auto fn) {
    std::vector<std::shared_ptr<internal::Connection>> live;
    {
      std::lock_guard<std::mutex> lock(core_->mu);
      for (auto& [id, weak] : core_->connections) {
        if (auto c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) fn(*c);
  };
  auto wait_drained = [this](absl::Duration d) {
    std::unique_lock<std::mutex> lock(core_->mu);
    return core_->drained.wait_for(lock, absl::ToChronoMilliseconds(d),
                                   [this] { return core_->connections.empty(); });
  };

  for_each_connection([](internal::Connection& c) { c.PostServerStopping(); });
  if (!wait_drained(grace)) {
    for_each_connection([](internal::Connection& c) { c.PostForceClose(); });
    wait_drained(absl::Seconds(2));
  }
  work_guard_.reset();
  core_->ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // Handlers still queued when the loop stopped (the acceptor's close, the cancelled accept)
  // hold the Acceptor, which holds the ServerCore that owns the io_context holding them: a
  // cycle that leaked the server. Run what is ready on this thread (every connection is gone
  // or force-closed, the acceptor closes, nothing blocks), and the cycle is broken.
  core_->ioc.restart();
  core_->ioc.poll();
}

}  // namespace deltaserve::router::http
