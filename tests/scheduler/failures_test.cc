// Node failure detection (scheduler/failures.h) over a real cluster_index fed heartbeats, both on
// one fake clock: silence past failed_after, a node's own `failing` report, a netsetup failure, a
// clean stop (leaving) that comes back within restart_grace and one that does not, no decision
// while the scheduler has just started or when most nodes go silent at once, and the events.
#include "scheduler/failures.h"

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

class FailuresTest : public ::testing::Test {
 protected:
  FailuresTest()
      : idx_(index_opts(), "epoch-1", clock_.fn()),
        fd_(
            opts(), [this](const node_summary& n) { return net_failure(n); }, clock_.fn()) {}
  static index_options index_opts() {
    index_options o;
    o.unhealthy_after = 30s;
    o.drop_after = 600s;
    return o;
  }
  static failover_options opts() {
    failover_options o;
    o.unhealthy_after = 30s;
    o.failed_after = 60s;
    o.restart_grace = 120s;
    o.max_failed_fraction = 0.5;
    o.max_events = 5;
    return o;
  }
  std::optional<std::string> net_failure(const node_summary& n) const {
    if (n.name == bad_network_) return std::string("NIC mlx5_0 has no RoCE v2 GID");
    return std::nullopt;
  }
  void beat(const std::string& node, bool leaving = false, std::string health = "ok") {
    auto m = full_hb(node, {}, {}, ++seq_[node], "");
    m.leaving = leaving;
    m.health = std::move(health);
    if (m.health == "failing") m.health_reasons = {"gpu 3: XID 79 (fallen off the bus)"};
    ASSERT_EQ(idx_.apply(m, "10.0.0.1").refused, 0u);
  }
  // Every node but `silent` heartbeats, then the clock moves `d` and the detector runs.
  std::vector<node_event> tick(std::chrono::seconds d, std::set<std::string> silent = {}) {
    for (const auto& n : names_) {
      if (!silent.count(n)) beat(n);
    }
    clock_.advance(d);
    return fd_.evaluate(idx_.nodes());
  }
  node_state state(const std::string& n) { return fd_.verdict(n).value().state; }
  // Past the start-up window, every node heard.
  void settle() {
    for (int i = 0; i < 7; ++i) tick(10s);
  }

  fake_clock clock_;
  cluster_index idx_;
  failure_detector fd_;
  std::map<std::string, std::uint64_t> seq_;
  std::vector<std::string> names_{"n1", "n2", "n3", "n4", "standby"};
  std::string bad_network_;
};

TEST_F(FailuresTest, NoSilenceDecisionWhileTheSchedulerHasJustStarted) {
  // n2 never heard after its first heartbeat: 50 s of silence inside the first failed_after.
  beat("n2");
  auto ev = tick(50s, {"n2"});
  EXPECT_TRUE(fd_.view_stale());
  EXPECT_NE(state("n2"), node_state::failed);
  EXPECT_TRUE(ev.empty());
}

TEST_F(FailuresTest, AReplicaOfSchedulersServingLongerDecidesAtOnce) {
  // A replica that just started, while other replicas have served for 10 minutes (shared state:
  // the nodes' last heartbeats came from Redis): n2's 70 s of silence is a failure now.
  beat("n2");
  tick(50s, {"n2"});
  EXPECT_TRUE(fd_.view_stale());
  fd_.serving_since(clock_.now() - 600s);
  auto ev = tick(20s, {"n2"});
  EXPECT_FALSE(fd_.view_stale());
  EXPECT_EQ(state("n2"), node_state::failed);
  ASSERT_FALSE(ev.empty());
  // Only ever earlier: a later start changes nothing.
  fd_.serving_since(clock_.now());
  tick(1s, {"n2"});
  EXPECT_FALSE(fd_.view_stale());
}

TEST_F(FailuresTest, SilencePastFailedAfterIsAFailureWithItsCause) {
  settle();
  EXPECT_FALSE(fd_.view_stale());
  std::vector<node_event> ev;
  // settle()'s last round heard n2 10 s before it evaluated: 4 more rounds make 50 s of silence.
  for (int i = 0; i < 4; ++i) ev = tick(10s, {"n2"});  // unhealthy, not failed
  EXPECT_EQ(state("n2"), node_state::unhealthy);
  ev = tick(11s, {"n2"});  // 61 s
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].node, "n2");
  EXPECT_EQ(ev[0].event, "failed");
  EXPECT_EQ(ev[0].cause, "heartbeat");
  EXPECT_NE(ev[0].detail.find("no heartbeat for 61 s (failed_after 60 s)"), std::string::npos)
      << ev[0].detail;
  auto v = fd_.verdict("n2").value();
  EXPECT_EQ(v.state, node_state::failed);
  EXPECT_EQ(v.cause, failure_cause::heartbeat);
  EXPECT_EQ(fd_.failed_nodes(), 1u);
  EXPECT_EQ(fd_.failures().at(failure_cause::heartbeat), 1u);
  // Still failed a second later: no second event, the count stays.
  EXPECT_TRUE(tick(1s, {"n2"}).empty());
  // Back: recovered.
  ev = tick(1s);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event, "recovered");
  EXPECT_EQ(state("n2"), node_state::healthy);
  EXPECT_EQ(fd_.failed_nodes(), 0u);
  EXPECT_EQ(fd_.failures().at(failure_cause::heartbeat), 1u);
}

TEST_F(FailuresTest, ACleanStopIsARestartNotAFailure) {
  settle();
  beat("n3", /*leaving=*/true);
  auto ev = tick(1s, {"n3"});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event, "restarting");
  EXPECT_FALSE(idx_.healthy("n3"));               // not placed on, not a source, while it restarts
  for (int i = 0; i < 9; ++i) tick(10s, {"n3"});  // 91 s: past failed_after, inside restart_grace
  EXPECT_EQ(state("n3"), node_state::restarting);
  EXPECT_EQ(fd_.failed_nodes(), 0u);
  ev = tick(1s);  // it is back
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event, "recovered");
  EXPECT_EQ(state("n3"), node_state::healthy);
  EXPECT_TRUE(fd_.failures().empty());
}

TEST_F(FailuresTest, AStopThatDoesNotComeBackFailsAfterRestartGrace) {
  settle();
  beat("n4", /*leaving=*/true);
  tick(1s, {"n4"});
  for (int i = 0; i < 11; ++i) tick(10s, {"n4"});  // 111 s
  EXPECT_EQ(state("n4"), node_state::restarting);
  auto ev = tick(10s, {"n4"});  // 121 s
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].event, "failed");
  EXPECT_EQ(ev[0].cause, "restart_grace");
}

TEST_F(FailuresTest, ANodesOwnReportAndNetsetupFailureCountAtOnce) {
  // Fresh evidence: acted on even while the view is stale (just started).
  beat("n1", false, "failing");
  bad_network_ = "n2";
  beat("n2");
  auto ev = fd_.evaluate(idx_.nodes());
  EXPECT_TRUE(fd_.view_stale());
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].node, "n1");
  EXPECT_EQ(ev[0].cause, "reported");
  EXPECT_NE(ev[0].detail.find("XID 79"), std::string::npos) << ev[0].detail;
  EXPECT_EQ(ev[1].node, "n2");
  EXPECT_EQ(ev[1].cause, "netsetup");
  EXPECT_NE(ev[1].detail.find("RoCE v2 GID"), std::string::npos) << ev[1].detail;
}

TEST_F(FailuresTest, MostNodesSilentAtOnceIsTheSchedulersProblem) {
  settle();
  std::vector<node_event> ev;
  for (int i = 0; i < 7; ++i) ev = tick(10s, {"n1", "n2", "n3"});  // 3 of 5 silent for 70 s
  EXPECT_TRUE(fd_.view_stale());
  EXPECT_EQ(fd_.failed_nodes(), 0u);
  auto all = fd_.events("", 10);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0].event, "view_stale");
  EXPECT_NE(all[0].detail.find("3 of 5 nodes went silent at once"), std::string::npos)
      << all[0].detail;
  // Two of them come back: one of five silent is a failure again.
  beat("n1");
  beat("n2");
  ev = tick(1s, {"n3"});
  EXPECT_FALSE(fd_.view_stale());
  EXPECT_EQ(state("n3"), node_state::failed);
}

TEST_F(FailuresTest, EventsAreBoundedNewestFirstAndFilteredByNode) {
  settle();
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 7; ++i) tick(10s, {"n2"});  // failed
    tick(1s);                                       // recovered
  }
  auto all = fd_.events("", 100);
  EXPECT_EQ(all.size(), 5u);  // max_events
  EXPECT_EQ(all[0].event, "recovered");
  EXPECT_EQ(all[1].event, "failed");
  EXPECT_EQ(fd_.events("n2", 2).size(), 2u);
  EXPECT_TRUE(fd_.events("n9", 10).empty());
  EXPECT_EQ(fd_.failures().at(failure_cause::heartbeat), 4u);
}

}  // namespace
}  // namespace shoal::scheduler
