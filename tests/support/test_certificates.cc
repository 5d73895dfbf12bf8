#include "tests/support/test_certificates.h"

#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace deltaserve::testing {
namespace {

bool RunOpenssl(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "/usr/bin/openssl");
  const ProcessResult r = RunProcess(argv);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "openssl " << argv[1] << " failed (" << r.exit_code << "): " << r.err;
    return false;
  }
  return true;
}

}  // namespace

std::optional<TestCertFiles> MakeTestCa(const std::string& dir, const std::string& name) {
  TestCertFiles ca{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  if (!RunOpenssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                   "-nodes", "-keyout", ca.key, "-out", ca.cert, "-days", "2", "-subj",
                   "/CN=deltaserve test CA " + name, "-addext", "basicConstraints=critical,CA:TRUE",
                   "-addext", "keyUsage=critical,keyCertSign,cRLSign"})) {
    return std::nullopt;
  }
  return ca;
}

std::optional<TestCertFiles> MakeTestLeaf(const std::string& dir, const std::string& name,
                                          const TestCertFiles& ca, TestLeafKind kind) {
  TestCertFiles leaf{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  const std::string csr = dir + "/" + name + ".csr", ext = dir + "/" + name + ".ext";
  {
    std::ofstream out(ext);
    out << "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        << (kind == TestLeafKind::kServer
                ? "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                : "extendedKeyUsage=clientAuth\n");
  }
  const std::string cn = kind == TestLeafKind::kServer ? "localhost" : name;
  if (!RunOpenssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                   "-keyout", leaf.key, "-out", csr, "-subj", "/CN=" + cn}) ||
      !RunOpenssl({"x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
                   "-out", leaf.cert, "-days", "2", "-extfile", ext})) {
    return std::nullopt;
  }
  return leaf;
}

std::optional<TestTlsFiles> MakeTestTlsFiles(const std::string& dir) {
  const std::optional<TestCertFiles> ca = MakeTestCa(dir, "ca");
  if (!ca) return std::nullopt;
  const std::optional<TestCertFiles> server =
      MakeTestLeaf(dir, "server", *ca, TestLeafKind::kServer);
  if (!server) return std::nullopt;
  return TestTlsFiles{ca->cert, server->cert, server->key};
}

}  // namespace deltaserve::testing
