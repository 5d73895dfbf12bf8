#include "worker/sched/served_model.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/str_util.h"
#include "worker/cache/model_footprint.h"
#include "worker/engine/expert_layout.h"

namespace deltaserve::worker {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Bytes glibc malloc takes for a request of `n` bytes: a chunk of n + 8 rounded up to 16, at
// least 32; requests of 128 KiB and more are mapped whole pages (n + 16, rounded up to 4 KiB).
uint64_t HeapBlockBytes(uint64_t n) {
  if (n == 0) return 0;
  if (n >= (128u << 10)) return CeilDiv(n + 16, 4096) * 4096;
  return std::max<uint64_t>(32, (n + 8 + 15) / 16 * 16);
}

// The heap block of a libstdc++ std::string holding `capacity` characters (15 fit inline).
uint64_t StringHeapBytes(uint64_t capacity) {
  return capacity > 15 ? HeapBlockBytes(capacity + 1) : 0;
}

// The backing array of an absl::flat_hash_map after reserve(n): capacity 2^k - 1 holding n at a
// load of at most 7/8, one control byte per slot plus 16 (sentinel and cloned group), padded to
// the slot alignment, then the slots.
uint64_t SwissTableBytes(uint64_t n, uint64_t slot_bytes, uint64_t slot_align) {
  if (n == 0) return 0;
  const uint64_t lower_bound = n + (n - 1) / 7;
  const uint64_t capacity = std::bit_ceil(lower_bound + 1) - 1;
  const uint64_t ctrl = (capacity + 16 + slot_align - 1) / slot_align * slot_align;
  return HeapBlockBytes(ctrl + capacity * slot_bytes);
}

// "VmRSS:    1234 kB" -> bytes, from /proc/self/status (or another /proc file of that shape).
uint64_t StatusField(const char* field, const char* path = "/proc/self/status") {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t len = std::strlen(field);
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, field, len) == 0 && line[len] == ':') {
      kib = std::strtoull(line + len + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

// What the GGUF reader keeps besides the mapping: a string_view per element of every string
// array (the vocabulary, the merges) and each tensor's info, name and index entry.
uint64_t GgufIndexBytes(const common::GgufFile& file) {
  uint64_t bytes = HeapBlockBytes(file.metadata().size() * sizeof(common::GgufKeyValue));
  for (const common::GgufKeyValue& kv : file.metadata()) {
    if (kv.value.is_array() && kv.value.array_type() == common::GgufValueType::kString) {
      bytes += HeapBlockBytes(kv.value.ArraySize() * sizeof(std::string_view));
    }
  }
  bytes += HeapBlockBytes(file.tensors().size() * sizeof(common::GgufTensorInfo));
  for (const common::GgufTensorInfo& t : file.tensors()) bytes += StringHeapBytes(t.name.size());
  bytes += SwissTableBytes(file.tensors().size() + file.metadata().size(), 24, 8);
  return bytes;
}

absl::Status Invalid(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("serving option ", common::Sv(field), " ", common::Sv(why)));
}

absl::Status Validate(const ServingOptions& o) {
  if (o.ctx < 1) return Invalid("ctx", "must be at least 1");
  if (o.n_parallel < 1 || o.n_parallel > 4096) return Invalid("n_parallel", "must be 1..4096");
  if (o.page_tokens < 1 || o.page_tokens > (1 << 20)) {
    return Invalid("page_tokens", "must be 1..1048576");
  }
  if (o.step_tokens < 1) return Invalid("step_tokens", "must be at least 1");
  if (o.max_waiting < 0) return Invalid("max_waiting", "must not be negative");
  if (o.budget_bytes == 0) return Invalid("budget_bytes", "must be set (--ram or --vram)");
  if (o.n_threads < 1) return Invalid("n_threads", "must be at least 1");
  if (o.ngram.draft_max < 0 || (o.speculation && o.ngram.draft_max < 1)) {
    return Invalid("ngram.draft_max", "must be at least 1 with speculation, else at least 0");
  }
  if (o.speculation && (o.ngram.ngram_min < 1 || o.ngram.ngram_max < o.ngram.ngram_min)) {
    return Invalid("ngram", "needs 1 <= ngram_min <= ngram_max");
  }
  return absl::OkStatus();
}

// 1234567 -> "1,234,567".
std::string Commas(uint64_t v) {
  std::string digits = absl::StrCat(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// --snapshot-ram's default: a quarter of the RAM still free once the plan's bytes are taken
// (MemAvailable now, less the plan; what the plan already made resident is counted twice, which
// errs on the small side).
uint64_t DefaultSnapshotRam(uint64_t planned_bytes) {
  const uint64_t available = StatusField("MemAvailable", "/proc/meminfo");
  return available > planned_bytes ? (available - planned_bytes) / 4 : 0;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

uint64_t ServingOverhead::total() const {
  uint64_t t = user + device_context + snapshot_slots + zero_slot + page_tables;
  if (host_counted) {
    t += process_baseline + tokenizer + gguf_index + mapped_beyond_weights + host_logits +
         sampler_scratch + token_histories + pass_vectors + moe_kernel;
  }
  return t;
}

std::string ServingOverhead::Render() const {
  std::string out = "serving overhead (the plan's fixed overhead)\n";
  auto line = [&out](std::string_view what, uint64_t bytes) {
    absl::StrAppendFormat(&out, "  %-44s %16s B (%s)\n", what, Commas(bytes), HumanBytes(bytes));
  };
  line("--overhead", user);
  if (!host_counted) line("CUDA context reserve", device_context);
  line("speculation snapshot slots", snapshot_slots);
  line("zeroed source slot", zero_slot);
  line("page-table buffer", page_tables);
  if (host_counted) {
    line("process baseline (measured at start-up)", process_baseline);
    line("tokenizer tables", tokenizer);
    line("GGUF index", gguf_index);
    line("GGUF mapping beyond the forward-pass weights", mapped_beyond_weights);
    line("host copy of the logits", host_logits);
    line("sampler scratch", sampler_scratch);
    line("token histories", token_histories);
    line("per-pass host vectors", pass_vectors);
    line("MoE kernel buffers", moe_kernel);
  } else {
    out += "  host memory (baseline, tokenizer, logits copy, ...) is not in this device's budget\n";
  }
  line("total", total());
  return out;
}

ServingBatchShape BatchShapeFor(const ServingOptions& o) {
  ServingBatchShape s;
  // Scheduler::Create raises the step budget to this so every sequence can decode and draft.
  s.scheduler_step_tokens = std::max<int64_t>(
      o.step_tokens, static_cast<int64_t>(o.n_parallel) * (1 + o.ngram.draft_max));
  // A sequence never holds more than ctx positions, so no pass feeds more than n * ctx.
  s.max_batch_tokens =
      std::min<int64_t>(s.scheduler_step_tokens, static_cast<int64_t>(o.n_parallel) * o.ctx);
  // One row per sequence; with speculation the last token and its drafts (BatchEntry::
  // last_logits), so at most 1 + draft_max per sequence.
  s.logits_rows = std::min<int64_t>(
      static_cast<int64_t>(o.n_parallel) * (o.speculation ? 1 + o.ngram.draft_max : 1),
      s.max_batch_tokens);
  return s;
}

uint64_t TokenizerTableBytes(const common::GgufFile& file, const common::Tokenizer& tokenizer) {
  const uint64_t n = static_cast<uint64_t>(tokenizer.vocab_size());
  // token_text_ and piece_: a std::string each per entry; type_: one byte per entry.
  uint64_t bytes = 2 * HeapBlockBytes(n * sizeof(std::string)) + HeapBlockBytes(n);
  for (uint64_t id = 0; id < n; ++id) {
    const auto token = static_cast<common::TokenId>(id);
    const uint64_t text = tokenizer.TokenText(token).size();
    bytes += StringHeapBytes(text);
    // A normal token's piece is decoded into a string reserved at the text's length; other
    // pieces are copies of their text or empty.
    const common::TokenType type = tokenizer.Type(token);
    if (type == common::TokenType::kNormal) {
      bytes += StringHeapBytes(text);
    } else {
      bytes += StringHeapBytes(tokenizer.Piece(token).size());
    }
  }
  // text -> id: {string_view, int32} slots of 24 bytes.
  bytes += SwissTableBytes(n, 24, 8);
  // The merges: read as strings while building (freed after, but the heap keeps the pages), then
  // a table of {uint64 key, {rank, result}} slots of 16 bytes reserved for all of them.
  if (const common::GgufValue* merges = file.Find("tokenizer.ggml.merges");
      merges != nullptr && merges->is_array()) {
    const uint64_t m = merges->ArraySize();
    bytes += HeapBlockBytes(m * sizeof(std::string));
    for (uint64_t i = 0; i < m; ++i) {
      if (std::optional<std::string_view> s = merges->ArrayString(i)) {
        bytes += StringHeapBytes(s->size());
      }
    }
    bytes += SwissTableBytes(m, 16, 8);
  }
  return bytes;
}

uint64_t ProcessResidentBytes() { return StatusField("VmRSS"); }
uint64_t ProcessPeakResidentBytes() { return StatusField("VmHWM"); }

ProcessBaseline MeasureProcessBaseline() {
  ProcessBaseline b;
  b.resident_bytes = ProcessResidentBytes();
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return b;
  exe[len] = '\0';
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return b;
  // A mapping's header line ends with its path; its "Size:" and "Rss:" lines follow (kB).
  char line[4608];
  bool in_exe = false;
  uint64_t size_kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    const size_t n = std::strlen(line);
    if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
    if (std::strncmp(line, "Size:", 5) == 0) {
      size_kib = std::strtoull(line + 5, nullptr, 10);
    } else if (std::strncmp(line, "Rss:", 4) == 0) {
      const uint64_t rss_kib = std::strtoull(line + 4, nullptr, 10);
      if (in_exe && size_kib > rss_kib) b.executable_paged_out_bytes += (size_kib - rss_kib) * 1024;
    } else if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
      // A mapping header, "start-end perms offset dev inode [path]" (fields start upper-case).
      const char* path = std::strchr(line, '/');
      in_exe = path != nullptr && std::strcmp(path, exe) == 0;
    }
  }
  std::fclose(f);
  return b;
}

namespace {

// The routed experts' device split (in.experts) for a MoE model on a device budget: what the
// budget leaves at ctx x n_parallel once everything else is planned with every expert in host
// memory, given to experts (auto) or checked against --expert-vram. Every expert fitting means
// no split: the stacks load onto the device as in the file. ResourceExhausted for an
// --expert-vram beyond what is left, naming the figures; a model that does not fit even with
// every expert in host memory is left to CheckFits (the split says so in the plan).
absl::Status PlanExpertSplit(const std::string& path, const common::GgufFile& file,
                             const ServingOptions& options, MemoryPlanInputs& in) {
  // The engine's own layout of an expert slot (worker/engine/expert_layout.h): the plan and the
  // arena count the same bytes.
  absl::StatusOr<ExpertSlotLayout> layout = ExpertSlotLayoutOf(file, in.hp);
  if (!layout.ok()) return layout.status();
  ExpertSplit& e = in.experts;
  e.applies = true;
  e.n_moe_layers = layout->n_layer;
  e.n_expert = layout->n_expert;
  e.routed_bytes = layout->routed_bytes;
  e.slot_bytes = layout->slot_bytes;
  e.auto_sized = !options.expert_vram_bytes.has_value();
  e.requested_bytes = options.expert_vram_bytes.value_or(0);
  e.all_on_device = false;
  e.n_slots = 0;
  absl::StatusOr<MemoryPlan> base = PlanMemory(in);  // every expert in host memory
  if (!base.ok()) return base.status();
  const uint64_t needed = BytesNeeded(*base, options.ctx, options.n_parallel);
  if (needed > in.budget_bytes || e.slot_bytes == 0) return absl::OkStatus();  // CheckFits says
  const uint64_t left = in.budget_bytes - needed;
  const uint64_t want = e.auto_sized ? left : std::min(e.requested_bytes, e.routed_bytes);
  if (want > left) {
    const auto fit_slots = static_cast<uint64_t>(layout->SlotsFor(left).total_slots());
    return absl::ResourceExhaustedError(absl::StrCat(
        BaseName(path), ": --expert-vram ", HumanBytes(e.requested_bytes), " does not fit: at --ctx ",
        options.ctx, " x --parallel ", options.n_parallel, " the ", in.budget_name, " budget of ",
        HumanBytes(in.budget_bytes), " leaves ", HumanBytes(left), " (", Commas(left),
        " B) for routed experts once the other weights, KV cache, state slots, workspace and "
        "overheads (",
        HumanBytes(needed), ") are placed: at most ", Commas(fit_slots), " of ",
        Commas(static_cast<uint64_t>(e.n_experts())), " experts of ", HumanBytes(e.slot_bytes),
        ". Use --expert-vram auto, a size up to ", HumanBytes(left),
        ", or a smaller --ctx / --parallel"));
  }
  if (want >= e.routed_bytes) {
    e.all_on_device = true;
  } else {
    const common::ExpertSlotClasses slots = layout->SlotsFor(want);
    e.n_slots = slots.total_slots();
    e.split_bytes = want;
    e.arena_bytes = slots.device_bytes();
  }
  return absl::OkStatus();
}

// The split as a line of a refusal ("" without one).
std::string ExpertSplitNote(const MemoryPlan& plan) {
  const std::string split = RenderExpertSplit(plan);
  return split.empty() ? "" : absl::StrCat(split, "\n");
}

// The plan of serving `file` with `options`, the serving terms as its fixed overhead. The host
// terms need the tokenizer; without one (a device budget, which does not count them) they are 0.
absl::StatusOr<PlannedServing> PlanServing(const std::string& path, const common::GgufFile& file,
                                           const common::Qwen35HParams& hp,
                                           const common::Tokenizer* tokenizer,
                                           const ServingOptions& options, bool host_memory) {
  PlannedServing out;
  out.shape = BatchShapeFor(options);
  absl::StatusOr<ModelWeightBytes> weights = ForwardPassWeightBytes(file, hp);
  if (!weights.ok()) return weights.status();
  RecurrentStateLayout layout;
  layout.n_layers = static_cast<int>(hp.LayersOf(common::LayerKind::kDeltaNet).size());
  layout.conv_floats = (hp.ssm_conv_kernel - 1) * hp.ssm_conv_channels();
  layout.delta_floats = hp.ssm_n_v_heads * hp.ssm_head_dim * hp.ssm_head_dim;
  const int64_t n = options.n_parallel;
  const uint64_t total_pages = static_cast<uint64_t>(n) * CeilDiv(options.ctx, options.page_tokens);
  ServingOverhead& o = out.overhead;
  o.user = options.fixed_overhead_bytes;
  o.device_context = host_memory ? 0 : options.device_context_bytes;
  o.snapshot_slots = options.speculation ? n * layout.bytes() : 0;
  o.zero_slot = layout.bytes();
  // Forward regrows the buffer to max(needed, 2 x old) entries, the old one alive meanwhile;
  // likewise the decode step's DeltaNet state pointers ([layer][conv, delta][sequence]).
  const uint64_t state_ptrs = 2 * static_cast<uint64_t>(layout.n_layers) * n * sizeof(float*);
  o.page_tables = 3 * total_pages * sizeof(int32_t) + 128;
  if (state_ptrs > 0) o.page_tables += 3 * state_ptrs + 128;
  o.host_counted = host_memory;
  if (host_memory) {
    const int32_t n_valid =
        tokenizer == nullptr
            ? static_cast<int32_t>(hp.n_vocab)
            : static_cast<int32_t>(std::min<int64_t>(tokenizer->vocab_size(), hp.n_vocab));
    o.process_baseline = options.process_baseline_bytes;
    o.tokenizer = tokenizer == nullptr ? 0 : TokenizerTableBytes(file, *tokenizer);
    o.gguf_index = GgufIndexBytes(file);
    uint64_t weight_bytes = 0;
    for (const WeightTypeBytes& w : weights->read) weight_bytes += w.bytes;
    // Prefetch reads the whole file: header, unread tensors and alignment padding stay resident.
    const uint64_t mapped = CeilDiv(file.file_size(), 4096) * 4096;
    o.mapped_beyond_weights = mapped > weight_bytes ? mapped - weight_bytes : 0;
    o.host_logits = HeapBlockBytes(static_cast<uint64_t>(out.shape.logits_rows) * hp.n_vocab * 4);
    // Sampler::Sample's per-thread buffers: the adjusted logits (4 B) and candidates (8 B).
    o.sampler_scratch = HeapBlockBytes(static_cast<uint64_t>(n_valid) * 4) +
                        HeapBlockBytes(static_cast<uint64_t>(n_valid) * 8);
    o.token_histories = n * HeapBlockBytes(static_cast<uint64_t>(options.ctx) * 4);
    o.pass_vectors = 2 * HeapBlockBytes(out.shape.max_batch_tokens * 4) +
                     HeapBlockBytes(total_pages * sizeof(int32_t));
    if (state_ptrs > 0) o.pass_vectors += HeapBlockBytes(state_ptrs);
    if (hp.is_moe) {
      // The host copy of every layer's expert ids of a pass (the routing counters).
      o.pass_vectors += HeapBlockBytes(static_cast<uint64_t>(hp.n_layer) *
                                       out.shape.max_batch_tokens * hp.n_expert_used * 4);
    }
    if (hp.is_moe) {
      // kernels/cpu/moe.cc per call: expert offsets, the T*k assignment order, and [count][H],
      // [count][ff] x 2, [count][H] f32 for the busiest expert, which can get all T tokens.
      const uint64_t t = static_cast<uint64_t>(out.shape.max_batch_tokens);
      const uint64_t e1 = static_cast<uint64_t>(hp.n_expert) + 1;
      o.moe_kernel = 2 * HeapBlockBytes(e1 * 8) + HeapBlockBytes(t * hp.n_expert_used * 8) +
                     2 * HeapBlockBytes(t * hp.n_embd * 4) +
                     2 * HeapBlockBytes(t * hp.n_ff_expert * 4);
    }
  }

  MemoryPlanInputs in;
  in.hp = hp;
  in.model_name = BaseName(path);
  in.weights = weights->read;
  in.k_type = static_cast<common::GgmlType>(options.k_type);
  in.v_type = static_cast<common::GgmlType>(options.v_type);
  in.page_tokens = options.page_tokens;
  in.conv_state_type = common::GgmlType::kF32;  // the engine keeps f32 conv windows
  in.max_batch_tokens = out.shape.max_batch_tokens;
  in.logits_rows = out.shape.logits_rows;
  in.budget_bytes = options.budget_bytes;
  in.budget_name = options.budget_name;
  in.fixed_overhead_bytes = o.total();
  in.n_threads = options.n_threads;
  in.device_budget = !host_memory;
  in.device_scratch_bytes = options.device_scratch_bytes;
  if (hp.is_moe && !host_memory) {
    absl::Status split = PlanExpertSplit(path, file, options, in);
    if (!split.ok()) return split;
  }
  absl::StatusOr<MemoryPlan> plan = PlanMemory(std::move(in));
  if (!plan.ok()) return plan.status();
  out.plan = std::move(*plan);
  if (absl::Status fits = CheckFits(out.plan, options.ctx, options.n_parallel); !fits.ok()) {
    return absl::Status(fits.code(),
                        absl::StrCat(BaseName(path), ": ", fits.message(), "\n", o.Render(),
                                     ExpertSplitNote(out.plan)));
  }
  return out;
}

}  // namespace

ExpertTierOptions ExpertTierOptionsFor(const MemoryPlan& plan, const ServingOptions& options) {
  ExpertTierOptions tiers;
  if (plan.inputs.experts.applies) tiers.device_bytes = plan.inputs.experts.tier_device_bytes();
  tiers.host_threads = options.n_threads;
  return tiers;
}

absl::StatusOr<PlannedServing> ServedModel::Plan(const std::string& path,
                                                 const ServingOptions& options, bool host_memory) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(**file);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<common::Tokenizer> tokenizer;
  if (host_memory) {
    absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok = common::Tokenizer::FromGguf(**file);
    if (!tok.ok()) return tok.status();
    tokenizer = std::move(*tok);
  }
  return PlanServing(path, **file, *hp, tokenizer.get(), options, host_memory);
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Create(const std::string& path,
                                                                 kernels::Backend& backend,
                                                                 const ServingOptions& options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->options_ = options;
  m->shape_ = BatchShapeFor(options);

  // The header, the tokenizer and the plan first: nothing is copied into the backend (a GPU's
  // weights) until the plan fits.
  absl::StatusOr<std::unique_ptr<common::GgufFile>> opened = common::GgufFile::Open(path);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<common::GgufFile> file_owner = std::move(*opened);
  const common::GgufFile& file = *file_owner;  // the model takes it over; the mapping stays
  absl::StatusOr<common::Qwen35HParams> read_hp = common::ReadQwen35HParams(file);
  if (!read_hp.ok()) return read_hp.status();
  const common::Qwen35HParams hp = std::move(*read_hp);
  absl::StatusOr<std::unique_ptr<common::Tokenizer>> tok = common::Tokenizer::FromGguf(file);
  if (!tok.ok()) return tok.status();
  m->tokenizer_ = std::move(*tok);
  m->n_valid_ = static_cast<int32_t>(std::min<int64_t>(m->tokenizer_->vocab_size(), hp.n_vocab));
  for (int32_t id = 0; id < m->n_valid_; ++id) {
    if (m->tokenizer_->IsEndOfGeneration(id)) m->eos_.push_back(id);
  }
  absl::StatusOr<PlannedServing> planned =
      PlanServing(path, file, hp, m->tokenizer_.get(), options, backend.host_memory());
  if (!planned.ok()) return planned.status();
  m->plan_ = std::move(planned->plan);
  m->overhead_ = planned->overhead;

  // The routed experts as the plan split them: every stack on the device (no tiers), or the
  // planned slot arena with the rest computed on the CPU from the file's mapping.
  absl::StatusOr<std::unique_ptr<Qwen35Model>> model = Qwen35Model::Load(
      std::move(file_owner), backend, ExpertTierOptionsFor(m->plan_, options));
  if (!model.ok()) return model.status();
  m->model_ = std::move(*model);
  m->model_->set_step_graphs(options.step_graphs);
  const RecurrentStateLayout layout = m->model_->state_layout();
  const uint64_t total_pages =
      static_cast<uint64_t>(options.n_parallel) * CeilDiv(options.ctx, options.page_tokens);

  // The plan and the engine must count the same bytes; a difference is a bug, not a config.
  const KvCacheOptions kv{options.k_type, options.v_type, options.page_tokens};
  const ModelMemory engine = m->model_->Memory(kv);
  if (engine.weight_bytes != m->plan_.weight_bytes ||
      engine.state_bytes_per_sequence != m->plan_.recurrent.total() ||
      engine.kv_bytes_per_token != m->plan_.kv.bytes) {
    return absl::InternalError(
        absl::StrCat(BaseName(path), ": the memory plan and the engine disagree: weights ",
                     m->plan_.weight_bytes, " vs ", engine.weight_bytes, ", state ",
                     m->plan_.recurrent.total(), " vs ", engine.state_bytes_per_sequence,
                     ", KV/token ", m->plan_.kv.bytes, " vs ", engine.kv_bytes_per_token));
  }

  // Everything below is planned; a failure here means the budget was not really there.
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache =
      PagedKvCache::Create(backend, m->model_->kv_shape(), kv, static_cast<int64_t>(total_pages));
  if (!cache.ok()) return cache.status();
  m->cache_ = std::move(*cache);
  absl::StatusOr<std::shared_ptr<RecurrentStateSlots>> slots = RecurrentStateSlots::Create(
      backend, layout, options.n_parallel * (options.speculation ? 2 : 1));
  if (!slots.ok()) return slots.status();
  m->slots_ = std::move(*slots);
  SchedulerOptions so;
  so.max_sequences = options.n_parallel;
  so.step_tokens = options.step_tokens;
  so.max_waiting = options.max_waiting;
  so.max_context = options.ctx;
  so.speculation = options.speculation;
  so.ngram = options.ngram;
  so.snapshot_interval = options.snapshot_interval;
  common::SnapshotDomain domain;
  domain.model_fingerprint = common::ModelFingerprint(m->model_->file());
  domain.k_type = std::string(KvCacheTypeName(options.k_type));
  domain.v_type = std::string(KvCacheTypeName(options.v_type));
  domain.state_type = "f32";
  domain.page_tokens = options.page_tokens;
  const uint64_t snapshot_ram = options.snapshot_ram_bytes.value_or(
      // On a GPU the planned bytes are device memory: none of them comes out of the RAM.
      DefaultSnapshotRam(backend.host_memory() ? m->planned_bytes() : 0));
  m->snapshots_ = std::make_shared<SnapshotCache>(m->cache_, m->slots_, domain, snapshot_ram);
  absl::StatusOr<std::unique_ptr<Scheduler>> sched = Scheduler::Create(
      *m->model_, m->cache_, m->slots_, so, m->eos_, m->n_valid_, m->snapshots_);
  if (!sched.ok()) return sched.status();
  m->scheduler_ = std::move(*sched);
  // Masks: 19 KB each on Qwen's 151K vocabulary, so about 1,700 grammar states.
  m->scheduler_->SetConstrainedDecoding(m->tokenizer_.get(), size_t{32} << 20);
  {
    const common::Tokenizer& tok = *m->tokenizer_;
    const int32_t start = tok.Find("<think>"), close = tok.Find("</think>");
    if (start >= 0 && close >= 0) {
      // "\n\n" by vocabulary lookup, not Encode: Encode's first call fills a 1.1 MB code-point
      // table the memory plan does not count (docs/memory_plan.md). In the byte-level alphabet
      // "\n" is U+010A.
      const int32_t nn = tok.Find("\xC4\x8A\xC4\x8A"), n = tok.Find("\xC4\x8A");
      std::vector<int32_t> end = {close};
      if (nn >= 0) {
        end.push_back(nn);
      } else if (n >= 0) {
        end.insert(end.end(), {n, n});
      }
      m->reasoning_ = {start, std::move(end)};
    }
  }
  if (backend.host_memory()) {
    m->model_->Prefetch(options.load_progress ? options.load_progress : [](double) {});
  } else if (options.load_progress) {
    options.load_progress(1.0);  // the weights were copied into the device by Load
  }
  if (absl::Status s = m->WarmUp(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(BaseName(path), ": warm-up pass: ", s.message()));
  }
  m->model_->counters().Reset();  // /metrics counts requests' passes, not the warm-up's
  return m;
}

ServedModel::~ServedModel() = default;

std::shared_ptr<const TokenTrie> ServedModel::token_trie() {
  std::call_once(trie_once_, [this] { trie_ = TokenTrie::Build(*tokenizer_); });
  return trie_;
}

bool PromptOpensReasoning(absl::Span<const int32_t> prompt, int32_t start, int32_t end_first) {
  for (size_t i = prompt.size(); i-- > 0;) {
    if (prompt[i] == end_first) return false;
    if (prompt[i] == start) return true;
  }
  return false;
}

uint64_t ServedModel::planned_bytes() const {
  return BytesNeeded(plan_, options_.ctx, options_.n_parallel);
}

// Two passes, because Forward sizes the workspace by the largest token count and the largest
// logits row count it has seen: max_batch_tokens tokens without logits, then logits_rows tokens
// with a logits row each. Sequences hold at most ctx tokens, so each pass is split over
// ceil(tokens / ctx) <= n_parallel sequences whose pages the cache has.
absl::Status ServedModel::WarmUp() {
  std::vector<float> logits;
  for (int pass = 0; pass < 2; ++pass) {
    const int64_t tokens = pass == 0 ? shape_.max_batch_tokens : shape_.logits_rows;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<std::vector<int32_t>> ids;
    for (int64_t left = tokens; left > 0;) {
      const int64_t take = std::min(left, options_.ctx);
      absl::StatusOr<std::unique_ptr<SequenceState>> seq =
          model_->NewSequence(cache_, slots_, options_.ctx);
      if (!seq.ok()) return seq.status();
      seqs.push_back(std::move(*seq));
      ids.emplace_back(static_cast<size_t>(take), 0);
      left -= take;
    }
    std::vector<BatchEntry> batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      BatchEntry e{seqs[i].get(), ids[i], /*all_logits=*/pass == 1};
      e.no_logits = pass == 0;
      batch.push_back(e);
    }
    if (absl::Status s = model_->Forward(batch, logits); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace deltaserve::worker
