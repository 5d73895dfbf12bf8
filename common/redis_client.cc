#include "common/redis_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/internal/redis_connection.h"
#include "common/str_util.h"

namespace deltaserve::common {

using Clock = std::chrono::steady_clock;

absl::Status RedisErrorToStatus(std::string_view context, std::string_view message) {
  const std::string_view code = message.substr(0, message.find(' '));
  const std::string text = absl::StrCat(context.empty() ? "redis" : Sv(context), ": ", Sv(message));
  if (code == "WRONGPASS" || code == "NOAUTH" || code == "NOPERM") {
    return absl::PermissionDeniedError(text);
  }
  if (code == "OOM") return absl::ResourceExhaustedError(text);
  if (code == "LOADING" || code == "BUSY" || code == "MASTERDOWN" || code == "READONLY" ||
      code == "TRYAGAIN" || absl::StartsWith(Sv(message), "ERR max number of clients")) {
    return absl::UnavailableError(text);
  }
  if (code == "WRONGTYPE") return absl::FailedPreconditionError(text);
  return absl::InvalidArgumentError(text);
}

absl::StatusOr<std::unique_ptr<RedisClient>> RedisClient::Create(RedisOptions options,
                                                                 absl::Duration default_timeout) {
  if (options.host.empty()) return absl::InvalidArgumentError("redis: empty host");
  if (options.port < 1 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("redis: invalid port ", options.port));
  }
  if (options.db < 0)
    return absl::InvalidArgumentError(absl::StrCat("redis: invalid db ", options.db));
  if (options.max_reply_bytes <= 0) {
    return absl::InvalidArgumentError("redis: max_reply_bytes must be positive");
  }
  if (default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis: the default timeout must be positive");
  }
  std::unique_ptr<RedisClient> client(new RedisClient(std::move(options), default_timeout));
  const RedisOptions& o = client->options_;
  if (!o.tls) return client;
  absl::StatusOr<std::unique_ptr<TlsContext>> tls = TlsContext::Create(o);
  if (!tls.ok()) return tls.status();
  client->tls_ = *std::move(tls);
  return client;
}

RedisClient::Call RedisClient::Start(std::string_view op, Timeout timeout) const {
  // A timeout of years is "no timeout"; capping it keeps the time_point arithmetic finite.
  const absl::Duration t =
      std::clamp(timeout.value_or(default_timeout_), absl::ZeroDuration(), absl::Hours(24 * 365));
  return Call{Clock::now() + absl::ToChronoNanoseconds(t), t, op};
}

absl::StatusOr<RedisReply> RedisClient::One(absl::Span<const std::string_view> argv,
                                            const Call& call) {
  const std::vector<std::string_view> command(argv.begin(), argv.end());
  absl::StatusOr<std::vector<RedisReply>> replies = RoundTrip({&command, 1}, call);
  if (!replies.ok()) return replies.status();
  RedisReply reply = std::move(replies->front());
  if (reply.type == RedisReply::Type::kError) {
    return RedisErrorToStatus(absl::StrCat("redis ", server_, ": ", Sv(call.op)), reply.str);
  }
  return reply;
}

namespace {

absl::Status Unexpected(std::string_view server, std::string_view op, const RedisReply& r) {
  return absl::InternalError(absl::StrCat("redis ", Sv(server), ": ", Sv(op),
                                          ": unexpected reply type ", static_cast<int>(r.type)));
}

}  // namespace

absl::Status RedisClient::Ping(Timeout timeout) {
  const std::string_view argv[] = {"PING"};
  absl::StatusOr<RedisReply> r = One(argv, Start("PING", timeout));
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kStatus) return Unexpected(server_, "PING", *r);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> RedisClient::Get(std::string_view key, Timeout timeout) {
  const std::string_view argv[] = {"GET", key};
  absl::StatusOr<RedisReply> r = One(argv, Start("GET", timeout));
  if (!r.ok()) return r.status();
  if (r->type == RedisReply::Type::kNil) return std::nullopt;
  if (r->type != RedisReply::Type::kString) return Unexpected(server_, "GET", *r);
  return std::optional<std::string>(std::move(r->str));
}

absl::Status RedisClient::Set(std::string_view key, std::string_view value, absl::Duration ttl,
                              Timeout timeout) {
  if (ttl < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("redis SET: negative ttl");
  }
  std::string ms;
  std::vector<std::string_view> argv = {"SET", key, value};
  if (ttl > absl::ZeroDuration()) {
    ms = std::to_string(absl::ToInt64Milliseconds(absl::Ceil(ttl, absl::Milliseconds(1))));
    argv.push_back("PX");
    argv.push_back(ms);
  }
  absl::StatusOr<RedisReply> r = One(argv, Start("SET", timeout));
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kStatus) return Unexpected(server_, "SET", *r);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> RedisClient::StrLens(absl::Span<const std::string> keys,
                                                          Timeout timeout) {
  std::vector<std::vector<std::string_view>> commands;
  commands.reserve(keys.size());
  for (const std::string& key : keys) commands.push_back({"STRLEN", key});
  absl::StatusOr<std::vector<RedisReply>> replies =
      RoundTrip(commands, Start("pipelined STRLEN", timeout));
  if (!replies.ok()) return replies.status();
  std::vector<int64_t> lens;
  lens.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const RedisReply& r = (*replies)[i];
    const std::string op = absl::StrCat("STRLEN \"", absl::CHexEscape(keys[i]), "\"");
    if (r.type == RedisReply::Type::kError) {
      return RedisErrorToStatus(absl::StrCat("redis ", server_, ": ", op), r.str);
    }
    if (r.type != RedisReply::Type::kInteger) return Unexpected(server_, op, r);
    lens.push_back(r.integer);
  }
  return lens;
}

absl::StatusOr<bool> RedisClient::Del(std::string_view key, Timeout timeout) {
  const std::string_view argv[] = {"DEL", key};
  absl::StatusOr<RedisReply> r = One(argv, Start("DEL", timeout));
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kInteger) return Unexpected(server_, "DEL", *r);
  return r->integer > 0;
}

absl::StatusOr<std::string> RedisClient::Info(std::string_view section, Timeout timeout) {
  std::vector<std::string_view> argv = {"INFO"};
  if (!section.empty()) argv.push_back(section);
  absl::StatusOr<RedisReply> r = One(argv, Start("INFO", timeout));
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kString) return Unexpected(server_, "INFO", *r);
  return std::move(r->str);
}

absl::StatusOr<std::optional<absl::Duration>> RedisClient::Ttl(std::string_view key,
                                                               Timeout timeout) {
  const std::string_view argv[] = {"PTTL", key};
  absl::StatusOr<RedisReply> r = One(argv, Start("PTTL", timeout));
  if (!r.ok()) return r.status();
  if (r->type != RedisReply::Type::kInteger) return Unexpected(server_, "PTTL", *r);
  if (r->integer == -2) return std::nullopt;
  if (r->integer == -1) return absl::InfiniteDuration();
  return absl::Milliseconds(r->integer);
}

absl::StatusOr<RedisReply> RedisClient::Command(absl::Span<const std::string_view> argv,
                                                Timeout timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("redis: empty command");
  return One(argv, Start(argv[0], timeout));
}

absl::StatusOr<std::vector<RedisReply>> RedisClient::Pipeline(
    absl::Span<const std::vector<std::string_view>> commands, Timeout timeout) {
  for (const std::vector<std::string_view>& argv : commands) {
    if (argv.empty()) return absl::InvalidArgumentError("redis: empty command in a pipeline");
  }
  return RoundTrip(commands, Start("pipeline", timeout));
}

}  // namespace deltaserve::common
