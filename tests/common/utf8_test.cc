#include "common/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace shoal {
namespace {

TEST(Utf8Safe, KeepsWellFormedText) {
  EXPECT_EQ(utf8_safe("plain ascii"), "plain ascii");
  EXPECT_EQ(utf8_safe("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x9f"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x9f");
  EXPECT_TRUE(utf8_valid("caf\xc3\xa9"));
}

// The review's input (finding 2): a Location of raw bytes that nlohmann's dump() refuses.
TEST(Utf8Safe, ReplacesInvalidBytes) {
  const std::string bad = "GET http://\xff\xfe.invalid/x: URL using bad/illegal format";
  EXPECT_FALSE(utf8_valid(bad));
  std::string safe = utf8_safe(bad);
  EXPECT_TRUE(utf8_valid(safe));
  EXPECT_EQ(safe, "GET http://\xef\xbf\xbd\xef\xbf\xbd.invalid/x: URL using bad/illegal format");
  nlohmann::json j = {{"error", safe}};
  EXPECT_NO_THROW((void)j.dump());
  // Overlong forms, surrogates, code points past U+10FFFF, truncated sequences.
  for (const char* b : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80"}) {
    EXPECT_FALSE(utf8_valid(b)) << b;
    EXPECT_TRUE(utf8_valid(utf8_safe(b))) << b;
  }
}

TEST(Utf8Safe, BoundsOnCharacterBoundaries) {
  std::string s(300, 'x');
  EXPECT_EQ(utf8_safe(s, 200), std::string(200, 'x') + "...");
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xe2\x82\xac";
  std::string cut = utf8_safe(euros, 10);
  EXPECT_TRUE(utf8_valid(cut));
  EXPECT_EQ(cut, "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac...");
}

}  // namespace
}  // namespace shoal
