#include <cstdio>

#include "router/tools/chat_commands.h"

namespace deltaserve::router {

// Not written yet (issue 12): refuses clearly rather than pretending.
int RunRenderCommand(int, char**) {
  std::fprintf(stderr, "deltaserve-chat render: not available in this build yet\n");
  return 1;
}

}  // namespace deltaserve::router
