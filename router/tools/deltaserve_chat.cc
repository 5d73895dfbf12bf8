// deltaserve-chat: the chat layer's CLI, for tests and for people debugging templates and
// tool-call parsing (docs/chat.md):
//
//   deltaserve-chat render CASES.json [--template FILE]   one {"name","prompt"|"error"} per case
//   deltaserve-chat toolcalls CASES.json                  one {"name","content",...} per case
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "router/tools/chat_commands.h"

namespace deltaserve::router {

int ChatUsage(const std::string& why) {
  return common::UsageExit(
      "deltaserve-chat", why,
      "usage: deltaserve-chat render CASES.json [--template FILE]\n"
      "       deltaserve-chat toolcalls CASES.json\n",
      "render: renders each case (../shared/fixtures/chat/*.json format) with the chat template\n"
      "  engine: one {\"name\", \"prompt\"|\"error\"} line per case.\n"
      "toolcalls: parses each case's model output into content, reasoning and tool calls:\n"
      "  one {\"name\", \"content\", ...} line per case.\n");
}

}  // namespace deltaserve::router

int main(int argc, char** argv) {
  using deltaserve::router::ChatUsage;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      return ChatUsage(std::string(deltaserve::common::kHelpRequested));
    }
  }
  if (argc >= 2 && std::strcmp(argv[1], "render") == 0) {
    return deltaserve::router::RunRenderCommand(argc - 2, argv + 2);
  }
  if (argc >= 2 && std::strcmp(argv[1], "toolcalls") == 0) {
    return deltaserve::router::RunToolcallsCommand(argc - 2, argv + 2);
  }
  if (argc < 2) return ChatUsage("no command");
  return ChatUsage(
      absl::StrCat(argv[1][0] == '-' ? "unknown argument '" : "unknown command '", argv[1], "'"));
}
