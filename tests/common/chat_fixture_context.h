// Test support for the Jinja engine's tests (chat_template_test, chat_template_marks_test): the
// files of ../shared/fixtures read whole, and a fixture case's render context built as
// transformers' apply_chat_template passes it.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace deltaserve::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The context transformers passes: messages, tools (None when absent), documents=None,
// add_generation_prompt, then the case's kwargs (special tokens and switches).
inline nlohmann::ordered_json FixtureContext(const nlohmann::ordered_json& c) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = c.at("messages");
  ctx["tools"] = c.contains("tools") ? c.at("tools") : nlohmann::ordered_json(nullptr);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = c.value("add_generation_prompt", false);
  if (c.contains("kwargs")) {
    for (const auto& [k, v] : c.at("kwargs").items()) ctx[k] = v;
  }
  return ctx;
}

}  // namespace deltaserve::testing
