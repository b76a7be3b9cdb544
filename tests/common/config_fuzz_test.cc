// Fuzz-style: random and mutated input into the config loader never crashes, never hangs, and
// every refusal carries a message. Deterministic seeds and bounded loops keep it a unit test.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"

namespace fuzzcfg {

using shoal::config::binder;
using shoal::config::byte_size;
using shoal::config::duration;

struct item {
  std::string name;
  std::optional<std::int32_t> weight;
  std::vector<std::string> tags;
};
void describe(binder& b, item& i) {
  b.field("name", i.name, "Name.", {.required = true});
  b.field("weight", i.weight, "Weight.", {.min = 0});
  b.field("tags", i.tags, "Tags.");
}

struct inner {
  bool on = false;
  double ratio = 0.5;
  std::map<std::string, std::string> labels;
};
void describe(binder& b, inner& c) {
  b.field("on", c.on, "On.");
  b.field("ratio", c.ratio, "Ratio.", {.min = 0.0, .max = 1.0});
  b.field("labels", c.labels, "Labels.");
}

struct config {
  std::string listen = "0.0.0.0:1";
  duration ttl{std::chrono::seconds(5)};
  byte_size max = byte_size::mib(1);
  std::uint16_t port = 80;
  std::int64_t offset = 0;
  inner sub;
  std::vector<item> items;
};
void describe(binder& b, config& c) {
  b.field("listen", c.listen, "Listen.");
  b.field("ttl", c.ttl, "TTL.");
  b.field("max", c.max, "Max.");
  b.field("port", c.port, "Port.");
  b.field("offset", c.offset, "Offset.");
  b.section("sub", c.sub, "Sub.");
  b.list("items", c.items, "Items.");
  b.check(c.sub.ratio <= 1.0, "ratio");
}

}  // namespace fuzzcfg

namespace shoal::config {
namespace {

const std::string k_seed_doc = R"(listen: "127.0.0.1:8080"
ttl: 1h30m
max: 1.5GiB
port: 8080
offset: -3
sub:
  on: true
  ratio: 0.25
  labels: {rack: r1, 'zone': "z"}
items:
  - name: a
    weight: 3
    tags: [x, y]
  - {name: b, tags: []}
# comment
)";

// Returns whether the input loaded.
bool expect_clean_outcome(const std::string& input) {
  fuzzcfg::config cfg;
  auto st = load_string(input, "fuzz.yaml", cfg);
  if (!st) {
    EXPECT_FALSE(st.error().message.empty());
    EXPECT_TRUE(st.error().is(errc::config_error));
    return false;
  }
  // Whatever loaded must print, and the print must load back to the same values.
  const std::string printed = to_yaml(cfg);
  fuzzcfg::config back;
  auto again = load_string(printed, "printed.yaml", back);
  EXPECT_TRUE(again) << again.error().message << "\ninput:\n" << input << "\nprinted:\n" << printed;
  EXPECT_EQ(to_yaml(back), printed);
  return true;
}

TEST(ConfigFuzz, SeedDocumentLoads) {
  fuzzcfg::config cfg;
  auto st = load_string(k_seed_doc, "seed.yaml", cfg);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(cfg.items.size(), 2u);
}

TEST(ConfigFuzz, RandomBytesNeverCrash) {
  std::mt19937_64 rng(0x5eed0001);
  const std::string alphabet = "abc:- \n\t\"'[]{},#&*!|>%@`?~01.5sKiB\\\x01\xff\xc3";
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s(rng() % 200, '\0');
    const bool raw = iter % 3 == 0;
    for (auto& c : s) {
      c = raw ? static_cast<char>(rng() & 0xff) : alphabet[rng() % alphabet.size()];
    }
    expect_clean_outcome(s);
  }
}

TEST(ConfigFuzz, MutatedValidDocumentsNeverCrash) {
  std::mt19937_64 rng(0x5eed0002);
  const std::string pieces[] = {
      ":", "- ", "\n",  "  ",     "\t",    "\"",    "'",   "[",     "]",
      "{", "}",  "&x ", "*x",     "---\n", "~",     "0x",  "-",     "99999999999999999999",
      "#", ",",  "? ",  "!!str ", "|\n",   "items", "sub", "name: "};
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = k_seed_doc;
    const int edits = 1 + static_cast<int>(rng() % 2);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const std::size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0:
          s[pos] = static_cast<char>(rng() & 0xff);
          break;
        case 1:
          s.erase(pos, 1 + rng() % 8);
          break;
        case 2:
          s.insert(pos, pieces[rng() % std::size(pieces)]);
          break;
        case 3:
          s.insert(pos, s.substr(rng() % s.size(), rng() % 20));
          break;
      }
    }
    loaded += expect_clean_outcome(s) ? 1 : 0;
  }
  // Many mutants must still load, or the print/load round trip above is never exercised.
  EXPECT_GT(loaded, 200) << "mutants that loaded";
  std::printf("%d of 3000 mutants loaded\n", loaded);
}

TEST(ConfigFuzz, DeepNestingAndHugeScalarsAreRefusedOrHandled) {
  expect_clean_outcome(std::string(5000, '[') + std::string(5000, ']'));
  expect_clean_outcome("sub:\n" + std::string(3000, ' ') + "on: true\n");
  std::string nested = "items:\n";
  for (int i = 0; i < 200; ++i)
    nested += std::string(static_cast<std::size_t>(2 * i + 2), ' ') + "- \n";
  expect_clean_outcome(nested);
  expect_clean_outcome("listen: " + std::string(1 << 20, 'x') + "\n");
  expect_clean_outcome("max: " + std::string(5000, '9') + "KiB\n");
  expect_clean_outcome("ttl: " + std::string(5000, '9') + "s\n");
}

TEST(ConfigFuzz, ValueParsersTakeAnyString) {
  std::mt19937_64 rng(0x5eed0003);
  const std::string alphabet = "0123456789.+- smhdnuµKMGTPiBbk\xc2\xb5";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s(rng() % 16, '\0');
    for (auto& c : s) c = alphabet[rng() % alphabet.size()];
    if (auto d = duration::parse(s)) {
      auto back = duration::parse(d->str());
      ASSERT_TRUE(back) << s;
      EXPECT_EQ(*back, *d) << s;
    } else {
      EXPECT_FALSE(d.error().message.empty());
    }
    if (auto b = byte_size::parse(s)) {
      auto back = byte_size::parse(b->str());
      ASSERT_TRUE(back) << s;
      EXPECT_EQ(*back, *b) << s;
    } else {
      EXPECT_FALSE(b.error().message.empty());
    }
  }
}

}  // namespace
}  // namespace shoal::config
