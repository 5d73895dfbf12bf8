#include "common/internal/redis_protocol.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <climits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"

namespace deltaserve::common::internal {
namespace {

using Budget = RespReplyReader::Budget;

// Slack for the framing around a reply's payload ("$<len>\r\n", "\r\n") in the buffered-bytes
// check, so that a value of exactly max_reply_bytes still passes.
constexpr int64_t kFramingSlack = 64;

// Charges `bytes` to the reply being decoded; false (and the reader stops) when over the cap.
bool Charge(const redisReadTask* task, int64_t bytes) {
  auto* budget = static_cast<Budget*>(task->privdata);
  if (bytes < 0 || bytes > budget->limit - budget->used) {
    budget->exceeded = true;
    return false;
  }
  budget->used += bytes;
  return true;
}

// hiredis asks for one object per value; a nested value lives in its parent's `elements`
// (sized by CreateArray before any child arrives), a root value on the heap until Next() takes
// it. hiredis frees only roots (FreeObject), so children need no separate owner.
RedisReply* Place(const redisReadTask* task) {
  if (task->parent == nullptr) return new (std::nothrow) RedisReply();
  auto* parent = static_cast<RedisReply*>(task->parent->obj);
  if (task->idx < 0 || static_cast<size_t>(task->idx) >= parent->elements.size()) return nullptr;
  return &parent->elements[static_cast<size_t>(task->idx)];
}

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  if (len > static_cast<size_t>(INT64_MAX) || !Charge(task, static_cast<int64_t>(len))) {
    return nullptr;
  }
  RedisReply* r = Place(task);
  if (r == nullptr) return nullptr;
  switch (task->type) {
    case REDIS_REPLY_STATUS:
      r->type = RedisReply::Type::kStatus;
      break;
    case REDIS_REPLY_ERROR:
      r->type = RedisReply::Type::kError;
      break;
    default:
      r->type = RedisReply::Type::kString;
  }
  r->str.assign(str, len);
  return r;
}

void* CreateArray(const redisReadTask* task, int elements) {
  if (elements < 0 ||
      !Charge(task, static_cast<int64_t>(elements) * static_cast<int64_t>(sizeof(RedisReply)))) {
    return nullptr;
  }
  RedisReply* r = Place(task);
  if (r == nullptr) return nullptr;
  r->type = RedisReply::Type::kArray;
  r->elements.resize(static_cast<size_t>(elements));
  return r;
}

void* CreateInteger(const redisReadTask* task, long long value) {  // NOLINT(runtime/int): hiredis
  RedisReply* r = Place(task);
  if (r == nullptr) return nullptr;
  r->type = RedisReply::Type::kInteger;
  r->integer = value;
  return r;
}

void* CreateNil(const redisReadTask* task) {
  RedisReply* r = Place(task);
  if (r == nullptr) return nullptr;
  r->type = RedisReply::Type::kNil;
  return r;
}

void FreeObject(void* obj) { delete static_cast<RedisReply*>(obj); }

redisReplyObjectFunctions kFunctions = {CreateString, CreateArray, CreateInteger, CreateNil,
                                        FreeObject};

void AppendHeader(std::string& out, char kind, size_t n) {
  out.push_back(kind);
  absl::StrAppend(&out, n, "\r\n");
}

}  // namespace

void AppendRespCommand(absl::Span<const std::string_view> argv, std::string& out,
                       size_t inline_limit, std::vector<RespGap>* gaps) {
  AppendHeader(out, '*', argv.size());
  for (size_t i = 0; i < argv.size(); ++i) {
    AppendHeader(out, '$', argv[i].size());
    if (gaps != nullptr && argv[i].size() >= inline_limit) {
      gaps->push_back(RespGap{out.size(), i});
    } else {
      out.append(argv[i]);
    }
    out.append("\r\n");
  }
}

RespReplyReader::RespReplyReader(int64_t max_reply_bytes, size_t direct_bulk_bytes)
    : direct_bulk_bytes_(direct_bulk_bytes) {
  budget_.limit = max_reply_bytes;
  reader_ = redisReaderCreateWithFunctions(&kFunctions);
  if (reader_ == nullptr) {
    error_ = absl::ResourceExhaustedError("redis: cannot allocate a reply reader");
    return;
  }
  reader_->privdata = &budget_;
}

RespReplyReader::~RespReplyReader() {
  if (reader_ != nullptr) redisReaderFree(reader_);
}

size_t RespReplyReader::buffered_bytes() const {
  return (reader_ == nullptr ? 0 : reader_->len - reader_->pos) + direct_value_.size();
}

absl::Status RespReplyReader::CheckBuffered() const {
  const size_t buffered = reader_->len - reader_->pos;
  if (static_cast<int64_t>(buffered) > budget_.limit + kFramingSlack) {
    return absl::ResourceExhaustedError(absl::StrCat("redis: reply larger than max_reply_bytes (",
                                                     budget_.limit, " bytes): ", buffered,
                                                     " bytes buffered and not complete"));
  }
  return absl::OkStatus();
}

bool RespReplyReader::StartDirect(std::string_view& bytes) {
  // Only at a reply boundary with nothing left in hiredis: then every reply before this one has
  // been returned by Next(), and the order of replies is kept.
  if (direct_bulk_bytes_ == 0 || reader_->ridx != -1 || reader_->len != reader_->pos ||
      bytes.empty() || bytes[0] != '$') {
    return false;
  }
  const size_t eol = bytes.substr(0, 24).find("\r\n");
  if (eol == std::string_view::npos || eol < 2 || eol > 19) return false;
  uint64_t len = 0;
  for (const char c : bytes.substr(1, eol - 1)) {
    if (c < '0' || c > '9') return false;  // "$-1" and anything odd: hiredis decides
    len = len * 10 + static_cast<uint64_t>(c - '0');
  }
  if (len < direct_bulk_bytes_ || len > static_cast<uint64_t>(budget_.limit)) return false;
  direct_active_ = true;
  direct_need_ = static_cast<size_t>(len);
  direct_trailer_ = 0;
  direct_value_.clear();
  direct_value_.reserve(direct_need_);
  bytes.remove_prefix(eol + 2);
  return true;
}

absl::Status RespReplyReader::Feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  while (!bytes.empty()) {
    if (!direct_active_ && !StartDirect(bytes)) return FeedHiredis(bytes);
    const size_t take = std::min(bytes.size(), direct_need_);
    direct_value_.append(bytes.data(), take);
    direct_need_ -= take;
    bytes.remove_prefix(take);
    while (direct_need_ == 0 && direct_trailer_ < 2 && !bytes.empty()) {
      if (bytes[0] != "\r\n"[direct_trailer_]) {
        error_ = absl::InternalError("redis: protocol error in reply: bulk string without CRLF");
        return error_;
      }
      ++direct_trailer_;
      bytes.remove_prefix(1);
    }
    if (direct_need_ == 0 && direct_trailer_ == 2) {
      RedisReply r;
      r.type = RedisReply::Type::kString;
      r.str = std::move(direct_value_);
      ready_.push_back(std::move(r));
      direct_value_ = std::string();
      direct_active_ = false;
    }
  }
  return absl::OkStatus();
}

absl::Status RespReplyReader::FeedHiredis(std::string_view bytes) {
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK) {
    error_ = absl::ResourceExhaustedError("redis: cannot buffer the reply");
    return error_;
  }
  error_ = CheckBuffered();
  return error_;
}

absl::StatusOr<std::optional<RedisReply>> RespReplyReader::Next() {
  if (!error_.ok()) return error_;
  if (!ready_.empty()) {
    RedisReply r = std::move(ready_.front());
    ready_.pop_front();
    return std::optional<RedisReply>(std::move(r));
  }
  void* obj = nullptr;
  if (redisReaderGetReply(reader_, &obj) != REDIS_OK) {
    if (budget_.exceeded) {
      error_ = absl::ResourceExhaustedError(
          absl::StrCat("redis: reply larger than max_reply_bytes (", budget_.limit, " bytes)"));
    } else {
      error_ =
          absl::InternalError(absl::StrCat("redis: protocol error in reply: ", reader_->errstr));
    }
    return error_;
  }
  if (obj == nullptr) {
    error_ = CheckBuffered();
    if (!error_.ok()) return error_;
    return std::nullopt;
  }
  budget_.used = 0;
  std::unique_ptr<RedisReply> root(static_cast<RedisReply*>(obj));
  return std::optional<RedisReply>(std::move(*root));
}

}  // namespace deltaserve::common::internal
