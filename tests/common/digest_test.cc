#include "common/digest.h"

#include <gtest/gtest.h>

#include <random>

#include "common/sha256.h"

namespace shoal {
namespace {

const std::string kEmptySha =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(Digest, ParsesAndPrintsCanonicalForm) {
  auto d = digest::parse(kEmptySha);
  ASSERT_TRUE(d.has_value()) << d.error().to_string();
  EXPECT_EQ(d->str(), kEmptySha);
  EXPECT_EQ(d->hex(), kEmptySha.substr(7));
  EXPECT_EQ(d->short_str(), "sha256:e3b0c44298fc");
  EXPECT_EQ(*d, sha256_of(""));
}

struct bad_case {
  std::string input;
  digest_errc expected;
};

class DigestMalformed : public ::testing::TestWithParam<bad_case> {};

TEST_P(DigestMalformed, IsTypedError) {
  auto d = digest::parse(GetParam().input);
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, make_error_code(GetParam().expected)) << d.error().to_string();
  EXPECT_NE(d.error().message.find("invalid digest"), std::string::npos);
}

const std::string hex64 = kEmptySha.substr(7);

INSTANTIATE_TEST_SUITE_P(
    Forms, DigestMalformed,
    ::testing::Values(
        bad_case{"", digest_errc::empty}, bad_case{hex64, digest_errc::missing_algorithm},
        bad_case{"sha512:" + hex64 + hex64, digest_errc::unsupported_algorithm},
        bad_case{"SHA256:" + hex64, digest_errc::unsupported_algorithm},
        bad_case{"md5:d41d8cd98f00b204e9800998ecf8427e", digest_errc::unsupported_algorithm},
        bad_case{":" + hex64, digest_errc::unsupported_algorithm},
        bad_case{"sha256+b64u:" + hex64, digest_errc::unsupported_algorithm},
        bad_case{"sha256:", digest_errc::wrong_length},
        bad_case{"sha256:" + hex64.substr(1), digest_errc::wrong_length},
        bad_case{"sha256:" + hex64 + "0", digest_errc::wrong_length},
        bad_case{"sha256:" + hex64 + "\n", digest_errc::wrong_length},
        bad_case{"sha256:" + hex64 + " ", digest_errc::wrong_length},
        bad_case{"sha256:" + hex64 + ":", digest_errc::wrong_length},
        bad_case{"sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
                 digest_errc::uppercase_hex},
        bad_case{"sha256:" + hex64.substr(0, 63) + "g", digest_errc::invalid_character},
        bad_case{"sha256:" + hex64.substr(0, 63) + std::string(1, '\0'),
                 digest_errc::invalid_character},
        bad_case{"sha256: " + hex64.substr(1), digest_errc::invalid_character},
        bad_case{"sha256:../../" + hex64.substr(6), digest_errc::invalid_character}));

TEST(Digest, RandomInputsNeverCrashAndRoundTrip) {
  std::mt19937_64 rng(42);
  const std::string alphabet = "sha256:0123456789abcdefABCDEF \n\t\x00\xff/.";
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    std::size_t len = rng() % 90;
    if (rng() % 4 == 0) s = "sha256:";
    for (std::size_t j = 0; j < len; ++j) s += alphabet[rng() % alphabet.size()];
    auto d = digest::parse(s);
    if (d)
      EXPECT_EQ(d->str(), s);
    else
      EXPECT_FALSE(d.error().message.empty());
  }
}

TEST(Sha256, StreamingMatchesOneShot) {
  std::string data(1 << 20, '\0');
  std::mt19937 rng(1);
  for (auto& c : data) c = static_cast<char>(rng());
  sha256_hasher h;
  for (std::size_t off = 0; off < data.size();) {
    std::size_t n = std::min<std::size_t>(data.size() - off, 1 + rng() % 9000);
    h.update(std::string_view(data).substr(off, n));
    off += n;
  }
  EXPECT_EQ(h.bytes(), data.size());
  EXPECT_EQ(h.finish(), sha256_of(data));
  // Known vector: "abc".
  EXPECT_EQ(sha256_of("abc").hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // The hasher resets after finish().
  h.update("abc");
  EXPECT_EQ(h.finish(), sha256_of("abc"));
}

}  // namespace
}  // namespace shoal
