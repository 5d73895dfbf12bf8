#include "bench/router_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace deltaserve::bench {

std::string CompletionRequest(const RouterLoadFlags& f, const std::string& host, bool stream) {
  const std::string body =
      absl::StrCat("{\"model\":\"", f.model, "\",\"prompt\":[", absl::StrJoin(f.prompt, ","),
                   "],\"max_tokens\":", f.max_tokens,
                   ",\"temperature\":0,\"stream\":", stream ? "true" : "false", "}");
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: ", host,
                      "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

boost::asio::ip::tcp::endpoint Endpoint(const std::string& address) {
  const size_t colon = address.rfind(':');
  return boost::asio::ip::tcp::endpoint(
      boost::asio::ip::make_address(address.substr(0, colon)),
      static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
}

ProcSample SampleProc(int pid) {
  ProcSample s;
  if (pid <= 0) return s;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = std::atoll(line.c_str() + 6);
  }
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = all.rfind(')');
  if (paren == std::string::npos) return s;
  std::istringstream rest(all.substr(paren + 2));
  std::string field;
  // Fields after the command: state is 3; utime and stime are 14 and 15 (proc(5)).
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return s;
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace deltaserve::bench
