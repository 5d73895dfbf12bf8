// deltaserve-chat render CASES.json [--template FILE]: renders every case of a file in the format
// of ../shared/fixtures/chat/*.json with the Jinja engine (common/jinja/chat_template.h) and
// prints one JSON line per case: {"name":…, "prompt":…} or {"name":…, "error":…}.
//
// A case's template is its "template" field (the template text) when present, else the
// --template FILE. The context is what transformers passes: messages, tools (null when absent),
// documents (null), add_generation_prompt (false when absent), then the case's "kwargs" (special
// tokens, enable_thinking, …) as top-level variables. docs/chat_templates.md, "The CLI".
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/jinja/chat_template.h"
#include "common/str_util.h"
#include "nlohmann/json.hpp"
#include "router/tools/chat_commands.h"

namespace deltaserve::router {
namespace {

using nlohmann::ordered_json;

std::string Dump(const ordered_json& line) {
  return line.dump(-1, ' ', /*ensure_ascii=*/false, ordered_json::error_handler_t::replace);
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

ordered_json CaseContext(const ordered_json& c) {
  ordered_json ctx = ordered_json::object();
  ctx["messages"] = c.contains("messages") ? c.at("messages") : ordered_json::array();
  ctx["tools"] = c.contains("tools") ? c.at("tools") : ordered_json(nullptr);
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] =
      c.contains("add_generation_prompt") ? c.at("add_generation_prompt") : ordered_json(false);
  if (c.contains("kwargs") && c.at("kwargs").is_object()) {
    for (const auto& [key, value] : c.at("kwargs").items()) ctx[key] = value;
  }
  return ctx;
}

// One output line for case `c` (number `index`, counted from 0).
ordered_json RenderCase(const ordered_json& c, size_t index,
                        const std::optional<common::ChatTemplate>& file_template) {
  ordered_json line = ordered_json::object();
  if (!c.is_object()) {
    line["name"] = nullptr;
    line["error"] = "case " + std::to_string(index) + " is not a JSON object";
    return line;
  }
  line["name"] = c.contains("name") ? c.at("name") : ordered_json(nullptr);
  std::optional<common::ChatTemplate> own;
  if (c.contains("template")) {
    if (!c.at("template").is_string()) {
      line["error"] = "\"template\" must be a string";
      return line;
    }
    absl::StatusOr<common::ChatTemplate> parsed =
        common::ChatTemplate::Parse(c.at("template").get<std::string>());
    if (!parsed.ok()) {
      line["error"] = std::string(parsed.status().message());
      return line;
    }
    own = std::move(*parsed);
  }
  const common::ChatTemplate* tmpl = own.has_value()             ? &*own
                                     : file_template.has_value() ? &*file_template
                                                                 : nullptr;
  if (tmpl == nullptr) {
    line["error"] = "the case has no \"template\" and no --template FILE was given";
    return line;
  }
  absl::StatusOr<std::string> prompt = tmpl->Render(CaseContext(c));
  if (prompt.ok()) {
    line["prompt"] = *prompt;
  } else {
    line["error"] = std::string(prompt.status().message());
  }
  return line;
}

int Run(int argc, char** argv) {
  std::string cases_path;
  std::string template_path;
  // One positional CASES.json and --template; whatever else is refused with the same line.
  const std::string unexpected = "unexpected argument '{flag}'";
  const std::vector<common::Flag> flags = {
      common::StringFlag("--template", &template_path).MissingMessage(unexpected)};
  common::FlagParseOptions options;
  options.unknown_message = unexpected;
  options.positional = [&cases_path](std::string_view arg) -> std::string {
    if (arg.empty() || arg == "-" || !cases_path.empty()) {
      return absl::StrCat("unexpected argument '", common::Sv(arg), "'");
    }
    cases_path = std::string(arg);
    return "";
  };
  if (std::string why = common::ParseFlags(flags, argc, argv, options, /*first=*/0); !why.empty()) {
    return ChatUsage(absl::StrCat("render: ", why));
  }
  if (cases_path.empty()) return ChatUsage("render needs CASES.json");
  std::optional<common::ChatTemplate> file_template;
  if (!template_path.empty()) {
    const std::optional<std::string> text = ReadFile(template_path);
    if (!text.has_value()) {
      std::fprintf(stderr, "deltaserve-chat render: cannot read %s\n", template_path.c_str());
      return 1;
    }
    absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(*text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "deltaserve-chat render: %s: %s\n", template_path.c_str(),
                   std::string(parsed.status().message()).c_str());
      return 1;
    }
    file_template = std::move(*parsed);
  }
  const std::optional<std::string> text = ReadFile(cases_path);
  if (!text.has_value()) {
    std::fprintf(stderr, "deltaserve-chat render: cannot read %s\n", cases_path.c_str());
    return 1;
  }
  ordered_json cases = ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (cases.is_discarded() || !cases.is_array()) {
    std::fprintf(stderr, "deltaserve-chat render: %s is not a JSON list of cases\n",
                 cases_path.c_str());
    return 1;
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::printf("%s\n", Dump(RenderCase(cases[i], i, file_template)).c_str());
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace

int RunRenderCommand(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {  // nlohmann::json only throws on our misuse; report it
    std::fprintf(stderr, "deltaserve-chat render: %s\n", e.what());
    return 1;
  }
}

}  // namespace deltaserve::router
