// Value types of configuration: duration and byte_size text forms, and strict scalar decoding.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "common/config.h"

namespace shoal::config {
namespace {

using namespace std::chrono_literals;

TEST(ConfigDuration, ParsesUnitsFractionsAndCompounds) {
  struct ok_case {
    std::string text;
    std::chrono::nanoseconds want;
  };
  const ok_case cases[] = {
      {"500ms", 500ms},
      {"5s", 5s},
      {"2m", 2min},
      {"1h", 1h},
      {"1h30m", 90min},
      {"1h 30m", 90min},
      {"1.5s", 1500ms},
      {"7d", 168h},
      {"0", 0ns},
      {"0s", 0ns},
      {"5 s", 5s},
      {"10us", 10us},
      {"10\xc2\xb5s", 10us},
      {"250ns", 250ns},
      {"+3s", 3s},
      {" 4s ", 4s},
      {"0.000000001s", 1ns},
      {"2562047h", 2562047h},
  };
  for (const auto& c : cases) {
    auto d = duration::parse(c.text);
    ASSERT_TRUE(d.has_value()) << c.text << ": " << d.error().message;
    EXPECT_EQ(d->get(), c.want) << c.text;
  }
}

TEST(ConfigDuration, RefusesBareNumbersUnknownUnitsAndOverflow) {
  struct bad_case {
    std::string text;
    std::string needle;
  };
  const bad_case cases[] = {
      {"5", "has no unit; write e.g. \"5s\""},
      {"300", "\"300ms\""},
      {"-5s", "negative"},
      {"5sec", "unknown unit \"sec\""},
      {"5x", "unknown unit \"x\""},
      {"", "empty duration"},
      {"s", "expected a duration"},
      {"0.5ns", "finer than a nanosecond"},
      {"2562048h", "too long"},
      {"99999999999999999999999999999999d", "too many digits"},
      {"5s5", "without a unit"},
      {"1.5.2s", "unexpected \".2s\""},
  };
  for (const auto& c : cases) {
    auto d = duration::parse(c.text);
    ASSERT_FALSE(d.has_value()) << c.text << " parsed as " << d->str();
    EXPECT_NE(d.error().message.find(c.needle), std::string::npos)
        << c.text << ": " << d.error().message;
    EXPECT_TRUE(d.error().is(errc::config_error));
  }
}

TEST(ConfigDuration, PrintsShortestExactFormThatParsesBack) {
  EXPECT_EQ(duration(0s).str(), "0s");
  EXPECT_EQ(duration(60s).str(), "1m");
  EXPECT_EQ(duration(90s).str(), "90s");
  EXPECT_EQ(duration(1500ms).str(), "1500ms");
  EXPECT_EQ(duration(48h).str(), "2d");
  EXPECT_EQ(duration(1ns).str(), "1ns");
  const std::chrono::nanoseconds values[] = {
      0ns, 1ns, 999ns, 1us, 1500us, 59s, 61min, 25h, std::chrono::nanoseconds::max()};
  for (auto v : values) {
    auto back = duration::parse(duration(v).str());
    ASSERT_TRUE(back.has_value()) << duration(v).str() << ": " << back.error().message;
    EXPECT_EQ(back->get(), v);
  }
}

TEST(ConfigByteSize, ParsesBinaryDecimalAndPlainBytes) {
  struct ok_case {
    std::string text;
    std::uint64_t want;
  };
  const ok_case cases[] = {
      {"512KiB", 512ull << 10},
      {"10MiB", 10ull << 20},
      {"2GiB", 2ull << 30},
      {"1GB", 1'000'000'000},
      {"500MB", 500'000'000},
      {"1024", 1024},
      {"0", 0},
      {"10 MiB", 10ull << 20},
      {"1.5GiB", 3ull << 29},
      {"1kB", 1000},
      {"3B", 3},
      {"15PiB", 15ull << 50},
      {"18446744073709551615", std::numeric_limits<std::uint64_t>::max()},
  };
  for (const auto& c : cases) {
    auto b = byte_size::parse(c.text);
    ASSERT_TRUE(b.has_value()) << c.text << ": " << b.error().message;
    EXPECT_EQ(b->bytes(), c.want) << c.text;
  }
}

// Kubernetes quantities (resource.Quantity), as pod specs and Helm values write sizes.
TEST(ConfigByteSize, ParsesKubernetesQuantities) {
  struct ok_case {
    std::string text;
    std::uint64_t want;
  };
  const ok_case cases[] = {
      {"10Gi", 10ull << 30},
      {"500Mi", 500ull << 20},
      {"1Ki", 1024},
      {"2Ti", 2ull << 40},
      {"1Pi", 1ull << 50},
      {"3Ei", 3ull << 60},
      {"1.5Gi", 3ull << 29},
      {"1G", 1'000'000'000},
      {"1k", 1000},
      {"128M", 128'000'000},
      {"4T", 4'000'000'000'000},
      {"2P", 2'000'000'000'000'000},
      {"1E", 1'000'000'000'000'000'000},
      {"1EiB", 1ull << 60},
      {"2EB", 2'000'000'000'000'000'000},
      {"1e3", 1000},
      {"1E6", 1'000'000},
      {"1.5e3", 1500},
      {"12e+2", 1200},
      {"1000e-3", 1},
      {"0e30", 0},
      {"10 Gi", 10ull << 30},
  };
  for (const auto& c : cases) {
    auto b = byte_size::parse(c.text);
    ASSERT_TRUE(b.has_value()) << c.text << ": " << b.error().message;
    EXPECT_EQ(b->bytes(), c.want) << c.text;
  }
}

TEST(ConfigByteSize, RefusesQuantitiesThatAreNotWholeBytes) {
  struct bad_case {
    std::string text;
    std::string needle;
  };
  const bad_case cases[] = {
      {"100m", "a thousandth"},
      {"1K", "write \"k\""},
      {"1ki", "unknown unit \"ki\""},
      {"1e-1", "not a whole number of bytes"},
      {"1e20", "too large"},
      {"20E", "too large"},
      {"16Ei", "too large"},
      {"1e99", "too large"},
      {"1e3Ki", "no unit may follow an exponent"},
      {"1e-90", "not a whole number"},
  };
  for (const auto& c : cases) {
    auto b = byte_size::parse(c.text);
    ASSERT_FALSE(b.has_value()) << c.text << " parsed as " << b->bytes();
    EXPECT_NE(b.error().message.find(c.needle), std::string::npos)
        << c.text << ": " << b.error().message;
  }
}

TEST(ConfigByteSize, RefusesUnknownUnitsFractionsOfBytesAndOverflow) {
  struct bad_case {
    std::string text;
    std::string needle;
  };
  const bad_case cases[] = {
      {"10XB", "unknown unit \"XB\""},
      {"10 mib", "unknown unit \"mib\""},
      {"10  MiB", "unknown unit"},
      {"0.3KiB", "not a whole number of bytes"},
      {"1.5", "not a whole number of bytes"},
      {"-1", "negative"},
      {"18446744073709551616", "too large"},
      {"16384PiB", "too large"},
      {"MiB", "expected a byte size"},
      {"", "empty byte size"},
  };
  for (const auto& c : cases) {
    auto b = byte_size::parse(c.text);
    ASSERT_FALSE(b.has_value()) << c.text << " parsed as " << b->bytes();
    EXPECT_NE(b.error().message.find(c.needle), std::string::npos)
        << c.text << ": " << b.error().message;
  }
}

TEST(ConfigByteSize, PrintsExactUnitsThatParseBack) {
  EXPECT_EQ(byte_size(0).str(), "0");
  EXPECT_EQ(byte_size::mib(10).str(), "10MiB");
  EXPECT_EQ(byte_size(1'000'000'000).str(), "1GB");
  EXPECT_EQ(byte_size(1000).str(), "1KB");
  EXPECT_EQ(byte_size(1023).str(), "1023");
  EXPECT_EQ(byte_size(3ull << 29).str(), "1536MiB");
  const std::uint64_t values[] = {
      0,         1,         1023,      1024,
      1536,      1'000'000, 123456789, std::numeric_limits<std::uint64_t>::max(),
      1ull << 62};
  for (auto v : values) {
    auto back = byte_size::parse(byte_size(v).str());
    ASSERT_TRUE(back.has_value()) << byte_size(v).str() << ": " << back.error().message;
    EXPECT_EQ(back->bytes(), v);
  }
}

detail::node scalar(std::string text, bool quoted = false) {
  detail::node n;
  n.k = detail::node::kind::scalar;
  n.text = std::move(text);
  n.quoted = quoted;
  return n;
}

TEST(ConfigScalars, IntegersAreStrictAboutTypeAndRange) {
  std::int64_t i64 = 0;
  EXPECT_EQ(detail::decode_scalar(scalar("-9223372036854775808"), i64), "");
  EXPECT_EQ(i64, std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(detail::decode_scalar(scalar("9223372036854775807"), i64), "");
  EXPECT_EQ(i64, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(detail::decode_scalar(scalar("0x1F"), i64), "");
  EXPECT_EQ(i64, 31);
  EXPECT_NE(detail::decode_scalar(scalar("9223372036854775808"), i64).find("out of range"),
            std::string::npos);
  EXPECT_NE(detail::decode_scalar(scalar("1.0"), i64).find("expected an integer, got \"1.0\""),
            std::string::npos);
  EXPECT_NE(detail::decode_scalar(scalar("1e3"), i64).find("expected an integer"),
            std::string::npos);
  EXPECT_NE(detail::decode_scalar(scalar("5", true), i64).find("remove the quotes"),
            std::string::npos);

  std::int16_t i16 = 0;
  EXPECT_NE(detail::decode_scalar(scalar("40000"), i16).find("-32768 to 32767"), std::string::npos);
  EXPECT_EQ(detail::decode_scalar(scalar("-32768"), i16), "");
  EXPECT_EQ(i16, -32768);

  std::uint64_t u64 = 7;
  EXPECT_EQ(detail::decode_scalar(scalar("18446744073709551615"), u64), "");
  EXPECT_EQ(u64, std::numeric_limits<std::uint64_t>::max());
  EXPECT_NE(detail::decode_scalar(scalar("18446744073709551616"), u64).find("out of range"),
            std::string::npos);
  EXPECT_NE(
      detail::decode_scalar(scalar("-5"), u64).find("expected a non-negative integer, got -5"),
      std::string::npos);
  std::uint16_t port = 0;
  EXPECT_NE(detail::decode_scalar(scalar("65536"), port).find("0 to 65535"), std::string::npos);
}

TEST(ConfigScalars, BoolsDoublesAndStrings) {
  bool b = false;
  EXPECT_EQ(detail::decode_scalar(scalar("true"), b), "");
  EXPECT_TRUE(b);
  EXPECT_EQ(detail::decode_scalar(scalar("FALSE"), b), "");
  EXPECT_FALSE(b);
  EXPECT_NE(detail::decode_scalar(scalar("yes"), b).find("expected true or false"),
            std::string::npos);
  EXPECT_NE(detail::decode_scalar(scalar("true", true), b).find("quoted"), std::string::npos);

  double d = 0;
  EXPECT_EQ(detail::decode_scalar(scalar("0.25"), d), "");
  EXPECT_EQ(d, 0.25);
  EXPECT_EQ(detail::decode_scalar(scalar("-1e3"), d), "");
  EXPECT_EQ(d, -1000);
  EXPECT_NE(detail::decode_scalar(scalar("nan"), d), "");
  EXPECT_NE(detail::decode_scalar(scalar("inf"), d), "");
  EXPECT_NE(detail::decode_scalar(scalar("1e999"), d), "");
  EXPECT_NE(detail::decode_scalar(scalar("0.5x"), d), "");

  std::string s;
  EXPECT_EQ(detail::decode_scalar(scalar("8080"), s), "");
  EXPECT_EQ(s, "8080");
  detail::node m;
  m.k = detail::node::kind::map;
  EXPECT_EQ(detail::decode_scalar(m, s), "expected a string, got a map");
  detail::node null;
  EXPECT_EQ(detail::decode_scalar(null, s), "expected a string, got nothing (null)");
}

TEST(ConfigScalars, StringsEncodeToYamlThatDecodesBack) {
  const std::string values[] = {"plain",        "",           "true",   "null",     "~",
                                "0.0.0.0:5050", "#x",         "- a",    "a: b",     "\"q\"",
                                "back\\",       "line\nline", "tab\tx", "\x01\x7f", "caf\xc3\xa9",
                                " lead",        "trail ",     "8080",   "[x]",      "{y}",
                                "&a",           "*b",         "!t",     "%p",       "@at",
                                "`tick`",       "a,b",        "?q",     "|",        ">"};
  for (const auto& v : values) {
    const std::string text = "k: " + detail::encode_scalar(v) + "\n";
    auto doc = detail::parse_yaml(text, "t.yaml");
    ASSERT_TRUE(doc.has_value()) << text << ": " << doc.error().message;
    ASSERT_EQ(doc->entries.size(), 1u) << text;
    std::string back;
    EXPECT_EQ(detail::decode_scalar(doc->entries[0].value, back), "") << text;
    EXPECT_EQ(back, v) << text;
  }
}

}  // namespace
}  // namespace shoal::config
