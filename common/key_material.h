// Key material of the router<->worker channel (docs/operations.md, "Securing the worker
// channel"): the shared secret, read from a file or an environment variable, never from the
// command line (where `ps` shows it), and compared in constant time; and PEM files (certificates,
// keys) read with errors that name the file.
//
//   absl::StatusOr<std::string> s = ReadSharedSecret(file, "DELTASERVE_WORKER_SECRET");
//   const SecretDigest expected = DigestSecret(*s);
//   bool ok = SecretMatches(expected, offered);  // time independent of where they differ
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace deltaserve::common {

// Bounds of a secret (bytes). It travels as a gRPC metadata value, so only visible ASCII
// (0x21..0x7E) is accepted; 16 bytes is a floor against typing "secret".
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 4096;

// The SHA-256 of a secret. Comparing digests rather than the strings makes the comparison's
// time independent of the secrets' lengths and of the position of the first difference.
using SecretDigest = std::array<uint8_t, 32>;

SecretDigest DigestSecret(std::string_view secret);

// True when `offered` hashes to `expected`; every byte of the digests is compared whatever the
// outcome (no early exit).
bool SecretMatches(const SecretDigest& expected, std::string_view offered);

// Both hashed, then compared as SecretMatches does.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// "" when `secret` is acceptable, else what is wrong with it (never quoting it).
std::string SecretError(std::string_view secret);

// The secret in `path`: the whole file less one trailing "\n" or "\r\n", checked with
// SecretError. Errors name the file, never its content.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

// The PEM text of `path` (a certificate, key or CA bundle; at most 1 MiB, holding a "-----BEGIN "
// line). `what` names the file's role in errors ("--tls-cert").
absl::StatusOr<std::string> ReadPemFile(const std::string& path, std::string_view what);

// The secret from `path` when it is not empty, else from the environment variable `env_name`
// when that is set (NotFound when it is not); errors name the file or the variable.
absl::StatusOr<std::string> ReadSharedSecret(const std::string& path, const char* env_name);

}  // namespace deltaserve::common
