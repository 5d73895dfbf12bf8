#include "common/expert_placement.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace deltaserve::common {

bool ExpertPlacement::Contains(int64_t layer, int32_t expert) const {
  if (layer < 0 || layer >= static_cast<int64_t>(device.size())) return false;
  const auto& l = device[static_cast<size_t>(layer)];
  return std::binary_search(l.begin(), l.end(), expert);
}

absl::Status ValidateExpertPlacement(const ExpertPlacement& p, int64_t max_slots) {
  if (p.n_layer < 0 || p.n_expert < 0) {
    return absl::InvalidArgumentError("a placement's layer and expert counts are negative");
  }
  if (static_cast<int64_t>(p.device.size()) != p.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("the placement lists ", p.device.size(),
                                                   " layers, the model has ", p.n_layer));
  }
  for (size_t layer = 0; layer < p.device.size(); ++layer) {
    const auto& l = p.device[layer];
    for (size_t i = 0; i < l.size(); ++i) {
      if (l[i] < 0 || l[i] >= p.n_expert) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", layer, ": expert ", l[i],
                                                       " is not in [0, ", p.n_expert, ")"));
      }
      if (i > 0 && l[i] <= l[i - 1]) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", layer, ": expert ", l[i],
                         l[i] == l[i - 1] ? " is listed twice" : " is out of ascending order"));
      }
    }
  }
  const int64_t n = p.size();
  if (n > max_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(n, " experts in device memory, the budget holds ",
                                                     max_slots < 0 ? 0 : max_slots));
  }
  return absl::OkStatus();
}

ExpertPlacement EvenExpertPlacement(int64_t n_layer, int64_t n_expert, int64_t max_slots) {
  ExpertPlacement p = ExpertPlacement::Empty(n_layer, n_expert);
  if (n_layer <= 0 || n_expert <= 0 || max_slots <= 0) return p;
  const int64_t slots = std::min(max_slots, n_layer * n_expert);
  for (int64_t l = 0; l < n_layer; ++l) {
    const int64_t count = std::min(n_expert, slots / n_layer + (l < slots % n_layer ? 1 : 0));
    auto& d = p.device[static_cast<size_t>(l)];
    for (int32_t e = 0; e < count; ++e) d.push_back(e);
  }
  return p;
}

ExpertPlacement HottestExpertPlacement(const std::vector<std::vector<double>>& heat,
                                       int64_t max_slots) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  const int64_t n_expert = heat.empty() ? 0 : static_cast<int64_t>(heat[0].size());
  ExpertPlacement p = ExpertPlacement::Empty(n_layer, n_expert);
  std::vector<std::tuple<double, int64_t, int32_t>> all;  // (-heat, layer, expert)
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto& h = heat[static_cast<size_t>(l)];
    for (int32_t e = 0; e < static_cast<int32_t>(std::min<int64_t>(n_expert, h.size())); ++e) {
      all.emplace_back(-h[static_cast<size_t>(e)], l, e);
    }
  }
  const auto take = static_cast<size_t>(std::clamp<int64_t>(max_slots, 0, all.size()));
  std::partial_sort(all.begin(), all.begin() + take, all.end());
  for (size_t i = 0; i < take; ++i) {
    p.device[static_cast<size_t>(std::get<1>(all[i]))].push_back(std::get<2>(all[i]));
  }
  for (auto& l : p.device) std::sort(l.begin(), l.end());
  return p;
}

ExpertSlotClasses ExpertSlotClasses::Single(int64_t n_layer, int64_t n_slots, uint64_t slot_bytes) {
  ExpertSlotClasses c;
  c.layer_class.assign(static_cast<size_t>(std::max<int64_t>(n_layer, 0)), 0);
  c.slot_bytes = {slot_bytes};
  c.slots = {std::max<int64_t>(n_slots, 0)};
  return c;
}

int64_t ExpertSlotClasses::total_slots() const {
  int64_t n = 0;
  for (int64_t s : slots) n += s;
  return n;
}

uint64_t ExpertSlotClasses::device_bytes() const {
  uint64_t b = 0;
  for (size_t c = 0; c < slots.size() && c < slot_bytes.size(); ++c) {
    b += static_cast<uint64_t>(slots[c]) * slot_bytes[c];
  }
  return b;
}

std::vector<int64_t> ExpertSlotClasses::LayersOf(int32_t c) const {
  std::vector<int64_t> layers;
  for (size_t l = 0; l < layer_class.size(); ++l) {
    if (layer_class[l] == c) layers.push_back(static_cast<int64_t>(l));
  }
  return layers;
}

absl::Status ExpertSlotClasses::Check(int64_t n_layer) const {
  if (static_cast<int64_t>(layer_class.size()) != n_layer || slots.size() != slot_bytes.size() ||
      slots.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the expert slot classes name ", layer_class.size(), " layers and ", slots.size(),
        " classes (", slot_bytes.size(), " sizes); the model has ", n_layer, " layers"));
  }
  for (size_t l = 0; l < layer_class.size(); ++l) {
    if (layer_class[l] < 0 || layer_class[l] >= n_class()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", l, ": expert slot class ", layer_class[l], " is not in [0, ", n_class(), ")"));
    }
  }
  for (int64_t s : slots) {
    if (s < 0) return absl::InvalidArgumentError("an expert slot class has negative slots");
  }
  return absl::OkStatus();
}

ExpertSlotClasses SplitExpertBudget(std::vector<int32_t> layer_class,
                                    std::vector<uint64_t> slot_bytes, int64_t n_expert,
                                    uint64_t device_bytes) {
  ExpertSlotClasses c;
  c.layer_class = std::move(layer_class);
  c.slot_bytes = std::move(slot_bytes);
  c.slots.assign(c.slot_bytes.size(), 0);
  std::vector<int64_t> experts(c.slot_bytes.size(), 0);  // the class's experts
  for (int32_t k : c.layer_class) {
    if (k >= 0 && k < c.n_class())
      experts[static_cast<size_t>(k)] += std::max<int64_t>(n_expert, 0);
  }
  long double all = 0;
  for (size_t k = 0; k < experts.size(); ++k) {
    all += static_cast<long double>(experts[k]) * static_cast<long double>(c.slot_bytes[k]);
  }
  if (all <= 0) return c;
  uint64_t left = device_bytes;
  for (size_t k = 0; k < experts.size(); ++k) {
    if (c.slot_bytes[k] == 0) continue;
    const long double weight = static_cast<long double>(experts[k]) * c.slot_bytes[k];
    const auto share = static_cast<uint64_t>(static_cast<long double>(device_bytes) * weight / all);
    c.slots[k] = std::min<int64_t>(static_cast<int64_t>(share / c.slot_bytes[k]), experts[k]);
    left -= static_cast<uint64_t>(c.slots[k]) * c.slot_bytes[k];
  }
  // What the shares' rounding left: one slot at a time, largest experts first.
  while (true) {
    int64_t best = -1;
    for (size_t k = 0; k < experts.size(); ++k) {
      if (c.slot_bytes[k] == 0 || c.slots[k] >= experts[k] || c.slot_bytes[k] > left) continue;
      if (best < 0 || c.slot_bytes[k] > c.slot_bytes[static_cast<size_t>(best)]) {
        best = static_cast<int64_t>(k);
      }
    }
    if (best < 0) break;
    ++c.slots[static_cast<size_t>(best)];
    left -= c.slot_bytes[static_cast<size_t>(best)];
  }
  return c;
}

absl::Status ValidateExpertPlacement(const ExpertPlacement& p, const ExpertSlotClasses& classes) {
  if (absl::Status s = ValidateExpertPlacement(p, classes.total_slots()); !s.ok()) return s;
  if (absl::Status s = classes.Check(p.n_layer); !s.ok()) return s;
  for (int32_t k = 0; k < classes.n_class(); ++k) {
    const std::vector<int64_t> layers = classes.LayersOf(k);
    int64_t n = 0;
    for (int64_t l : layers) n += static_cast<int64_t>(p.device[static_cast<size_t>(l)].size());
    const int64_t slots = classes.slots[static_cast<size_t>(k)];
    if (n > slots) {
      const size_t shown = std::min<size_t>(layers.size(), 6);
      return absl::ResourceExhaustedError(absl::StrCat(
          "layer", layers.size() == 1 ? " " : "s ",
          absl::StrJoin(layers.begin(), layers.begin() + static_cast<ptrdiff_t>(shown), ", "),
          layers.size() > shown ? ", ..." : "", ": ", n,
          " experts in device memory, their slots of ", classes.slot_bytes[static_cast<size_t>(k)],
          " B hold ", slots));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExpertSlotClasses> SplitForPlacement(const ExpertPlacement& p,
                                                    const ExpertSlotClasses& current,
                                                    uint64_t budget_bytes) {
  if (absl::Status s = ValidateExpertPlacement(p, p.n_layer * p.n_expert); !s.ok()) return s;
  if (absl::Status s = current.Check(p.n_layer); !s.ok()) return s;
  const auto n_class = static_cast<size_t>(current.n_class());
  std::vector<int64_t> count(n_class, 0), experts(n_class, 0);
  for (size_t l = 0; l < p.device.size(); ++l) {
    const auto c = static_cast<size_t>(current.layer_class[l]);
    count[c] += static_cast<int64_t>(p.device[l].size());
    experts[c] += p.n_expert;
  }
  long double bytes = 0;
  bool fits = true;
  for (size_t c = 0; c < n_class; ++c) {
    bytes += static_cast<long double>(count[c]) * current.slot_bytes[c];
    fits = fits && count[c] <= current.slots[c];
  }
  if (bytes > static_cast<long double>(budget_bytes)) {
    if (n_class == 1 && current.slot_bytes[0] > 0) {  // one size: in experts, as plain budgets are
      return absl::ResourceExhaustedError(
          absl::StrCat(p.size(), " experts in device memory, the budget holds ",
                       budget_bytes / current.slot_bytes[0]));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat(p.size(), " experts in device memory take ", static_cast<uint64_t>(bytes),
                     " B of slots, the budget holds ", budget_bytes, " B"));
  }
  if (fits) return current;
  ExpertSlotClasses out = current;
  out.slots = count;
  uint64_t left = budget_bytes - static_cast<uint64_t>(bytes);
  for (size_t c = 0; c < n_class; ++c) {  // back towards the current split
    if (out.slot_bytes[c] == 0 || current.slots[c] <= count[c]) continue;
    const auto more = std::min<int64_t>(current.slots[c] - count[c],
                                        static_cast<int64_t>(left / out.slot_bytes[c]));
    out.slots[c] += more;
    left -= static_cast<uint64_t>(more) * out.slot_bytes[c];
  }
  while (true) {  // what is left: one slot at a time, largest experts first
    int64_t best = -1;
    for (size_t c = 0; c < n_class; ++c) {
      const bool full = out.slots[c] >= experts[c] || out.slot_bytes[c] > left;
      if (out.slot_bytes[c] == 0 || full) continue;
      if (best < 0 || out.slot_bytes[c] > out.slot_bytes[static_cast<size_t>(best)]) {
        best = static_cast<int64_t>(c);
      }
    }
    if (best < 0) break;
    ++out.slots[static_cast<size_t>(best)];
    left -= out.slot_bytes[static_cast<size_t>(best)];
  }
  return out;
}

namespace {

// `f` applied to each class's layers as a model of their own, the results put back in place.
template <typename F>
ExpertPlacement PerClass(int64_t n_layer, int64_t n_expert, const ExpertSlotClasses& classes, F f) {
  ExpertPlacement p = ExpertPlacement::Empty(n_layer, n_expert);
  if (!classes.Check(n_layer).ok()) return p;
  for (int32_t k = 0; k < classes.n_class(); ++k) {
    const std::vector<int64_t> layers = classes.LayersOf(k);
    const ExpertPlacement sub = f(layers, classes.slots[static_cast<size_t>(k)]);
    for (size_t i = 0; i < layers.size(); ++i) {
      p.device[static_cast<size_t>(layers[i])] = sub.device[i];
    }
  }
  return p;
}

}  // namespace

ExpertPlacement EvenExpertPlacement(int64_t n_layer, int64_t n_expert,
                                    const ExpertSlotClasses& classes) {
  return PerClass(n_layer, n_expert, classes, [&](const std::vector<int64_t>& layers, int64_t s) {
    return EvenExpertPlacement(static_cast<int64_t>(layers.size()), n_expert, s);
  });
}

ExpertPlacement HottestExpertPlacement(const std::vector<std::vector<double>>& heat,
                                       const ExpertSlotClasses& classes) {
  const auto n_layer = static_cast<int64_t>(heat.size());
  const int64_t n_expert = heat.empty() ? 0 : static_cast<int64_t>(heat[0].size());
  return PerClass(n_layer, n_expert, classes, [&](const std::vector<int64_t>& layers, int64_t s) {
    std::vector<std::vector<double>> sub;
    for (int64_t l : layers) sub.push_back(heat[static_cast<size_t>(l)]);
    ExpertPlacement q = HottestExpertPlacement(sub, s);
    q.device.resize(layers.size());
    return q;
  });
}

std::string DescribeExpertPlacement(const ExpertPlacement& p, int max_layers) {
  std::string out;
  int shown = 0;
  for (size_t l = 0; l < p.device.size(); ++l) {
    if (shown == max_layers) {
      absl::StrAppend(&out, "; ... (", p.size(), " experts in ", p.device.size(), " layers)");
      break;
    }
    const auto& d = p.device[l];
    absl::StrAppend(&out, shown == 0 ? "" : "; ", "layer ", l, ": ", d.size(), " experts");
    if (!d.empty() && d.size() <= 16) absl::StrAppend(&out, " (", absl::StrJoin(d, ", "), ")");
    ++shown;
  }
  return out.empty() ? "no layers" : out;
}

}  // namespace deltaserve::common
