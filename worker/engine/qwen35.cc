#include "worker/engine/qwen35.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "worker/engine/qwen35_ops.h"
#include "worker/engine/qwen35_workspace.h"

namespace deltaserve::worker {
namespace {

using engine_internal::CheckKernel;
using kernels::Mat;

Mat Contiguous(const kernels::DeviceBuffer& b, int64_t rows, int64_t cols) {
  return {b.floats(), rows, cols, cols};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Qwen35Model>> Qwen35Model::Load(const std::string& path,
                                                               kernels::Backend& backend) {
  absl::StatusOr<std::unique_ptr<common::GgufFile>> file = common::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return Load(std::move(*file), backend);
}

absl::StatusOr<std::unique_ptr<Qwen35Model>> Qwen35Model::Load(
    std::unique_ptr<common::GgufFile> file, kernels::Backend& backend) {
  return Load(std::move(file), backend, ExpertTierOptions{});
}

absl::StatusOr<std::unique_ptr<Qwen35Model>> Qwen35Model::Load(
    std::unique_ptr<common::GgufFile> file, kernels::Backend& backend,
    const ExpertTierOptions& tiers) {
  std::unique_ptr<Qwen35Model> m(new Qwen35Model());
  m->file_ = std::move(file);
  absl::StatusOr<common::Qwen35HParams> hp = common::ReadQwen35HParams(*m->file_);
  if (!hp.ok()) return hp.status();
  m->hp_ = std::move(*hp);
  m->backend_ = &backend;
  // Two tiers only where the experts would otherwise be copied into a device that cannot hold
  // them all: on host memory every expert is already where the CPU computes it.
  common::ExpertSlotClasses slots;
  bool tiered = false;
  absl::StatusOr<ExpertSlotLayout> layout = absl::NotFoundError("a dense model");
  if (m->hp_.is_moe) {
    layout = ExpertSlotLayoutOf(*m->file_, m->hp_);
    if (layout.ok()) {
      slots = layout->SlotsFor(tiers.device_bytes);
      tiered = !backend.host_memory() && slots.total_slots() < layout->n_experts();
    }
  }
  absl::StatusOr<ModelWeights> w = LoadQwen35Weights(*m->file_, m->hp_, backend, !tiered);
  if (!w.ok()) return w.status();  // names a bad tensor better than the layout would
  if (m->hp_.is_moe) {
    if (!layout.ok()) return layout.status();
    m->expert_layout_ = std::move(*layout);
  }
  m->weights_ = std::move(*w);
  if (tiered) {
    if (absl::Status s = m->MakeExpertTiers(slots, tiers); !s.ok()) return s;
  }
  int dn = 0, at = 0;
  for (common::LayerKind kind : m->hp_.layers) {
    const bool is_dn = kind == common::LayerKind::kDeltaNet;
    m->deltanet_index_.push_back(is_dn ? dn++ : -1);
    m->attention_index_.push_back(is_dn ? -1 : at++);
  }
  m->counters_ =
      std::make_unique<ForwardCounters>(m->hp_.n_layer, m->hp_.is_moe ? m->hp_.n_expert : 0);
  // Models sharing a backend keep their step graphs apart by this salt in their keys.
  static std::atomic<uint64_t> next_model{1};
  m->graph_salt_ = 0xcbf29ce484222325ull ^ (next_model.fetch_add(1) * 0x9e3779b97f4a7c15ull);
  return m;
}

void Qwen35Model::Prefetch(const std::function<void(double)>& progress) const {
  // Touch one byte per page of every tensor, in file order; the kernel reads ahead around it.
  constexpr uint64_t kStep = 64ull << 20;
  constexpr uint64_t kPage = 4096;
  const uint64_t total = std::max<uint64_t>(weights_.bytes, 1);
  uint64_t done = 0, next_report = 0;
  volatile uint8_t sink = 0;
  for (const common::GgufTensorInfo& t : file_->tensors()) {
    const absl::Span<const uint8_t> bytes = file_->TensorData(t);
    for (uint64_t i = 0; i < bytes.size(); i += kPage) sink = sink + bytes[i];
    done += bytes.size();
    if (done >= next_report) {
      progress(std::min(1.0, static_cast<double>(done) / total));
      next_report = done + kStep;
    }
  }
  progress(1.0);
}

KvCacheShape Qwen35Model::kv_shape() const {
  KvCacheShape shape;
  shape.n_layers = static_cast<int>(hp_.LayersOf(common::LayerKind::kFullAttention).size());
  shape.kv_dim = hp_.n_head_kv * hp_.head_dim;
  shape.head_dim = hp_.head_dim;
  return shape;
}

RecurrentStateLayout Qwen35Model::state_layout() const {
  RecurrentStateLayout layout;
  layout.n_layers = static_cast<int>(hp_.LayersOf(common::LayerKind::kDeltaNet).size());
  layout.conv_floats = (hp_.ssm_conv_kernel - 1) * hp_.ssm_conv_channels();
  layout.delta_floats = hp_.ssm_n_v_heads * hp_.ssm_head_dim * hp_.ssm_head_dim;
  return layout;
}

ModelMemory Qwen35Model::Memory(const KvCacheOptions& kv) const {
  ModelMemory mem;
  mem.weight_bytes = weights_.bytes + (tiers_ != nullptr ? tiers_->arena_bytes() : 0);
  mem.state_bytes_per_sequence = state_layout().bytes();
  mem.kv_bytes_per_token = KvBytesPerToken(kv_shape(), kv.k_type, kv.v_type);
  if (expert_layout_.has_value()) {
    mem.routed_expert_bytes = expert_layout_->routed_bytes;
    mem.expert_bytes_per_layer = expert_layout_->expert_bytes;
    mem.expert_slot_bytes = expert_layout_->slot_bytes;
  }
  if (tiers_ != nullptr) {
    mem.expert_slots = tiers_->n_slots();
    mem.host_expert_bytes = expert_layout_->routed_bytes;
  }
  return mem;
}

absl::StatusOr<std::unique_ptr<SequenceState>> Qwen35Model::NewSequence(int64_t max_tokens,
                                                                        const KvCacheOptions& kv) {
  if (max_tokens <= 0) return absl::InvalidArgumentError("max_tokens must be positive");
  KvCacheOptions options = kv;
  // A short private sequence does not need a full page of the default size.
  options.page_tokens = std::min(options.page_tokens, max_tokens);
  const int64_t pages = (max_tokens + options.page_tokens - 1) / options.page_tokens;
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache =
      PagedKvCache::Create(*backend_, kv_shape(), options, pages);
  if (!cache.ok()) return cache.status();
  absl::StatusOr<std::shared_ptr<RecurrentStateSlots>> slots =
      RecurrentStateSlots::Create(*backend_, state_layout(), 1);
  if (!slots.ok()) return slots.status();
  return NewSequence(std::shared_ptr<PagedKvCache>(std::move(*cache)), std::move(*slots),
                     max_tokens);
}

absl::StatusOr<std::unique_ptr<SequenceState>> Qwen35Model::NewSequence(
    std::shared_ptr<PagedKvCache> cache, std::shared_ptr<RecurrentStateSlots> slots,
    int64_t capacity) {
  if (capacity <= 0) return absl::InvalidArgumentError("capacity must be positive");
  const KvCacheShape want = kv_shape();
  const KvCacheShape& have = cache->shape();
  if (have.n_layers != want.n_layers || have.kv_dim != want.kv_dim ||
      have.head_dim != want.head_dim) {
    return absl::InvalidArgumentError("the KV cache was made for another model shape");
  }
  const RecurrentStateLayout& layout = slots->layout();
  const RecurrentStateLayout want_layout = state_layout();
  if (layout.n_layers != want_layout.n_layers || layout.conv_floats != want_layout.conv_floats ||
      layout.delta_floats != want_layout.delta_floats) {
    return absl::InvalidArgumentError("the state slots were made for another model shape");
  }
  absl::StatusOr<std::unique_ptr<RecurrentSlot>> slot = RecurrentSlot::Acquire(std::move(slots));
  if (!slot.ok()) return slot.status();
  auto seq = std::make_unique<SequenceState>();
  seq->state = std::move(*slot);
  seq->kv = std::make_unique<PagedSequenceKv>(std::move(cache), capacity);
  return seq;
}

absl::Status Qwen35Model::ReserveWorkspace(int64_t tokens, int64_t out_rows) {
  if (tokens <= ws_tokens_ && out_rows <= ws_out_rows_) return absl::OkStatus();
  tokens = std::max(tokens, ws_tokens_);
  out_rows = std::max(out_rows, ws_out_rows_);
  // Everything is freed before the new buffers are taken, so the workspace never holds more
  // than the planned bytes, even while it grows.
  ws_buffers_.clear();
  ids_buf_ = {};
  pos_buf_ = {};
  route_ids_buf_ = {};
  ws_tokens_ = ws_out_rows_ = 0;  // until every buffer is back (a failure leaves no stale views)
  // Every buffer comes from Qwen35WorkspaceBuffers, the list the memory planner counts, so the
  // plan and this allocation cannot disagree; each name must have exactly one destination here.
  const std::pair<std::string_view, Mat*> views[] = {
      {"x", &ws_.x},
      {"xn", &ws_.xn},
      {"mix", &ws_.mix},
      {"qkv", &ws_.qkv},
      {"z", &ws_.z},
      {"alpha", &ws_.alpha},
      {"beta", &ws_.beta},
      {"o", &ws_.o},
      {"qg", &ws_.qg},
      {"k", &ws_.k},
      {"v", &ws_.v},
      {"qc", &ws_.qc},
      {"ao", &ws_.ao},
      {"ff_gate", &ws_.ff_gate},
      {"ff_up", &ws_.ff_up},
      {"router", &ws_.router},
      {"route_w", &ws_.route_w},
      {"shared_g", &ws_.shared_g},
      {"shared_out", &ws_.shared_out},
      {"out_x", &ws_.out_x},
      {"logits", &ws_.logits},
  };
  const std::pair<std::string_view, kernels::DeviceBuffer*> int_buffers[] = {
      {"ids", &ids_buf_}, {"pos", &pos_buf_}, {"route_ids", &route_ids_buf_}};
  size_t n_views = 0, n_int = 0;
  for (const WorkspaceBuffer& b : Qwen35WorkspaceBuffers(hp_, tokens, out_rows)) {
    kernels::DeviceBuffer buf = backend_->Allocate(static_cast<size_t>(b.bytes()));
    if (buf.data() == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no memory for the forward pass workspace (buffer '", common::Sv(b.name),
                       "', ", b.bytes(), " bytes)"));
    }
    bool placed = false;
    if (b.element == WorkspaceElement::kF32) {
      for (const auto& [name, view] : views) {
        if (name != b.name) continue;
        *view = Contiguous(buf, b.rows, b.cols);
        ws_buffers_.push_back(std::move(buf));
        placed = true;
        ++n_views;
        break;
      }
    } else {
      for (const auto& [name, dst] : int_buffers) {
        if (name != b.name) continue;
        *dst = std::move(buf);
        placed = true;
        ++n_int;
        break;
      }
    }
    if (!placed) {
      return absl::InternalError(
          absl::StrCat("workspace buffer '", common::Sv(b.name), "' has no view in the engine"));
    }
  }
  if (n_views != std::size(views) || n_int != std::size(int_buffers)) {
    return absl::InternalError("the workspace buffer list does not cover every engine view");
  }
  ws_tokens_ = tokens;
  ws_out_rows_ = out_rows;
  return absl::OkStatus();
}

absl::Status Qwen35Model::Forward(absl::Span<const BatchEntry> batch, std::vector<float>& logits) {
  int64_t total = 0, out_rows = 0;
  std::vector<int32_t> ids, positions;
  for (const BatchEntry& e : batch) {
    if (e.sequence == nullptr || e.tokens.empty()) {
      return absl::InvalidArgumentError("a batch entry has no sequence or no tokens");
    }
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (e.sequence->kv == nullptr || e.sequence->state == nullptr) {
      return absl::InvalidArgumentError("a batch entry's sequence has no cache or state");
    }
    if (e.sequence->n_past + n > e.sequence->kv->capacity()) {
      return absl::OutOfRangeError(absl::StrCat("sequence would hold ", e.sequence->n_past + n,
                                                " tokens; its capacity is ",
                                                e.sequence->kv->capacity()));
    }
    int64_t tapped = 0;
    for (const StateTap& tap : e.taps) {
      if (tap.after <= tapped || tap.after >= n || tap.host == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a state tap after ", tap.after, " of ", n,
            " tokens (taps must be inside the entry, ascending, with a host buffer)"));
      }
      tapped = tap.after;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = e.tokens[i];
      if (id < 0 || id >= hp_.n_vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " outside the vocabulary (", hp_.n_vocab, ")"));
      }
      ids.push_back(id);
      positions.push_back(static_cast<int32_t>(e.sequence->n_past + i));
    }
    total += n;
    out_rows += e.LogitsRows();
  }
  if (total == 0) return absl::InvalidArgumentError("empty batch");
  if (auto s = ReserveWorkspace(total, std::max<int64_t>(out_rows, 1)); !s.ok()) return s;
  // KV pages for the new positions (copy-on-write where shared), before anything is computed,
  // and every page table in backend memory for the attention kernel.
  std::vector<int32_t> tables;
  page_table_offset_.clear();
  for (const BatchEntry& e : batch) {
    SequenceKv& kv = *e.sequence->kv;
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (auto s = kv.Prepare(e.sequence->n_past, e.sequence->n_past + n); !s.ok()) return s;
    page_table_offset_.push_back(static_cast<int64_t>(tables.size()));
    tables.insert(tables.end(), kv.pages().begin(), kv.pages().end());
  }
  if (static_cast<int64_t>(tables.size()) > page_table_capacity_) {
    page_table_capacity_ =
        std::max<int64_t>(static_cast<int64_t>(tables.size()), 2 * page_table_capacity_);
    page_table_buf_ = backend_->Allocate(page_table_capacity_ * sizeof(int32_t));
    if (page_table_buf_.data() == nullptr) {
      page_table_capacity_ = 0;
      return absl::ResourceExhaustedError("no memory for the page tables");
    }
  }
  DS_RUN(CopyToDevice, page_table_buf_.data(), tables.data(), tables.size() * sizeof(int32_t));
  if (auto s = PrepareDeltaNetStep(batch); !s.ok()) return s;
  n_tokens_ = total;
  // Views sized to this pass (the buffers hold ws_tokens_ rows).
  for (Mat* m : {&ws_.x, &ws_.xn, &ws_.mix, &ws_.qkv, &ws_.z, &ws_.alpha, &ws_.beta, &ws_.o,
                 &ws_.qg, &ws_.k, &ws_.v, &ws_.qc, &ws_.ao, &ws_.ff_gate, &ws_.ff_up, &ws_.router,
                 &ws_.route_w, &ws_.shared_g, &ws_.shared_out}) {
    m->rows = total;
  }
  ws_.out_x.rows = out_rows;
  ws_.logits.rows = out_rows;

  DS_RUN(CopyToDevice, ids_buf_.data(), ids.data(), ids.size() * sizeof(int32_t));
  DS_RUN(CopyToDevice, pos_buf_.data(), positions.data(), positions.size() * sizeof(int32_t));

  // Every input is in backend memory now: the ops may run as a step graph.
  const std::optional<uint64_t> graph_key = StepGraphKey(batch);
  absl::Status status =
      graph_key.has_value() ? RunOpsAsGraph(batch, out_rows, *graph_key) : RunOps(batch, out_rows);
  if (status.ok()) {
    logits.resize(static_cast<size_t>(out_rows * hp_.n_vocab));
    if (out_rows > 0) {
      DS_RUN(CopyToHost, logits.data(), ws_.logits.data, logits.size() * sizeof(float));
    }
    if (hp_.is_moe) {
      // Which experts this pass's tokens went to, per layer, for placement (docs/metrics.md):
      // every layer's T x k ids in one copy (a memcpy on the CPU backend).
      const int64_t k = hp_.n_expert_used, per_layer = total * k;
      route_ids_host_.resize(static_cast<size_t>(hp_.n_layer * per_layer));
      DS_RUN(CopyToHost, route_ids_host_.data(), route_ids_buf_.data(),
             route_ids_host_.size() * sizeof(int32_t));
      for (int64_t layer = 0; layer < hp_.n_layer; ++layer) {
        counters_->CountRoutes(layer, route_ids_host_.data() + layer * per_layer, per_layer);
      }
      if (routing_observer_) routing_observer_(route_ids_host_, total, k);
    }
    for (const BatchEntry& e : batch) e.sequence->n_past += static_cast<int64_t>(e.tokens.size());
    int64_t prefill = 0, decode = 0;
    for (const BatchEntry& e : batch) {
      const int64_t n = static_cast<int64_t>(e.tokens.size());
      (e.LogitsRows() == n && !e.all_logits ? decode : prefill) += n;
    }
    counters_->CountPass(static_cast<int64_t>(batch.size()), prefill, decode);
  }
  return status;
}

absl::Status Qwen35Model::RunOps(absl::Span<const BatchEntry> batch, int64_t out_rows) {
  DS_RUN(GetRows, weights_.token_embd, static_cast<const int32_t*>(ids_buf_.data()), n_tokens_,
         ws_.x);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    const LayerWeights& l = weights_.layers[i];
    DS_RUN(RmsNorm, ws_.x, l.attn_norm, static_cast<float>(hp_.rms_eps), ws_.xn);
    absl::Status status = l.kind == common::LayerKind::kDeltaNet
                              ? RunDeltaNet(l, deltanet_index_[i], batch)
                              : RunAttention(l, attention_index_[i], batch);
    if (!status.ok()) return status;
    DS_RUN(Add, ws_.x, ws_.mix);
    DS_RUN(RmsNorm, ws_.x, l.post_norm, static_cast<float>(hp_.rms_eps), ws_.xn);
    layer_ = static_cast<int64_t>(i);
    if (status = RunFfn(l); !status.ok()) return status;
    DS_RUN(Add, ws_.x, ws_.mix);
  }
  // Gather the rows that want logits, then final norm and head on those rows only.
  int64_t row = 0, out = 0;
  for (const BatchEntry& e : batch) {
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    const int64_t count = e.LogitsRows();
    const int64_t first = row + n - count;
    if (count == 0) {
      row += n;
      continue;
    }
    Mat dst = ws_.out_x.Rows(out, count);
    DS_RUN(Copy, ws_.x.Rows(first, count), dst);
    row += n;
    out += count;
  }
  if (out_rows > 0) {
    DS_RUN(RmsNorm, ws_.out_x, weights_.output_norm, static_cast<float>(hp_.rms_eps), ws_.out_x);
    DS_RUN(MatMul, weights_.output, ws_.out_x, ws_.logits);
  }
  return absl::OkStatus();
}

std::optional<uint64_t> Qwen35Model::StepGraphKey(absl::Span<const BatchEntry> batch) const {
  if (!step_graphs_ || !backend_->SupportsStepCapture()) return std::nullopt;
  // Expert tiers copy each MoE layer's routes to the host and the host experts' output back in
  // the middle of the pass, and compute on the host: nothing a graph can record.
  if (tiers_ != nullptr) return std::nullopt;
  // Why one key per (model, B, T_1..T_B) keeps a graph's op sequence fixed: RunOps calls the
  // batched ops (projections, norms, FFN/MoE, head) over sum T_b rows and the per-sequence ops
  // (conv, delta rule, KV store, attention) once per entry over T_b rows, in batch order, and
  // gathers T_b logits rows per entry (a decode pass asks for all of them). So the ops, their
  // order and shapes are a function of the key; only pointers (which sequence's state and
  // pages) and n_past change from step to step, which a graph takes as an update. A launcher
  // may still choose another kernel sequence from n_past (attention splitting a longer
  // context): the backend then rebuilds that key's graph (kernels/cuda/README.md).
  uint64_t key = graph_salt_;
  auto mix = [&key](uint64_t v) {  // FNV-1a over 8-byte words
    key = (key ^ v) * 0x100000001b3ull;
  };
  mix(batch.size());
  for (const BatchEntry& e : batch) {
    const int64_t n = static_cast<int64_t>(e.tokens.size());
    if (n > kMaxGraphEntryTokens || e.LogitsRows() != n || !e.taps.empty()) {
      return std::nullopt;  // prefill (a tap copies to the host mid-pass: not in a graph)
    }
    mix(static_cast<uint64_t>(n));
  }
  if (failed_graph_keys_.count(key) != 0) return std::nullopt;
  if (graph_keys_.count(key) == 0 && graph_keys_.size() >= kMaxStepGraphs) return std::nullopt;
  return key;
}

absl::Status Qwen35Model::RunOpsAsGraph(absl::Span<const BatchEntry> batch, int64_t out_rows,
                                        uint64_t key) {
  const kernels::Backend::StepGraphStats before = backend_->step_graph_stats();
  absl::Status status = CheckKernel(backend_->BeginStepCapture(), "BeginStepCapture");
  if (status.ok()) {
    status = RunOps(batch, out_rows);
    if (status.ok()) {
      status = CheckKernel(backend_->EndStepCapture(key), "EndStepCapture");
    } else {
      backend_->AbortStepCapture();
    }
  }
  if (!status.ok()) {
    // Nothing recorded ran: the step runs again without a graph (a degraded mode: counted in
    // deltaserve_model_graph_capture_fallbacks_total, logged once per model).
    failed_graph_keys_.insert(key);
    graph_keys_.erase(key);
    counters_->CountGraphFallback();
    if (!capture_failure_logged_) {
      capture_failure_logged_ = true;
      std::fprintf(stderr,
                   "deltaserve engine: capturing a decode step of %zu sequence(s) as a graph on "
                   "%s failed (%s); such steps run without a graph from now on\n",
                   batch.size(), std::string(backend_->name()).c_str(),
                   std::string(status.message()).c_str());
    }
    return RunOps(batch, out_rows);
  }
  graph_keys_.insert(key);
  DS_RUN(LaunchStepGraph, key);
  counters_->CountGraphLaunch(backend_->step_graph_stats().instantiated > before.instantiated);
  return absl::OkStatus();
}

absl::Status Qwen35Model::RunAttention(const LayerWeights& l, int attn_index,
                                       absl::Span<const BatchEntry> batch) {
  const AttentionWeights& w = l.attention;
  const int64_t h = hp_.n_head, hk = hp_.n_head_kv, hd = hp_.head_dim, t = n_tokens_;
  const float eps = static_cast<float>(hp_.rms_eps);
  const auto* positions = static_cast<const int32_t*>(pos_buf_.data());
  {
    const kernels::WeightView group_w[] = {w.q, w.k, w.v};
    Mat group_y[] = {ws_.qg, ws_.k, ws_.v};
    DS_RUN(MatMulGroup, group_w, 3, ws_.xn, group_y);
  }
  // attn_q rows are per head [query (hd) | gate (hd)]: strided views, one row per (token, head).
  Mat query{ws_.qg.data, t * h, hd, 2 * hd};
  Mat gate{ws_.qg.data + hd, t * h, hd, 2 * hd};
  Mat key = ws_.k.Reshaped(hd);
  DS_RUN(RmsNorm, query, w.q_norm, eps, query);
  DS_RUN(RmsNorm, key, w.k_norm, eps, key);
  const float base = static_cast<float>(hp_.rope_freq_base);
  DS_RUN(RopeNeox, query, positions, h, hp_.n_rot, base);
  DS_RUN(RopeNeox, key, positions, hk, hp_.n_rot, base);
  Mat qc = ws_.qc.Reshaped(hd);
  DS_RUN(Copy, query, qc);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const auto* tables = static_cast<const int32_t*>(page_table_buf_.data());
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t n = static_cast<int64_t>(batch[i].tokens.size());
    SequenceState& seq = *batch[i].sequence;
    const kernels::PagedKvView view = seq.kv->View(attn_index, tables + page_table_offset_[i]);
    DS_RUN(StoreKv, ws_.k.Rows(row, n), ws_.v.Rows(row, n), view, seq.n_past);
    Mat out = ws_.ao.Rows(row, n);
    DS_RUN(PagedAttention, ws_.qc.Rows(row, n), view, seq.n_past, h, hk, scale, out);
    row += n;
  }
  Mat ao_heads = ws_.ao.Reshaped(hd);
  DS_RUN(MulSigmoid, ao_heads, gate);
  DS_RUN(MatMul, w.out, ws_.ao, ws_.mix);
  return absl::OkStatus();
}

}  // namespace deltaserve::worker
