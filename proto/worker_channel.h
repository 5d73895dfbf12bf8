// Security of the router<->worker gRPC channel, both ends (docs/operations.md, "Securing the
// worker channel"). Two independent layers, either or both:
//  - TLS with gRPC's SSL credentials: the worker presents a certificate; given a client CA it
//    also wants a client certificate signed by that CA (mutual TLS).
//  - A shared secret that every call carries as metadata (kWorkerSecretMetadataKey) and the worker
//    compares in constant time (common/key_material.h).
// The worker's check runs as a gRPC auth metadata processor on its listening port, so it covers
// every call on that port: Worker RPCs, streams, and the standard health service. A refused call
// ends UNAUTHENTICATED, is counted by reason (CallRefusals, on the worker's /metrics) and logged,
// at most one line per kRefusalLogInterval. A TLS handshake that fails (a certificate from
// another CA, a plain-text client on a TLS port) never becomes a call: gRPC ends it before any
// of this runs, and the client sees UNAVAILABLE.
//
//   // worker
//   auto creds = MakeWorkerServerCredentials(security, refusals);  // StatusOr
//   builder.AddListeningPort(listen, *creds, &port);
//   // router, CLIs
//   auto channel = CreateWorkerChannel(address, client_security, args);
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace deltaserve::proto {

// The metadata key of the shared secret (lower case, as HTTP/2 requires).
inline constexpr char kWorkerSecretMetadataKey[] = "x-deltaserve-worker-secret";
// The environment variable the worker and the CLIs read the secret from when no file is given.
inline constexpr char kWorkerSecretEnv[] = "DELTASERVE_WORKER_SECRET";
inline constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);

// What the worker's port demands; PEM texts, not paths.
struct WorkerServerSecurity {
  std::string cert_pem;  // with key_pem: TLS on the port; both empty: plain text
  std::string key_pem;
  std::string client_ca_pem;  // with TLS: every call needs a client certificate signed by it
  std::string secret;         // non-empty: every call must carry it

  bool tls() const { return !cert_pem.empty(); }
  bool authenticates() const { return !client_ca_pem.empty() || !secret.empty(); }
};

// Why a call was refused; the `reason` label of deltaserve_worker_unauthenticated_calls_total.
enum class RefusalReason { kNoClientCertificate = 0, kMissingSecret, kWrongSecret };
inline constexpr int kRefusalReasons = 3;
std::string_view RefusalReasonLabel(RefusalReason reason);  // "no_client_cert", ...

// Counts refused calls by reason and logs them to stderr, one line per kRefusalLogInterval at
// most (a scanner cannot flood the log; the line says how many were not logged). Thread-safe.
class CallRefusals {
 public:
  // `log_prefix` starts each line ("deltaserve-worker").
  explicit CallRefusals(std::string log_prefix) : log_prefix_(std::move(log_prefix)) {}
  void Record(RefusalReason reason, std::string_view method);
  int64_t count(RefusalReason reason) const {
    return counts_[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }
  // The counter family deltaserve_worker_unauthenticated_calls_total (Prometheus text), every
  // reason listed even at 0.
  std::string RenderPrometheus() const;

 private:
  const std::string log_prefix_;
  std::array<std::atomic<int64_t>, kRefusalReasons> counts_{};
  std::mutex mu_;
  absl::Time last_log_ = absl::InfinitePast();
  int64_t not_logged_ = 0;  // refusals since the last line
};

// The worker's flags, as paths.
struct WorkerServerFiles {
  std::string cert_file, key_file, client_ca_file, secret_file;
};

// Reads the files (errors name the flag and the file: --tls-cert, --tls-key, --tls-client-ca,
// --auth-secret-file). The secret comes from secret_file, else from $DELTASERVE_WORKER_SECRET
// when set, else there is none.
absl::StatusOr<WorkerServerSecurity> LoadWorkerServerSecurity(const WorkerServerFiles& files);

// Server credentials for the worker's port as `security` says, refusals going to `refusals`.
// InvalidArgument when key material is half given (a certificate without its key, a client CA
// without TLS).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeWorkerServerCredentials(
    const WorkerServerSecurity& security, std::shared_ptr<CallRefusals> refusals);

// How a client reaches a worker; PEM texts, not paths.
struct WorkerClientSecurity {
  std::string ca_pem;    // non-empty: TLS, the worker's certificate verified against it
  std::string cert_pem;  // with key_pem: the client certificate (mutual TLS)
  std::string key_pem;
  std::string server_name;  // the name checked in the worker's certificate; empty: the host
  std::string secret;       // non-empty: sent with every call

  bool operator==(const WorkerClientSecurity&) const = default;
};

// A channel to `address` with `security` (TLS credentials and/or the secret on every call).
std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& address,
                                                   const WorkerClientSecurity& security,
                                                   grpc::ChannelArguments args);

// Command-line options of the CLIs that talk to a worker, as paths.
struct WorkerClientFiles {
  std::string ca_file, cert_file, key_file, server_name, secret_file;
};

// When `flag` is one of --worker-tls-ca, --worker-tls-cert, --worker-tls-key,
// --worker-tls-server-name, --worker-secret-file: stores `value` and returns true (an error
// message in `error` when the value is missing). False for other flags.
bool ParseWorkerClientFlag(std::string_view flag, const char* value, WorkerClientFiles& files,
                           std::string& error);
inline constexpr char kWorkerClientFlagsUsage[] =
    "[--worker-tls-ca FILE] [--worker-tls-cert FILE --worker-tls-key FILE]\n"
    "         [--worker-tls-server-name NAME] [--worker-secret-file FILE]";

// Reads the files (errors name the flag and the file). The secret comes from secret_file, else
// from $DELTASERVE_WORKER_SECRET when set, else there is none.
absl::StatusOr<WorkerClientSecurity> LoadWorkerClientSecurity(const WorkerClientFiles& files);

}  // namespace deltaserve::proto
