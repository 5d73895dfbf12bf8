// libFuzzer target for the bytes an upstream sends back (docs/upstreams.md): an HTTP/1.1
// response (router/upstream/http_response_reader.h) whose body is read as server-sent events
// (sse_reader.h) and translated into the router's deltas (upstream_stream.h). The input's first
// byte picks the upstream's API (bit 0: OpenAI or Anthropic) and the number of choices (bits 1-2;
// the seeds use '0', '1' and '2'); the rest is the answer. Properties:
//   - nothing crashes, reads out of bounds or throws; every refusal has a message;
//   - the answer fed in one piece and fed in pieces whose sizes come from the input itself give
//     the same outcome, body and deltas (an upstream's TCP segments may split anywhere);
//   - every delta belongs to one of the request's choices and every tool-call piece has an index
//     >= 0; the end's per-choice list is empty or has one entry per choice.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "router/upstream/http_response_reader.h"
#include "router/upstream/sse_reader.h"
#include "router/upstream/upstream_stream.h"
#include "tests/fuzz/fuzz_check.h"

namespace deltaserve::router::upstream {
namespace {

constexpr const char* kTarget = "upstream_stream_fuzz";

struct Outcome {
  bool ok = true;
  std::string body;
  std::vector<std::string> deltas;  // each delta flattened, for comparison
  bool done = false;
  bool reusable = false;  // the connection could carry another request (keep-alive)
};

Outcome Run(std::string_view answer, UpstreamKind kind, int n, std::string_view piece_sizes) {
  Outcome out;
  HttpResponseReader response;
  SseReader sse;
  auto translator = MakeStreamTranslator(kind, api::Endpoint::kChatCompletions, n);
  std::string body;
  size_t at = 0, k = 0;
  auto step = [&](absl::Status s) {
    if (!s.ok()) {
      fuzz::Check(!s.message().empty(), kTarget, "a refusal has a message");
      out.ok = false;
    }
    return s.ok();
  };
  while (out.ok && at <= answer.size()) {
    const bool eof = at == answer.size();
    size_t size = piece_sizes.empty() ? answer.size()
                                      : 1 + static_cast<unsigned char>(piece_sizes[k++ %
                                                                       piece_sizes.size()]) % 64;
    size = std::min(size, answer.size() - at);
    std::string fresh;
    if (!step(eof ? response.FeedEof() : response.Feed(answer.substr(at, size), &fresh))) break;
    at += eof ? 1 : size;
    out.body += fresh;
    if (!response.headers_done() || response.status() != 200) continue;
    std::vector<SseEvent> events;
    if (!step(sse.Feed(fresh, &events))) break;
    for (const SseEvent& e : events) {
      if (translator->done()) break;
      std::vector<api::GenerationDelta> deltas;
      if (!step(translator->OnEvent(e, &deltas))) break;
      for (const api::GenerationDelta& d : deltas) {
        fuzz::Check(d.choice >= 0 && d.choice < n, kTarget, "a delta belongs to a choice");
        std::string flat = std::to_string(d.choice) + "|" + d.text + "|" + d.reasoning_text;
        for (const api::ToolCallDelta& c : d.tool_calls) {
          fuzz::Check(c.index >= 0, kTarget, "a tool-call piece has an index >= 0");
          flat += "|" + std::to_string(c.index) + c.id + "/" + c.name + "/" + c.arguments;
        }
        out.deltas.push_back(std::move(flat));
      }
    }
  }
  out.reusable = response.reusable();
  if (out.reusable) {
    fuzz::Check(response.complete() && !response.trailing_bytes(), kTarget,
                "a reusable connection's answer ended exactly");
  }
  out.done = translator->done();
  if (out.done) {
    const api::GenerationEnd end = translator->End();
    fuzz::Check(end.choices.empty() || static_cast<int>(end.choices.size()) == n, kTarget,
                "the end lists every choice or none");
  }
  return out;
}

}  // namespace
}  // namespace deltaserve::router::upstream

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using deltaserve::router::UpstreamKind;
  using deltaserve::router::upstream::Outcome;
  using deltaserve::router::upstream::Run;
  using deltaserve::router::upstream::kTarget;
  if (size < 1) return 0;
  const UpstreamKind kind = (data[0] & 1) ? UpstreamKind::kAnthropic : UpstreamKind::kOpenAi;
  const int n = 1 + ((data[0] >> 1) & 3);
  const std::string_view answer(reinterpret_cast<const char*>(data) + 1, size - 1);
  const Outcome whole = Run(answer, kind, n, "");
  const Outcome pieces = Run(answer, kind, n, answer.substr(0, 16));
  deltaserve::fuzz::Check(whole.ok == pieces.ok, kTarget, "pieces give the same outcome");
  if (whole.ok) {
    deltaserve::fuzz::Check(whole.body == pieces.body, kTarget, "pieces give the same body");
    deltaserve::fuzz::Check(whole.deltas == pieces.deltas, kTarget,
                            "pieces give the same deltas");
    deltaserve::fuzz::Check(whole.done == pieces.done, kTarget, "pieces give the same end");
    deltaserve::fuzz::Check(whole.reusable == pieces.reusable, kTarget,
                            "pieces give the same keep-alive decision");
  }
  return 0;
}
