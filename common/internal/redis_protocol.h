// RESP2, the Redis wire protocol, without any I/O: RedisClient (common/redis_client.h) encodes
// commands with AppendRespCommand and decodes replies with RespReplyReader, and the
// redis_url_fuzz target feeds arbitrary bytes through the same reader.
//
//   RespReplyReader reader(/*max_reply_bytes=*/1 << 20);
//   reader.Feed(bytes);
//   absl::StatusOr<std::optional<RedisReply>> reply = reader.Next();  // nullopt: need more bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/redis_client.h"

struct redisReader;

namespace deltaserve::common::internal {

// Appends `argv` as one RESP command (an array of bulk strings) to `out`. Arguments of at least
// `inline_limit` bytes are not copied: their bytes are left out of `out` and their position is
// recorded in `gaps` as (offset in `out`, argument index), so that a writer can send large
// values from the caller's memory (writev) instead of copying them.
struct RespGap {
  size_t offset = 0;     // where in `out` the argument's bytes belong
  size_t arg_index = 0;  // which argument of `argv`
};
void AppendRespCommand(absl::Span<const std::string_view> argv, std::string& out,
                       size_t inline_limit, std::vector<RespGap>* gaps);

// Incremental decoder of a stream of replies (hiredis's redisReader for the grammar, our own
// reply objects for the values). Untrusted input: a reply whose decoded size (string bytes plus
// per-element overhead) or whose buffered, not yet complete bytes pass `max_reply_bytes` is
// refused with ResourceExhausted; malformed input gives Internal ("protocol error"). After an
// error the reader is unusable (the stream is desynchronized).
//
// A bulk string of at least `direct_bulk_bytes` whose header starts a Feed() at a reply boundary
// (the reply to a GET of a snapshot) bypasses hiredis: its bytes go straight into the reply's
// string, reserved once from the header (within the cap). Through hiredis they would be
// buffered first (a buffer grown 1 MiB at a time) and then copied into the reply: twice the
// memory at the peak (200 MiB for a 100 MiB snapshot) and one more copy.
class RespReplyReader {
 public:
  static constexpr size_t kDefaultDirectBulkBytes = size_t{1} << 20;

  explicit RespReplyReader(int64_t max_reply_bytes,
                           size_t direct_bulk_bytes = kDefaultDirectBulkBytes);
  ~RespReplyReader();
  RespReplyReader(const RespReplyReader&) = delete;
  RespReplyReader& operator=(const RespReplyReader&) = delete;

  // Appends bytes read from the connection; fails when the incomplete reply is over the cap.
  absl::Status Feed(std::string_view bytes);
  // The next complete reply, nullopt when more bytes are needed.
  absl::StatusOr<std::optional<RedisReply>> Next();
  // Bytes fed but not yet consumed by a complete reply.
  size_t buffered_bytes() const;

  // Per-reply accounting, shared with the reader's callbacks (public for them only).
  struct Budget {
    int64_t limit = 0;
    int64_t used = 0;
    bool exceeded = false;
  };

 private:
  absl::Status CheckBuffered() const;
  absl::Status FeedHiredis(std::string_view bytes);
  // Starts a direct bulk string when `bytes` opens with a large one's header at a reply
  // boundary; consumes the header.
  bool StartDirect(std::string_view& bytes);

  redisReader* reader_ = nullptr;
  Budget budget_;
  absl::Status error_;
  size_t direct_bulk_bytes_;
  // The bulk string being received outside hiredis.
  bool direct_active_ = false;
  std::string direct_value_;
  size_t direct_need_ = 0;        // payload bytes still to come
  size_t direct_trailer_ = 0;     // bytes of its CRLF seen
  std::deque<RedisReply> ready_;  // complete direct replies, before anything hiredis holds
};

}  // namespace deltaserve::common::internal
