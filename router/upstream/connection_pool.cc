#include "router/upstream/connection_pool.h"

#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace deltaserve::router::upstream {

std::string ConnectionKey(const UpstreamUrl& url, const std::string& ca_pem) {
  // The CA bundle itself, not its file name: a reload that changes the file's contents must not
  // reuse connections verified against the old one.
  return absl::StrCat(url.tls ? "https://" : "http://", url.host, ":", url.port, "\n", ca_pem);
}

ConnectionPool& ConnectionPool::Global() {
  static ConnectionPool* pool = new ConnectionPool();  // never destroyed: threads may outlive main
  return *pool;
}

void ConnectionPool::DropExpired(absl::Time now,
                                 std::vector<std::unique_ptr<HttpConnection>>* dropped) {
  // Every endpoint, not only the one asked for: an upstream removed by a reload is never asked
  // for again, and its connections must not stay open for good.
  for (auto it = idle_.begin(); it != idle_.end();) {
    std::deque<Idle>& list = it->second;
    while (!list.empty() && now - list.front().since >= kIdleConnectionTimeout) {
      dropped->push_back(std::move(list.front().connection));
      list.pop_front();
    }
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
}

std::unique_ptr<HttpConnection> ConnectionPool::Take(const std::string& key, absl::Time now) {
  std::vector<std::unique_ptr<HttpConnection>> dropped;  // closed outside the lock
  std::unique_ptr<HttpConnection> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DropExpired(now, &dropped);
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    std::deque<Idle>& list = it->second;
    while (!list.empty()) {
      Idle last = std::move(list.back());
      list.pop_back();
      if (last.connection->IdleUsable()) {  // (none left past the timeout)
        found = std::move(last.connection);
        break;
      }
      dropped.push_back(std::move(last.connection));
    }
    if (list.empty()) idle_.erase(it);
  }
  return found;
}

void ConnectionPool::Put(const std::string& key, std::unique_ptr<HttpConnection> connection,
                         absl::Time now) {
  std::vector<std::unique_ptr<HttpConnection>> dropped;  // closed outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(now, &dropped);
  std::deque<Idle>& list = idle_[key];
  if (list.size() >= static_cast<size_t>(kMaxIdleConnectionsPerEndpoint)) {
    dropped.push_back(std::move(list.front().connection));
    list.pop_front();
  }
  list.push_back({std::move(connection), now});
}

void ConnectionPool::CountNew(std::string_view upstream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(upstream);
  if (it == counts_.end()) it = counts_.emplace(std::string(upstream), Counts{}).first;
  ++it->second.opened;
}

void ConnectionPool::CountReused(std::string_view upstream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(upstream);
  if (it == counts_.end()) it = counts_.emplace(std::string(upstream), Counts{}).first;
  ++it->second.reused;
}

ConnectionPool::Counts ConnectionPool::counts(std::string_view upstream) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(upstream);
  return it == counts_.end() ? Counts{} : it->second;
}

size_t ConnectionPool::idle(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = idle_.find(key);
  return it == idle_.end() ? 0 : it->second.size();
}

void ConnectionPool::Clear() {
  std::map<std::string, std::deque<Idle>> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  dropped.swap(idle_);
}

}  // namespace deltaserve::router::upstream
