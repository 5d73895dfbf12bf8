#pragma once
// State shared by the HttpServer and its connections: the io_context, options, the route table,
// the stopping flag and the registry of open connections (for the graceful stop).
// Private to router/http.

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "router/http/http_server.h"

namespace deltaserve::router::http::internal {

class Connection;

struct ServerCore {
  explicit ServerCore(HttpServerOptions opts) : options(std::move(opts)) {}

  const Handler* FindRoute(const std::string& method, const std::string& path,
                           bool* path_known) const {
    auto it = Find(path);
    *path_known = it != routes.end();
    if (!*path_known) return nullptr;
    auto m = it->second.find(method);
    return m == it->second.end() ? nullptr : &m->second;
  }

  // The methods routed on `path`, as a 405's Allow header lists them ("GET, POST"; RFC 9110
  // 15.5.6 requires the header on a 405).
  std::string AllowedMethods(const std::string& path) const {
    std::string allow;
    auto it = Find(path);
    if (it == routes.end()) return allow;
    for (const auto& [method, handler] : it->second) {
      if (!allow.empty()) allow += ", ";
      allow += method;
    }
    return allow;
  }

  // The route entry of `path`: its exact one, else the prefix route ("/a/*") it extends.
  std::map<std::string, std::map<std::string, Handler>>::const_iterator Find(
      const std::string& path) const {
    auto it = routes.find(path);
    if (it != routes.end()) return it;
    for (auto p = routes.begin(); p != routes.end(); ++p) {
      const std::string& key = p->first;
      if (!key.empty() && key.back() == '*' && path.size() >= key.size() &&
          path.compare(0, key.size() - 1, key, 0, key.size() - 1) == 0) {
        return p;
      }
    }
    return routes.end();
  }

  Response ErrorResponse(int status, std::string_view message, std::string_view path = "") const {
    if (options.error_response_at) return options.error_response_at(path, status, message);
    return options.error_response ? options.error_response(status, message)
                                  : DefaultErrorResponse(status, message);
  }

  // Returns the connection's id; `*open` receives the number of open connections, this one
  // included.
  uint64_t Register(const std::shared_ptr<Connection>& c, size_t* open) {
    std::lock_guard<std::mutex> lock(mu);
    uint64_t id = next_id++;
    connections.emplace(id, c);
    *open = connections.size();
    return id;
  }
  void Unregister(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    connections.erase(id);
    if (connections.empty()) drained.notify_all();
  }

  HttpServerOptions options;
  // path -> method -> handler; filled before Start(), read-only afterwards.
  std::map<std::string, std::map<std::string, Handler>> routes;

  boost::asio::io_context ioc;
  std::atomic<bool> stopping{false};

  mutable std::mutex mu;
  std::condition_variable drained;
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> connections;
};

}  // namespace deltaserve::router::http::internal
