#include "router/routing/tokenizer_provider.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"

namespace deltaserve::router {

CachingTokenizerProvider::CachingTokenizerProvider(TokenizerBuilder build)
    : build_(std::move(build)) {}

absl::StatusOr<const common::Tokenizer*> CachingTokenizerProvider::Get(
    const deltaserve::v1::Tokenizer& proto, std::string_view digest) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = cache_.find(common::Sv(digest)); it != cache_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok = build_(proto);
  if (!tok.ok()) return tok.status();
  if (*tok == nullptr) return absl::InternalError("tokenizer builder returned null");
  const common::Tokenizer* ptr = tok->get();
  cache_.emplace(std::string(digest), std::move(*tok));
  return ptr;
}

size_t CachingTokenizerProvider::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace deltaserve::router
