#include "common/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/json_text.h"

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

TEST(JsonText, NeverThrowsOnContent) {
  // What a cut at a byte count leaves: the first byte of a two-byte character. dump() throws
  // type_error 316 on it; json_text writes U+FFFD.
  nlohmann::json j = {{"detail", std::string(511, 'a') + "\xc3"}, {"n", 1}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  const std::string text = json_text(j);
  EXPECT_EQ(text, "{\"detail\":\"" + std::string(511, 'a') + "\xef\xbf\xbd\",\"n\":1}");
  EXPECT_EQ(nlohmann::json::parse(text)["n"], 1);
  EXPECT_EQ(json_text(nlohmann::json{{"a", {1, 2}}}, 2), "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
  // utf8_safe cuts on a character boundary, so what it keeps is whole characters.
  const std::string cut = utf8_safe(std::string(511, 'a') + "\xc3\xa9", 512);
  EXPECT_TRUE(utf8_valid(cut));
  EXPECT_NO_THROW((void)nlohmann::json(cut).dump());
}

TEST(JsonText, StringMembersAreReadWithoutThrowing) {
  auto j = nlohmann::json::parse(R"({"manifest":5,"name":"x","list":["a"],"nul":null})");
  EXPECT_THROW((void)j.value("manifest", ""), nlohmann::json::type_error);
  EXPECT_EQ(json_string(j, "manifest"), "");
  EXPECT_EQ(json_string(j, "manifest", "fallback"), "fallback");
  EXPECT_EQ(json_string(j, "name"), "x");
  EXPECT_EQ(json_string(j, "list"), "");
  EXPECT_EQ(json_string(j, "nul", "d"), "d");
  EXPECT_EQ(json_string(j, "absent", "d"), "d");
  EXPECT_EQ(json_string(nlohmann::json::array({1}), "name", "d"), "d");
  EXPECT_EQ(json_string(nlohmann::json("text"), "name"), "");
}

}  // namespace
}  // namespace shoal
