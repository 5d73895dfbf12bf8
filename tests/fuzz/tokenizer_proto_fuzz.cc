// Fuzz target: the tokenizer a worker sends the router (deltaserve.v1.Tokenizer inside
// GetWorkerInfo), rebuilt by router/chat's TokenizerFromProto. The router trusts its workers
// less than itself: a skewed or broken worker must give a clear error, never a crash. The input
// is a serialized Tokenizer message (seeds: the tiny golden vocabulary, made by
// fuzz_seed_corpus). Checks: no crash; a refusal carries a message; an accepted tokenizer
// encodes a fixed text into ids inside its vocabulary and decodes them without crashing
// (byte-exact round trips are the tokenizer's own tests; here the vocabulary may be nonsense).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/stubs/common.h>

#include "deltaserve/v1/worker.pb.h"
#include "router/chat/tokenizer_from_proto.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void Check(bool ok, const char* what) { deltaserve::fuzz::Check(ok, "tokenizer_proto_fuzz", what); }

}  // namespace

// Protobuf logs every string field that is not UTF-8; mutated inputs hit that constantly.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deltaserve::v1::Tokenizer proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  // Bounded work per input: vocabularies beyond what a seed mutation reaches are not interesting.
  if (proto.tokens_size() > 200000 || proto.merges_size() > 400000) return 0;
  absl::StatusOr<std::unique_ptr<deltaserve::common::Tokenizer>> tok =
      deltaserve::router::chat::TokenizerFromProto(proto);
  if (!tok.ok()) {
    Check(!tok.status().message().empty(), "refusals say why");
    return 0;
  }
  const deltaserve::common::Tokenizer& t = **tok;
  const std::vector<int32_t> ids =
      t.Encode("<|im_start|>user\nHello, wörld! 123 🙂\n<|im_end|>", /*parse_special=*/true);
  for (int32_t id : ids) Check(id >= 0 && id < t.vocab_size(), "ids inside the vocabulary");
  const std::string text = t.Decode(ids);
  (void)text;
  return 0;
}
