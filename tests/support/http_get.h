// A plain HTTP/1.1 GET on 127.0.0.1 for tests that read a process's /metrics or status pages.
// Bounded: a peer that stalls ends the read after the timeout instead of hanging the test.
#pragma once

#include <string>

namespace deltaserve::testing {

// The whole response (status line, headers, body) of GET `path` on 127.0.0.1:`port`, read until
// the peer closes or `timeout_s` passes without a byte; empty when nothing answers.
std::string HttpGet(int port, const std::string& path, int timeout_s = 10);

}  // namespace deltaserve::testing
