#include "worker/engine/expert_layout.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace deltaserve::worker {
namespace {

uint64_t RoundUp(uint64_t n) {
  return (n + kExpertSlotAlign - 1) / kExpertSlotAlign * kExpertSlotAlign;
}

}  // namespace

absl::StatusOr<ExpertSlotLayout> ExpertSlotLayoutOf(const common::GgufFile& file,
                                                    const common::Qwen35HParams& hp) {
  if (!hp.is_moe || hp.n_expert <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), ": not a mixture-of-experts model (no routed experts)"));
  }
  ExpertSlotLayout l;
  l.n_layer = hp.n_layer;
  l.n_expert = hp.n_expert;
  uint64_t most[3] = {0, 0, 0};  // gate, up, down: one expert's bytes, largest over layers
  const char* const kParts[3] = {"gate", "up", "down"};
  for (int64_t layer = 0; layer < hp.n_layer; ++layer) {
    uint64_t expert = 0;
    for (int part = 0; part < 3; ++part) {
      const std::string name = absl::StrCat("blk.", layer, ".ffn_", kParts[part], "_exps.weight");
      const common::GgufTensorInfo* t = file.FindTensor(name);
      if (t == nullptr) {
        return absl::NotFoundError(absl::StrCat(file.name(), ": missing tensor '", name, "'"));
      }
      if (t->n_dims != 3 || t->ne[2] != hp.n_expert || t->n_bytes % hp.n_expert != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.name(), ": tensor '", name, "' has shape ", t->ShapeString(),
                         ", not a stack of ", hp.n_expert, " experts"));
      }
      const uint64_t one = t->n_bytes / static_cast<uint64_t>(hp.n_expert);
      most[part] = std::max(most[part], one);
      expert += one;
      l.routed_bytes += t->n_bytes;
    }
    l.expert_bytes.push_back(expert);
  }
  l.gate_at = 0;
  l.up_at = RoundUp(most[0]);
  l.down_at = l.up_at + RoundUp(most[1]);
  l.slot_bytes = l.down_at + RoundUp(most[2]);
  return l;
}

uint64_t ExpertSlotBytes(const common::GgufFile& file) {
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(file);
  if (!hp.ok()) return 0;
  absl::StatusOr<ExpertSlotLayout> l = ExpertSlotLayoutOf(file, *hp);
  return l.ok() ? l->slot_bytes : 0;
}

}  // namespace deltaserve::worker
