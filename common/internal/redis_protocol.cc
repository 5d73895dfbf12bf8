#include "common/internal/redis_protocol.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

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

RespReplyReader::RespReplyReader(int64_t max_reply_bytes) {
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
  return reader_ == nullptr ? 0 : reader_->len - reader_->pos;
}

absl::Status RespReplyReader::CheckBuffered() const {
  if (static_cast<int64_t>(buffered_bytes()) > budget_.limit + kFramingSlack) {
    return absl::ResourceExhaustedError(absl::StrCat("redis: reply larger than max_reply_bytes (",
                                                     budget_.limit, " bytes): ", buffered_bytes(),
                                                     " bytes buffered and not complete"));
  }
  return absl::OkStatus();
}

absl::Status RespReplyReader::Feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  if (redisReaderFeed(reader_, bytes.data(), bytes.size()) != REDIS_OK) {
    error_ = absl::ResourceExhaustedError("redis: cannot buffer the reply");
    return error_;
  }
  error_ = CheckBuffered();
  return error_;
}

absl::StatusOr<std::optional<RedisReply>> RespReplyReader::Next() {
  if (!error_.ok()) return error_;
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
