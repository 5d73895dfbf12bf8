// The router's YAML configuration and API-keys file: a full example parses into the expected
// values, and each kind of mistake is refused with a message naming the key path (and line).
// The full example mirrors the one in docs/router.md ("Configuration").

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/config/api_keys_file.h"
#include "router/config/router_config_validation.h"
#include "router/config/router_config_yaml.h"

namespace deltaserve::router {
namespace {

using ::testing::HasSubstr;

constexpr char kHashA[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
constexpr char kHashB[] = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

constexpr char kFullExample[] = R"yaml(
# deltaserve-router configuration
listen: 0.0.0.0:8080
workers:
  - 10.0.0.11:50051
  - 10.0.0.12:50051
  - "[::1]:50052"
models:
  - name: qwen3.5-4b
    served_name: Qwen3.5-4B-Q4_K_M
    allow_special_tokens_in_content: true
    defaults:
      temperature: 0.7
      top_p: 0.8
      top_k: 20
      min_p: 0
      repetition_penalty: 1.05
      max_tokens: 2048
      enable_thinking: false
  - name: qwen2.5-coder-1.5b
aliases:
  fast: [qwen3.5-4b, qwen2.5-coder-1.5b]
  default: [fast]
api_keys:
  - name: ci
    sha256: 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08
    models: [fast]
    requests_per_minute: 60
    tokens_per_minute: 100000
    max_concurrent_requests: 3
  - name: admin
    sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
api_keys_file: keys.txt
routing:
  max_attempts: 4
  retry_backoff_ms: 25
  health_interval_ms: 500
  circuit_failures: 5
  circuit_open_ms: 10000
  connect_timeout_ms: 1500
  prefix_affinity: false
  prefix_max_waiting: 8
max_body_bytes: 4194304
)yaml";

absl::Status ParseError(const std::string& yaml) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(yaml);
  EXPECT_FALSE(c.ok()) << "accepted:\n" << yaml;
  if (!c.ok()) {
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  }
  return c.status();
}

std::string ErrorMessage(const std::string& yaml) {
  return std::string(ParseError(yaml).message());
}

TEST(RouterConfigYamlTest, FullExampleParses) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(kFullExample);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "0.0.0.0:8080");
  ASSERT_EQ(c->workers.size(), 3u);
  EXPECT_EQ(c->workers[0].address, "10.0.0.11:50051");
  EXPECT_EQ(c->workers[2].address, "[::1]:50052");
  ASSERT_EQ(c->models.size(), 2u);
  const ModelConfig& m = c->models[0];
  EXPECT_EQ(m.name, "qwen3.5-4b");
  EXPECT_EQ(m.served_name, "Qwen3.5-4B-Q4_K_M");
  EXPECT_EQ(m.defaults.temperature, 0.7);
  EXPECT_EQ(m.defaults.top_p, 0.8);
  EXPECT_EQ(m.defaults.top_k, 20);
  EXPECT_EQ(m.defaults.min_p, 0.0);
  EXPECT_EQ(m.defaults.repetition_penalty, 1.05);
  EXPECT_EQ(m.defaults.max_tokens, 2048);
  EXPECT_EQ(m.defaults.enable_thinking, false);
  EXPECT_EQ(m.defaults.allow_special_tokens_in_content, true);
  EXPECT_EQ(c->models[1].served_name, "qwen2.5-coder-1.5b");  // defaults to name
  EXPECT_FALSE(c->models[1].defaults.temperature.has_value());
  EXPECT_FALSE(c->models[1].defaults.allow_special_tokens_in_content.has_value());
  ASSERT_EQ(c->aliases.size(), 2u);
  EXPECT_EQ(c->aliases[0].name, "fast");
  EXPECT_THAT(c->aliases[0].chain, ::testing::ElementsAre("qwen3.5-4b", "qwen2.5-coder-1.5b"));
  EXPECT_EQ(c->aliases[1].name, "default");
  ASSERT_EQ(c->api_keys.size(), 2u);
  EXPECT_EQ(c->api_keys[0].name, "ci");
  EXPECT_EQ(c->api_keys[0].sha256_hex, kHashA);  // lowercased
  EXPECT_THAT(c->api_keys[0].models, ::testing::ElementsAre("fast"));
  EXPECT_EQ(c->api_keys[0].limit.requests_per_minute, 60);
  EXPECT_EQ(c->api_keys[0].limit.tokens_per_minute, 100000);
  EXPECT_EQ(c->api_keys[0].limit.max_concurrent_requests, 3);
  EXPECT_EQ(c->api_keys[1].limit.requests_per_minute, 0);
  EXPECT_EQ(c->api_keys[1].limit.max_concurrent_requests, 0);
  EXPECT_EQ(c->api_keys_file, "keys.txt");
  EXPECT_EQ(c->routing.max_attempts, 4);
  EXPECT_EQ(c->routing.retry_backoff_ms, 25);
  EXPECT_EQ(c->routing.health_interval_ms, 500);
  EXPECT_EQ(c->routing.circuit_failures, 5);
  EXPECT_EQ(c->routing.circuit_open_ms, 10000);
  EXPECT_EQ(c->routing.connect_timeout_ms, 1500);
  EXPECT_FALSE(c->routing.prefix_affinity);
  EXPECT_EQ(c->routing.prefix_max_waiting, 8);
  EXPECT_EQ(c->max_body_bytes, 4194304u);
}

// allow_special_tokens_in_content (docs/chat.md, "Special tokens in content"): a boolean per
// model, unset unless the model gives it.
TEST(RouterConfigYamlTest, AllowSpecialTokensInContentIsABooleanPerModel) {
  EXPECT_THAT(ErrorMessage("models:\n  - name: m\n    allow_special_tokens_in_content: maybe\n"),
              HasSubstr("models[0].allow_special_tokens_in_content"));
  absl::StatusOr<RouterConfig> c =
      ParseRouterConfigYaml("models:\n  - name: m\n    allow_special_tokens_in_content: false\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->models[0].defaults.allow_special_tokens_in_content, false);
}

// clamp_max_tokens (docs/router.md, "max_tokens and the context"): true / false for every API or
// a mapping of the APIs, at the top level and per model; unset keys stay unset (the API's
// default applies at routing).
TEST(RouterConfigYamlTest, ClampMaxTokensIsABooleanOrAMappingOfTheApis) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(
      "clamp_max_tokens: true\n"
      "models:\n  - name: m\n    clamp_max_tokens: {anthropic: false, completions: true}\n"
      "  - name: n\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->clamp_max_tokens, (ClampMaxTokens{true, true, true, true}));
  EXPECT_EQ(c->models[0].defaults.clamp_max_tokens,
            (ClampMaxTokens{std::nullopt, true, std::nullopt, false}));
  EXPECT_EQ(c->models[1].defaults.clamp_max_tokens, ClampMaxTokens{});
  c = ParseRouterConfigYaml("clamp_max_tokens: {chat_completions: false, responses: true}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->clamp_max_tokens, (ClampMaxTokens{false, std::nullopt, true, std::nullopt}));
  EXPECT_EQ(ParseRouterConfigYaml("").value().clamp_max_tokens, ClampMaxTokens{});

  EXPECT_THAT(ErrorMessage("clamp_max_tokens: sometimes\n"),
              HasSubstr("clamp_max_tokens (line 1, column 19): must be true or false"));
  EXPECT_THAT(ErrorMessage("clamp_max_tokens: {anthropic: 1}\n"),
              HasSubstr("clamp_max_tokens.anthropic"));
  EXPECT_THAT(ErrorMessage("clamp_max_tokens: {messages: true}\n"),
              HasSubstr("unknown key 'messages' in clamp_max_tokens (known: chat_completions, "
                        "completions, responses, anthropic)"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: m\n    clamp_max_tokens: [true]\n"),
              HasSubstr("models[0].clamp_max_tokens"));
}

TEST(RouterConfigYamlTest, EmptyDocumentGivesDefaults) {
  for (const char* yaml : {"", "# nothing\n", "listen: ~\n"}) {
    absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml(yaml);
    ASSERT_TRUE(c.ok()) << c.status();
    const RouterConfig defaults;
    EXPECT_EQ(c->listen, defaults.listen);
    EXPECT_TRUE(c->workers.empty());
    EXPECT_EQ(c->routing.max_attempts, defaults.routing.max_attempts);
    EXPECT_EQ(c->max_body_bytes, defaults.max_body_bytes);
  }
}

// Routing by prefix is on by default (it does nothing until workers report snapshot keys), with
// the session-affinity threshold; the knobs are type- and range-checked.
TEST(RouterConfigYamlTest, PrefixRoutingKnobs) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfigYaml("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->routing.prefix_affinity);
  EXPECT_EQ(c->routing.prefix_max_waiting, 4);
  c = ParseRouterConfigYaml("routing: {prefix_affinity: true, prefix_max_waiting: 1}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->routing.prefix_affinity);
  EXPECT_EQ(c->routing.prefix_max_waiting, 1);
  EXPECT_THAT(ErrorMessage("routing: {prefix_affinity: sometimes}\n"),
              HasSubstr("routing.prefix_affinity (line 1, column 28): must be true or false"));
  EXPECT_THAT(ErrorMessage("routing:\n  prefix_max_waiting: 0\n"),
              HasSubstr("routing.prefix_max_waiting (line 2, column 23): must be in [1, 1024], "
                        "got 0"));
  EXPECT_THAT(ErrorMessage("routing: {prefix_max_waiting: 5000}\n"),
              HasSubstr("routing.prefix_max_waiting"));
  EXPECT_THAT(ErrorMessage("routing: {prefix_max_wait: 2}\n"),
              HasSubstr("unknown key 'prefix_max_wait' in routing"));
}

TEST(RouterConfigYamlTest, MalformedYamlNamesLineAndColumn) {
  EXPECT_THAT(ErrorMessage("workers: [a:1, b:2\nlisten: x\n"),
              HasSubstr("invalid YAML at line 2, column"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n   bad indent: 1\n"),
              HasSubstr("invalid YAML at line 3"));
  EXPECT_THAT(ErrorMessage("- just\n- a list\n"), HasSubstr("must be a mapping"));
}

TEST(RouterConfigYamlTest, DeeplyNestedYamlIsRefusedNotACrash) {
  const std::string deep = "workers: " + std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorMessage(deep), HasSubstr("invalid YAML"));
}

TEST(RouterConfigYamlTest, UnknownKeysAreNamed) {
  EXPECT_THAT(ErrorMessage("listen: 127.0.0.1:80\nworkerz: []\n"),
              HasSubstr("workerz (line 2, column 1): unknown key 'workerz'"));
  EXPECT_THAT(
      ErrorMessage("models:\n  - name: a\n    defaults:\n      temprature: 0.5\n"),
      HasSubstr("models[0].defaults.temprature (line 4, column 7): unknown key 'temprature' in "
                "models[0].defaults (known: temperature, top_p"));
  EXPECT_THAT(ErrorMessage("routing: {max_attempt: 2}\n"),
              HasSubstr("unknown key 'max_attempt' in routing"));
  EXPECT_THAT(
      ErrorMessage("api_keys:\n  - name: k\n    sha256: " + std::string(kHashA) + "\n    rpm: 5\n"),
      HasSubstr("api_keys[0].rpm"));
}

TEST(RouterConfigYamlTest, DuplicateMappingKeyIsRefused) {
  EXPECT_THAT(ErrorMessage("listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n"),
              HasSubstr("listen (line 2, column 1): is given twice"));
}

TEST(RouterConfigYamlTest, WrongTypesAreNamed) {
  EXPECT_THAT(ErrorMessage("workers: 10.0.0.1:50051\n"), HasSubstr("workers (line 1"));
  EXPECT_THAT(ErrorMessage("workers: 10.0.0.1:50051\n"), HasSubstr("must be a list"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {temperature: hot}\n"),
              HasSubstr("models[0].defaults.temperature (line 3, column 29): must be a number, "
                        "got 'hot'"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {top_k: 2.5}\n"),
              HasSubstr("models[0].defaults.top_k (line 3"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {enable_thinking: maybe}\n"),
              HasSubstr("must be true or false"));
  EXPECT_THAT(ErrorMessage("models:\n  - served_name: a\n"),
              HasSubstr("models[0].name (line 2, column 5): is missing"));
  EXPECT_THAT(ErrorMessage("aliases: [fast]\n"), HasSubstr("aliases (line 1"));
  EXPECT_THAT(ErrorMessage("aliases: {fast: a}\n"),
              HasSubstr("aliases.fast (line 1, column 17): must be a list of model names"));
  EXPECT_THAT(ErrorMessage("routing: {max_attempts: 99999999999}\n"),
              HasSubstr("routing.max_attempts (line 1, column 25): is out of range"));
  EXPECT_THAT(ErrorMessage("max_body_bytes: -1\n"), HasSubstr("max_body_bytes"));
}

TEST(RouterConfigYamlTest, RangesAreChecked) {
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults:\n      top_p: 1.5\n"),
              HasSubstr("models[0].defaults.top_p (line 4, column 14): must be in (0, 1], got "
                        "1.5"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {temperature: 2.5}\n"),
              HasSubstr("models[0].defaults.temperature"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {top_k: -2}\n"),
              HasSubstr("models[0].defaults.top_k"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {max_tokens: 0}\n"),
              HasSubstr("models[0].defaults.max_tokens"));
  EXPECT_THAT(ErrorMessage("models:\n  - name: a\n    defaults: {repetition_penalty: 0}\n"),
              HasSubstr("models[0].defaults.repetition_penalty"));
  EXPECT_THAT(ErrorMessage("routing:\n  max_attempts: 0\n"),
              HasSubstr("routing.max_attempts (line 2, column 17): must be in [1, 100], got 0"));
  EXPECT_THAT(ErrorMessage("routing: {health_interval_ms: 1}\n"),
              HasSubstr("routing.health_interval_ms"));
  EXPECT_THAT(ErrorMessage("routing: {retry_backoff_ms: -5}\n"),
              HasSubstr("routing.retry_backoff_ms"));
  EXPECT_THAT(ErrorMessage("max_body_bytes: 10\n"),
              HasSubstr("max_body_bytes (line 1, column 17): must be in [1024, 1073741824]"));
  EXPECT_THAT(ErrorMessage("api_keys:\n  - {name: k, sha256: " + std::string(kHashA) +
                           ", tokens_per_minute: -1}\n"),
              HasSubstr("api_keys[0].tokens_per_minute"));
  EXPECT_THAT(ErrorMessage("api_keys:\n  - {name: k, sha256: " + std::string(kHashA) +
                           ", max_concurrent_requests: -2}\n"),
              HasSubstr("api_keys[0].max_concurrent_requests"));
}

TEST(RouterConfigYamlTest, AddressesAreChecked) {
  EXPECT_THAT(ErrorMessage("listen: localhost\n"), HasSubstr("listen (line 1, column 9)"));
  EXPECT_THAT(ErrorMessage("listen: 127.0.0.1:99999\n"), HasSubstr("listen"));
  EXPECT_THAT(ErrorMessage("workers: ['10.0.0.1:0']\n"), HasSubstr("workers[0]"));
  EXPECT_THAT(ErrorMessage("workers: ['::1:50051']\n"), HasSubstr("brackets"));
  EXPECT_THAT(
      ErrorMessage("workers: [a:1, b:2, a:1]\n"),
      HasSubstr("workers[2] (line 1, column 21): duplicate worker 'a:1' (also workers[0])"));
  EXPECT_TRUE(ParseRouterConfigYaml("listen: 127.0.0.1:0\n").ok());  // port 0: any free port
}

TEST(RouterConfigYamlTest, DuplicateNamesAreRefused) {
  EXPECT_THAT(ErrorMessage("models: [{name: a}, {name: b}, {name: a}]\n"),
              HasSubstr("models[2].name (line 1, column 39): duplicate model name 'a' (also "
                        "models[0])"));
  EXPECT_THAT(ErrorMessage("models: [{name: a}]\naliases: {a: [a]}\n"),
              HasSubstr("aliases.a (line 2, column 11): duplicate name 'a' (also models[0])"));
  EXPECT_THAT(ErrorMessage("aliases: {f: [a, b, a]}\n"),
              HasSubstr("aliases.f[2] (line 1, column 21): 'a' appears twice"));
  EXPECT_THAT(ErrorMessage(absl::StrCat("api_keys:\n  - {name: k, sha256: ", kHashA,
                                        "}\n  - {name: k, sha256: ", kHashB, "}\n")),
              HasSubstr("api_keys[1].name (line 3, column 12): duplicate key name 'k'"));
  EXPECT_THAT(ErrorMessage(absl::StrCat("api_keys:\n  - {name: k1, sha256: ", kHashA,
                                        "}\n  - {name: k2, sha256: ", kHashA, "}\n")),
              HasSubstr("api_keys[1].sha256 (line 3, column 24): the same hash as api_keys[0]"));
  EXPECT_THAT(ErrorMessage("models: [{name: 'my model'}]\n"),
              HasSubstr("models[0].name (line 1, column 17)"));
}

TEST(RouterConfigYamlTest, AliasesMustNameKnownModelsWhenModelsAreListed) {
  EXPECT_THAT(ErrorMessage("models: [{name: a}]\naliases:\n  fast: [a, b]\n"),
              HasSubstr("aliases.fast[1] (line 3, column 13): 'b' is neither a model in "
                        "`models` nor an alias"));
  // Without a models list the workers decide which models exist.
  EXPECT_TRUE(ParseRouterConfigYaml("aliases:\n  fast: [a, b]\n").ok());
  EXPECT_THAT(ErrorMessage("aliases: {fast: []}\n"),
              HasSubstr("aliases.fast (line 1, column 11): must list at least one model"));
  EXPECT_THAT(ErrorMessage(absl::StrCat("models: [{name: a}]\napi_keys:\n  - name: k\n    sha256: ",
                                        kHashA, "\n    models: [a, nope]\n")),
              HasSubstr("api_keys[0].models[1] (line 5, column 17): 'nope' is neither"));
}

TEST(RouterConfigYamlTest, AliasCyclesAreRefused) {
  EXPECT_THAT(ErrorMessage("aliases:\n  a: [x, b]\n  b: [c]\n  c: [a]\n"),
              HasSubstr("alias cycle a -> b -> c -> a"));
  EXPECT_THAT(ErrorMessage("aliases:\n  self: [self]\n"), HasSubstr("alias cycle self -> self"));
  // A diamond is not a cycle.
  EXPECT_TRUE(ParseRouterConfigYaml("aliases:\n  a: [b, c]\n  b: [d]\n  c: [d]\n  d: [m]\n").ok());
}

TEST(RouterConfigYamlTest, KeyHashesMustBe64Hex) {
  EXPECT_THAT(ErrorMessage("api_keys:\n  - {name: k, sha256: abc}\n"),
              HasSubstr("api_keys[0].sha256 (line 2, column 23): must be 64 hex digits"));
  std::string bad(kHashA);
  bad[10] = 'g';
  EXPECT_THAT(ErrorMessage("api_keys:\n  - {name: k, sha256: " + bad + "}\n"),
              HasSubstr("must be 64 hex digits"));
  EXPECT_THAT(ErrorMessage("api_keys:\n  - {name: k}\n"),
              HasSubstr("api_keys[0].sha256 (line 2, column 5): is missing"));
}

TEST(ApiKeysFileTest, ParsesKeysCommentsAndModelLists) {
  const std::string text = absl::StrCat("# team keys\n\n  ci   ", kHashA,
                                        "   fast,qwen3.5-4b  # CI runners\n"
                                        "admin\t",
                                        absl::AsciiStrToUpper(kHashB), "\n");
  std::vector<int> lines;
  absl::StatusOr<std::vector<ApiKeyConfig>> keys = ParseApiKeysFile(text, "keys.txt", &lines);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].name, "ci");
  EXPECT_EQ((*keys)[0].sha256_hex, kHashA);
  EXPECT_THAT((*keys)[0].models, ::testing::ElementsAre("fast", "qwen3.5-4b"));
  EXPECT_EQ((*keys)[1].name, "admin");
  EXPECT_EQ((*keys)[1].sha256_hex, kHashB);
  EXPECT_TRUE((*keys)[1].models.empty());
  EXPECT_THAT(lines, ::testing::ElementsAre(3, 4));
}

TEST(ApiKeysFileTest, ErrorsNameFileAndLine) {
  EXPECT_THAT(ParseApiKeysFile("# x\nci\n", "keys.txt").status().message(),
              HasSubstr("keys.txt:2: expected 'name sha256hex [model,model]', got 1 field"));
  EXPECT_THAT(ParseApiKeysFile("ci deadbeef\n", "keys.txt").status().message(),
              HasSubstr("keys.txt:1: key 'ci': the hash must be 64 hex digits"));
  EXPECT_THAT(
      ParseApiKeysFile(absl::StrCat("ci ", kHashA, " a,,b\n"), "keys.txt").status().message(),
      HasSubstr("keys.txt:1: key 'ci': empty model name"));
  EXPECT_THAT(
      ParseApiKeysFile(absl::StrCat("ci ", kHashA, " a extra\n"), "keys.txt").status().message(),
      HasSubstr("got 4 fields"));
}

class LoadRouterConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("router_config_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(LoadRouterConfigFileTest, MergesTheKeysFileRelativeToTheConfig) {
  Write("keys.txt", absl::StrCat("# extra keys\nrunner ", kHashB, " fast\n"));
  const std::string path =
      Write("router.yaml", absl::StrCat("models: [{name: m}]\naliases: {fast: [m]}\napi_keys:\n"
                                        "  - {name: ci, sha256: ",
                                        kHashA, "}\napi_keys_file: keys.txt\n"));
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->api_keys.size(), 2u);
  EXPECT_EQ(c->api_keys[1].name, "runner");
  EXPECT_EQ(c->api_keys[1].sha256_hex, kHashB);
  EXPECT_THAT(c->api_keys[1].models, ::testing::ElementsAre("fast"));
}

TEST_F(LoadRouterConfigFileTest, ConflictsWithTheKeysFileNameItsLine) {
  const std::string keys = Write("keys.txt", absl::StrCat("\n\nci ", kHashB, "\n"));
  const std::string path = Write(
      "router.yaml",
      absl::StrCat("api_keys:\n  - {name: ci, sha256: ", kHashA, "}\napi_keys_file: keys.txt\n"));
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr(path + ": api_keys[1].name (" + keys + ":3): duplicate key name 'ci'"));
}

TEST_F(LoadRouterConfigFileTest, KeysFileModelsAreChecked) {
  Write("keys.txt", absl::StrCat("ci ", kHashA, " m,unknown\n"));
  const std::string path = Write("router.yaml", "models: [{name: m}]\napi_keys_file: keys.txt\n");
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("api_keys[0].models[1]"));
  EXPECT_THAT(c.status().message(), HasSubstr("keys.txt:1"));
}

// A model's chat_template file (docs/chat.md): read relative to the config, its text kept; one that
// does not parse is refused naming the key, the file and the template's line.
TEST_F(LoadRouterConfigFileTest, ChatTemplateFilesAreReadAndParsed) {
  Write("good.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  Write("bad.jinja", "line one\n{% for m in %}\n");
  const std::string good =
      Write("router.yaml", "models:\n  - name: m\n    chat_template: good.jinja\n");
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(good);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->models[0].defaults.chat_template,
            "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string bad = Write("bad.yaml", "models:\n  - name: m\n    chat_template: bad.jinja\n");
  c = LoadRouterConfigFile(bad);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("models[0].chat_template"));
  EXPECT_THAT(c.status().message(), HasSubstr("bad.jinja"));
  EXPECT_THAT(c.status().message(), HasSubstr("line 2"));
  c = LoadRouterConfigFile(Write("none.yaml", "models:\n  - {name: m, chat_template: no.jinja}\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("no.jinja"));
}

TEST_F(LoadRouterConfigFileTest, MissingFilesAreNamed) {
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile((dir_ / "nope.yaml").string());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("nope.yaml"));

  const std::string path = Write("router.yaml", "api_keys_file: missing-keys.txt\n");
  c = LoadRouterConfigFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("missing-keys.txt"));
}

TEST_F(LoadRouterConfigFileTest, ErrorsStartWithThePath) {
  const std::string path = Write("router.yaml", "listen: [1]\n");
  absl::StatusOr<RouterConfig> c = LoadRouterConfigFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(path + ": listen (line 1, column 9): must be a "
                                                     "string"));
}

TEST(ValidateRouterConfigTest, ChecksConfigsBuiltInCode) {
  // What main.cc does after merging --worker flags into a parsed config.
  RouterConfig c;
  EXPECT_TRUE(ValidateRouterConfig(c).ok());
  c.workers.push_back({"127.0.0.1:50051"});
  c.workers.push_back({"127.0.0.1:50051"});
  EXPECT_THAT(ValidateRouterConfig(c).message(),
              HasSubstr("workers[1]: duplicate worker '127.0.0.1:50051'"));
  c.workers.pop_back();
  c.models.push_back({"m", "", {}});
  EXPECT_THAT(ValidateRouterConfig(c).message(), HasSubstr("models[0].served_name"));
}

}  // namespace
}  // namespace deltaserve::router
