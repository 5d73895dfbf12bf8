// ChatTemplate::RenderMarked (common/jinja/chat_template.h): which bytes of a rendering came from
// the context (the request) rather than the template (issue 17, docs/chat_templates.md). Every
// fixture of ../shared/fixtures/chat renders the same text marked, and on the Qwen3 vocabulary
// (../shared/golden/qwen3-vocab-qwen35pre.gguf) its marked tokenization equals the plain one with
// special parsing, so the marks never cover the template's own markup. The targeted cases write
// context bytes between « and » to show where the marks fall.
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf_file.h"
#include "common/jinja/chat_template.h"
#include "common/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/chat_fixture_context.h"
#include "tests/support/test_paths.h"

namespace deltaserve::common {
namespace {

using Json = nlohmann::ordered_json;
using testing::FixtureContext;
using testing::ReadFile;

// The marked rendering with context bytes between « and »; failures as "ERROR: <message>".
std::string Marked(std::string_view source, const std::string& context,
                   std::vector<std::string> trusted_keys = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  absl::StatusOr<MarkedText> out = t->RenderMarked(Json::parse(context), trusted_keys);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  std::string shown;
  size_t at = 0;
  for (const ByteRange& r : out->untrusted) {
    shown +=
        out->text.substr(at, r.begin - at) + "«" + out->text.substr(r.begin, r.end - r.begin) + "»";
    at = r.end;
  }
  return shown + out->text.substr(at);
}

constexpr char kChat[] = R"({"messages": [{"role": "user", "content": " hi <|x|> "}],
  "tools": [{"name": "f", "args": {"city": "<|y|>"}}], "bos_token": "<s>", "flag": "kw"})";

TEST(ChatTemplateMarks, ConcatenationKeepsMarksByteForByte) {
  const std::string content = "messages[0].content";
  EXPECT_EQ(Marked("<|a|>{{ " + content + " }}<|b|>", kChat), "<|a|>« hi <|x|> »<|b|>");
  EXPECT_EQ(Marked("{{ '<|a|>' ~ " + content + " ~ '<|b|>' }}", kChat), "<|a|>« hi <|x|> »<|b|>");
  EXPECT_EQ(Marked("{{ '<|a|>' + " + content + " + '<|b|>' }}", kChat), "<|a|>« hi <|x|> »<|b|>");
  EXPECT_EQ(Marked("{% set s %}<|a|>{{ " + content + " }}{% endset %}{{ s }}", kChat),
            "<|a|>« hi <|x|> »");
  EXPECT_EQ(Marked("{% macro m(c) %}<|a|>{{ c }}{% endmacro %}{{ m(" + content + ") }}", kChat),
            "<|a|>« hi <|x|> »");
  EXPECT_EQ(Marked("{{ ['<|a|>', " + content + "] | join('<|j|>') }}", kChat),
            "<|a|><|j|>« hi <|x|> »");
  // Trimming keeps the marks on the bytes that remain (Qwen3.5's render_content(...)|trim).
  EXPECT_EQ(Marked("{{ (' <|a|>' ~ " + content + ") | trim }}", kChat), "<|a|>« hi <|x|>»");
  EXPECT_EQ(Marked("{{ (" + content + " ~ '<|a|>\n').strip() }}", kChat), "«hi <|x|> »<|a|>");
  EXPECT_EQ(Marked("{{ (' <|a|>' ~ " + content + ").rstrip() | string }}", kChat),
            " <|a|>« hi <|x|>»");
}

TEST(ChatTemplateMarks, AnythingComputedFromContextIsContext) {
  const std::string c = "messages[0].content";
  for (const std::string& expr : std::vector<std::string>{
           c + " | upper", c + " | tojson", c + "[1:]", c + "[1]", c + ".split('x')[0]",
           c + ".replace('hi', '<|a|>')", c + " * 2", c + " | list | join",
           "messages | map(attribute='content') | join", "messages | tojson", "messages",
           "tools[0].args | tojson", "(tools[0].args | items | list)[0][0]", c + " | indent(2)",
           "'<|a|>{}'.format(" + c + ")"}) {
    const std::string out = Marked("{{ " + expr + " }}", kChat);
    EXPECT_TRUE(out.starts_with("«") && out.ends_with("»") && out.find("«", 1) == out.npos)
        << expr << " -> " << out;
  }
  EXPECT_EQ(Marked("{% for ch in messages[0].content %}{{ ch }}{% endfor %}", kChat),
            "« hi <|x|> »");
}

TEST(ChatTemplateMarks, TemplateTextStaysTemplateText) {
  // Values passed through keep their own marks; control flow on context writes template text.
  EXPECT_EQ(Marked("{{ ['<|a|>', messages[0].content] | first }}", kChat), "<|a|>");
  EXPECT_EQ(Marked("{{ messages[0].missing | default('<|a|>') }}", kChat), "<|a|>");
  EXPECT_EQ(Marked("{% if messages[0].content %}<|a|>{% endif %}{{ flag is defined }}", kChat),
            "<|a|>True");
  EXPECT_EQ(Marked("{% macro m(c) %}{% if c %}<|a|>{% endif %}{% endmacro %}"
                   "{{ m(messages[0].content) }}",
                   kChat),
            "<|a|>");
  EXPECT_EQ(Marked("{{ '<|a|>' | upper }}{{ messages | length }}", kChat), "<|A|>1");
  // The caller's own keys are trusted, the rest of the context (kwargs included) is not.
  EXPECT_EQ(Marked("{{ bos_token }}{{ flag }}", kChat, {"bos_token"}), "<s>«kw»");
  EXPECT_EQ(Marked("{{ bos_token }}", kChat), "«<s>»");
  EXPECT_EQ(
      Marked("{% set ns = namespace(v='') %}{% set ns.v = messages[0].role %}{{ ns.v }}", kChat),
      "«user»");
}

TEST(ChatTemplateMarks, EveryFixtureRendersTheSameTextAndTokenizesAsBefore) {
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf =
      GgufFile::Open(testing::GoldenPath("qwen3-vocab-qwen35pre.gguf"));
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<std::string> trusted = {"bos_token", "eos_token"};
  int rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::FixturesPath("chat"))) {
    if (entry.path().extension() != ".json") continue;
    const std::string name = entry.path().stem().string();
    absl::StatusOr<ChatTemplate> tmpl =
        ChatTemplate::Parse(ReadFile(testing::FixturesPath("templates/" + name + ".jinja")));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    for (const Json& c : Json::parse(ReadFile(entry.path().string()))) {
      if (!c.contains("expected")) continue;
      const std::string label = name + "/" + c.at("name").get<std::string>();
      absl::StatusOr<MarkedText> out = tmpl->RenderMarked(FixtureContext(c), trusted);
      ASSERT_TRUE(out.ok()) << label << ": " << out.status();
      const std::string expected = c.at("expected").get<std::string>();
      EXPECT_EQ(out->text, expected) << label;
      size_t end = 0;
      for (const ByteRange& r : out->untrusted) {
        EXPECT_TRUE(r.begin < r.end && r.end <= out->text.size() && (end == 0 || r.begin > end))
            << label << ": ranges must be sorted, disjoint, non-adjacent, non-empty";
        end = r.end;
      }
      // No fixture message holds control-token text, so marking changes no token.
      EXPECT_EQ((*tok)->EncodeMarked(out->text, out->untrusted),
                (*tok)->Encode(expected, /*parse_special=*/true))
          << label;
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 100);
}

}  // namespace
}  // namespace deltaserve::common
