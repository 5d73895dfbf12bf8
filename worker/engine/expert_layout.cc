#include "worker/engine/expert_layout.h"

#include <algorithm>
#include <string>
#include <utility>

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
  const char* const kParts[3] = {"gate", "up", "down"};
  for (int64_t layer = 0; layer < hp.n_layer; ++layer) {
    uint64_t expert = 0;
    uint64_t one_of[3] = {0, 0, 0};  // gate, up, down of one expert
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
      one_of[part] = one;
      expert += one;
      l.routed_bytes += t->n_bytes;
    }
    l.expert_bytes.push_back(expert);
    int32_t c = 0;
    while (c < static_cast<int32_t>(l.classes.size()) &&
           (l.classes[c].gate_bytes != one_of[0] || l.classes[c].up_bytes != one_of[1] ||
            l.classes[c].down_bytes != one_of[2])) {
      ++c;
    }
    if (c == static_cast<int32_t>(l.classes.size())) {
      ExpertSlotClass k;
      k.gate_bytes = one_of[0];
      k.up_bytes = one_of[1];
      k.down_bytes = one_of[2];
      k.gate_at = 0;
      k.up_at = RoundUp(one_of[0]);
      k.down_at = k.up_at + RoundUp(one_of[1]);
      k.slot_bytes = k.down_at + RoundUp(one_of[2]);
      l.slot_bytes = std::max(l.slot_bytes, k.slot_bytes);
      l.classes.push_back(k);
    }
    l.layer_class.push_back(c);
  }
  return l;
}

common::ExpertSlotClasses ExpertSlotLayout::SlotsFor(uint64_t device_bytes) const {
  std::vector<uint64_t> sizes;
  for (const ExpertSlotClass& c : classes) sizes.push_back(c.slot_bytes);
  return common::SplitExpertBudget(layer_class, std::move(sizes), n_expert, device_bytes);
}

uint64_t ExpertSlotBytes(const common::GgufFile& file) {
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(file);
  if (!hp.ok()) return 0;
  absl::StatusOr<ExpertSlotLayout> l = ExpertSlotLayoutOf(file, *hp);
  return l.ok() ? l->slot_bytes : 0;
}

}  // namespace deltaserve::worker
