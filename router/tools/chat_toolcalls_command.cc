// deltaserve-chat toolcalls CASES.json: runs ParseModelOutput (router/chat/tool_call_parser.h)
// over every case of a file in the format of ../shared/fixtures/toolcalls.json and prints one
// JSON line per case:
//   {"name":…, "content":…, "reasoning_content":…, "tool_calls":[{"name":…, "arguments":{…}}],
//    "finish":…}
// A case may also carry "prompt_opened_think": true (the prompt ended inside <think>) and
// "tool_choice": "none" (nothing parsed as a call). docs/tool_calls.md, "The CLI".
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/chat/tool_call_parser.h"
#include "router/tools/chat_commands.h"

namespace deltaserve::router {
namespace {

using nlohmann::ordered_json;

ordered_json Nullable(const std::optional<std::string>& s) {
  return s.has_value() ? ordered_json(*s) : ordered_json(nullptr);
}

std::string Dump(const ordered_json& line) {
  return line.dump(-1, ' ', /*ensure_ascii=*/false, ordered_json::error_handler_t::replace);
}

// The output line of one case, or an "error" line when the case lacks what it needs.
ordered_json RunCase(const ordered_json& c, bool& ok) {
  ordered_json line = ordered_json::object();
  auto name = c.is_object() ? c.find("name") : c.end();
  line["name"] = (c.is_object() && name != c.end()) ? *name : ordered_json(nullptr);
  auto raw = c.is_object() ? c.find("raw_output") : c.end();
  if (!c.is_object() || raw == c.end() || !raw->is_string()) {
    line["error"] = "case has no string \"raw_output\"";
    ok = false;
    return line;
  }
  OutputParseOptions options;
  if (auto tools = c.find("tools"); tools != c.end()) options.tools = *tools;
  if (auto opened = c.find("prompt_opened_think"); opened != c.end() && opened->is_boolean()) {
    options.prompt_opened_think = opened->get<bool>();
  }
  if (auto choice = c.find("tool_choice"); choice != c.end() && *choice == "none") {
    options.parse_tool_calls = false;
  }
  options.call_id_seed = 1;  // ids are not printed; keep runs reproducible anyway
  const ParsedOutput parsed = ParseModelOutput(raw->get_ref<const std::string&>(), options);
  ordered_json calls = ordered_json::array();
  for (const ToolCallOut& call : parsed.tool_calls) {
    calls.push_back({{"name", call.name}, {"arguments", call.arguments}});
  }
  line["content"] = Nullable(parsed.content);
  line["reasoning_content"] = Nullable(parsed.reasoning_content);
  line["tool_calls"] = std::move(calls);
  line["finish"] = parsed.finish;
  return line;
}

}  // namespace

int RunToolcallsCommand(int argc, char** argv) {
  if (argc != 1) return ChatUsage("toolcalls needs exactly one CASES.json");
  if (argv[0][0] == '-' && argv[0][1] != '\0') {
    return ChatUsage(absl::StrCat("toolcalls: unknown argument '", argv[0], "'"));
  }
  const std::string path = argv[0];
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "deltaserve-chat toolcalls: cannot read %s\n", path.c_str());
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const ordered_json cases = ordered_json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (cases.is_discarded()) {
    std::fprintf(stderr, "deltaserve-chat toolcalls: %s is not valid JSON\n", path.c_str());
    return 1;
  }
  if (!cases.is_array()) {
    std::fprintf(stderr, "deltaserve-chat toolcalls: %s is not a JSON array of cases\n",
                 path.c_str());
    return 1;
  }
  bool ok = true;
  for (const ordered_json& c : cases) {
    std::printf("%s\n", Dump(RunCase(c, ok)).c_str());
  }
  if (!ok) {
    std::fprintf(stderr, "deltaserve-chat toolcalls: %s: some cases could not be read\n",
                 path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace deltaserve::router
