#include "common/key_material.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/str_util.h"

namespace deltaserve::common {

SecretDigest DigestSecret(std::string_view secret) {
  return Sha256(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()));
}

bool SecretMatches(const SecretDigest& expected, std::string_view offered) {
  const SecretDigest got = DigestSecret(offered);
  // volatile: the compiler may not turn the accumulation into an early-exit memcmp.
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff = diff | (got[i] ^ expected[i]);
  return diff == 0;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return SecretMatches(DigestSecret(a), b);
}

std::string SecretError(std::string_view secret) {
  if (secret.size() < kMinSecretBytes) {
    return absl::StrCat("is ", secret.size(), " bytes; a secret needs at least ", kMinSecretBytes,
                        " (openssl rand -hex 32)");
  }
  if (secret.size() > kMaxSecretBytes) {
    return absl::StrCat("is more than ", kMaxSecretBytes, " bytes");
  }
  for (unsigned char c : secret) {
    if (c < 0x21 || c > 0x7E) {
      return "holds whitespace, a control character or non-ASCII bytes (it travels as a gRPC "
             "metadata value: visible ASCII only)";
    }
  }
  return "";
}

namespace {

using common::Sv;

// The bytes of `path`, at most `max_bytes`; errors start with "<what> <path>: ".
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, std::string_view what,
                                            uintmax_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": ", ec.message()));
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), " ", path, ": more than ", max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(Sv(what), " ", path, ": cannot open"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, what, 1 << 20);
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(what), " ", path, ": not PEM (no -----BEGIN line)"));
  }
  return text;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadBoundedFile(path, "secret file", kMaxSecretBytes + 2);
  if (!text.ok()) return text.status();
  std::string s = std::move(*text);
  // `echo secret > file` and editors add a newline; it is not part of the secret.
  if (s.ends_with("\r\n")) {
    s.resize(s.size() - 2);
  } else if (s.ends_with("\n")) {
    s.pop_back();
  }
  if (std::string why = SecretError(s); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, ": the secret ", why));
  }
  return s;
}

absl::StatusOr<std::string> ReadSharedSecret(const std::string& path, const char* env_name) {
  if (!path.empty()) return ReadSecretFile(path);
  const char* v = std::getenv(env_name);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("$", env_name, " is not set"));
  if (std::string why = SecretError(v); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("$", env_name, ": the secret ", why));
  }
  return std::string(v);
}

}  // namespace deltaserve::common
