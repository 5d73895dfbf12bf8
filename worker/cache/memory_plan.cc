#include "worker/cache/memory_plan.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/str_util.h"

namespace deltaserve::worker {
namespace {

using common::GgmlType;
using common::Sv;

constexpr uint64_t kMaxSize = uint64_t{1} << 62;

struct CacheTypeName {
  std::string_view name;
  GgmlType type;
  int value_bits;
};
constexpr std::array<CacheTypeName, 7> kCacheTypes = {{
    {"f32", GgmlType::kF32, 32},
    {"f16", GgmlType::kF16, 16},
    {"bf16", GgmlType::kBF16, 16},
    {"q8_0", GgmlType::kQ8_0, 8},
    {"q4_0", GgmlType::kQ4_0, 4},
    {"q4_1", GgmlType::kQ4_1, 4},
    {"q5_0", GgmlType::kQ5_0, 5},
}};

constexpr std::array<std::pair<GgmlType, GgmlType>, 8> kComparedPairs = {{
    {GgmlType::kF32, GgmlType::kF32},
    {GgmlType::kF16, GgmlType::kF16},
    {GgmlType::kBF16, GgmlType::kBF16},
    {GgmlType::kQ8_0, GgmlType::kQ8_0},
    {GgmlType::kQ8_0, GgmlType::kQ4_0},
    {GgmlType::kQ5_0, GgmlType::kQ5_0},
    {GgmlType::kQ4_1, GgmlType::kQ4_1},
    {GgmlType::kQ4_0, GgmlType::kQ4_0},
}};

std::string TypeNames(bool conv_only) {
  std::vector<std::string> names;
  for (const CacheTypeName& t : kCacheTypes) {
    if (!conv_only || t.value_bits >= 16) names.emplace_back(t.name);
  }
  return absl::StrJoin(names, ", ");
}

std::string_view TypeName(GgmlType t) { return common::GgmlTypeName(t); }

// 1234567 -> "1,234,567".
std::string Commas(uint64_t v) {
  const std::string digits = absl::StrCat(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}
std::string Commas(int64_t v) {
  if (v >= 0) return Commas(static_cast<uint64_t>(v));
  return absl::StrCat("-", Commas(static_cast<uint64_t>(0) - static_cast<uint64_t>(v)));
}

uint64_t SatMul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
uint64_t SatAdd(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of `n` values of `type` (n a whole number of blocks).
uint64_t RowBytes(GgmlType type, int64_t n) {
  const common::GgmlTypeTraits& t = common::TraitsOf(type);
  return static_cast<uint64_t>(n / t.block_size * t.type_size);
}

absl::Status CheckCacheType(const common::Qwen35HParams& hp, GgmlType type, const char* what) {
  if (CacheValueBits(type) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " type ", Sv(TypeName(type)),
                                                   " is not a cache type (one of ",
                                                   TypeNames(false), ")"));
  }
  const int64_t block = common::TraitsOf(type).block_size;
  if (hp.head_dim <= 0 || hp.head_dim % block != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " type ", Sv(TypeName(type)), " stores blocks of ", block,
                     " values, and head_dim ", hp.head_dim, " is not a whole number of them"));
  }
  return absl::OkStatus();
}

std::string PairName(GgmlType k, GgmlType v) {
  return absl::StrCat(Sv(TypeName(k)), " / ", Sv(TypeName(v)));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  const std::string s(text);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", s, "': ", Sv(why), " (examples: 8GiB, 512MiB, 64G, 1.5GiB)"));
  };
  size_t i = 0;
  absl::uint128 whole = 0;
  int whole_digits = 0;
  while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) {
    whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
    if (++whole_digits > 20) return bad("too large");
    ++i;
  }
  absl::uint128 frac = 0, frac_scale = 1;
  int frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) {
      if (frac_digits < 18) {  // digits beyond 1e-18 cannot change a size below 2^62 bytes
        frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
        frac_scale *= 10;
        ++frac_digits;
      }
      ++i;
    }
    if (whole_digits == 0 && frac_digits == 0) return bad("no number");
  } else if (whole_digits == 0) {
    return bad(s.empty() ? "empty" : "does not start with a number");
  }
  while (i < s.size() && s[i] == ' ') ++i;
  const std::string unit = absl::AsciiStrToLower(s.substr(i));
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else {
    constexpr std::string_view kPrefixes = "kmgt";
    const size_t p = unit.size() <= 3 ? kPrefixes.find(unit[0]) : std::string_view::npos;
    if (p != std::string_view::npos) {
      const std::string rest = unit.substr(1);
      uint64_t binary = uint64_t{1} << (10 * (p + 1)), decimal = 1;
      for (size_t k = 0; k <= p; ++k) decimal *= 1000;
      if (rest.empty() || rest == "i" || rest == "ib") mult = binary;
      if (rest == "b") mult = decimal;
    }
  }
  if (mult == 0) {
    return bad(absl::StrCat("unknown unit '", s.substr(i),
                            "' (B, K/KiB, M/MiB, G/GiB, T/TiB binary; KB, MB, GB, TB decimal)"));
  }
  const absl::uint128 bytes = whole * mult + frac * mult / frac_scale;
  if (bytes >= kMaxSize) return bad("too large (at most 4 EiB)");
  return static_cast<uint64_t>(bytes);
}

absl::StatusOr<GgmlType> ParseCacheType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(Sv(name));
  for (const CacheTypeName& t : kCacheTypes) {
    if (t.name == lower) return t.type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown cache type '", Sv(name), "' (one of ", TypeNames(false), ")"));
}

absl::StatusOr<GgmlType> ParseConvStateType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(Sv(name));
  for (const CacheTypeName& t : kCacheTypes) {
    if (t.name == lower && t.value_bits >= 16) return t.type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown conv state type '", Sv(name), "' (one of ", TypeNames(true), ")"));
}

int CacheValueBits(GgmlType type) {
  for (const CacheTypeName& t : kCacheTypes) {
    if (t.type == type) return t.value_bits;
  }
  return 0;
}

absl::StatusOr<KvTokenBytes> KvBytesPerToken(const common::Qwen35HParams& hp, GgmlType k,
                                             GgmlType v) {
  if (absl::Status s = CheckCacheType(hp, k, "K cache"); !s.ok()) return s;
  if (absl::Status s = CheckCacheType(hp, v, "V cache"); !s.ok()) return s;
  const int64_t n_attention =
      static_cast<int64_t>(hp.LayersOf(common::LayerKind::kFullAttention).size());
  const int64_t row = hp.n_head_kv * hp.head_dim;
  KvTokenBytes kv{k, v};
  kv.k_row_bytes = RowBytes(k, row);
  kv.v_row_bytes = RowBytes(v, row);
  kv.raw_bytes =
      static_cast<uint64_t>(n_attention * row * (CacheValueBits(k) + CacheValueBits(v)) / 8);
  kv.bytes = static_cast<uint64_t>(n_attention) * (kv.k_row_bytes + kv.v_row_bytes);
  return kv;
}

absl::Span<const std::pair<GgmlType, GgmlType>> ComparedKvTypePairs() { return kComparedPairs; }

RecurrentBytes RecurrentBytesPerSequence(const common::Qwen35HParams& hp, GgmlType conv_type) {
  RecurrentBytes r;
  r.n_deltanet_layers = static_cast<int64_t>(hp.LayersOf(common::LayerKind::kDeltaNet).size());
  const int64_t conv_values = (hp.ssm_conv_kernel - 1) * hp.ssm_conv_channels();
  r.conv_bytes = static_cast<uint64_t>(r.n_deltanet_layers * conv_values *
                                       common::TraitsOf(conv_type).type_size);
  r.delta_bytes = static_cast<uint64_t>(r.n_deltanet_layers * hp.ssm_n_v_heads * hp.ssm_head_dim *
                                        hp.ssm_head_dim) *
                  sizeof(float);
  return r;
}

absl::StatusOr<MemoryPlan> PlanMemory(MemoryPlanInputs inputs) {
  auto out_of_range = [](std::string_view field, int64_t v, std::string_view range) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(field), " ", v, " is out of range (", Sv(range), ")"));
  };
  if (inputs.page_tokens < 1 || inputs.page_tokens > 65536) {
    return out_of_range("page_tokens", inputs.page_tokens, "1..65536");
  }
  if (inputs.max_batch_tokens < 1 || inputs.max_batch_tokens > (int64_t{1} << 20)) {
    return out_of_range("max_batch_tokens", inputs.max_batch_tokens, "1..1048576");
  }
  if (inputs.logits_rows < 0 || inputs.logits_rows > inputs.max_batch_tokens) {
    return out_of_range("logits_rows", inputs.logits_rows, "0..max_batch_tokens");
  }
  if (inputs.n_threads < 1 || inputs.n_threads > 4096) {
    return out_of_range("n_threads", inputs.n_threads, "1..4096");
  }
  if (inputs.budget_bytes == 0 || inputs.budget_bytes >= kMaxSize) {
    return absl::InvalidArgumentError(absl::StrCat(inputs.budget_name, " budget of ",
                                                   inputs.budget_bytes,
                                                   " bytes is out of range (1 B .. 4 EiB)"));
  }
  if (inputs.fixed_overhead_bytes >= kMaxSize) {
    return absl::InvalidArgumentError("fixed overhead is out of range (below 4 EiB)");
  }
  if (inputs.device_scratch_bytes >= kMaxSize) {
    return absl::InvalidArgumentError("device scratch is out of range (below 4 EiB)");
  }
  if (absl::Status s = CheckCacheType(inputs.hp, inputs.conv_state_type, "conv state"); !s.ok())
    return s;
  if (CacheValueBits(inputs.conv_state_type) < 16) {
    return absl::InvalidArgumentError(absl::StrCat("conv state type ",
                                                   Sv(TypeName(inputs.conv_state_type)),
                                                   " is not one of ", TypeNames(true)));
  }

  MemoryPlan plan;
  plan.inputs = std::move(inputs);
  const MemoryPlanInputs& in = plan.inputs;
  for (const WeightTypeBytes& w : in.weights)
    plan.weight_bytes = SatAdd(plan.weight_bytes, w.bytes);
  if (in.experts.applies) {
    // The routed stacks as the device holds them: all of them, or the slot arena.
    if (in.experts.routed_bytes > plan.weight_bytes) {
      return absl::InvalidArgumentError("routed expert bytes exceed the weights' total");
    }
    plan.weight_bytes = SatAdd(plan.weight_bytes - in.experts.routed_bytes,
                               in.experts.device_bytes());
  }
  plan.n_attention_layers =
      static_cast<int64_t>(in.hp.LayersOf(common::LayerKind::kFullAttention).size());
  if (plan.n_attention_layers == 0) {
    return absl::InvalidArgumentError(
        "the model has no full-attention layers: no KV cache to plan");
  }
  absl::StatusOr<KvTokenBytes> kv = KvBytesPerToken(in.hp, in.k_type, in.v_type);
  if (!kv.ok()) return kv.status();
  plan.kv = *kv;
  bool chosen_listed = false;
  for (const auto& [k, v] : kComparedPairs) {
    absl::StatusOr<KvTokenBytes> row = KvBytesPerToken(in.hp, k, v);
    if (!row.ok()) continue;  // head_dim not a multiple of 32: only the block-free types apply
    plan.kv_compared.push_back(*row);
    chosen_listed = chosen_listed || (k == in.k_type && v == in.v_type);
  }
  if (!chosen_listed) plan.kv_compared.push_back(plan.kv);
  plan.recurrent = RecurrentBytesPerSequence(in.hp, in.conv_state_type);
  const int64_t logits_rows = in.logits_rows > 0 ? in.logits_rows : in.max_batch_tokens;
  plan.workspace_buffers = Qwen35WorkspaceBuffers(in.hp, in.max_batch_tokens, logits_rows);
  plan.workspace_bytes = WorkspaceBytes(plan.workspace_buffers);
  plan.kernel_scratch_bytes = in.device_budget ? in.device_scratch_bytes
                                               : AttentionKernelScratchBytes(in.hp, in.n_threads);
  plan.page_bytes = static_cast<uint64_t>(in.page_tokens) * plan.kv.bytes;
  for (int n : kPlannedParallel) plan.contexts.push_back(LargestContext(plan, n));
  return plan;
}

ContextFit LargestContext(const MemoryPlan& plan, int n_parallel) {
  ContextFit fit;
  fit.n_parallel = std::max(n_parallel, 1);
  const absl::int128 free = static_cast<absl::int128>(plan.inputs.budget_bytes) -
                            plan.fixed_bytes() -
                            static_cast<absl::int128>(fit.n_parallel) * plan.recurrent.total();
  fit.free_bytes =
      static_cast<int64_t>(std::max<absl::int128>(free, std::numeric_limits<int64_t>::min()));
  if (fit.free_bytes <= 0 || plan.page_bytes == 0) return fit;
  fit.pages = fit.free_bytes / static_cast<int64_t>(plan.page_bytes);
  fit.pages_per_sequence = fit.pages / fit.n_parallel;
  fit.max_context = fit.pages_per_sequence * plan.inputs.page_tokens;
  const int64_t train = plan.inputs.hp.n_ctx_train;
  if (train > 0 && fit.max_context > train) {
    fit.max_context = train;
    fit.capped = true;
  }
  return fit;
}

uint64_t BytesNeeded(const MemoryPlan& plan, int64_t ctx, int n_parallel) {
  const uint64_t pages =
      static_cast<uint64_t>(CeilDiv(std::max<int64_t>(ctx, 0), plan.inputs.page_tokens));
  const uint64_t per_sequence = SatAdd(plan.recurrent.total(), SatMul(pages, plan.page_bytes));
  return SatAdd(plan.fixed_bytes(),
                SatMul(static_cast<uint64_t>(std::max(n_parallel, 0)), per_sequence));
}

absl::Status CheckFits(const MemoryPlan& plan, int64_t ctx, int n_parallel) {
  const MemoryPlanInputs& in = plan.inputs;
  if (n_parallel < 1) {
    return absl::InvalidArgumentError(absl::StrCat("n_parallel ", n_parallel, " is below 1"));
  }
  if (ctx < 1) return absl::InvalidArgumentError(absl::StrCat("context ", ctx, " is below 1"));
  if (in.hp.n_ctx_train > 0 && ctx > in.hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context ", ctx, " is beyond the model's trained context ", in.hp.n_ctx_train));
  }
  const uint64_t need = BytesNeeded(plan, ctx, n_parallel);
  if (need <= in.budget_bytes) return absl::OkStatus();
  const int64_t pages = CeilDiv(ctx, in.page_tokens);
  return absl::ResourceExhaustedError(absl::StrCat(
      "context ", ctx, " x ", n_parallel, " sequences does not fit in ", in.budget_name, " ",
      HumanBytes(in.budget_bytes), ": it needs ", HumanBytes(need), " (", Commas(need),
      " B), short by ", HumanBytes(need - in.budget_bytes), ". Needed: weights ",
      HumanBytes(plan.weight_bytes), ", workspace ", HumanBytes(plan.workspace_bytes),
      ", kernel scratch ", HumanBytes(plan.kernel_scratch_bytes), ", fixed overhead ",
      HumanBytes(in.fixed_overhead_bytes), ", recurrent state ", n_parallel, " x ",
      HumanBytes(plan.recurrent.total()), ", KV ", n_parallel, " x ", pages, " pages x ",
      HumanBytes(plan.page_bytes), " (", in.page_tokens, " tokens, K ", Sv(TypeName(in.k_type)),
      ", V ", Sv(TypeName(in.v_type)), "). Largest context per n_parallel:\n",
      RenderContextTable(plan)));
}

std::string HumanBytes(uint64_t bytes) {
  constexpr std::array<const char*, 5> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes) / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < kUnits.size()) {
    v /= 1024;
    ++u;
  }
  return v >= 100 ? absl::StrFormat("%.1f %s", v, kUnits[u])
                  : absl::StrFormat("%.2f %s", v, kUnits[u]);
}

std::string RenderContextTable(const MemoryPlan& plan) {
  std::string out = absl::StrFormat("  %10s  %18s  %8s  %9s  %11s\n", "n_parallel", "free for KV",
                                    "pages", "pages/seq", "max context");
  for (const ContextFit& f : plan.contexts) {
    std::string ctx = f.max_context > 0 ? Commas(f.max_context) : "does not fit";
    if (f.capped) ctx += " (trained context)";
    absl::StrAppendFormat(&out, "  %10d  %18s  %8s  %9s  %11s\n", f.n_parallel,
                          f.free_bytes >= 0
                              ? HumanBytes(static_cast<uint64_t>(f.free_bytes))
                              : absl::StrCat("-", HumanBytes(static_cast<uint64_t>(0) -
                                                             static_cast<uint64_t>(f.free_bytes))),
                          Commas(f.pages), Commas(f.pages_per_sequence), ctx);
  }
  return out;
}

uint64_t ExpertSplit::tier_device_bytes() const {
  return all_on_device ? std::numeric_limits<uint64_t>::max() : split_bytes;
}

std::string RenderExpertSplit(const MemoryPlan& plan) {
  const ExpertSplit& e = plan.inputs.experts;
  if (!e.applies || e.n_experts() == 0) return "";
  const int64_t on = e.device_experts();
  const double share = 100.0 * static_cast<double>(on) / static_cast<double>(e.n_experts());
  std::string out = absl::StrFormat(
      "experts: %s of %s in %s (%s of %s experts, %.0f %%)", HumanBytes(e.device_bytes()),
      HumanBytes(e.routed_bytes), plan.inputs.budget_name, Commas(on), Commas(e.n_experts()),
      share);
  if (e.all_on_device) {
    absl::StrAppend(&out, ", all on the device");
  } else if (on == 0) {
    absl::StrAppend(&out, ", all in RAM (computed on the CPU)");
  } else {
    absl::StrAppend(&out, ", the rest in RAM (computed on the CPU); slots of ",
                    HumanBytes(e.slot_bytes));
  }
  absl::StrAppend(&out, e.auto_sized ? " [--expert-vram auto]"
                                     : absl::StrCat(" [--expert-vram ", HumanBytes(e.requested_bytes),
                                                    "]"));
  return out;
}

std::string RenderMemoryPlan(const MemoryPlan& plan) {
  const MemoryPlanInputs& in = plan.inputs;
  const common::Qwen35HParams& hp = in.hp;
  std::string out;
  absl::StrAppendFormat(&out, "memory plan: %s, %s budget %s (%s B)\n\n", in.model_name,
                        in.budget_name, HumanBytes(in.budget_bytes), Commas(in.budget_bytes));

  absl::StrAppend(&out, "weights (tensors the forward pass reads)\n");
  absl::StrAppendFormat(&out, "  %-8s %8s  %18s\n", "type", "tensors", "bytes");
  int64_t n_tensors = 0;
  uint64_t listed = 0;
  for (const WeightTypeBytes& w : in.weights) {
    absl::StrAppendFormat(&out, "  %-8s %8d  %18s  %11s\n", Sv(TypeName(w.type)), w.n_tensors,
                          Commas(w.bytes), HumanBytes(w.bytes));
    n_tensors += w.n_tensors;
    listed = SatAdd(listed, w.bytes);
  }
  absl::StrAppendFormat(&out, "  %-8s %8d  %18s  %11s\n", "total", n_tensors, Commas(listed),
                        HumanBytes(listed));
  if (const ExpertSplit& e = in.experts; e.applies) {
    // The routed experts' split: the rest of the weights, then what the device holds of them.
    absl::StrAppendFormat(&out, "  %-17s  %18s  %11s\n", "routed experts", Commas(e.routed_bytes),
                          HumanBytes(e.routed_bytes));
    absl::StrAppendFormat(
        &out, "  %-17s  %18s  %11s  (%s of %s experts%s)\n",
        absl::StrCat("experts in ", in.budget_name), Commas(e.device_bytes()),
        HumanBytes(e.device_bytes()), Commas(e.device_experts()), Commas(e.n_experts()),
        e.all_on_device ? ", as in the file"
                        : absl::StrCat(" in slots of ", Commas(e.slot_bytes), " B"));
    absl::StrAppendFormat(&out, "  %-17s  %18s  %11s\n", absl::StrCat("in ", in.budget_name),
                          Commas(plan.weight_bytes), HumanBytes(plan.weight_bytes));
  }
  out += "\n";

  absl::StrAppendFormat(
      &out,
      "KV cache per token: %d full-attention layers x (K row + V row), a row = %d KV heads x %d "
      "head dim values\n",
      plan.n_attention_layers, hp.n_head_kv, hp.head_dim);
  absl::StrAppendFormat(&out, "  %-13s %16s  %18s  %16s\n", "K / V", "raw B/token",
                        "with scales B/tok", absl::StrCat("page (", in.page_tokens, " tok)"));
  for (const KvTokenBytes& kv : plan.kv_compared) {
    const bool chosen = kv.k_type == in.k_type && kv.v_type == in.v_type;
    absl::StrAppendFormat(&out, "  %-13s %16s  %18s  %16s%s\n", PairName(kv.k_type, kv.v_type),
                          Commas(kv.raw_bytes), Commas(kv.bytes),
                          HumanBytes(kv.bytes * static_cast<uint64_t>(in.page_tokens)),
                          chosen ? "  <- chosen" : "");
  }
  absl::StrAppendFormat(&out,
                        "  page: %d tokens x %s B = %s B (%s), one page id for every layer's K "
                        "and V\n\n",
                        in.page_tokens, Commas(plan.kv.bytes), Commas(plan.page_bytes),
                        HumanBytes(plan.page_bytes));

  // One figure a line: label, bytes, and a note in parentheses.
  auto line = [&out](const std::string& label, uint64_t bytes, const std::string& note) {
    absl::StrAppendFormat(&out, "  %-46s %18s B%s\n", label, Commas(bytes),
                          note.empty() ? "" : absl::StrCat(" (", note, ")"));
  };
  const RecurrentBytes& r = plan.recurrent;
  absl::StrAppendFormat(&out, "recurrent state per sequence (%d DeltaNet layers)\n",
                        r.n_deltanet_layers);
  line(absl::StrCat("conv window ", Sv(TypeName(in.conv_state_type)), ": (", hp.ssm_conv_kernel,
                    "-1) x ", hp.ssm_conv_channels(), " channels"),
       r.conv_bytes, "");
  line(absl::StrCat("delta state f32: ", hp.ssm_n_v_heads, " heads x ", hp.ssm_head_dim, " x ",
                    hp.ssm_head_dim),
       r.delta_bytes, "");
  line("total", r.total(), HumanBytes(r.total()));
  absl::StrAppend(&out, "\n");

  const int64_t logits_rows = in.logits_rows > 0 ? in.logits_rows : in.max_batch_tokens;
  uint64_t logits_bytes = 0;
  for (const WorkspaceBuffer& b : plan.workspace_buffers) {
    if (b.name == "logits" || b.name == "out_x") logits_bytes += b.bytes();
  }
  absl::StrAppend(&out, "fixed\n");
  line("weights", plan.weight_bytes, HumanBytes(plan.weight_bytes));
  line(absl::StrCat("workspace (", in.max_batch_tokens, " batch tokens, ", logits_rows,
                    " logits rows)"),
       plan.workspace_bytes,
       absl::StrCat(HumanBytes(plan.workspace_bytes), "; logits ", HumanBytes(logits_bytes)));
  if (in.device_budget) {
    line("device kernel scratch (largest launcher need)", plan.kernel_scratch_bytes,
         HumanBytes(plan.kernel_scratch_bytes));
  } else {
    line(absl::StrCat("attention kernel scratch (", in.n_threads,
                      in.n_threads == 1 ? " thread)" : " threads)"),
         plan.kernel_scratch_bytes, "");
  }
  line("fixed overhead", in.fixed_overhead_bytes, "");
  line("total", plan.fixed_bytes(), HumanBytes(plan.fixed_bytes()));
  absl::StrAppend(&out, "\n");

  absl::StrAppendFormat(&out,
                        "largest context per n_parallel (K %s, V %s)\n  pages = floor((budget - "
                        "fixed - n x recurrent) / page bytes), context = floor(pages / n) x %d, "
                        "at most %s\n",
                        Sv(TypeName(in.k_type)), Sv(TypeName(in.v_type)), in.page_tokens,
                        Commas(hp.n_ctx_train));
  absl::StrAppend(&out, RenderContextTable(plan));
  return out;
}

}  // namespace deltaserve::worker
