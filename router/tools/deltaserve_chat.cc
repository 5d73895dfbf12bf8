// deltaserve-chat: the chat layer's CLI, for tests and for people debugging templates and
// tool-call parsing (docs/chat.md):
//
//   deltaserve-chat render CASES.json [--template FILE]   one {"name","prompt"|"error"} per case
//   deltaserve-chat toolcalls CASES.json                  one {"name","content",...} per case
#include <cstdio>
#include <cstring>

#include "router/tools/chat_commands.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "render") == 0) {
    return deltaserve::router::RunRenderCommand(argc - 2, argv + 2);
  }
  if (argc >= 2 && std::strcmp(argv[1], "toolcalls") == 0) {
    return deltaserve::router::RunToolcallsCommand(argc - 2, argv + 2);
  }
  std::fprintf(stderr,
               "usage: deltaserve-chat render CASES.json [--template FILE]\n"
               "       deltaserve-chat toolcalls CASES.json\n");
  return 2;
}
