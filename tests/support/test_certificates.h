// Throw-away certificates for TLS tests, made at test time with Debian's openssl CLI (P-256
// keys: milliseconds each, unlike RSA; valid two days): a CA, server certificates for 127.0.0.1
// and localhost, client certificates. Used by the Redis TLS tests and the worker channel tests.
//
//   auto ca = MakeTestCa(dir, "ca");                        // ca->cert, ca->key
//   auto server = MakeTestLeaf(dir, "worker", *ca, TestLeafKind::kServer);
//   auto client = MakeTestLeaf(dir, "router", *ca, TestLeafKind::kClient);
#pragma once

#include <optional>
#include <string>

namespace deltaserve::testing {

// A PEM certificate and its private key, as files.
struct TestCertFiles {
  std::string cert;
  std::string key;
};

// A self-signed CA in dir/<name>.crt and dir/<name>.key; nullopt with a test failure (openssl's
// output) when openssl fails.
std::optional<TestCertFiles> MakeTestCa(const std::string& dir, const std::string& name);

enum class TestLeafKind {
  kServer,  // subjectAltName IP:127.0.0.1, DNS:localhost; extendedKeyUsage serverAuth
  kClient,  // CN=<name>; extendedKeyUsage clientAuth
};

// A certificate signed by `ca` in dir/<name>.crt and dir/<name>.key.
std::optional<TestCertFiles> MakeTestLeaf(const std::string& dir, const std::string& name,
                                          const TestCertFiles& ca, TestLeafKind kind);

// Certificate files for a TLS test server, all PEM.
struct TestTlsFiles {
  std::string ca_cert;      // the self-signed CA; give it to the client as tls_ca_cert
  std::string server_cert;  // signed by the CA, subjectAltName IP:127.0.0.1, DNS:localhost
  std::string server_key;
};

// A fresh CA and a server certificate in `dir` (MakeTestCa + MakeTestLeaf).
std::optional<TestTlsFiles> MakeTestTlsFiles(const std::string& dir);

}  // namespace deltaserve::testing
