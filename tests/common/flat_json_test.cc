// flat_json (common/flat_json.h): what it accepts and refuses is what nlohmann does, values and
// number kinds included; strings without escapes point into the text; find() takes the last
// member of a name; source() is the container's text. tests/fuzz's flat_json harness compares
// the two parsers on mutated inputs as well.
#include "common/flat_json.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "support/flat_json_compare.h"

namespace shoal {
namespace {

using testing::flat_json_disagreement;

TEST(FlatJson, AgreesWithNlohmannOnEdgeCases) {
  const std::vector<std::string> texts = {
      "{}", "[]", " {\"a\" : [1, 2 , {\"b\":null}]} ", "\xEF\xBB\xBF{}", "\xEF\xBB{}", "\xEF{}",
      "{\"a\":1,}", "[1,]", "[,1]", "{\"a\" 1}", "{1:2}", "{\"a\":1}x", "{\"a\":1}\n\t\r ", "",
      "   ", "nul", "nulls", "true", "tru", "false", "[true,false,null]", "0", "-0", "-0.0", "01",
      "-01", "1.", ".5", "1e", "1e+", "1E-2", "1.5e300", "1e400", "-1e400", "18446744073709551615",
      "18446744073709551616", "-9223372036854775808", "-9223372036854775809", "9223372036854775808",
      "-", "+1", "0x10",
      // strings: escapes, surrogates, UTF-8 (valid and not), control characters
      "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "\"\\u0041\\u00e9\\u20ac\"", "\"\\ud83d\\ude00\"",
      "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83d\\u0041\"", "\"\\u12\"", "\"\\uzzzz\"", "\"\\x\"",
      "\"\\u0000\"", "\"a\x01\"", "\"tab\there\"", "\"\x7f\"", "\"\xC3\xA9\"", "\"\xC3\"",
      "\"\xC0\xAF\"", "\"\xE0\x80\xAF\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"",
      "\"\xF0\x9F\x98\x80\"", "\"\xFF\"", "\"unterminated", "\"\\", std::string("\"a\0b\"", 5),
      std::string("{}\0", 3), "{\"a\":1,\"a\":2}", "{\"k\":{\"k\":[{\"k\":\"v\"}]}}",
      "[[[[[[[[[[]]]]]]]]]]", "[1 2]", "{\"a\":}", "[\"a\":1]"};
  for (const auto& t : texts) EXPECT_EQ(flat_json_disagreement(t), "") << "text: " << t;
}

TEST(FlatJson, ReadsValuesAndKinds) {
  const std::string text =
      R"({"u":18446744073709551615,"i":-5,"z":-0,"f":1.5,"big":18446744073709551616,)"
      R"("s":"plain","e":"a\nb","t":true,"n":null,"a":[1,"x",[2]],"dup":1,"dup":2})";
  auto doc = flat_json::parse(text);
  ASSERT_TRUE(doc) << doc.error().message;
  auto r = doc->root();
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r.size(), 12u);
  EXPECT_TRUE(r.find("u").is_unsigned());
  EXPECT_EQ(r.find("u").as_u64(), 18446744073709551615ull);
  EXPECT_EQ(r.find("i").type(), flat_json::kind::number_integer);
  EXPECT_EQ(r.find("i").as_i64(), -5);
  EXPECT_EQ(r.find("z").type(), flat_json::kind::number_integer);
  EXPECT_EQ(r.find("f").type(), flat_json::kind::number_float);
  EXPECT_EQ(r.find("big").type(), flat_json::kind::number_float);
  EXPECT_EQ(r.find("s").as_string(), "plain");
  // Unescaped strings point into the text; escaped ones are decoded.
  EXPECT_GE(r.find("s").as_string().data(), text.data());
  EXPECT_LT(r.find("s").as_string().data(), text.data() + text.size());
  EXPECT_EQ(r.find("e").as_string(), "a\nb");
  EXPECT_TRUE(r.find("t").as_bool());
  EXPECT_TRUE(r.find("n").is_null());
  EXPECT_TRUE(r.find("n"));      // present, null
  EXPECT_FALSE(r.find("none"));  // absent
  EXPECT_EQ(r.find("dup").as_u64(), 2u) << "the last member of a name, as nlohmann";
  EXPECT_EQ(r.find("a").source(), R"([1,"x",[2]])");
  std::vector<std::string> kinds;
  for (auto x : r.find("a").elements()) kinds.push_back(std::string(x.source()));
  EXPECT_EQ(kinds, (std::vector<std::string>{"1", "\"x\"", "[2]"}));
  std::size_t members = 0;
  for (auto m : r.members()) {
    EXPECT_FALSE(m.key.empty());
    ++members;
  }
  EXPECT_EQ(members, 12u);
  // Wrong-type reads give zero values, never a crash.
  EXPECT_EQ(r.find("s").as_u64(), 0u);
  EXPECT_EQ(r.find("u").as_string(), "");
  EXPECT_EQ(r.find("s").size(), 0u);
  EXPECT_FALSE(r.find("s").find("x"));
  std::size_t none = 0;
  for (auto x : r.find("s").elements()) none += x.size() + 1;
  EXPECT_EQ(none, 0u);
}

TEST(FlatJson, ErrorsSayWhereAndNestingIsBounded) {
  auto bad = flat_json::parse("{\"a\": tru}");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("at byte 6"), std::string::npos) << bad.error().message;
  std::string deep(600, '[');
  deep += std::string(600, ']');
  auto d = flat_json::parse(deep);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("nesting too deep"), std::string::npos);
  EXPECT_TRUE(flat_json::parse(deep, 1000));
}

// A random valid document of JSON's pieces (then, every other time, one byte changed): both
// parsers agree on each.
std::string random_json(std::mt19937& rng, int depth) {
  static const std::vector<std::string> scalars = {
      "\"k\"", "\"\\u00e9\"", "\"\\ud800\\udc00\"",   "1",
      "-0",    "1.5e3",       "18446744073709551616", "-9223372036854775808",
      "true",  "null",        "\"\xC3\xA9\"",         "\"a\\nb\"",
      "0",     "\"\""};
  int pick = static_cast<int>(rng() % 4);
  if (depth > 4 || pick < 2) return scalars[rng() % scalars.size()];
  int n = static_cast<int>(rng() % 4);
  std::string out = pick == 2 ? "[" : "{";
  for (int k = 0; k < n; ++k) {
    if (k) out += rng() % 2 ? "," : " , ";
    if (pick == 3) out += (rng() % 2 ? "\"k\"" : "\"x\"") + std::string(rng() % 2 ? ":" : " : ");
    out += random_json(rng, depth + 1);
  }
  return out + (pick == 2 ? "]" : "}");
}

TEST(FlatJson, AgreesWithNlohmannOnRandomDocuments) {
  std::mt19937 rng(20261204);
  for (int n = 0; n < 5000; ++n) {
    std::string t = random_json(rng, 0);
    if (n % 2 && !t.empty()) t[rng() % t.size()] = static_cast<char>(rng() & 0xff);
    ASSERT_EQ(flat_json_disagreement(t), "") << "text: " << t;
  }
}

}  // namespace
}  // namespace shoal
