// deltaserve-scripted-worker: the ScriptedWorker TEST DOUBLE (scripted_worker.h) as a process, for
// tests that drive the real deltaserve-router from outside (tests/integration/openai_agents/). It
// serves one model with the byte-level test vocabulary and answers the n-th Generate call with
// the n-th output of --outputs (a JSON array of strings; the last one repeats), streamed in
// pieces of --piece-bytes bytes, so tags split across pieces too. Not a worker: worker/ is.
//
//   deltaserve-scripted-worker --outputs outputs.json [--model m] [--chat-template t.jinja]
//                              [--port 0] [--piece-bytes 5]
// prints "listening on 127.0.0.1:PORT" on stderr and serves until SIGTERM / SIGINT.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/router/scripted_worker.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

int Fail(const std::string& why) {
  std::cerr << "deltaserve-scripted-worker: " << why << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using deltaserve::router::testing::GenerateScript;
  using deltaserve::router::testing::ScriptedModel;
  using deltaserve::router::testing::ScriptedWorker;
  std::string outputs_path, template_path, model = "m";
  int port = 0;
  size_t piece_bytes = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Fail("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--outputs") {
      outputs_path = v;
    } else if (a == "--chat-template") {
      template_path = v;
    } else if (a == "--model") {
      model = v;
    } else if (a == "--port") {
      port = std::atoi(v.c_str());
    } else if (a == "--piece-bytes") {
      piece_bytes = static_cast<size_t>(std::max(1, std::atoi(v.c_str())));
    } else {
      return Fail("unknown argument " + a);
    }
  }
  std::string text;
  if (outputs_path.empty() || !ReadFile(outputs_path, text)) {
    return Fail("--outputs FILE (a JSON array of strings) is required and must be readable");
  }
  const nlohmann::json outputs = nlohmann::json::parse(text, nullptr, false);
  if (!outputs.is_array() || outputs.empty()) return Fail(outputs_path + ": not a JSON array");
  std::vector<GenerateScript> scripts;
  for (const nlohmann::json& o : outputs) {
    if (!o.is_string()) return Fail(outputs_path + ": every output must be a string");
    const std::string s = o.get<std::string>();
    GenerateScript script;
    script.pieces.clear();
    for (size_t at = 0; at < s.size(); at += piece_bytes) {
      script.pieces.push_back(s.substr(at, piece_bytes));
    }
    scripts.push_back(std::move(script));
  }
  ScriptedModel m;
  m.name = model;
  if (!template_path.empty() && !ReadFile(template_path, m.chat_template)) {
    return Fail("cannot read " + template_path);
  }
  ScriptedWorker worker({m});
  worker.SetScripts(std::move(scripts));
  worker.Start(port);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::fprintf(stderr, "listening on %s\n", worker.address().c_str());
  while (g_stop == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  worker.Stop();
  return 0;
}
