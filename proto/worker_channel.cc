#include "proto/worker_channel.h"

#include <grpc/grpc_security.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <initializer_list>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_material.h"
#include "common/str_util.h"

namespace deltaserve::proto {
namespace {

using common::Sv;

std::string_view SliceView(const grpc_slice& s) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s)};
}

// The per-port check: the state of a core auth metadata processor. gRPC calls Process for every
// call on the port, before any handler, with the call's metadata (":path" included).
struct CallGate {
  bool require_client_cert = false;
  bool require_secret = false;
  common::SecretDigest secret{};
  std::shared_ptr<CallRefusals> refusals;

  static void Process(void* state, grpc_auth_context* context, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
    const CallGate& gate = *static_cast<const CallGate*>(state);
    std::string_view method = "?";
    const grpc_metadata* secret = nullptr;
    for (size_t i = 0; i < num_md; ++i) {
      const std::string_view key = SliceView(md[i].key);
      if (key == ":path") method = SliceView(md[i].value);
      if (key == kWorkerSecretMetadataKey && secret == nullptr) secret = &md[i];
    }
    auto refuse = [&](RefusalReason reason, const char* why) {
      gate.refusals->Record(reason, method);
      done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, why);
    };
    // With a client CA the handshake verified any certificate the client sent; one that sent none
    // has an unauthenticated peer here.
    if (gate.require_client_cert && !grpc_auth_context_peer_is_authenticated(context)) {
      return refuse(RefusalReason::kNoClientCertificate,
                    "the worker requires a client certificate signed by its client CA");
    }
    if (gate.require_secret) {
      if (secret == nullptr) {
        return refuse(RefusalReason::kMissingSecret,
                      "the call carries no x-deltaserve-worker-secret");
      }
      if (!common::SecretMatches(gate.secret, SliceView(secret->value))) {
        return refuse(RefusalReason::kWrongSecret, "wrong x-deltaserve-worker-secret");
      }
    }
    // The secret is consumed: handlers (and anything they log) never see it.
    done(user_data, secret, secret == nullptr ? 0 : 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
  }

  static void Destroy(void* state) { delete static_cast<CallGate*>(state); }
};

// grpc++ 1.51 has no public way to put an auth metadata processor on a plain-text port
// (InsecureServerCredentials()->SetAuthMetadataProcessor aborts), while the core does: its
// insecure credentials carry one like the SSL ones. This wraps core server credentials so the
// C++ ServerBuilder can listen with them.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* creds) : creds_(creds) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(creds_); }
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    // The processor is set on the core credentials at construction.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

// Adds the secret to the initial metadata of every call on the channel.
class SecretInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit SecretInterceptor(const std::string& secret) : secret_(secret) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kWorkerSecretMetadataKey, secret_});
    }
    methods->Proceed();
  }

 private:
  const std::string& secret_;  // the factory's, which the channel (held by every call) owns
};

class SecretInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SecretInterceptorFactory(std::string secret) : secret_(std::move(secret)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new SecretInterceptor(secret_);  // gRPC owns and deletes it with the call
  }

 private:
  const std::string secret_;
};

// One PEM file to read: the flag that named it, its path (empty: none), where the text goes.
struct PemSlot {
  const char* flag;
  const std::string& path;
  std::string* pem;
};

absl::Status ReadPems(std::initializer_list<PemSlot> slots) {
  for (const PemSlot& s : slots) {
    if (s.path.empty()) continue;
    absl::StatusOr<std::string> pem = common::ReadPemFile(s.path, s.flag);
    if (!pem.ok()) return pem.status();
    *s.pem = std::move(*pem);
  }
  return absl::OkStatus();
}

// The secret from `file` (named `flag` in errors) or $DELTASERVE_WORKER_SECRET; "" when neither.
absl::StatusOr<std::string> OptionalSecret(const std::string& file, std::string_view flag) {
  absl::StatusOr<std::string> secret = common::ReadSharedSecret(file, kWorkerSecretEnv);
  if (secret.ok()) return secret;
  if (file.empty() && absl::IsNotFound(secret.status())) return std::string();
  return absl::Status(
      secret.status().code(),
      absl::StrCat(file.empty() ? "" : absl::StrCat(Sv(flag), ": "), secret.status().message()));
}

}  // namespace

std::string_view RefusalReasonLabel(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kNoClientCertificate:
      return "no_client_cert";
    case RefusalReason::kMissingSecret:
      return "missing_secret";
    case RefusalReason::kWrongSecret:
      return "wrong_secret";
  }
  return "unknown";
}

void CallRefusals::Record(RefusalReason reason, std::string_view method) {
  counts_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  const absl::Time now = absl::Now();
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_log_ < kRefusalLogInterval) {
      ++not_logged_;
      return;
    }
    line = absl::StrCat(log_prefix_, ": refused an unauthenticated call to ", Sv(method), " (",
                        Sv(RefusalReasonLabel(reason)), ")");
    if (not_logged_ > 0) {
      absl::StrAppend(&line, "; ", not_logged_, " more refused since the last such line");
    }
    last_log_ = now;
    not_logged_ = 0;
  }
  std::cerr << line + "\n";
}

std::string CallRefusals::RenderPrometheus() const {
  std::string out =
      "# HELP deltaserve_worker_unauthenticated_calls_total Calls refused UNAUTHENTICATED on "
      "the gRPC port (TLS handshake failures are not calls and not counted).\n"
      "# TYPE deltaserve_worker_unauthenticated_calls_total counter\n";
  for (int r = 0; r < kRefusalReasons; ++r) {
    absl::StrAppend(&out, "deltaserve_worker_unauthenticated_calls_total{reason=\"",
                    Sv(RefusalReasonLabel(static_cast<RefusalReason>(r))), "\"} ",
                    counts_[r].load(std::memory_order_relaxed), "\n");
  }
  return out;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeWorkerServerCredentials(
    const WorkerServerSecurity& security, std::shared_ptr<CallRefusals> refusals) {
  if (security.cert_pem.empty() != security.key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and its private key");
  }
  if (!security.client_ca_pem.empty() && !security.tls()) {
    return absl::InvalidArgumentError(
        "a client CA needs TLS on the port (a certificate and its key)");
  }
  if (!security.secret.empty()) {
    if (std::string why = common::SecretError(security.secret); !why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the secret ", why));
    }
  }
  grpc_server_credentials* creds = nullptr;
  if (security.tls()) {
    grpc_ssl_pem_key_cert_pair pair{security.key_pem.c_str(), security.cert_pem.c_str()};
    // REQUEST_..._AND_VERIFY rather than REQUIRE: a certificate that is sent is verified in the
    // handshake either way, and a client that sends none gets an UNAUTHENTICATED call from the
    // processor (counted, logged) instead of a bare handshake failure.
    creds = grpc_ssl_server_credentials_create_ex(
        security.client_ca_pem.empty() ? nullptr : security.client_ca_pem.c_str(), &pair, 1,
        security.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                       : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  if (creds == nullptr) return absl::InternalError("gRPC refused the server credentials");
  if (security.authenticates()) {
    if (refusals == nullptr) refusals = std::make_shared<CallRefusals>("deltaserve");
    auto gate = std::make_unique<CallGate>();
    gate->require_client_cert = !security.client_ca_pem.empty();
    gate->require_secret = !security.secret.empty();
    if (gate->require_secret) gate->secret = common::DigestSecret(security.secret);
    gate->refusals = std::move(refusals);
    // The core owns the gate from here and calls Destroy with the credentials.
    grpc_server_credentials_set_auth_metadata_processor(
        creds,
        grpc_auth_metadata_processor{&CallGate::Process, &CallGate::Destroy, gate.release()});
  }
  return std::make_shared<CoreServerCredentials>(creds);
}

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& address,
                                                   const WorkerClientSecurity& security,
                                                   grpc::ChannelArguments args) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!security.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = security.ca_pem;
    ssl.pem_private_key = security.key_pem;
    ssl.pem_cert_chain = security.cert_pem;
    creds = grpc::SslCredentials(ssl);
    if (!security.server_name.empty()) args.SetSslTargetNameOverride(security.server_name);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  if (security.secret.empty()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<SecretInterceptorFactory>(security.secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(factories));
}

bool ParseWorkerClientFlag(std::string_view flag, const char* value, WorkerClientFiles& files,
                           std::string& error) {
  std::string* out = flag == "--worker-tls-ca"            ? &files.ca_file
                     : flag == "--worker-tls-cert"        ? &files.cert_file
                     : flag == "--worker-tls-key"         ? &files.key_file
                     : flag == "--worker-tls-server-name" ? &files.server_name
                     : flag == "--worker-secret-file"     ? &files.secret_file
                                                          : nullptr;
  if (out == nullptr) return false;
  if (value == nullptr) {
    error = absl::StrCat(Sv(flag), " needs a value");
  } else {
    *out = value;
  }
  return true;
}

absl::StatusOr<WorkerClientSecurity> LoadWorkerClientSecurity(const WorkerClientFiles& files) {
  WorkerClientSecurity s;
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError("--worker-tls-cert and --worker-tls-key go together");
  }
  if (!files.cert_file.empty() && files.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--worker-tls-cert needs --worker-tls-ca (the CA that signed the worker's certificate)");
  }
  if (absl::Status st = ReadPems({{"--worker-tls-ca", files.ca_file, &s.ca_pem},
                                  {"--worker-tls-cert", files.cert_file, &s.cert_pem},
                                  {"--worker-tls-key", files.key_file, &s.key_pem}});
      !st.ok()) {
    return st;
  }
  s.server_name = files.server_name;
  absl::StatusOr<std::string> secret = OptionalSecret(files.secret_file, "--worker-secret-file");
  if (!secret.ok()) return secret.status();
  s.secret = std::move(*secret);
  return s;
}

absl::StatusOr<WorkerServerSecurity> LoadWorkerServerSecurity(const WorkerServerFiles& files) {
  WorkerServerSecurity s;
  if (absl::Status st = ReadPems({{"--tls-cert", files.cert_file, &s.cert_pem},
                                  {"--tls-key", files.key_file, &s.key_pem},
                                  {"--tls-client-ca", files.client_ca_file, &s.client_ca_pem}});
      !st.ok()) {
    return st;
  }
  absl::StatusOr<std::string> secret = OptionalSecret(files.secret_file, "--auth-secret-file");
  if (!secret.ok()) return secret.status();
  s.secret = std::move(*secret);
  return s;
}

}  // namespace deltaserve::proto
