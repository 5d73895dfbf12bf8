// Request parsing cost and isolation (issue 17). Two measurements, printed as Markdown tables
// for docs/benchmarks.md:
//  1. Parse + validation time per MB of body (ParseChatCompletionRequest /
//     ParseCompletionRequest) for the worst shapes we know — wide objects, deep nesting, many
//     messages / tools / content parts / tiny arrays / token ids, long escaped strings, long
//     numbers — and, for chat bodies that are accepted, the chat template context
//     (BuildTemplateContext) and a render with Qwen3.5's template. Target: <= 50 ms per MB.
//  2. The delay of a small chat request sent through the real router HTTP server (HttpServer +
//     OpenAiApi, a backend that answers at once) while large bodies are being parsed on other
//     connections, with the large bodies handed to the request pool (the router's behaviour) and
//     handled on the io threads (the behaviour before issue 17), for comparison. Target: <= 50 ms.
//
//   deltaserve-bench-request-parse [--mb 4] [--reps 3] [--big 2] [--small 20] [--no-render]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jinja/chat_template.h"
#include "router/api/api_error.h"
#include "router/api/openai_api.h"
#include "router/api/request_parser.h"
#include "router/chat/chat_template_context.h"
#include "tests/router/http_test_client.h"

namespace deltaserve::router::bench {
namespace {

using api::CompletionRequest;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- body shapes ----------------------------------------------------------------------------

constexpr char kUser[] = R"({"role":"user","content":"hi"})";

std::string ChatWith(const std::string& extra) {
  return absl::StrCat(R"({"model":"m","messages":[)", kUser, "],", extra, "}");
}

// Appends `item(i)` with commas until `out` reaches `bytes` or `max_items` were written.
void Fill(std::string& out, size_t bytes, size_t max_items,
          const std::function<std::string(size_t)>& item) {
  for (size_t i = 0; i < max_items && out.size() < bytes; ++i) {
    if (i > 0) out += ',';
    out += item(i);
  }
}

std::string WideObject(size_t keys, const std::string& prefix = "k") {
  std::string out = "{";
  Fill(out, std::numeric_limits<size_t>::max(), keys,
       [&](size_t i) { return absl::StrCat("\"", prefix, i, "\":", i % 100); });
  return out + "}";
}

// A chat body whose "metadata" is an array of `item` repeated up to `bytes` or `max_items`.
std::string MetadataOf(size_t bytes, size_t max_items, const std::string& item) {
  std::string out = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":[)";
  Fill(out, bytes, max_items, [&](size_t) { return item; });
  return out + "]}";
}

struct Shape {
  const char* name;
  bool chat;
  std::function<std::string(size_t bytes)> make;
};

std::vector<Shape> Shapes() {
  return {
      {"wide object, 200k keys (issue 17; refused)", true,
       [](size_t) { return ChatWith(R"("metadata":)" + WideObject(200'000)); }},
      {"logit_bias, 200k keys (refused)", true,
       [](size_t) { return ChatWith(R"("logit_bias":)" + WideObject(200'000, "")); }},
      {"objects of 10,000 keys (the limit)", true,
       [](size_t bytes) { return MetadataOf(bytes, SIZE_MAX, WideObject(api::kMaxObjectKeys)); }},
      {"nesting 62 deep, repeated", true,
       [](size_t bytes) {
         return MetadataOf(bytes, api::kMaxArrayElements,
                           std::string(61, '[') + "1" + std::string(61, ']'));
       }},
      {"nesting 62 deep, as many as max_json_containers allows (rest: a string)", true,
       [](size_t bytes) {
         // The densest accepted body: max_json_containers allows 4,096 + one per 8 bytes, so
         // the nesting fills what that allows and a `user` string pads the body to `bytes`.
         const size_t allowed = api::RequestJsonLimits(bytes).max_containers;
         std::string body = MetadataOf(SIZE_MAX, (allowed - 8) / 61,
                                       std::string(61, '[') + "1" + std::string(61, ']'));
         if (body.size() + 16 < bytes) {
           body.insert(1, absl::StrCat(R"("user":")", std::string(bytes - body.size() - 10, 'u'),
                                       R"(",)"));
         }
         return body;
       }},
      {"objects nested 62 deep, repeated", true,
       [](size_t bytes) {
         std::string chain;
         for (int i = 0; i < 61; ++i) chain += R"({"a":)";
         chain += "1" + std::string(61, '}');
         return MetadataOf(bytes, api::kMaxArrayElements, chain);
       }},
      {"small messages (40 bytes each, up to the 100,000 limit)", true,
       [](size_t bytes) {
         const std::string msg = R"({"role":"user","content":"xxxxxxxxxxxxx"})";
         std::string out = R"({"model":"m","messages":[)";
         Fill(out, bytes, api::kMaxMessages, [&](size_t) { return msg; });
         return out + "]}";
       }},
      {"100,000 messages (the limit) filling the body", true,
       [](size_t bytes) {
         const size_t each = std::max<size_t>(1, bytes / api::kMaxMessages);
         const std::string msg = absl::StrCat(R"({"role":"user","content":")",
                                              std::string(each > 30 ? each - 30 : 1, 'x'), "\"}");
         std::string out = R"({"model":"m","messages":[)";
         Fill(out, SIZE_MAX, api::kMaxMessages, [&](size_t) { return msg; });
         return out + "]}";
       }},
      {"2,048 tools (the limit), wide schemas", true,
       [](size_t bytes) {
         const size_t props = std::max<size_t>(1, bytes / api::kMaxTools / 20);
         std::string schema = R"({"type":"object","properties":{)";
         Fill(schema, SIZE_MAX, props,
              [](size_t i) { return absl::StrCat("\"p", i, R"(":{"type":"string"})"); });
         schema += "}}";
         std::string out = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[)";
         Fill(out, SIZE_MAX, api::kMaxTools, [&](size_t i) {
           return absl::StrCat(R"({"type":"function","function":{"name":"f)", i,
                               R"(","parameters":)", schema, "}}");
         });
         return out + "]}";
       }},
      {"content parts, 1 byte each", true,
       [](size_t bytes) {
         std::string out = R"({"model":"m","messages":[{"role":"user","content":[)";
         Fill(out, bytes, api::kMaxArrayElements,
              [](size_t) { return std::string(R"({"type":"text","text":"a"})"); });
         return out + "]}]}";
       }},
      {"long string, every char escaped", true,
       [](size_t bytes) {
         std::string out = R"({"model":"m","messages":[{"role":"user","content":")";
         while (out.size() < bytes) out += R"(\u00e9\n\"\\\t\ud83d\ude00)";
         return out + "\"}]}";
       }},
      {"stop string of the body's size (refused)", true,
       [](size_t bytes) { return ChatWith(R"("stop":[")" + std::string(bytes, 's') + "\"]"); }},
      {"tiny arrays [] (1M)", true,
       [](size_t bytes) { return MetadataOf(bytes, api::kMaxArrayElements, "[]"); }},
      {"tiny arrays, 1,000 per array", true,
       [](size_t bytes) {
         std::string group = "[";
         Fill(group, SIZE_MAX, 1000, [](size_t) { return std::string("[{}]"); });
         group += "]";
         return MetadataOf(bytes, SIZE_MAX, group);
       }},
      {"long numbers", true,
       [](size_t bytes) {
         return MetadataOf(bytes, api::kMaxArrayElements, "-1.2345678901234567890123456789e-300");
       }},
      {"one number of the body's size", true,
       [](size_t bytes) { return ChatWith(R"("metadata":1)" + std::string(bytes, '7')); }},
      {"tool_calls arguments: wide object in a string", true,
       [](size_t bytes) {
         std::string args = "{";
         Fill(args, bytes, SIZE_MAX, [](size_t i) { return absl::StrCat(R"(\"a)", i, R"(\":1)"); });
         args += "}";
         return absl::StrCat(
             R"({"model":"m","messages":[{"role":"user","content":"q"},)",
             R"({"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",)",
             R"("function":{"name":"f","arguments":")", args, R"("}}]},)",
             R"({"role":"tool","tool_call_id":"c","content":"r"}]})");
       }},
      {"chat_template_kwargs, 10,000 keys", true,
       [](size_t) {
         return ChatWith(R"("chat_template_kwargs":)" + WideObject(api::kMaxObjectKeys));
       }},
      {"token-id prompt (completions, 1M ids)", false,
       [](size_t bytes) {
         std::string out = R"({"model":"m","prompt":[)";
         Fill(out, bytes, api::kMaxArrayElements,
              [](size_t i) { return std::to_string(i % 150000); });
         return out + "]}";
       }},
  };
}

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Wall and this thread's CPU time of one run, in ms. On a busy machine the CPU time is what the
// work costs; the wall time adds the waits for a core.
struct Timing {
  double wall = 1e300, cpu = 1e300;
};

// The best of `reps` runs of fn (each figure on its own).
Timing Best(int reps, const std::function<void()>& fn) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    const double c0 = ThreadCpuMs();
    fn();
    best.cpu = std::min(best.cpu, ThreadCpuMs() - c0);
    best.wall = std::min(best.wall, MsSince(t0));
  }
  return best;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "wall / CPU" ms per MB.
std::string PerMb(Timing t, double mb) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f", t.wall / mb, t.cpu / mb);
  return buf;
}

// Prints the parse table; returns the accepted shape with the highest parse ms per MB.
std::string ParseTable(size_t bytes, int reps, const common::ChatTemplate* tmpl) {
  std::printf(
      "| shape | body MB | result | parse + validate ms | parse + validate ms/MB, wall / CPU "
      "| nlohmann::json::parse ms/MB | context ms/MB | render ms/MB |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  double worst = -1;
  std::string worst_name;
  for (const Shape& shape : Shapes()) {
    const std::string body = shape.make(bytes);
    const double mb = static_cast<double>(body.size()) / (1 << 20);
    absl::StatusOr<CompletionRequest> parsed;
    const Timing parse = Best(reps, [&] {
      parsed =
          shape.chat ? api::ParseChatCompletionRequest(body) : api::ParseCompletionRequest(body);
    });
    // The reference: nlohmann's parse into its std::map-based json (no key order; the
    // ordered_json parse is the quadratic one this replaced), document freed as ours is.
    const Timing reference = Best(reps, [&] {
      nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    });
    std::string result = "200";
    if (!parsed.ok()) {
      const std::string code = api::ErrorCode(parsed.status());
      std::string limit;
      const std::string_view msg(parsed.status().message().data(),
                                 parsed.status().message().size());
      if (size_t at = msg.find("(limit "); at != std::string_view::npos) {
        limit = std::string(msg.substr(at + 7, msg.find(':', at) - at - 7));
      }
      result = absl::StrCat("400 ", limit.empty() ? code : limit);
    } else if (parse.cpu / mb > worst) {
      worst = parse.cpu / mb;
      worst_name = shape.name;
    }
    std::string context_cell = "-", render_cell = "-";
    if (parsed.ok() && shape.chat) {
      absl::StatusOr<nlohmann::ordered_json> ctx;
      const Timing context = Best(reps, [&] { ctx = chat::BuildTemplateContext(*parsed, {}); });
      context_cell = ctx.ok() ? PerMb(context, mb) : "error";
      if (ctx.ok() && tmpl != nullptr) {
        absl::StatusOr<std::string> text;
        const Timing render = Best(1, [&] { text = tmpl->Render(*ctx); });
        render_cell = text.ok()
                          ? PerMb(render, mb)
                          : absl::StrCat(PerMb(render, mb),
                                         " (refused: ", text.status().message().substr(0, 40), ")");
      }
    }
    std::printf("| %s | %.2f | %s | %.1f | %s | %s | %s | %s |\n", shape.name, mb, result.c_str(),
                parse.wall, PerMb(parse, mb).c_str(), PerMb(reference, mb).c_str(),
                context_cell.c_str(), render_cell.c_str());
    std::fflush(stdout);
  }
  return worst_name;
}

// ---- the small request's delay through the real HTTP server --------------------------------

// Answers every request at once with an empty completion.
class InstantBackend : public api::CompletionBackend {
 public:
  class NoHandle : public api::GenerationHandle {
   public:
    void Cancel() override {}
  };
  std::unique_ptr<api::GenerationHandle> Generate(
      const CompletionRequest& request, std::shared_ptr<api::GenerationObserver> obs) override {
    obs->OnStart({request.model});
    obs->OnEnd({});
    return std::make_unique<NoHandle>();
  }
};

class NoState : public api::RouterState {
 public:
  std::vector<api::ModelCard> Models() const override { return {}; }
  api::Readiness Ready() const override { return {true, ""}; }
  void WriteMetrics(api::PrometheusText&) const override {}
};

struct DelayResult {
  double p50 = 0, max = 0;
  int big_done = 0;
};

DelayResult MeasureSmallDelay(const std::string& big_body, int big_clients, int smalls,
                              bool offload) {
  InstantBackend backend;
  NoState state;
  api::ApiMetrics metrics;
  api::OpenAiApiOptions options;
  if (!offload) options.inline_body_bytes = std::numeric_limits<size_t>::max();
  api::OpenAiApi api(backend, state, metrics, options);
  http::HttpServerOptions http_options;
  http_options.max_body_bytes = 16 << 20;
  api::OpenAiApi::ConfigureServer(http_options, &metrics);
  http::HttpServer server(http_options);
  api.Register(server);
  if (!server.Start().ok()) std::abort();
  const int port = server.port();

  std::atomic<bool> stop{false};
  std::atomic<int> big_done{0};
  std::vector<std::thread> big;
  const std::string big_request =
      testing::RawHttpClient::Request("POST", "/v1/chat/completions", big_body);
  for (int i = 0; i < big_clients; ++i) {
    big.emplace_back([&] {
      testing::RawHttpClient client(port);
      while (!stop.load()) {
        if (!client.Send(big_request)) return;
        if (!client.ReadResponse(std::chrono::seconds(120))) return;
        big_done.fetch_add(1);
      }
    });
  }
  // Let the large bodies arrive and their parsing start.
  std::this_thread::sleep_for(std::chrono::milliseconds(big_clients > 0 ? 300 : 0));
  std::vector<double> ms;
  const std::string small = testing::RawHttpClient::Request(
      "POST", "/v1/chat/completions",
      R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  for (int i = 0; i < smalls; ++i) {
    testing::RawHttpClient client(port);
    const Clock::time_point t0 = Clock::now();
    client.Send(small);
    auto reply = client.ReadResponse(std::chrono::seconds(120));
    ms.push_back(reply && reply->status == 200 ? MsSince(t0) : 1e9);
    std::this_thread::sleep_for(std::chrono::milliseconds(37));
  }
  stop = true;
  for (std::thread& t : big) t.join();
  server.Stop(absl::Seconds(5));
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.back(), big_done.load()};
}

int Main(int argc, char** argv) {
  double mb = 4;
  int reps = 3, big_clients = 2, smalls = 20;
  bool render = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "0";
    if (a == "--no-render") render = false;
    if (a == "--mb") mb = std::atof(v);
    if (a == "--reps") reps = std::atoi(v);
    if (a == "--big") big_clients = std::atoi(v);
    if (a == "--small") smalls = std::atoi(v);
  }
  const size_t bytes = static_cast<size_t>(mb * (1 << 20));

  std::unique_ptr<common::ChatTemplate> tmpl;
  if (render) {
    const std::string source = ReadFile(DELTASERVE_DEFAULT_FIXTURES_DIR "/templates/qwen3.5.jinja");
    if (auto parsed = common::ChatTemplate::Parse(source); parsed.ok()) {
      tmpl = std::make_unique<common::ChatTemplate>(*std::move(parsed));
    } else {
      std::printf("(no render column: qwen3.5.jinja not readable)\n");
    }
  }
  std::printf("## Parse + validation per shape (bodies of about %.1f MB; best of %d)\n\n", mb,
              reps);
  const std::string worst = ParseTable(bytes, reps, tmpl.get());

  // The concurrency run's large bodies: the accepted shape that parsed slowest, near the 8 MB cap.
  std::string big_body;
  for (const Shape& s : Shapes()) {
    if (s.name == worst) big_body = s.make(7 << 20);
  }
  std::printf("\n## A small request's delay while %d clients send %.1f MB bodies (%s)\n\n",
              big_clients, static_cast<double>(big_body.size()) / (1 << 20), worst.c_str());
  std::printf(
      "| large bodies handled | small p50 ms | small max ms | large done |\n|---|---|---|---|\n");
  const DelayResult idle = MeasureSmallDelay(big_body, 0, smalls, true);
  std::printf("| (none sent) | %.2f | %.2f | - |\n", idle.p50, idle.max);
  const DelayResult pooled = MeasureSmallDelay(big_body, big_clients, smalls, true);
  std::printf("| on the request pool (now) | %.2f | %.2f | %d |\n", pooled.p50, pooled.max,
              pooled.big_done);
  const DelayResult inline_ = MeasureSmallDelay(big_body, big_clients, smalls, false);
  std::printf("| on the io threads (before) | %.2f | %.2f | %d |\n", inline_.p50, inline_.max,
              inline_.big_done);
  return 0;
}

}  // namespace
}  // namespace deltaserve::router::bench

int main(int argc, char** argv) { return deltaserve::router::bench::Main(argc, argv); }
