#include "common/expert_placement.h"

#include <algorithm>
#include <tuple>

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
