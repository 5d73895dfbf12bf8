// Unit tests of the deltaserve.v1 messages (proto/deltaserve/v1/worker.proto): every message
// survives a binary round trip with every field set, the field numbers the README freezes are
// still the numbers in the schema, and the evolution rules of proto/README.md (unknown fields
// kept, unknown enum values kept, unknown oneof cases seen as unset, optional presence) hold for
// the protobuf runtime we build against.
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "deltaserve/v1/worker.pb.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/unknown_field_set.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/wire_format_lite.h"
#include "gtest/gtest.h"

namespace deltaserve::proto_test {
namespace {

namespace pb = ::google::protobuf;
namespace v1 = ::deltaserve::v1;

// Parses `text` (text format) into a T, failing the test on a syntax error.
template <typename T>
T FromText(std::string_view text) {
  T message;
  EXPECT_TRUE(pb::TextFormat::ParseFromString(std::string(text), &message)) << text;
  return message;
}

// Serializes and parses back into a fresh message of the same type.
template <typename T>
T RoundTrip(const T& message) {
  std::string wire;
  EXPECT_TRUE(message.SerializeToString(&wire));
  T back;
  EXPECT_TRUE(back.ParseFromString(wire));
  return back;
}

// Appends to `missing` the path of every field of `message` (recursively) that is not set: a
// sample that covers the whole schema leaves it empty, so a new field added to the .proto
// without a value here fails the test and gets round-trip coverage. Members of a oneof are
// skipped; the oneof itself must have a case set.
void CollectUnsetFields(const pb::Message& message, const std::string& prefix,
                        std::vector<std::string>& missing) {
  const pb::Descriptor* descriptor = message.GetDescriptor();
  const pb::Reflection* reflection = message.GetReflection();
  // Real oneofs come first; the synthetic ones of proto3 `optional` fields follow them.
  for (int i = 0; i < descriptor->real_oneof_decl_count(); ++i) {
    const pb::OneofDescriptor* oneof = descriptor->oneof_decl(i);
    const pb::FieldDescriptor* set = reflection->GetOneofFieldDescriptor(message, oneof);
    if (set == nullptr) {
      missing.push_back(prefix + oneof->name());
    } else if (set->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectUnsetFields(reflection->GetMessage(message, set), prefix + set->name() + ".", missing);
    }
  }
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    if (field->real_containing_oneof() != nullptr) continue;
    const std::string path = prefix + field->name();
    if (field->is_repeated()) {
      if (reflection->FieldSize(message, field) == 0) {
        missing.push_back(path);
      } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && !field->is_map()) {
        CollectUnsetFields(reflection->GetRepeatedMessage(message, field, 0), path + "[0].",
                           missing);
      }
      continue;
    }
    if (!reflection->HasField(message, field)) {
      missing.push_back(path);
    } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      CollectUnsetFields(reflection->GetMessage(message, field), path + ".", missing);
    }
  }
}

std::vector<std::string> UnsetFields(const pb::Message& message) {
  std::vector<std::string> missing;
  CollectUnsetFields(message, "", missing);
  return missing;
}

// Checks that `message` sets every field and survives a round trip unchanged.
template <typename T>
void ExpectFullRoundTrip(const T& message) {
  EXPECT_EQ(UnsetFields(message), std::vector<std::string>{})
      << T::descriptor()->full_name() << ": give these fields a non-default value";
  const T back = RoundTrip(message);
  std::string diff;
  pb::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(message, back)) << diff;
}

constexpr std::string_view kGenerateRequest = R"pb(
  request_id: "chatcmpl-42"
  model: "qwen3.5-4b"
  prompt_token_ids: [ 151644, 872, 198, 9707, 151645 ]
  sampling {
    temperature: 0.7
    top_k: 20
    top_p: 0.8
    min_p: 0.05
    presence_penalty: 1.5
    frequency_penalty: -0.5
    repetition_penalty: 1.1
    repetition_last_n: 64
    logit_bias { key: 151645 value: -100 }
    logit_bias { key: 9707 value: 2.5 }
    seed: 18446744073709551615
    max_tokens: 256
    stop_token_ids: [ 151643 ]
    stop_strings: [ "</answer>", "\n\nUser:" ]
    ignore_eos: true
    logprobs: true
    top_logprobs: 5
  }
  session_id: "conv-7f3a"
  priority: -2
  message_boundaries: [ 12, 40, 97 ]
  turn_end_token_ids: [ 151645, 198 ]
  reasoning_budget: 512
  output_constraint {
    tool_call {
      functions { name: "get_weather" parameters_schema: "{\"type\":\"object\"}" }
      format: TOOL_CALL_FORMAT_QWEN_XML
      parallel: true
    }
    after_reasoning: true
    reasoning_may_open: true
    or_tool_call {
      functions { name: "ping" parameters_schema: "{}" }
      format: TOOL_CALL_FORMAT_JSON
      parallel: true
    }
  }
  n: 4
)pb";

constexpr std::string_view kTokenEvent = R"pb(
  token_event {
    token_ids: [ 9707, 1879 ]
    text: "Hello wörld ✓"
    logprobs {
      chosen { token_id: 9707 logprob: -0.25 }
      top { token_id: 9707 logprob: -0.25 }
      top { token_id: 13048 logprob: -1.75 }
    }
    logprobs {
      chosen { token_id: 1879 logprob: -0.5 }
      top { token_id: 1879 logprob: -0.5 }
    }
    choice_index: 3
  }
)pb";

constexpr std::string_view kFinalEvent = R"pb(
  final_event {
    finish_reason: FINISH_REASON_STOP
    message: "stop string matched"
    usage { prompt_tokens: 1200 cached_prompt_tokens: 1024 completion_tokens: 37 reasoning_tokens: 21 }
    timings { queue_ms: 0.5 prefill_ms: 12.25 decode_ms: 310.0 time_to_first_token_ms: 21.0 }
    seed: 1234
    choice_index: 2
    matched_stop_token_id: 151645
    matched_stop_string: "</answer>"
  }
)pb";

constexpr std::string_view kWorkerInfo = R"pb(
  worker_id: "worker-a:50051"
  device: "cuda:0"
  device_description: "NVIDIA H100 80GB HBM3, 79.1 GiB"
  build_version: "0.1.0 (bcd5e9a)"
  draining: true
  models {
    name: "qwen3.5-4b"
    architecture: "qwen35"
    context_length: 65536
    n_ctx_train: 262144
    n_vocab: 151936
    max_parallel_sequences: 16
    tokenizer {
      model: "gpt2"
      pre: "qwen35"
      tokens: [ "!", "\"", "Ġworld", "<|im_start|>", "<|im_end|>", "\xc4" ]
      token_types: [
        TOKEN_TYPE_NORMAL,
        TOKEN_TYPE_NORMAL,
        TOKEN_TYPE_NORMAL,
        TOKEN_TYPE_CONTROL,
        TOKEN_TYPE_CONTROL,
        TOKEN_TYPE_BYTE
      ]
      merges: [ "Ġ w", "Ġw orld" ]
      special {
        bos_id: 3
        eos_id: 4
        eot_id: 4
        pad_id: 5
        unk_id: 0
        eog_ids: [ 4 ]
        add_bos: true
      }
    }
    tokenizer_digest: "sha256:0f1e2d"
    chat_template: "{%- for message in messages %}<|im_start|>{{ message.role }}\n{%- endfor %}"
    memory_plan {
      text: "weights 2.50 GiB ..."
      budget_bytes: 85899345920
      weight_bytes: 2684354560
      workspace_bytes: 134217728
      kernel_scratch_bytes: 1048576
      fixed_overhead_bytes: 536870912
      k_type: "f16"
      v_type: "q8_0"
      kv_bytes_per_token: 27648
      page_tokens: 256
      page_bytes: 7077888
      n_attention_layers: 8
      n_deltanet_layers: 24
      recurrent_bytes_per_sequence: 25165824
      contexts { n_parallel: 1 max_context: 262144 pages: 11000 capped_by_training: true }
      contexts { n_parallel: 64 max_context: 40960 pages: 10240 capped_by_training: false }
      experts_split_planned: true
      expert_routed_bytes: 19327352832
      expert_device_bytes: 5368709120
      n_experts: 10240
      n_device_experts: 2560
      expert_slot_bytes: 2097152
      expert_vram_auto: true
    }
    load {
      running_sequences: 3
      waiting_sequences: 1
      free_kv_pages: 9000
      total_kv_pages: 11000
      free_state_slots: 13
      total_state_slots: 16
      snapshot_key_prefixes: [ 1311768467463790320, 18364758544493064720 ]
    }
    snapshot_key_root: "0123456789abcdef"
  }
)pb";

TEST(WorkerProtoRoundTrip, GenerateRequestWithEveryField) {
  const auto request = FromText<v1::GenerateRequest>(kGenerateRequest);
  ExpectFullRoundTrip(request);
  const v1::GenerateRequest back = RoundTrip(request);
  EXPECT_EQ(back.prompt_token_ids_size(), 5);
  EXPECT_EQ(back.prompt_token_ids(3), 9707);
  EXPECT_EQ(back.sampling().seed(), 18446744073709551615ull);  // full uint64 range
  EXPECT_FLOAT_EQ(back.sampling().logit_bias().at(151645), -100.0f);
  EXPECT_EQ(back.sampling().stop_strings(1), "\n\nUser:");
  EXPECT_EQ(back.priority(), -2);
}

// The other kinds of output constraint (a oneof: the request above carries tool_call).
TEST(WorkerProtoRoundTrip, OutputConstraintKinds) {
  // Every field but the kind, which each case below sets.
  constexpr std::string_view kRest = R"pb(
    after_reasoning: true
    reasoning_may_open: true
    or_tool_call {
      functions { name: "f" parameters_schema: "{}" }
      format: TOOL_CALL_FORMAT_JSON
      parallel: true
    }
  )pb";
  for (std::string_view kind : {
           R"pb(json_schema { schema: "{\"type\":\"boolean\"}" strict: true })pb",
           R"pb(json_object {})pb",
           R"pb(regex: "[a-z]+")pb",
       }) {
    ExpectFullRoundTrip(FromText<v1::OutputConstraint>(std::string(kind) + std::string(kRest)));
  }
}

TEST(WorkerProtoRoundTrip, TokenEventWithLogprobs) {
  const auto event = FromText<v1::GenerateEvent>(kTokenEvent);
  ExpectFullRoundTrip(event);
  const v1::GenerateEvent back = RoundTrip(event);
  ASSERT_EQ(back.event_case(), v1::GenerateEvent::kTokenEvent);
  EXPECT_EQ(back.token_event().text(), "Hello wörld ✓");
  ASSERT_EQ(back.token_event().logprobs_size(), 2);
  EXPECT_EQ(back.token_event().logprobs(0).top(1).token_id(), 13048);
  EXPECT_FLOAT_EQ(back.token_event().logprobs(0).top(1).logprob(), -1.75f);
}

TEST(WorkerProtoRoundTrip, FinalEventWithUsageAndTimings) {
  const auto event = FromText<v1::GenerateEvent>(kFinalEvent);
  ExpectFullRoundTrip(event);
  const v1::GenerateEvent back = RoundTrip(event);
  ASSERT_EQ(back.event_case(), v1::GenerateEvent::kFinalEvent);
  EXPECT_EQ(back.final_event().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(back.final_event().usage().cached_prompt_tokens(), 1024);
  EXPECT_EQ(back.final_event().usage().reasoning_tokens(), 21);
  EXPECT_DOUBLE_EQ(back.final_event().timings().prefill_ms(), 12.25);
}

TEST(WorkerProtoRoundTrip, WorkerInfoWithTokenizerPlanAndLoad) {
  const auto info = FromText<v1::WorkerInfo>(kWorkerInfo);
  ExpectFullRoundTrip(info);
  const v1::WorkerInfo back = RoundTrip(info);
  ASSERT_EQ(back.models_size(), 1);
  const v1::ModelInfo& model = back.models(0);
  EXPECT_EQ(model.tokenizer().tokens(2), "Ġworld");
  EXPECT_EQ(model.tokenizer().tokens(5), "\xc4");  // bytes: not UTF-8, still carried
  EXPECT_EQ(model.tokenizer().token_types(5), v1::TOKEN_TYPE_BYTE);
  EXPECT_EQ(model.memory_plan().budget_bytes(), 85899345920ull);
  EXPECT_EQ(model.memory_plan().contexts(1).max_context(), 40960);
  EXPECT_EQ(model.load().free_state_slots(), 13);
}

TEST(WorkerProtoRoundTrip, SmallRequestsAndResponses) {
  ExpectFullRoundTrip(FromText<v1::WorkerInfoRequest>(R"pb(
    include_tokenizer: true
    models: [ "qwen3.5-4b" ]
  )pb"));
  ExpectFullRoundTrip(FromText<v1::DrainRequest>("exit_when_idle: true"));
  ExpectFullRoundTrip(FromText<v1::DrainResponse>(R"pb(
    already_draining: true
    running_sequences: 4
    waiting_sequences: 2
  )pb"));
}

// GGUF token types are copied through as numbers (llama.cpp's llama_token_type values).
TEST(WorkerProtoSchema, TokenTypeValuesAreGgufValues) {
  EXPECT_EQ(v1::TOKEN_TYPE_UNDEFINED, 0);
  EXPECT_EQ(v1::TOKEN_TYPE_NORMAL, 1);
  EXPECT_EQ(v1::TOKEN_TYPE_UNKNOWN, 2);
  EXPECT_EQ(v1::TOKEN_TYPE_CONTROL, 3);
  EXPECT_EQ(v1::TOKEN_TYPE_USER_DEFINED, 4);
  EXPECT_EQ(v1::TOKEN_TYPE_UNUSED, 5);
  EXPECT_EQ(v1::TOKEN_TYPE_BYTE, 6);
}

// The released numbering (proto/README.md: never renumber, never reuse). A field may be added
// to the schema without a row here; a row may never change or disappear (a removed field's
// number goes to `reserved`, and its row moves to kReservedNumbers below).
struct FrozenField {
  const char* message;
  const char* field;
  int number;
};
constexpr FrozenField kFrozenFields[] = {
    {"GenerateRequest", "request_id", 1},
    {"GenerateRequest", "model", 2},
    {"GenerateRequest", "prompt_token_ids", 3},
    {"GenerateRequest", "sampling", 4},
    {"GenerateRequest", "session_id", 5},
    {"GenerateRequest", "priority", 6},
    {"GenerateRequest", "message_boundaries", 7},
    {"GenerateRequest", "turn_end_token_ids", 8},
    {"GenerateRequest", "reasoning_budget", 9},
    {"GenerateRequest", "output_constraint", 10},
    {"GenerateRequest", "n", 11},
    {"OutputConstraint", "json_schema", 1},
    {"OutputConstraint", "json_object", 2},
    {"OutputConstraint", "regex", 3},
    {"OutputConstraint", "tool_call", 4},
    {"OutputConstraint", "after_reasoning", 10},
    {"OutputConstraint", "reasoning_may_open", 11},
    {"OutputConstraint", "or_tool_call", 12},
    {"JsonSchemaConstraint", "schema", 1},
    {"JsonSchemaConstraint", "strict", 2},
    {"ToolCallConstraint", "functions", 1},
    {"ToolCallConstraint", "format", 2},
    {"ToolCallConstraint", "parallel", 3},
    {"ToolFunction", "name", 1},
    {"ToolFunction", "parameters_schema", 2},
    {"SamplingParams", "temperature", 1},
    {"SamplingParams", "top_k", 2},
    {"SamplingParams", "top_p", 3},
    {"SamplingParams", "min_p", 4},
    {"SamplingParams", "presence_penalty", 10},
    {"SamplingParams", "frequency_penalty", 11},
    {"SamplingParams", "repetition_penalty", 12},
    {"SamplingParams", "repetition_last_n", 13},
    {"SamplingParams", "logit_bias", 14},
    {"SamplingParams", "seed", 20},
    {"SamplingParams", "max_tokens", 30},
    {"SamplingParams", "stop_token_ids", 31},
    {"SamplingParams", "stop_strings", 32},
    {"SamplingParams", "ignore_eos", 33},
    {"SamplingParams", "logprobs", 40},
    {"SamplingParams", "top_logprobs", 41},
    {"GenerateEvent", "token_event", 1},
    {"GenerateEvent", "final_event", 2},
    {"TokenEvent", "token_ids", 1},
    {"TokenEvent", "text", 2},
    {"TokenEvent", "logprobs", 3},
    {"TokenEvent", "choice_index", 4},
    {"TokenLogprob", "token_id", 1},
    {"TokenLogprob", "logprob", 2},
    {"TokenLogprobs", "chosen", 1},
    {"TokenLogprobs", "top", 2},
    {"Usage", "prompt_tokens", 1},
    {"Usage", "cached_prompt_tokens", 2},
    {"Usage", "completion_tokens", 3},
    {"Usage", "reasoning_tokens", 4},
    {"Timings", "queue_ms", 1},
    {"Timings", "prefill_ms", 2},
    {"Timings", "decode_ms", 3},
    {"Timings", "time_to_first_token_ms", 4},
    {"FinalEvent", "finish_reason", 1},
    {"FinalEvent", "message", 2},
    {"FinalEvent", "usage", 3},
    {"FinalEvent", "timings", 4},
    {"FinalEvent", "seed", 5},
    {"FinalEvent", "choice_index", 6},
    {"FinalEvent", "matched_stop_token_id", 10},
    {"FinalEvent", "matched_stop_string", 11},
    {"WorkerInfoRequest", "include_tokenizer", 1},
    {"WorkerInfoRequest", "models", 2},
    {"WorkerInfo", "worker_id", 1},
    {"WorkerInfo", "device", 2},
    {"WorkerInfo", "device_description", 3},
    {"WorkerInfo", "build_version", 4},
    {"WorkerInfo", "draining", 5},
    {"WorkerInfo", "models", 6},
    {"ModelInfo", "name", 1},
    {"ModelInfo", "architecture", 2},
    {"ModelInfo", "context_length", 3},
    {"ModelInfo", "n_ctx_train", 4},
    {"ModelInfo", "n_vocab", 5},
    {"ModelInfo", "max_parallel_sequences", 6},
    {"ModelInfo", "tokenizer", 10},
    {"ModelInfo", "tokenizer_digest", 11},
    {"ModelInfo", "chat_template", 12},
    {"ModelInfo", "memory_plan", 20},
    {"ModelInfo", "load", 21},
    {"ModelInfo", "snapshot_key_root", 30},
    {"Tokenizer", "model", 1},
    {"Tokenizer", "pre", 2},
    {"Tokenizer", "tokens", 3},
    {"Tokenizer", "token_types", 4},
    {"Tokenizer", "merges", 5},
    {"Tokenizer", "special", 6},
    {"SpecialTokens", "bos_id", 1},
    {"SpecialTokens", "eos_id", 2},
    {"SpecialTokens", "eot_id", 3},
    {"SpecialTokens", "pad_id", 4},
    {"SpecialTokens", "unk_id", 5},
    {"SpecialTokens", "eog_ids", 6},
    {"SpecialTokens", "add_bos", 7},
    {"MemoryPlan", "text", 1},
    {"MemoryPlan", "budget_bytes", 10},
    {"MemoryPlan", "weight_bytes", 11},
    {"MemoryPlan", "workspace_bytes", 12},
    {"MemoryPlan", "kernel_scratch_bytes", 13},
    {"MemoryPlan", "fixed_overhead_bytes", 14},
    {"MemoryPlan", "k_type", 20},
    {"MemoryPlan", "v_type", 21},
    {"MemoryPlan", "kv_bytes_per_token", 22},
    {"MemoryPlan", "page_tokens", 23},
    {"MemoryPlan", "page_bytes", 24},
    {"MemoryPlan", "n_attention_layers", 25},
    {"MemoryPlan", "n_deltanet_layers", 30},
    {"MemoryPlan", "recurrent_bytes_per_sequence", 31},
    {"MemoryPlan", "contexts", 40},
    {"MemoryPlan", "experts_split_planned", 50},
    {"MemoryPlan", "expert_routed_bytes", 51},
    {"MemoryPlan", "expert_device_bytes", 52},
    {"MemoryPlan", "n_experts", 53},
    {"MemoryPlan", "n_device_experts", 54},
    {"MemoryPlan", "expert_slot_bytes", 55},
    {"MemoryPlan", "expert_vram_auto", 56},
    {"ContextFit", "n_parallel", 1},
    {"ContextFit", "max_context", 2},
    {"ContextFit", "pages", 3},
    {"ContextFit", "capped_by_training", 4},
    {"ModelLoad", "running_sequences", 1},
    {"ModelLoad", "waiting_sequences", 2},
    {"ModelLoad", "free_kv_pages", 3},
    {"ModelLoad", "total_kv_pages", 4},
    {"ModelLoad", "free_state_slots", 5},
    {"ModelLoad", "total_state_slots", 6},
    {"ModelLoad", "snapshot_key_prefixes", 10},
    {"DrainRequest", "exit_when_idle", 1},
    {"DrainResponse", "already_draining", 1},
    {"DrainResponse", "running_sequences", 2},
    {"DrainResponse", "waiting_sequences", 3},
    {"ExpertStatsRequest", "model", 1},
    {"LayerExperts", "layer", 1},
    {"LayerExperts", "device_experts", 2},
    {"LayerExperts", "decayed_tokens", 3},
    {"LayerExperts", "total_tokens", 4},
    {"ExpertStats", "model", 1},
    {"ExpertStats", "model_fingerprint", 2},
    {"ExpertStats", "n_layer", 3},
    {"ExpertStats", "n_expert", 4},
    {"ExpertStats", "n_expert_used", 5},
    {"ExpertStats", "tiered", 10},
    {"ExpertStats", "slot_bytes", 11},
    {"ExpertStats", "device_slots", 12},
    {"ExpertStats", "device_budget_bytes", 13},
    {"ExpertStats", "slot_classes", 14},
    {"ExpertStats", "slot_budget_bytes", 15},
    {"ExpertSlotClass", "slot_bytes", 1},
    {"ExpertSlotClass", "device_slots", 2},
    {"ExpertSlotClass", "layers", 3},
    {"ExpertStats", "layers", 20},
    {"ExpertStats", "half_life_seconds", 21},
    {"ExpertStats", "routed_total", 22},
    {"ExpertStats", "routed_device", 23},
    {"ExpertStats", "moves_in", 40},
    {"ExpertStats", "moves_out", 41},
    {"ExpertStats", "bytes_moved", 42},
    {"ExpertStats", "moves_pending", 43},
    {"ExpertStats", "placement_generation", 44},
    {"ExpertStats", "startup_source", 45},
    {"SetExpertPlacementRequest", "model", 1},
    {"SetExpertPlacementRequest", "layers", 2},
    {"SetExpertPlacementRequest", "generation", 3},
    {"SetExpertPlacementResponse", "moves_in", 1},
    {"SetExpertPlacementResponse", "moves_out", 2},
    {"SetExpertPlacementResponse", "bytes_to_copy", 3},
};

TEST(WorkerProtoSchema, ReleasedFieldNumbersNeverChange) {
  const pb::FileDescriptor* file = v1::GenerateRequest::descriptor()->file();
  for (const FrozenField& frozen : kFrozenFields) {
    const pb::Descriptor* message = file->FindMessageTypeByName(frozen.message);
    ASSERT_NE(message, nullptr) << "message deltaserve.v1." << frozen.message << " was removed";
    const pb::FieldDescriptor* field = message->FindFieldByName(frozen.field);
    ASSERT_NE(field, nullptr) << frozen.message << "." << frozen.field
                              << " was removed: reserve its number and name instead";
    EXPECT_EQ(field->number(), frozen.number) << frozen.message << "." << frozen.field;
  }
}

TEST(WorkerProtoSchema, EveryFieldIsFrozen) {
  // The converse: a released field must have a row above, so that its number is guarded.
  const pb::FileDescriptor* file = v1::GenerateRequest::descriptor()->file();
  int n_fields = 0;
  for (int m = 0; m < file->message_type_count(); ++m) {
    const pb::Descriptor* message = file->message_type(m);
    for (int f = 0; f < message->field_count(); ++f) {
      ++n_fields;
      const pb::FieldDescriptor* field = message->field(f);
      bool listed = false;
      for (const FrozenField& frozen : kFrozenFields) {
        listed = listed || (message->name() == frozen.message && field->name() == frozen.field);
      }
      EXPECT_TRUE(listed) << message->name() << "." << field->name() << " = " << field->number()
                          << " has no row in kFrozenFields";
    }
  }
  EXPECT_EQ(n_fields, static_cast<int>(std::size(kFrozenFields)));
}

// proto3 `optional`: a zero that was sent is told apart from nothing sent (temperature 0 is
// greedy; unset is the worker's default).
TEST(WorkerProtoEvolution, OptionalZeroIsDistinctFromUnset) {
  v1::SamplingParams sent_zero;
  sent_zero.set_temperature(0.0f);
  sent_zero.set_max_tokens(0);
  const v1::SamplingParams back = RoundTrip(sent_zero);
  EXPECT_TRUE(back.has_temperature());
  EXPECT_EQ(back.temperature(), 0.0f);
  EXPECT_TRUE(back.has_max_tokens());

  const v1::SamplingParams unset = RoundTrip(v1::SamplingParams());
  EXPECT_FALSE(unset.has_temperature());
  EXPECT_FALSE(unset.has_top_k());
  EXPECT_FALSE(unset.has_seed());
  EXPECT_FALSE(unset.has_max_tokens());
}

// Appends a varint field `number` = `value` to `wire` (what a newer peer might send).
std::string WithExtraVarintField(std::string wire, int number, uint64_t value) {
  {  // The streams trim `wire` to what was written when they are destroyed.
    pb::io::StringOutputStream stream(&wire);
    pb::io::CodedOutputStream out(&stream);
    out.WriteTag(pb::internal::WireFormatLite::MakeTag(
        number, pb::internal::WireFormatLite::WIRETYPE_VARINT));
    out.WriteVarint64(value);
  }
  return wire;
}

// A newer router's field reaches an older worker: parsing succeeds, the known fields are read,
// and the unknown one is kept and forwarded when the message is re-serialized.
TEST(WorkerProtoEvolution, UnknownFieldsAreKeptAndForwarded) {
  const auto request = FromText<v1::GenerateRequest>(kGenerateRequest);
  const std::string newer_wire = WithExtraVarintField(request.SerializeAsString(), 99, 7);

  v1::GenerateRequest older;
  ASSERT_TRUE(older.ParseFromString(newer_wire));
  EXPECT_EQ(older.model(), "qwen3.5-4b");
  EXPECT_EQ(older.GetReflection()->GetUnknownFields(older).field_count(), 1);
  EXPECT_EQ(older.GetReflection()->GetUnknownFields(older).field(0).number(), 99);
  // Re-serialized (as a proxy or a log would): the field is still there, unchanged. (Bytes are
  // not compared: map entries need not keep their order.)
  v1::GenerateRequest forwarded;
  ASSERT_TRUE(forwarded.ParseFromString(older.SerializeAsString()));
  const pb::UnknownFieldSet& unknown = forwarded.GetReflection()->GetUnknownFields(forwarded);
  ASSERT_EQ(unknown.field_count(), 1);
  EXPECT_EQ(unknown.field(0).number(), 99);
  EXPECT_EQ(unknown.field(0).varint(), 7u);
}

// A finish reason added by a newer worker reaches an older router as its number (proto3 enums
// are open); the router must treat numbers it does not know as an error (worker.proto).
TEST(WorkerProtoEvolution, UnknownEnumValueIsKeptAsItsNumber) {
  const std::string wire = WithExtraVarintField("", v1::FinalEvent::kFinishReasonFieldNumber, 17);
  v1::FinalEvent event;
  ASSERT_TRUE(event.ParseFromString(wire));
  EXPECT_EQ(static_cast<int>(event.finish_reason()), 17);
  EXPECT_FALSE(v1::FinishReason_IsValid(event.finish_reason()));
}

// An event kind added by a newer worker (a new oneof member) looks like "no event" to an older
// router, which must skip it rather than fail.
TEST(WorkerProtoEvolution, UnknownEventKindReadsAsNotSet) {
  const std::string wire = WithExtraVarintField("", 3, 1);
  v1::GenerateEvent event;
  ASSERT_TRUE(event.ParseFromString(wire));
  EXPECT_EQ(event.event_case(), v1::GenerateEvent::EVENT_NOT_SET);
}

}  // namespace
}  // namespace deltaserve::proto_test
