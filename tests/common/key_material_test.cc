// common/key_material: the constant-time secret comparison (every kind of difference, lengths
// included, gives false; equal gives true), the secret's acceptance rules, and reading secrets and
// PEM files with errors that name the file and never quote the secret.
#include "common/key_material.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace deltaserve::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/key_material_test_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(KeyMaterialTest, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(ConstantTimeEquals(kSecret, kSecret));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  std::string first = kSecret, last = kSecret;
  first[0] = 'X';
  last.back() = 'X';
  EXPECT_FALSE(ConstantTimeEquals(kSecret, first));
  EXPECT_FALSE(ConstantTimeEquals(kSecret, last));
  // A prefix, an extension, the empty string: a length difference is a difference.
  EXPECT_FALSE(ConstantTimeEquals(kSecret, std::string(kSecret).substr(0, 31)));
  EXPECT_FALSE(ConstantTimeEquals(kSecret, std::string(kSecret) + "0"));
  EXPECT_FALSE(ConstantTimeEquals(kSecret, ""));
  // Embedded NUL bytes count (no C-string comparison).
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0c", 4), std::string("ab\0d", 4)));
}

TEST(KeyMaterialTest, SecretMatchesComparesWithAPrecomputedDigest) {
  const SecretDigest d = DigestSecret(kSecret);
  EXPECT_TRUE(SecretMatches(d, kSecret));
  EXPECT_FALSE(SecretMatches(d, "0123456789abcdef0123456789abcdeF"));
  // The digest is SHA-256 (FIPS 180-4 example "abc").
  const SecretDigest abc = DigestSecret("abc");
  EXPECT_EQ(abc[0], 0xba);
  EXPECT_EQ(abc[31], 0xad);
}

TEST(KeyMaterialTest, SecretErrorRefusesShortSpacedAndBinarySecrets) {
  EXPECT_EQ(SecretError(kSecret), "");
  EXPECT_THAT(SecretError("short"), HasSubstr("at least 16"));
  EXPECT_THAT(SecretError("0123456789abcdef 123"), HasSubstr("whitespace"));
  EXPECT_THAT(SecretError("0123456789abcdef\xc3\xa9"), HasSubstr("non-ASCII"));
  EXPECT_THAT(SecretError(std::string(kMaxSecretBytes + 1, 'a')), HasSubstr("more than"));
}

TEST(KeyMaterialTest, ReadSecretFileStripsOneNewlineAndNamesTheFile) {
  auto s = ReadSecretFile(WriteTemp("lf", std::string(kSecret) + "\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, kSecret);
  s = ReadSecretFile(WriteTemp("crlf", std::string(kSecret) + "\r\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, kSecret);
  // Two newlines: the second is part of the content, and refused as whitespace.
  const std::string two = WriteTemp("two", std::string(kSecret) + "\n\n");
  EXPECT_THAT(ReadSecretFile(two).status().message(), HasSubstr(two));

  const std::string missing = ::testing::TempDir() + "/key_material_test_no_such_file";
  const absl::Status st = ReadSecretFile(missing).status();
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr(missing));

  const std::string weak = WriteTemp("weak", "hunter2\n");
  const absl::Status w = ReadSecretFile(weak).status();
  EXPECT_THAT(w.message(), HasSubstr(weak));
  EXPECT_THAT(w.message(), Not(HasSubstr("hunter2")));
}

TEST(KeyMaterialTest, ReadSharedSecretPrefersTheFileThenTheEnvironment) {
  constexpr char kEnv[] = "DELTASERVE_KEY_MATERIAL_TEST_SECRET";
  ::unsetenv(kEnv);
  EXPECT_TRUE(absl::IsNotFound(ReadSharedSecret("", kEnv).status()));
  ::setenv(kEnv, "fromtheenvironment-0123", 1);
  auto s = ReadSharedSecret("", kEnv);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "fromtheenvironment-0123");
  s = ReadSharedSecret(WriteTemp("file", kSecret), kEnv);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, kSecret);
  ::setenv(kEnv, "short", 1);
  const absl::Status bad = ReadSharedSecret("", kEnv).status();
  EXPECT_THAT(bad.message(), HasSubstr(kEnv));
  ::unsetenv(kEnv);
}

TEST(KeyMaterialTest, ReadPemFileWantsPemAndNamesTheFlagAndFile) {
  const std::string pem = WriteTemp("ok.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n");
  auto ok = ReadPemFile(pem, "--tls-cert");
  ASSERT_TRUE(ok.ok()) << ok.status();
  const std::string der = WriteTemp("der.pem", "\x30\x82\x01\x0a");
  EXPECT_THAT(ReadPemFile(der, "--tls-cert").status().message(),
              HasSubstr("--tls-cert " + der + ": not PEM"));
  const std::string missing = ::testing::TempDir() + "/key_material_test_missing.pem";
  EXPECT_THAT(ReadPemFile(missing, "--tls-key").status().message(),
              HasSubstr("--tls-key " + missing));
}

}  // namespace
}  // namespace deltaserve::common
