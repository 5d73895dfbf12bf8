#include "worker/service/model_info.h"

#include <string>

#include "absl/strings/str_format.h"

namespace deltaserve::worker {
namespace {

// Snapshot keys a load report carries at most (proto ModelLoad.snapshot_key_prefixes): 8 KiB.
constexpr size_t kMaxReportedSnapshotKeys = 1024;

namespace pb = ::deltaserve::v1;

}  // namespace

void DescribeModel(const std::string& name, ServedModel& model, bool with_tokenizer,
                   pb::ModelInfo& info) {
  const common::GgufFile& file = model.model().file();
  const common::Qwen35HParams& hp = model.model().hparams();
  info.set_name(name);
  info.set_architecture(hp.is_moe ? "qwen35moe" : "qwen35");
  info.set_context_length(static_cast<int32_t>(model.options().ctx));
  info.set_n_ctx_train(static_cast<int32_t>(hp.n_ctx_train));
  info.set_n_vocab(static_cast<int32_t>(hp.n_vocab));
  info.set_max_parallel_sequences(model.options().n_parallel);
  if (absl::StatusOr<std::string_view> t = file.GetString("tokenizer.chat_template"); t.ok()) {
    info.set_chat_template(std::string(*t));
  }
  // Digest of the vocabulary and merges (FNV-1a 64): the router re-fetches on change only.
  uint64_t digest = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) digest = (digest ^ c) * 1099511628211ull;
    digest = (digest ^ 0xFF) * 1099511628211ull;
  };
  const common::Tokenizer& tok = model.tokenizer();
  pb::Tokenizer* t = with_tokenizer ? info.mutable_tokenizer() : nullptr;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    mix(tok.TokenText(id));
    if (t != nullptr) {
      t->add_tokens(std::string(tok.TokenText(id)));
      t->add_token_types(static_cast<pb::TokenType>(static_cast<int>(tok.Type(id))));
    }
  }
  if (const common::GgufValue* merges = file.Find("tokenizer.ggml.merges")) {
    for (uint64_t i = 0; i < merges->ArraySize(); ++i) {
      const std::optional<std::string_view> m = merges->ArrayString(i);
      if (!m) continue;
      mix(*m);
      if (t != nullptr) t->add_merges(std::string(*m));
    }
  }
  info.set_tokenizer_digest(absl::StrFormat("%016x", digest));
  if (t != nullptr) {
    if (absl::StatusOr<std::string_view> m = file.GetString("tokenizer.ggml.model"); m.ok()) {
      t->set_model(std::string(*m));
    }
    if (absl::StatusOr<std::string_view> p = file.GetString("tokenizer.ggml.pre"); p.ok()) {
      t->set_pre(std::string(*p));
    }
    pb::SpecialTokens* sp = t->mutable_special();
    if (tok.bos_id() >= 0) sp->set_bos_id(tok.bos_id());
    if (tok.eos_id() >= 0) sp->set_eos_id(tok.eos_id());
    if (tok.pad_id() >= 0) sp->set_pad_id(tok.pad_id());
    for (int32_t id : model.eos_token_ids()) sp->add_eog_ids(id);
  }
  const MemoryPlan& plan = model.plan();
  pb::MemoryPlan* mp = info.mutable_memory_plan();
  mp->set_text(RenderMemoryPlan(plan));
  mp->set_budget_bytes(plan.inputs.budget_bytes);
  mp->set_weight_bytes(plan.weight_bytes);
  mp->set_workspace_bytes(plan.workspace_bytes);
  mp->set_kernel_scratch_bytes(plan.kernel_scratch_bytes);
  mp->set_fixed_overhead_bytes(plan.inputs.fixed_overhead_bytes);
  mp->set_k_type(std::string(KvCacheTypeName(model.options().k_type)));
  mp->set_v_type(std::string(KvCacheTypeName(model.options().v_type)));
  mp->set_kv_bytes_per_token(plan.kv.bytes);
  mp->set_page_tokens(static_cast<int32_t>(plan.inputs.page_tokens));
  mp->set_page_bytes(plan.page_bytes);
  mp->set_n_attention_layers(static_cast<int32_t>(plan.n_attention_layers));
  mp->set_n_deltanet_layers(static_cast<int32_t>(plan.recurrent.n_deltanet_layers));
  mp->set_recurrent_bytes_per_sequence(plan.recurrent.total());
  if (const ExpertSplit& e = plan.inputs.experts; e.applies) {
    mp->set_experts_split_planned(true);
    mp->set_expert_routed_bytes(e.routed_bytes);
    mp->set_expert_device_bytes(e.device_bytes());
    mp->set_n_experts(e.n_experts());
    mp->set_n_device_experts(e.device_experts());
    mp->set_expert_slot_bytes(e.slot_bytes);
    mp->set_expert_vram_auto(e.auto_sized);
  }
  for (const ContextFit& c : plan.contexts) {
    pb::ContextFit* cf = mp->add_contexts();
    cf->set_n_parallel(c.n_parallel);
    cf->set_max_context(c.max_context);
    cf->set_pages(c.pages);
    cf->set_capped_by_training(c.capped);
  }
  const SchedulerStats s = model.scheduler().stats();
  pb::ModelLoad* load = info.mutable_load();
  load->set_running_sequences(static_cast<int32_t>(s.running));
  load->set_waiting_sequences(static_cast<int32_t>(s.waiting));
  load->set_free_kv_pages(s.free_pages);  // pages held only by RAM snapshots count as free
  load->set_total_kv_pages(model.kv_cache().total_pages());
  load->set_free_state_slots(model.state_slots().free_slots());
  load->set_total_state_slots(model.state_slots().total_slots());
  if (model.snapshots().enabled()) {
    const common::SnapshotKey& root = model.snapshots().root();
    info.set_snapshot_key_root(std::string(root.bytes.begin(), root.bytes.end()));
    for (uint64_t prefix : model.snapshots().KeyPrefixes(kMaxReportedSnapshotKeys)) {
      load->add_snapshot_key_prefixes(prefix);
    }
  }
}

}  // namespace deltaserve::worker
