// The subcommands of deltaserve-chat (router/tools/deltaserve_chat.cc), one file each: rendering
// chat-template fixture cases (chat_render_command.cc) and parsing model output into content,
// reasoning and tool calls (chat_toolcalls_command.cc). Each prints one JSON line per case on
// stdout and returns the process's exit code: 0 when every case was processed, whatever the
// results; non-zero with a message on stderr for unreadable input or bad arguments.
#pragma once

#include <string>

namespace deltaserve::router {

// The program's usage (common::UsageExit): on stdout with 0 when `why` is common::kHelpRequested,
// else "deltaserve-chat: <why>" and the usage on stderr with 2.
int ChatUsage(const std::string& why);

// deltaserve-chat render CASES.json [--template FILE]; args exclude the program and subcommand.
int RunRenderCommand(int argc, char** argv);
// deltaserve-chat toolcalls CASES.json.
int RunToolcallsCommand(int argc, char** argv);

}  // namespace deltaserve::router
