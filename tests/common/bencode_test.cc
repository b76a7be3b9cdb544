// The bencode codec (common): canonical round trips, malformed input, random bytes.
#include <gtest/gtest.h>

#include <random>
#include "common/bencode.h"

namespace shoal {
namespace {

TEST(Bencode, RoundTripCanonical) {
  bencode::dict d;
  d["b"] = 1;
  d["a"] = bencode::list{bencode::value("x"), bencode::value(-5)};
  d["c"] = std::string("\0bin", 4);
  std::string enc = bencode::encode(bencode::value(d));
  EXPECT_EQ(enc, std::string("d1:al1:xi-5ee1:bi1e1:c4:\0bine", 29));
  auto back = bencode::decode(enc);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(bencode::encode(*back), enc);
  EXPECT_EQ(back->find("b")->as_int(), 1);
  EXPECT_EQ(back->raw, enc);
}

TEST(Bencode, RejectsMalformed) {
  for (const char* bad : {"",
                          "i",
                          "ie",
                          "i-0e",
                          "i01e",
                          "i1",
                          "ix1e",
                          "3:ab",
                          "-1:a",
                          "l",
                          "d",
                          "d1:ai1e",
                          "d1:bi1e1:ai2ee",
                          "d1:ai1e1:ai2ee",
                          "di1ei2ee",
                          "x",
                          "i1ei2e",
                          "i99999999999999999999e",
                          "01:a",
                          "le1",
                          "1:"}) {
    EXPECT_FALSE(bencode::decode(bad)) << bad;
  }
  std::string deep(100, 'l');
  deep += std::string(100, 'e');
  auto r = bencode::decode(deep);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("deeper"), std::string::npos);
}

TEST(Bencode, RandomInputNeverCrashes) {
  std::mt19937_64 rng(8);
  const std::string alpha = "ilde0123456789:-ax";
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    for (std::size_t j = 0, n = rng() % 30; j < n; ++j) s += alpha[rng() % alpha.size()];
    auto v = bencode::decode(s);
    if (v) {
      EXPECT_EQ(bencode::encode(*v), s);  // strict decoding means canonical input
    }
  }
}

}  // namespace
}  // namespace shoal
