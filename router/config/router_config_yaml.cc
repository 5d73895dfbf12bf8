#include "router/config/router_config_yaml.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/str_util.h"
#include "common/jinja/chat_template.h"
#include "common/key_material.h"
#include "router/config/api_keys_file.h"
#include "router/config/internal/config_reader.h"
#include "router/config/router_config_validation.h"
#include "router/config/upstream_config.h"

namespace deltaserve::router {
namespace {

using common::Sv;
using internal::ConfigReader;

// Parses `yaml` into `out` with `reader` keeping where each value was.
absl::Status ParseInto(std::string_view yaml, ConfigReader& reader, RouterConfig& out) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  }
  try {
    return reader.Read(root, out);
  } catch (const std::exception& e) {  // yaml-cpp node access; not expected after the checks
    return absl::InvalidArgumentError(absl::StrCat("invalid configuration: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, std::string_view what) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": ", ec.message()));
  if (size > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(what), " ", path, ": ", size,
                                                   " bytes, more than the ", kMaxConfigFileBytes,
                                                   " accepted"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": cannot open"));
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(in.gcount()) != size) {
    return absl::DataLossError(absl::StrCat(Sv(what), " ", path, ": short read"));
  }
  return text;
}

absl::Status Prefixed(const absl::Status& s, std::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(Sv(prefix), ": ", s.message()));
}

// Reads the files (and the environment variable) `w` names, relative paths from `dir`; errors
// start with the key path and its place in the file.
absl::Status LoadChannelFiles(const std::filesystem::path& dir, const std::string& path,
                              const ConfigReader& reader, WorkerChannelConfig& w) {
  auto fail = [&](std::string_view key, const absl::Status& s) {
    const std::string at = absl::StrCat(path, ".", Sv(key));
    return absl::Status(s.code(), absl::StrCat(at, reader.Locate(at), ": ", s.message()));
  };
  auto resolve = [&](const std::string& file) {
    const std::filesystem::path f(file);
    return (f.is_relative() ? dir / f : f).string();
  };
  const std::tuple<std::string_view, const std::string*, std::string*> pems[] = {
      {"tls_ca_file", &w.tls_ca_file, &w.ca_pem},
      {"tls_cert_file", &w.tls_cert_file, &w.cert_pem},
      {"tls_key_file", &w.tls_key_file, &w.key_pem}};
  for (const auto& [key, file, pem] : pems) {
    if (file->empty()) continue;
    absl::StatusOr<std::string> text = common::ReadPemFile(resolve(*file), key);
    if (!text.ok()) return fail(key, text.status());
    *pem = std::move(*text);
  }
  if (!w.secret_file.empty() || !w.secret_env.empty()) {
    absl::StatusOr<std::string> secret = common::ReadSharedSecret(
        w.secret_file.empty() ? "" : resolve(w.secret_file), w.secret_env.c_str());
    if (!secret.ok()) {
      return fail(w.secret_file.empty() ? "secret_env" : "secret_file", secret.status());
    }
    w.secret = std::move(*secret);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RouterConfig> ParseRouterConfigYaml(std::string_view yaml) {
  RouterConfig config;
  ConfigReader reader;
  if (auto s = ParseInto(yaml, reader, config); !s.ok()) return s;
  if (auto s = internal::ValidateRouterConfig(
          config, [&](std::string_view path) { return reader.Locate(path); });
      !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<std::string> ReadChatTemplateFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, "chat template");
  if (!text.ok()) return text.status();
  absl::StatusOr<common::ChatTemplate> parsed = common::ChatTemplate::Parse(*text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the chat template does not parse: ", parsed.status().message()));
  }
  return text;
}

absl::StatusOr<RouterConfig> LoadRouterConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, "router config");
  if (!text.ok()) return text.status();
  RouterConfig config;
  ConfigReader reader;
  if (auto s = ParseInto(*text, reader, config); !s.ok()) return Prefixed(s, path);
  for (size_t i = 0; i < config.models.size(); ++i) {
    ModelConfig& m = config.models[i];
    if (m.defaults.chat_template_file.empty()) continue;
    std::filesystem::path file(m.defaults.chat_template_file);
    if (file.is_relative()) file = std::filesystem::path(path).parent_path() / file;
    const std::string key = absl::StrCat("models[", i, "].chat_template");
    absl::StatusOr<std::string> source = ReadChatTemplateFile(file.string());
    if (!source.ok()) {
      return Prefixed(absl::InvalidArgumentError(absl::StrCat(key, reader.Locate(key), ": ",
                                                              source.status().message())),
                      path);
    }
    m.defaults.chat_template = std::move(*source);
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (auto s = LoadChannelFiles(dir, "worker_channel", reader, config.worker_channel); !s.ok()) {
    return Prefixed(s, path);
  }
  for (size_t i = 0; i < config.workers.size(); ++i) {
    if (!config.workers[i].channel) continue;
    const std::string key = absl::StrCat("workers[", i, "].channel");
    if (auto s = LoadChannelFiles(dir, key, reader, *config.workers[i].channel); !s.ok()) {
      return Prefixed(s, path);
    }
  }
  for (size_t i = 0; i < config.upstreams.size(); ++i) {
    const std::string key = absl::StrCat("upstreams[", i, "]");
    if (auto s = LoadUpstreamKeyMaterial(dir, config.upstreams[i]); !s.ok()) {
      return Prefixed(absl::Status(s.code(), absl::StrCat(key, ".", s.message())), path);
    }
  }
  if (!config.api_keys_file.empty()) {
    std::filesystem::path keys_path(config.api_keys_file);
    if (keys_path.is_relative()) keys_path = std::filesystem::path(path).parent_path() / keys_path;
    absl::StatusOr<std::string> keys_text = ReadSmallFile(keys_path.string(), "api_keys_file");
    if (!keys_text.ok()) return Prefixed(keys_text.status(), path);
    std::vector<int> lines;
    absl::StatusOr<std::vector<ApiKeyConfig>> keys =
        ParseApiKeysFile(*keys_text, keys_path.string(), &lines);
    if (!keys.ok()) return Prefixed(keys.status(), path);
    for (size_t i = 0; i < keys->size(); ++i) {
      reader.SetLocation(absl::StrCat("api_keys[", config.api_keys.size(), "]"),
                         absl::StrCat(" (", keys_path.string(), ":", lines[i], ")"));
      config.api_keys.push_back(std::move((*keys)[i]));
    }
  }
  if (auto s = internal::ValidateRouterConfig(config,
                                              [&](std::string_view p) { return reader.Locate(p); });
      !s.ok()) {
    return Prefixed(s, path);
  }
  return config;
}

}  // namespace deltaserve::router
