#include "router/api/internal/unserved_fields.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "router/api/api_error.h"
#include "router/api/internal/json_fields.h"

namespace deltaserve::router::api::internal {
namespace {

using json = nlohmann::ordered_json;

// A field that is refused whenever it is sent (non-null), with why.
absl::Status RefuseIfSent(const json& doc, const char* name, std::string_view why) {
  if (Member(doc, name) == nullptr) return absl::OkStatus();
  return Unsupported(name, absl::StrCat("'", name, "' is not supported: ", common::Sv(why)));
}

absl::Status CheckContextManagement(const json& doc) {
  const json* cm = Member(doc, "context_management");
  if (cm == nullptr) return absl::OkStatus();
  if (!cm->is_object()) return TypeError("context_management", "an object", *cm);
  const json* edits = Member(*cm, "edits");
  if (edits == nullptr) return absl::OkStatus();
  if (!edits->is_array()) return TypeError("context_management.edits", "an array", *edits);
  for (size_t i = 0; i < edits->size(); ++i) {
    const json& e = (*edits)[i];
    const std::string path = absl::StrCat("context_management.edits[", i, "]");
    if (!e.is_object()) return TypeError(path, "an object", e);
    std::string type;
    DS_RETURN_IF_ERROR(RequiredString(e, "type", path + ".type", &type));
    // Keeping every thinking block is what an unedited context does.
    const json* keep = Member(e, "keep");
    if (type == "clear_thinking_20251015" && keep != nullptr && keep->is_string() &&
        keep->get_ref<const std::string&>() == "all") {
      continue;
    }
    return Unsupported(path, absl::StrCat("'", path, "' (", type,
                                          ") is not supported: DeltaServe does not edit the "
                                          "context on the server; only clear_thinking_20251015 "
                                          "with keep \"all\" (no edit) is accepted"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadSafetyIdentifier(const json& doc, CompletionRequest* r) {
  std::optional<std::string> id;
  DS_RETURN_IF_ERROR(ReadString(doc, "safety_identifier", "safety_identifier", &id));
  if (id && r->user.empty()) r->user = std::move(*id);
  return absl::OkStatus();
}

absl::Status CheckOpenAiServiceTier(const json& doc) {
  std::optional<std::string> tier;
  DS_RETURN_IF_ERROR(ReadString(doc, "service_tier", "service_tier", &tier));
  if (!tier || *tier == "auto" || *tier == "default") return absl::OkStatus();
  if (*tier == "flex" || *tier == "priority" || *tier == "scale") {
    return Unsupported("service_tier",
                       absl::StrCat("'service_tier' \"", *tier,
                                    "\" is not supported: DeltaServe has one tier; send \"auto\" "
                                    "or \"default\", or leave it out"));
  }
  return InvalidRequestError(
      "service_tier", "invalid_value",
      absl::StrCat("'service_tier' must be one of auto, default, flex, priority, scale; got '",
                   *tier, "'"));
}

absl::Status CheckChatUnservedFields(const json& doc) {
  std::optional<bool> store;
  DS_RETURN_IF_ERROR(ReadBool(doc, "store", "store", &store));
  if (store.value_or(false)) {
    return Unsupported("store", "'store' true is not supported: DeltaServe stores no completions");
  }
  if (const json* metadata = Member(doc, "metadata")) {
    if (!metadata->is_object()) return TypeError("metadata", "an object", *metadata);
    for (auto it = metadata->begin(); it != metadata->end(); ++it) {
      if (!it.value().is_string()) {
        return TypeError(absl::StrCat("metadata.", it.key()), "a string", it.value());
      }
    }
  }
  if (const json* modalities = Member(doc, "modalities")) {
    if (!modalities->is_array()) {
      return TypeError("modalities", "an array of strings", *modalities);
    }
    for (size_t i = 0; i < modalities->size(); ++i) {
      const json& m = (*modalities)[i];
      const std::string path = absl::StrCat("modalities[", i, "]");
      if (!m.is_string()) return TypeError(path, "a string", m);
      const std::string& name = m.get_ref<const std::string&>();
      if (name == "text") continue;
      if (name == "audio") {
        return Unsupported(path, "audio output is not supported: the served models write text");
      }
      return InvalidRequestError(
          path, "invalid_value",
          absl::StrCat("'", path, "' must be text or audio, got '", name, "'"));
    }
  }
  DS_RETURN_IF_ERROR(RefuseIfSent(doc, "audio", "the served models write text"));
  DS_RETURN_IF_ERROR(RefuseIfSent(doc, "prediction", "predicted outputs are not used"));
  DS_RETURN_IF_ERROR(RefuseIfSent(doc, "web_search_options", "DeltaServe does not search the web"));
  DS_RETURN_IF_ERROR(
      RefuseIfSent(doc, "functions", "it is the deprecated form of 'tools'; send 'tools'"));
  DS_RETURN_IF_ERROR(RefuseIfSent(
      doc, "function_call", "it is the deprecated form of 'tool_choice'; send 'tool_choice'"));
  std::optional<std::string> cache_key;  // a caching hint: type-checked, nothing more
  DS_RETURN_IF_ERROR(ReadString(doc, "prompt_cache_key", "prompt_cache_key", &cache_key));
  return absl::OkStatus();
}

absl::Status CheckAnthropicUnservedFields(const json& doc) {
  std::optional<std::string> s;
  DS_RETURN_IF_ERROR(ReadString(doc, "service_tier", "service_tier", &s));
  if (s && *s != "auto" && *s != "standard_only") {
    return InvalidRequestError(
        "service_tier", "invalid_value",
        absl::StrCat("'service_tier' must be auto or standard_only, got '", *s, "'"));
  }
  s.reset();
  DS_RETURN_IF_ERROR(ReadString(doc, "speed", "speed", &s));
  if (s && *s != "standard") {
    return Unsupported("speed", absl::StrCat("'speed' \"", *s,
                                             "\" is not supported: there is one speed; send "
                                             "\"standard\" or leave it out"));
  }
  DS_RETURN_IF_ERROR(CheckContextManagement(doc));
  DS_RETURN_IF_ERROR(
      RefuseIfSent(doc, "container", "DeltaServe runs no code-execution containers"));
  if (const json* mcp = Member(doc, "mcp_servers")) {
    if (!mcp->is_array()) return TypeError("mcp_servers", "an array", *mcp);
    if (!mcp->empty()) {
      return Unsupported("mcp_servers",
                         "'mcp_servers' is not supported: DeltaServe calls no MCP servers "
                         "itself (declare their tools in 'tools' and run them in the client)");
    }
  }
  return RefuseIfSent(doc, "inference_geo",
                      "DeltaServe computes where its operator runs it, in no chosen region");
}

}  // namespace deltaserve::router::api::internal
