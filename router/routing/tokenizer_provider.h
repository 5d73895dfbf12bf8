#pragma once
// Tokenizers for routing: the router holds no model files, so it builds each model's
// tokenizer from the proto a worker sent (WorkerInfo, include_tokenizer) and keeps it by
// digest. RouterBackend asks a TokenizerProvider; CachingTokenizerProvider is the real one.

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/tokenizer.h"
#include "deltaserve/v1/worker.pb.h"

namespace deltaserve::router {

class TokenizerProvider {
 public:
  virtual ~TokenizerProvider() = default;
  // The tokenizer built from `proto`, cached under `digest`: the same digest returns the same
  // pointer, valid as long as the provider. Thread-safe.
  virtual absl::StatusOr<const common::Tokenizer*> Get(const deltaserve::v1::Tokenizer& proto,
                                                       std::string_view digest) = 0;
};

// The function that builds a tokenizer from a worker's proto (main.cc passes
// chat::TokenizerFromProto, router/chat/tokenizer_from_proto.h).
using TokenizerBuilder = std::function<absl::StatusOr<std::unique_ptr<common::Tokenizer>>(
    const deltaserve::v1::Tokenizer&)>;

// Builds each digest's tokenizer once with `build` and keeps it. Entries are never evicted:
// digests change only when a worker is redeployed with another model, and a Qwen tokenizer is
// tens of MB. A build (a fraction of a second for a 150k vocabulary) runs under a lock;
// concurrent callers wait for it.
class CachingTokenizerProvider : public TokenizerProvider {
 public:
  explicit CachingTokenizerProvider(TokenizerBuilder build);
  absl::StatusOr<const common::Tokenizer*> Get(const deltaserve::v1::Tokenizer& proto,
                                               std::string_view digest) override;
  size_t size() const;

 private:
  TokenizerBuilder build_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<common::Tokenizer>> cache_;
};

}  // namespace deltaserve::router
