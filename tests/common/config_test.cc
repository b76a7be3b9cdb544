// Loading, validating, printing and documenting a realistic daemon config through its single
// describe() functions.

#include "common/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace demo {

using shoal::config::binder;
using shoal::config::byte_size;
using shoal::config::duration;
using namespace std::chrono_literals;

struct upstream {
  std::string name;
  std::string url;
  std::string auth = "anonymous";
  std::vector<std::string> prefixes;
  std::optional<std::uint16_t> port;
  bool operator==(const upstream&) const = default;
};

void describe(binder& b, upstream& u) {
  b.field("name", u.name, "Name used in logs and metrics.", {.required = true});
  b.field("url", u.url, "Base URL of the registry.", {.required = true});
  b.field("auth", u.auth, "How to authenticate.", {.one_of = {"anonymous", "basic", "bearer"}});
  b.field("prefixes", u.prefixes, "Repository prefixes routed to this upstream.");
  b.field("port", u.port, "Port override.", {.min = 1});
}

struct eviction_config {
  double high_watermark = 0.9;
  double low_watermark = 0.8;
  duration interval{30s};
  bool operator==(const eviction_config&) const = default;
};

void describe(binder& b, eviction_config& c) {
  b.field("high_watermark", c.high_watermark, "Start evicting above this fill ratio.",
          {.min = 0.0, .max = 1.0});
  b.field("low_watermark", c.low_watermark, "Stop evicting below this fill ratio.",
          {.min = 0.0, .max = 1.0});
  b.field("interval", c.interval, "How often the fill ratio is checked.");
  b.check(c.low_watermark < c.high_watermark, "low_watermark must be below high_watermark");
}

struct cache_config {
  std::string dir = "/var/lib/shoal";
  byte_size max_bytes = byte_size::gib(100);
  eviction_config eviction;
  bool operator==(const cache_config&) const = default;
};

void describe(binder& b, cache_config& c) {
  b.field("dir", c.dir, "Directory of the object store.");
  b.field("max_bytes", c.max_bytes, "Total size of the objects kept.", {.min = byte_size::mib(1)});
  b.section("eviction", c.eviction, "When and how objects are evicted.");
}

struct proxy_config {
  std::string listen = "0.0.0.0:5050";
  duration tag_ttl{60s};
  byte_size max_body = byte_size::mib(10);
  int workers = 4;
  std::int64_t clock_skew_ms = -5;
  std::uint64_t max_connections = 1000;
  bool tls = false;
  double sample_ratio = 0.5;
  std::optional<duration> idle_timeout;
  std::vector<std::string> mirrors = {"a.example", "b.example"};
  std::map<std::string, std::string> labels;
  cache_config cache;
  std::vector<upstream> upstreams;
  bool operator==(const proxy_config&) const = default;
};

void describe(binder& b, proxy_config& c) {
  b.field("listen", c.listen, "Address and port the HTTP API listens on.");
  b.field("tag_ttl", c.tag_ttl, "How long a tag to digest answer is cached.");
  b.field("max_body", c.max_body, "Largest request body accepted.");
  b.field("workers", c.workers, "Threads serving requests.", {.min = 1, .max = 256});
  b.field("clock_skew_ms", c.clock_skew_ms, "Tolerated clock skew.");
  b.field("max_connections", c.max_connections, "Open connections at most.");
  b.field("tls", c.tls, "Serve HTTPS.");
  b.field("sample_ratio", c.sample_ratio, "Fraction of requests traced.");
  b.field("idle_timeout", c.idle_timeout, "Close idle connections after this long.\nUnset: never.");
  b.field("mirrors", c.mirrors, "Mirror hosts.");
  b.field("labels", c.labels, "Topology labels.");
  b.section("cache", c.cache, "Local object store.");
  b.list("upstreams", c.upstreams, "Upstream registries, tried by ns or prefix.");
}

}  // namespace demo

namespace shoal::config {
namespace {

using demo::proxy_config;
using namespace std::chrono_literals;

// A temporary directory removed at the end of the test.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shoal-config-XXXXXX";
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string load_error(const std::string& text, proxy_config& cfg,
                       const std::string& name = "proxy.yaml") {
  auto st = load_string(text, name, cfg);
  if (st) return "(loaded)";
  EXPECT_TRUE(st.error().is(errc::config_error));
  return st.error().message;
}

std::string load_error(const std::string& text) {
  proxy_config cfg;
  return load_error(text, cfg);
}

const char* const k_full = R"(# every type
listen: 127.0.0.1:8080
tag_ttl: 5m
max_body: 2GiB
workers: 16
clock_skew_ms: -250
max_connections: 0x100
tls: true
sample_ratio: 0.125
idle_timeout: 90s
mirrors: [m1, "m2"]
labels:
  rack: r7
  zone: "eu-1"
cache:
  dir: /data/cache
  max_bytes: 1.5TiB
  eviction:
    low_watermark: 0.5
upstreams:
  - name: hub
    url: https://registry-1.docker.io
    auth: bearer
    prefixes: [library/, bitnami/]
  - name: local
    url: http://harbor:5000
    port: 5000
)";

TEST(ConfigLoad, EmptyDocumentKeepsDefaults) {
  proxy_config cfg;
  ASSERT_TRUE(load_string("", "empty.yaml", cfg));
  ASSERT_TRUE(load_string("# only a comment\n", "c.yaml", cfg));
  ASSERT_TRUE(load_string("---\n...\n", "d.yaml", cfg));
  EXPECT_EQ(cfg, proxy_config{});
}

TEST(ConfigLoad, EveryTypeLoads) {
  proxy_config cfg;
  auto st = load_string(k_full, "full.yaml", cfg);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(cfg.listen, "127.0.0.1:8080");
  EXPECT_EQ(cfg.tag_ttl, duration(5min));
  EXPECT_EQ(cfg.max_body, byte_size::gib(2));
  EXPECT_EQ(cfg.workers, 16);
  EXPECT_EQ(cfg.clock_skew_ms, -250);
  EXPECT_EQ(cfg.max_connections, 256u);
  EXPECT_TRUE(cfg.tls);
  EXPECT_EQ(cfg.sample_ratio, 0.125);
  ASSERT_TRUE(cfg.idle_timeout.has_value());
  EXPECT_EQ(*cfg.idle_timeout, duration(90s));
  EXPECT_EQ(cfg.mirrors, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(cfg.labels, (std::map<std::string, std::string>{{"rack", "r7"}, {"zone", "eu-1"}}));
  EXPECT_EQ(cfg.cache.dir, "/data/cache");
  EXPECT_EQ(cfg.cache.max_bytes, byte_size(3ull << 39));
  EXPECT_EQ(cfg.cache.eviction.low_watermark, 0.5);
  EXPECT_EQ(cfg.cache.eviction.high_watermark, 0.9);  // untouched default inside a set section
  ASSERT_EQ(cfg.upstreams.size(), 2u);
  EXPECT_EQ(cfg.upstreams[0].name, "hub");
  EXPECT_EQ(cfg.upstreams[0].auth, "bearer");
  EXPECT_EQ(cfg.upstreams[0].prefixes, (std::vector<std::string>{"library/", "bitnami/"}));
  EXPECT_EQ(cfg.upstreams[1].auth, "anonymous");  // item default
  EXPECT_EQ(cfg.upstreams[1].port, std::optional<std::uint16_t>(5000));
  EXPECT_FALSE(cfg.upstreams[0].port.has_value());
}

TEST(ConfigLoad, WrongTypesNameTheKeyPathFileAndLine) {
  struct bad_case {
    std::string yaml;
    std::string want;
  };
  const bad_case cases[] = {
      {"workers: many\n", "proxy.yaml:1: workers: expected an integer, got \"many\""},
      {"workers: \"4\"\n", "proxy.yaml:1: workers: expected an integer, got the quoted string"},
      {"workers: 1.5\n", "proxy.yaml:1: workers: expected an integer, got \"1.5\""},
      {"workers: 99999999999\n", "proxy.yaml:1: workers: integer out of range"},
      {"max_connections: -1\n", "proxy.yaml:1: max_connections: expected a non-negative integer"},
      {"clock_skew_ms: 9223372036854775808\n", "clock_skew_ms: integer out of range"},
      {"listen: {a: 1}\n", "proxy.yaml:1: listen: expected a string, got a map"},
      {"listen: [a]\n", "proxy.yaml:1: listen: expected a string, got a list"},
      {"listen:\n", "proxy.yaml:1: listen: expected a string, got nothing (null)"},
      {"tls: yes\n", "proxy.yaml:1: tls: expected true or false"},
      {"sample_ratio: half\n", "sample_ratio: expected a number"},
      {"tag_ttl: 30\n", "proxy.yaml:1: tag_ttl: duration \"30\" has no unit"},
      {"tag_ttl: [1s]\n", "tag_ttl: expected a duration like \"5s\", got a list"},
      {"max_body: 10 XB\n", "proxy.yaml:1: max_body: unknown unit \"XB\""},
      {"idle_timeout: soon\n", "idle_timeout: expected a duration"},
      {"mirrors: a\n", "proxy.yaml:1: mirrors: expected a list, got \"a\""},
      {"mirrors: [a, {b: c}]\n", "proxy.yaml:1: mirrors[1]: expected a string, got a map"},
      {"labels: [a]\n", "proxy.yaml:1: labels: expected a map, got a list"},
      {"labels:\n  rack: [r1]\n", "proxy.yaml:2: labels.rack: expected a string, got a list"},
      {"cache: 5\n", "proxy.yaml:1: cache: expected a map, got \"5\""},
      {"cache:\n  eviction:\n    interval: 5\n", "proxy.yaml:3: cache.eviction.interval:"},
      {"upstreams: {name: a}\n", "proxy.yaml:1: upstreams: expected a list of maps, got a map"},
      {"upstreams:\n  - name: a\n    url: b\n  - name: c\n    url: d\n    auth: {x: 1}\n",
       "proxy.yaml:6: upstreams[1].auth: expected a string, got a map"},
      {"upstreams:\n  - just-a-string\n", "proxy.yaml:2: upstreams[0]: expected a map"},
      {"upstreams:\n  - name: a\n    url: b\n    port: 70000\n",
       "proxy.yaml:4: upstreams[0].port: integer out of range: the range is 0 to 65535"},
      {"- a\n- b\n", "proxy.yaml:1: expected a map of keys at the top level, got a list"},
  };
  for (const auto& c : cases) {
    const std::string msg = load_error(c.yaml);
    EXPECT_NE(msg.find(c.want), std::string::npos) << "yaml:\n" << c.yaml << "message: " << msg;
  }
}

TEST(ConfigLoad, UnknownKeysAreErrorsEverywhereWithSuggestions) {
  EXPECT_EQ(load_error("listne: x\n"),
            "proxy.yaml:1: listne: unknown key (did you mean \"listen\"?)");
  EXPECT_EQ(load_error("completely_else: 1\n"), "proxy.yaml:1: completely_else: unknown key");
  EXPECT_EQ(load_error("cache:\n  max_byte: 1GiB\n"),
            "proxy.yaml:2: cache.max_byte: unknown key (did you mean \"max_bytes\"?)");
  EXPECT_EQ(load_error("cache:\n  eviction:\n    hi: 0.5\n"),
            "proxy.yaml:3: cache.eviction.hi: unknown key");
  EXPECT_EQ(load_error("upstreams:\n  - name: a\n    url: b\n    uri: c\n"),
            "proxy.yaml:4: upstreams[0].uri: unknown key (did you mean \"url\"?)");
}

TEST(ConfigLoad, ReportsEveryProblemAndLeavesConfigUnchanged) {
  proxy_config cfg;
  cfg.listen = "kept";
  const std::string msg = load_error("listen: new\nworkers: x\ntls: maybe\nbogus: 1\n", cfg);
  EXPECT_NE(msg.find("proxy.yaml:2: workers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("proxy.yaml:3: tls"), std::string::npos) << msg;
  EXPECT_NE(msg.find("proxy.yaml:4: bogus: unknown key"), std::string::npos) << msg;
  EXPECT_EQ(cfg.listen, "kept");
}

TEST(ConfigLoad, MalformedYamlGivesFileLineAndColumn) {
  EXPECT_EQ(load_error("listen: a\n\tworkers: 2\n"),
            "proxy.yaml:2:1: illegal tab when looking for indentation");
  EXPECT_EQ(load_error("listen: \"unclosed\nworkers: 2\n"),
            "proxy.yaml:1:9: unclosed quote: the string runs to the end of the file");
  EXPECT_EQ(load_error("listen: 'unclosed\nworkers: 2\n"),
            "proxy.yaml:1:9: unclosed quote: the string runs to the end of the file");
  EXPECT_NE(load_error("listen: \"unclosed\nworkers: 2").find("proxy.yaml:2:"), std::string::npos);
  EXPECT_EQ(load_error("mirrors: [a, b\nworkers: 2\n"),
            "proxy.yaml:2:8: end of sequence flow not found");
  EXPECT_EQ(load_error("listen: a: b\n"), "proxy.yaml:1:10: illegal map value");
  EXPECT_EQ(load_error("workers: 1\nworkers: 2\n"), "proxy.yaml:2:1: duplicate key \"workers\"");
  EXPECT_NE(load_error("  workers: 1\nlisten: x\n").find("proxy.yaml:2:1: a second YAML document"),
            std::string::npos);
  EXPECT_NE(
      load_error("workers: 1\n---\nlisten: x\n").find("proxy.yaml:2:1: a second YAML document"),
      std::string::npos);
  // yaml-cpp's LoadAll loops forever on this one (found by the fuzz test).
  EXPECT_EQ(load_error(",\n"), "proxy.yaml:1:1: unexpected \",\": not valid YAML here");
  EXPECT_EQ(load_error("listen: \"\\q\"\n"), "proxy.yaml:1:12: unknown escape character: q");
}

TEST(ConfigLoad, AliasBombIsRefusedNotExpanded) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    const std::string n = std::to_string(i);
    yaml += "a";
    yaml += n;
    yaml += ": &a";
    yaml += n;
    yaml += " [";
    for (int j = 0; j < 10; ++j) {
      yaml += j ? ", *a" : "*a";
      yaml += std::to_string(i - 1);
    }
    yaml += "]\n";
  }
  EXPECT_NE(load_error(yaml).find("document too large"), std::string::npos);
}

TEST(ConfigValidate, BoundsOneOfRequiredAndChecksNameWhereTheValueWasSet) {
  EXPECT_EQ(load_error("workers: 0\n"), "proxy.yaml:1: workers: must be at least 1, got 0");
  EXPECT_EQ(load_error("\nworkers: 300\n"), "proxy.yaml:2: workers: must be at most 256, got 300");
  EXPECT_EQ(load_error("cache:\n  max_bytes: 1KiB\n"),
            "proxy.yaml:2: cache.max_bytes: must be at least 1MiB, got 1KiB");
  EXPECT_EQ(
      load_error("upstreams:\n  - name: a\n    url: b\n    auth: kerberos\n"),
      "proxy.yaml:4: upstreams[0].auth: must be one of anonymous, basic, bearer; got kerberos");
  EXPECT_EQ(load_error("upstreams:\n  - name: a\n  - url: b\n"),
            "proxy.yaml:2: upstreams[0].url: required key is missing\n"
            "proxy.yaml:3: upstreams[1].name: required key is missing");
  EXPECT_EQ(load_error("upstreams:\n  - name: a\n    url: b\n    port: 0\n"),
            "proxy.yaml:4: upstreams[0].port: must be at least 1, got 0");
  EXPECT_EQ(load_error("cache:\n  eviction:\n    low_watermark: 0.95\n"),
            "proxy.yaml:2: cache.eviction: low_watermark must be below high_watermark");
}

TEST(ConfigValidate, ValidateChecksAConfigBuiltInCode) {
  proxy_config cfg;
  EXPECT_TRUE(validate(cfg));
  cfg.workers = 0;
  cfg.cache.eviction.low_watermark = 1.0;
  auto st = validate(cfg);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("workers: must be at least 1, got 0 (the default value)"),
            std::string::npos);
  EXPECT_NE(st.error().message.find("cache.eviction: low_watermark must be below high_watermark"),
            std::string::npos);
  // A config built in code has no file, so "required" is not enforced by validate().
  proxy_config with_item;
  with_item.upstreams.push_back({});
  EXPECT_TRUE(validate(with_item));
  // Nor by loading, for list items that no file provided (defaults or items set in code).
  EXPECT_TRUE(load_string("workers: 3\n", "w.yaml", with_item));
  EXPECT_EQ(with_item.workers, 3);
}

TEST(ConfigLayers, LaterFilesWinSectionsMergeListsAndMapsReplace) {
  temp_dir dir;
  const std::string base = dir.write("base.yaml", R"(listen: 0.0.0.0:1
workers: 8
labels: {rack: r1, zone: z1}
cache:
  dir: /base
  max_bytes: 10GiB
upstreams:
  - {name: a, url: http://a}
  - {name: b, url: http://b}
)");
  const std::string site = dir.write("site.yaml", R"(workers: 2
labels: {rack: r2}
cache:
  max_bytes: 20GiB
upstreams:
  - {name: c, url: http://c}
)");
  proxy_config cfg;
  auto st = load_files({base, site}, cfg);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(cfg.listen, "0.0.0.0:1");
  EXPECT_EQ(cfg.workers, 2);
  EXPECT_EQ(cfg.labels, (std::map<std::string, std::string>{{"rack", "r2"}}));
  EXPECT_EQ(cfg.cache.dir, "/base");
  EXPECT_EQ(cfg.cache.max_bytes, byte_size::gib(20));
  ASSERT_EQ(cfg.upstreams.size(), 1u);
  EXPECT_EQ(cfg.upstreams[0].name, "c");
}

TEST(ConfigLayers, ValidationRunsOnceOnTheMergedResultWithTheRightOrigin) {
  temp_dir dir;
  // The base alone fails the watermark check; the override repairs it.
  const std::string base = dir.write("base.yaml", "cache:\n  eviction:\n    low_watermark: 0.95\n");
  const std::string fix = dir.write("fix.yaml", "cache:\n  eviction:\n    high_watermark: 0.99\n");
  proxy_config cfg;
  ASSERT_TRUE(load_files({base, fix}, cfg));
  // A replaced list forgets the keys its earlier items set: "url" must be set in the new item.
  const std::string a = dir.write("a.yaml", "upstreams:\n  - {name: a, url: http://a}\n");
  const std::string b = dir.write("b.yaml", "\nupstreams:\n  - {name: b}\n");
  proxy_config cfg2;
  auto st = load_files({a, b}, cfg2);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, b + ":3: upstreams[0].url: required key is missing");
  // Errors name the file they come from.
  const std::string bad = dir.write("bad.yaml", "workers: 0\n");
  st = load_files({a, bad}, cfg2);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, bad + ":1: workers: must be at least 1, got 0");
}

TEST(ConfigLayers, MissingFileNamesThePath) {
  proxy_config cfg;
  auto st = load_file("/nonexistent/shoal/proxy.yaml", cfg);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message,
            "config file /nonexistent/shoal/proxy.yaml: No such file or directory");
  temp_dir dir;
  st = load_file(dir.path(), cfg);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("Is a directory"), std::string::npos) << st.error().message;
}

proxy_config odd_config() {
  proxy_config cfg;
  cfg.listen = "[::1]:5050";
  cfg.tag_ttl = duration(1500ms);
  cfg.max_body = byte_size(12345);
  cfg.workers = 7;
  cfg.clock_skew_ms = std::numeric_limits<std::int64_t>::min();
  cfg.max_connections = std::numeric_limits<std::uint64_t>::max();
  cfg.tls = true;
  cfg.sample_ratio = 0.1;
  cfg.idle_timeout = duration(3h);
  cfg.mirrors = {"true", "", "a: b", "# not a comment", "- dash", "quote\"back\\slash", "nl\nx"};
  cfg.labels = {{"caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac"}, {"null", "~"}, {"k: v", "8080"}};
  cfg.cache.dir = "/path with spaces/x";
  cfg.cache.eviction.interval = duration(0s);
  cfg.upstreams = {{"hub", "https://registry-1.docker.io", "bearer", {"library/"}, 443},
                   {"empty-prefixes", "http://x", "anonymous", {}, std::nullopt}};
  return cfg;
}

TEST(ConfigPrint, RoundTripsThroughLoad) {
  for (const proxy_config& cfg : {proxy_config{}, odd_config()}) {
    const std::string yaml = to_yaml(cfg);
    proxy_config back;
    back.workers = 99;  // prove every key is printed: nothing may stay at this value
    back.mirrors = {"stale"};
    auto st = load_string(yaml, "printed.yaml", back);
    ASSERT_TRUE(st) << st.error().message << "\n" << yaml;
    EXPECT_EQ(back, cfg) << yaml;
  }
}

TEST(ConfigPrint, CommentsEveryKeyAndNotesChangedDefaults) {
  proxy_config cfg;
  cfg.tag_ttl = duration(5min);
  cfg.upstreams = {{"hub", "https://h", "anonymous", {}, std::nullopt}};
  const std::string yaml = to_yaml(cfg);
  EXPECT_NE(yaml.find("# Address and port the HTTP API listens on.\nlisten: \"0.0.0.0:5050\"\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("# How long a tag to digest answer is cached.\n# default: 1m\ntag_ttl: 5m\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(
      yaml.find("# Close idle connections after this long.\n# Unset: never.\nidle_timeout: null\n"),
      std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("mirrors:\n  - a.example\n  - b.example\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("labels: {}\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("cache:\n  # Directory of the object store.\n  dir: /var/lib/shoal\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("  eviction:\n    # Start evicting"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("upstreams:\n  # Name used in logs and metrics.\n"
                      "  - name: hub\n    # Base URL of the registry.\n    url: \"https://h\"\n"),
            std::string::npos)
      << yaml;
  // Every line is a comment, a key, or a list item: no stray output.
  std::size_t keys = 0;
  for (std::size_t pos = 0; (pos = yaml.find(": ", pos)) != std::string::npos; ++pos) ++keys;
  EXPECT_GE(keys, 20u);
}

// Sections and lists nested inside list items, and items with nothing to print, exercise the
// YAML emitter's indentation and "- " placement.
struct leaf {
  int n = 1;
  bool operator==(const leaf&) const = default;
};
void describe(binder& b, leaf& l) { b.field("n", l.n, "N."); }
struct nothing {
  bool operator==(const nothing&) const = default;
};
void describe(binder&, nothing&) {}
struct node_cfg {
  leaf first;  // a section as the first key of a list item
  std::vector<leaf> leaves;
  std::vector<std::string> tags;
  bool operator==(const node_cfg&) const = default;
};
void describe(binder& b, node_cfg& c) {
  b.section("first", c.first, "First.");
  b.list("leaves", c.leaves, "Leaves.");
  b.field("tags", c.tags, "Tags.");
}
struct tree_cfg {
  std::vector<node_cfg> nodes;
  std::vector<nothing> empties;
  nothing empty_section;
  bool operator==(const tree_cfg&) const = default;
};
void describe(binder& b, tree_cfg& c) {
  b.list("nodes", c.nodes, "Nodes.");
  b.list("empties", c.empties, "Items without keys.");
  b.section("empty_section", c.empty_section, "No keys.");
}

TEST(ConfigPrint, EmptyListAndEmptyItems) {
  proxy_config cfg;
  EXPECT_NE(to_yaml(cfg).find("upstreams: []\n"), std::string::npos);
  tree_cfg tree;
  tree.nodes = {{{5}, {{1}, {2}}, {"a", "b"}}, {}, {{7}, {}, {}}};
  tree.empties = {{}, {}};
  const std::string yaml = to_yaml(tree);
  tree_cfg back;
  auto st = load_string(yaml, "tree.yaml", back);
  ASSERT_TRUE(st) << st.error().message << "\n" << yaml;
  EXPECT_EQ(back, tree) << yaml;
  EXPECT_NE(yaml.find("empties:\n  - {}\n  - {}\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("empty_section: {}\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("  - first:\n      # N.\n      # default: 1\n      n: 5\n"),
            std::string::npos)
      << yaml;
}

TEST(ConfigDocs, TableHasEveryKeyWithTypeAndDefault) {
  const std::string md = to_markdown<proxy_config>("registry-proxy");
  const std::string rows[] = {
      "| `listen` | string | `\"0.0.0.0:5050\"` | Address and port the HTTP API listens on. |",
      "| `tag_ttl` | duration | `1m` |",
      "| `max_body` | byte size | `10MiB` |",
      "| `workers` | int32 | `4` | Threads serving requests. Minimum 1. Maximum 256. |",
      "| `clock_skew_ms` | int64 | `-5` |",
      "| `max_connections` | uint64 | `1000` |",
      "| `tls` | bool | `false` |",
      "| `sample_ratio` | double | `0.5` |",
      "| `idle_timeout` | duration (optional) | `null` |",
      "| `mirrors` | list of string | `[a.example, b.example]` |",
      "| `labels` | map of string to string | `{}` |",
      "| `cache` | section |  | Local object store. See `cache` below. |",
      "| `cache.dir` | string | `/var/lib/shoal` |",
      "| `cache.max_bytes` | byte size | `100GiB` | Total size of the objects kept. Minimum 1MiB. "
      "|",
      "| `cache.eviction` | section |",
      "| `cache.eviction.high_watermark` | double | `0.9` |",
      "| `cache.eviction.low_watermark` | double | `0.8` |",
      "| `cache.eviction.interval` | duration | `30s` |",
      "| `upstreams` | list of maps | `[]` |",
      "| `upstreams[].name` | string | *required* |",
      "| `upstreams[].url` | string | *required* |",
      "| `upstreams[].auth` | string | `anonymous` | How to authenticate. One of: anonymous, "
      "basic, bearer. |",
      "| `upstreams[].prefixes` | list of string | `[]` |",
      "| `upstreams[].port` | uint16 (optional) | `null` | Port override. Minimum 1. |",
      "## `cache.eviction`",
      "## `upstreams[]`",
      "# registry-proxy configuration reference",
  };
  for (const auto& r : rows) EXPECT_NE(md.find(r), std::string::npos) << r << "\n---\n" << md;
}

TEST(ConfigDiff, ListsOnlyKeysThatDifferFromDefaults) {
  proxy_config cfg;
  EXPECT_TRUE(non_defaults(cfg).empty());
  cfg.workers = 8;
  cfg.cache.eviction.interval = duration(1min);
  cfg.upstreams = {{"hub", "https://h", "anonymous", {}, std::nullopt}};
  const auto d = non_defaults(cfg);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"workers", "8"},
      {"cache.eviction.interval", "1m"},
      {"upstreams[0].name", "hub"},
      {"upstreams[0].url", "\"https://h\""},
  };
  EXPECT_EQ(d, want);
}

// A describe() that binds a key twice is a bug; loading says so instead of misbehaving.
struct twice {
  int a = 0;
  int b = 0;
  bool operator==(const twice&) const = default;
};
void describe(binder& bd, twice& t) {
  bd.field("a", t.a, "A.");
  bd.field("a", t.b, "Again.");
}

TEST(ConfigLoad, KeyBoundTwiceIsReportedAsInternalError) {
  twice t;
  auto st = load_string("a: 1\n", "t.yaml", t);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("internal: describe() binds \"a\" twice"), std::string::npos);
}

result<cli_outcome> run_cli(std::vector<std::string> args, proxy_config& cfg) {
  std::vector<const char*> argv = {"registry-proxy"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_daemon_args(static_cast<int>(argv.size()), argv.data(), "registry-proxy", cfg);
}

TEST(ConfigCli, LayersFilesThenSetsAndReportsFiles) {
  temp_dir dir;
  const std::string a = dir.write("a.yaml", "workers: 8\nlisten: x:1\n");
  const std::string b = dir.write("b.yaml", "workers: 9\n");
  proxy_config cfg;
  auto out = run_cli({"--config", a, "-c", b, "--set", "cache.max_bytes=2GiB", "--set=listen=y:2",
                      "--set", "labels={rack: r1}", "--config=" + a},
                     cfg);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_FALSE(out->exit);
  EXPECT_EQ(out->files, (std::vector<std::string>{a, b, a}));
  EXPECT_EQ(cfg.workers, 8);     // a.yaml given again last
  EXPECT_EQ(cfg.listen, "y:2");  // --set after every file
  EXPECT_EQ(cfg.cache.max_bytes, byte_size::gib(2));
  EXPECT_EQ(cfg.labels, (std::map<std::string, std::string>{{"rack", "r1"}}));
  // A whole list of sections can be set; its items' required keys are checked.
  auto list = run_cli({"--set", "upstreams=[{name: a, url: \"http://a\"}, {name: b}]"}, cfg);
  ASSERT_FALSE(list);
  EXPECT_EQ(list.error().message,
            "--set upstreams=[{name: a, url: \"http://a\"}, {name: b}]: upstreams[1].url: "
            "required key is missing");
  ASSERT_TRUE(run_cli({"--set", "upstreams=[{name: a, url: x}]"}, cfg));
  ASSERT_EQ(cfg.upstreams.size(), 1u);
  EXPECT_EQ(cfg.upstreams[0].url, "x");
}

TEST(ConfigCli, PrintConfigPrintsTheEffectiveConfigAndAsksToExit) {
  temp_dir dir;
  const std::string a = dir.write("a.yaml", "workers: 8\n");
  proxy_config cfg;
  auto out = run_cli({"-c", a, "--print-config"}, cfg);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_TRUE(out->exit);
  EXPECT_EQ(out->output.rfind("# Effective configuration of registry-proxy from " + a + "\n", 0),
            0u);
  EXPECT_NE(out->output.find("# default: 4\nworkers: 8\n"), std::string::npos) << out->output;
  proxy_config back;
  ASSERT_TRUE(load_string(out->output, "printed", back));
  EXPECT_EQ(back, cfg);
}

TEST(ConfigCli, DocsHelpAndErrors) {
  proxy_config cfg;
  auto docs = run_cli({"--print-config-docs"}, cfg);
  ASSERT_TRUE(docs);
  EXPECT_TRUE(docs->exit);
  EXPECT_NE(docs->output.find("| `cache.max_bytes` |"), std::string::npos);
  auto help = run_cli({"--help"}, cfg);
  ASSERT_TRUE(help);
  EXPECT_TRUE(help->exit);
  EXPECT_NE(help->output.find("usage: registry-proxy"), std::string::npos);

  struct bad_case {
    std::vector<std::string> args;
    std::string want;
  };
  const bad_case cases[] = {
      {{"--bogus"}, "unknown argument \"--bogus\" (see --help)"},
      {{"--config"}, "--config needs a file name"},
      {{"--set"}, "--set needs KEY=VALUE"},
      {{"--set", "workers"}, "--set workers: expected KEY=VALUE"},
      {{"--set", "workers=lots"}, "--set workers=lots: workers: expected an integer, got \"lots\""},
      {{"--set", "cache.nope=1"}, "--set cache.nope=1: cache.nope: unknown key"},
      {{"--set", "upstreams[0].url=x"}, "bad key path \"upstreams[0].url\""},
      {{"--set", "a..b=1"}, "bad key path"},
      {{"--set", "workers=0"}, "--set workers=0: workers: must be at least 1, got 0"},
      {{"-c", "/nonexistent.yaml"}, "config file /nonexistent.yaml: No such file or directory"},
      {{"--print-config=yes"}, "unknown argument"},
  };
  for (const auto& c : cases) {
    proxy_config fresh;
    auto r = run_cli(c.args, fresh);
    ASSERT_FALSE(r) << c.want;
    EXPECT_TRUE(r.error().is(errc::config_error));
    EXPECT_NE(r.error().message.find(c.want), std::string::npos) << r.error().message;
    EXPECT_EQ(fresh, proxy_config{});
  }
}

}  // namespace
}  // namespace shoal::config
