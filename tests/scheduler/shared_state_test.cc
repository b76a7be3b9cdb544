// The parts of shared state that run without Redis: log positions, Redis addresses, the index
// applying a heartbeat with a verdict already given (as every replica applies the shared log),
// and a replica that cannot reach Redis answering alone, marked stale. Real Redis, Sentinel and
// several replicas: tests/scheduler/ha_test.py.
#include "scheduler/shared_state.h"

#include <gtest/gtest.h>

#include "scheduler/ingest.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

TEST(LogId, ParsesAndOrdersStreamIds) {
  auto a = log_id::parse("1700000000000-0");
  auto b = log_id::parse("1700000000000-12");
  auto c = log_id::parse("1700000000001-0");
  ASSERT_TRUE(a && b && c);
  EXPECT_LT(*a, *b);
  EXPECT_LT(*b, *c);
  EXPECT_EQ(b->str(), "1700000000000-12");
  for (const char* bad :
       {"", "-", "12", "12-", "-3", "a-1", "1-b", "1-2-3", "99999999999999999999-0"})
    EXPECT_FALSE(log_id::parse(bad)) << bad;
}

TEST(RedisAddress, SplitsHostAndPort) {
  std::string h;
  int p = 0;
  ASSERT_TRUE(split_host_port("127.0.0.1:6379", h, p));
  EXPECT_EQ(h, "127.0.0.1");
  EXPECT_EQ(p, 6379);
  ASSERT_TRUE(split_host_port("[::1]:26379", h, p));
  EXPECT_EQ(h, "::1");
  EXPECT_EQ(p, 26379);
  ASSERT_TRUE(split_host_port("redis.shoal.svc:6379", h, p));
  EXPECT_EQ(h, "redis.shoal.svc");
  for (const char* bad :
       {"", "host", ":6379", "host:", "host:0", "host:65536", "host:12x", "[::1]6379"})
    EXPECT_FALSE(split_host_port(bad, h, p)) << bad;
}

TEST(RedisAddress, ATunnelOrNothing) {
  // Without tunnels a named Redis is connected to as named.
  EXPECT_EQ(*through_tunnel({}, "10.0.0.5:6379"), "10.0.0.5:6379");
  std::map<std::string, std::string> t{{"shoal-redis-0.shoal-redis:6379", "127.0.0.1:16379"},
                                       {"10.0.0.6:6379", "127.0.0.1:16380"}};
  EXPECT_EQ(*through_tunnel(t, "shoal-redis-0.shoal-redis:6379"), "127.0.0.1:16379");
  EXPECT_EQ(*through_tunnel(t, "10.0.0.6:6379"), "127.0.0.1:16380");
  // With tunnels, a primary that has none is refused, never reached in plain text.
  auto r = through_tunnel(t, "10.0.0.7:6379");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::unavailable));
  EXPECT_NE(r.error().message.find("10.0.0.7:6379 has no entry in redis.tunnels"),
            std::string::npos);
}

class DecidedApply : public ::testing::Test {
 protected:
  DecidedApply() : idx_(index_options{}, "e1", clock_.fn()), trk_(tracker_options{}, clock_.fn()) {}
  fake_clock clock_;
  cluster_index idx_;
  tracker trk_;
};

// A replica applies Redis's verdict even where its own view would judge otherwise: a delta
// judged "ok" is applied on a replica that never saw the node's full list; one judged "gap" is
// not applied anywhere, whatever the local sequence says.
TEST_F(DecidedApply, TheVerdictGivenIsTheOneApplied) {
  apply_decision ok{"ok"};
  auto m = delta_hb("n1", 7, "other-epoch", {held("a", 10)});
  m.ip = "10.0.0.1";
  m.bt_port = 6881;
  auto out = ingest_heartbeat(idx_, trk_, m, &ok);
  EXPECT_FALSE(out.resync) << out.resync_reason;
  ASSERT_TRUE(idx_.object(dg("a")));
  EXPECT_EQ(idx_.object(dg("a"))->holders.size(), 1u);

  apply_decision gap{"gap"};
  auto m2 = delta_hb("n1", 8, "e1", {held("b", 10)});
  m2.ip = "10.0.0.1";
  m2.bt_port = 6881;
  out = ingest_heartbeat(idx_, trk_, m2, &gap);
  EXPECT_TRUE(out.resync);
  EXPECT_EQ(out.resync_reason, "gap");
  EXPECT_FALSE(idx_.object(dg("b")));
}

// A node loaded from Redis at start keeps its age: silent long enough, it is not healthy.
TEST_F(DecidedApply, ALoadedNodeKeepsItsAge) {
  auto m = full_hb("n1", {held("a", 10)}, {}, 3, "e1");
  apply_decision fresh{"full", 0ms};
  (void)ingest_heartbeat(idx_, trk_, m, &fresh);
  EXPECT_TRUE(idx_.healthy("n1"));
  auto m2 = full_hb("n2", {held("a", 10)}, {}, 3, "e1");
  apply_decision old{"full", std::chrono::minutes(2)};
  (void)ingest_heartbeat(idx_, trk_, m2, &old);
  EXPECT_FALSE(idx_.healthy("n2"));
  EXPECT_GE(idx_.node("n2")->last_seen_s, 119.0);
}

TEST_F(DecidedApply, CapsAreCheckedBeforeTheLogNotWhenApplyingIt) {
  index_options o;
  o.max_objects_per_node = 1;
  cluster_index small(o, "e1", clock_.fn());
  auto m = full_hb("n1", {held("a", 1), held("b", 1)}, {}, 1, "e1");
  EXPECT_EQ(small.refused(m).refused, 413u);
  EXPECT_FALSE(small.node("n1"));  // refused() applies nothing
  apply_decision full{"full"};
  EXPECT_EQ(small.apply(m, "10.0.0.1", &full).refused, 0u);
}

// Redis unreachable (nothing listens on the port): the replica starts, answers heartbeats from
// its own view and says why it is stale.
TEST(SharedStateDown, AnswersAloneMarkedStale) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e1", clock.fn());
  tracker trk(tracker_options{}, clock.fn());
  metrics::registry reg;
  shared_state_options so;
  so.redis.address = "127.0.0.1:1";  // nothing listens on port 1
  so.redis.connect_timeout = 100ms;
  so.redis.command_timeout = 100ms;
  so.replica_id = "test/1";
  shared_state s(so, idx, trk, reg);
  s.start();
  EXPECT_NE(s.stale_reason().find("127.0.0.1:1"), std::string::npos) << s.stale_reason();
  auto m = full_hb("n1", {held("a", 10)}, {}, 1, "");
  m.ip = "10.0.0.1";
  auto r = s.heartbeat(m);
  EXPECT_TRUE(r.stale);
  EXPECT_TRUE(r.out.full);
  EXPECT_TRUE(idx.node("n1"));
  EXPECT_FALSE(s.leader());
  s.stop();
}

}  // namespace
}  // namespace shoal::scheduler
