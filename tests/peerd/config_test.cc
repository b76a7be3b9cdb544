// peerd's configuration: defaults are valid, every documented key loads, and bad values are
// refused with a message naming the key.

#include "peerd/config.h"

#include <gtest/gtest.h>

namespace shoal::peerd {
namespace {

using namespace std::chrono_literals;

TEST(PeerdConfig, DefaultsValidate) {
  peerd_config c;
  auto st = config::validate(c);
  EXPECT_TRUE(st) << st.error().message;
  EXPECT_LT(c.swarm.stall_timeout.get(), c.swarm.fallback_deadline.get());
  // Dataset views and their pins expire after hours, not seconds, unless renewed.
  EXPECT_EQ(c.datasets.pin_ttl.get(), 24h);
  EXPECT_EQ(c.datasets.pin_ttl_max.get(), 168h);
}

TEST(PeerdConfig, LoadsEverySection) {
  peerd_config c;
  auto st = config::load_string(R"(
http: {listen: "10.0.0.5:65001"}
node: {name: n1, zone: z1, rack: r1}
upstream: {registry_proxy: "http://10.0.0.2:5050", scheduler: "http://10.0.0.2:7070",
           connect_timeout: 500ms, request_timeout: 3s, metainfo_wait: 2s}
cache: {dir: /tmp/x/cache, quota: 4GiB, high_watermark: 0.9, low_watermark: 0.8}
swarm: {listen: "10.0.0.5:6881", announce_ip: 10.0.0.5, seed_idle_unload: 2s, stall_timeout: 1s,
        fallback_deadline: 8s, streaming_window: 16, max_loaded_torrents: 3, heartbeat_interval: 1s}
)",
                                "peerd.yaml", c);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(c.node.name, "n1");
  EXPECT_EQ(c.node.rack, "r1");
  EXPECT_EQ(c.upstream.scheduler, "http://10.0.0.2:7070");
  EXPECT_EQ(c.upstream.connect_timeout.get(), 500ms);
  EXPECT_EQ(c.cache.quota.bytes(), 4ull << 30);
  EXPECT_EQ(c.swarm.seed_idle_unload.get(), 2s);
  EXPECT_EQ(c.swarm.stall_timeout.get(), 1s);
  EXPECT_EQ(c.swarm.fallback_deadline.get(), 8s);
  EXPECT_EQ(c.swarm.streaming_window, 16);
  EXPECT_EQ(c.swarm.max_loaded_torrents, 3);
  EXPECT_EQ(c.swarm.announce_ip, "10.0.0.5");
}

TEST(PeerdConfig, SchedulerReplicas) {
  peerd_config one;
  ASSERT_TRUE(config::load_string("upstream: {scheduler: \"http://s:7070/\"}", "a.yaml", one));
  EXPECT_EQ(scheduler_urls(one.upstream), (std::vector<std::string>{"http://s:7070"}));
  EXPECT_TRUE(scheduler_urls(peerd_config{}.upstream).empty());
  peerd_config many;
  auto st = config::load_string(R"(
upstream: {scheduler: "http://a:7070", schedulers: ["http://b:7070", "http://a:7070/", "http://c:7070"],
           scheduler_connect_timeout: 500ms, scheduler_timeout: 1s, scheduler_backoff: 3s,
           scheduler_resolve_interval: 10s}
)",
                                "b.yaml", many);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(scheduler_urls(many.upstream),
            (std::vector<std::string>{"http://a:7070", "http://b:7070", "http://c:7070"}));
  EXPECT_EQ(many.upstream.scheduler_timeout.get(), 1s);
  peerd_config only_list;
  ASSERT_TRUE(
      config::load_string("upstream: {schedulers: [\"http://b:7070\"]}", "c.yaml", only_list));
  EXPECT_EQ(scheduler_urls(only_list.upstream), (std::vector<std::string>{"http://b:7070"}));
  EXPECT_EQ(peerd_config{}.upstream.scheduler_connect_timeout.get(), 1s);
  EXPECT_EQ(peerd_config{}.upstream.scheduler_timeout.get(), 2s);
}

struct bad_case {
  const char* name;
  const char* yaml;
  const char* must_mention;
};

// Names the case in ctest's list instead of dumping its bytes.
void PrintTo(const bad_case& c, std::ostream* os) { *os << c.name; }

class PeerdConfigRefuses : public ::testing::TestWithParam<bad_case> {};

TEST_P(PeerdConfigRefuses, WithAMessageNamingTheKey) {
  peerd_config c;
  auto before = config::to_yaml(c);
  auto st = config::load_string(GetParam().yaml, "peerd.yaml", c);
  ASSERT_FALSE(st) << GetParam().yaml;
  EXPECT_NE(st.error().message.find(GetParam().must_mention), std::string::npos)
      << st.error().message;
  // A refused config leaves the struct as it was.
  EXPECT_EQ(config::to_yaml(c), before);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PeerdConfigRefuses,
    ::testing::Values(
        bad_case{"StallTooShort", "swarm: {stall_timeout: 10ms}", "stall_timeout"},
        bad_case{"DeadlineZero", "swarm: {fallback_deadline: 0s}", "fallback_deadline"},
        bad_case{"WindowNegative", "swarm: {streaming_window: -1}", "streaming_window"},
        bad_case{"WindowHuge", "swarm: {streaming_window: 100000}", "streaming_window"},
        bad_case{"NoLoadedTorrents", "swarm: {max_loaded_torrents: 0}", "max_loaded_torrents"},
        bad_case{"FewConnections", "swarm: {connections_limit: 1}", "connections_limit"},
        bad_case{"UnloadTooSoon", "swarm: {seed_idle_unload: 100ms}", "seed_idle_unload"},
        bad_case{"BadDuration", "swarm: {stall_timeout: soon}", "stall_timeout"},
        bad_case{"UnknownKey", "swarm: {no_such_key: 1}", "no_such_key"},
        bad_case{"Watermarks", "cache: {low_watermark: 0.9, high_watermark: 0.8}", "watermark"},
        bad_case{"BadQuota", "cache: {quota: lots}", "quota"},
        bad_case{"NoIoThreads", "io_threads: 0", "io_threads"},
        bad_case{"ConnectTooShort", "upstream: {connect_timeout: 1ms}", "connect_timeout"},
        // With the deadline not after the stall timeout the HTTP fallback could
        // never run before the download is failed.
        bad_case{"DeadlineNotAfterStall", "swarm: {stall_timeout: 5s, fallback_deadline: 5s}",
                 "fallback_deadline"},
        bad_case{"SectionNotAMap", "swarm: [1, 2]", "swarm"},
        // Every dataset pin expires (security review F8): a TTL cannot exceed the renewal cap.
        bad_case{"PinTtlBeyondMax", "datasets: {pin_ttl: 8d, pin_ttl_max: 7d}", "pin_ttl"},
        bad_case{"PinTtlZero", "datasets: {pin_ttl: 0s}", "pin_ttl"}),
    [](const ::testing::TestParamInfo<bad_case>& i) { return std::string(i.param.name); });

TEST(PeerdConfig, ReferenceDocumentsTheSwarmKeys) {
  auto md = config::to_markdown<peerd_config>("peerd");
  for (const char* k : {"stall_timeout", "fallback_deadline", "seed_idle_unload",
                        "streaming_window", "announce_ip", "registry_proxy", "metainfo_wait"}) {
    EXPECT_NE(md.find(k), std::string::npos) << k;
  }
}

}  // namespace
}  // namespace shoal::peerd
