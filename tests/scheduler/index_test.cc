// The cluster cache index: full lists and deltas, resync on unknown node / epoch / gap, health
// and dropping of silent nodes, and the views placement uses.
#include "scheduler/index.h"

#include <algorithm>
#include <functional>
#include <utility>

#include <gtest/gtest.h>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

class IndexTest : public ::testing::Test {
 protected:
  IndexTest() : idx_(opts(), "epoch-1", clock_.fn()) {}
  static index_options opts() {
    index_options o;
    o.unhealthy_after = 30s;
    o.drop_after = 120s;
    return o;
  }
  std::vector<std::string> holders(std::string_view name) {
    std::vector<std::string> out;
    if (auto o = idx_.object(dg(name))) {
      for (const auto& h : o->holders) out.push_back(h.node);
    }
    return out;
  }
  fake_clock clock_;
  cluster_index idx_;
};

TEST_F(IndexTest, FullListThenDeltasApplyInOrder) {
  auto r = idx_.apply(full_hb("n1", {held("a", 100), held("b", 200)}, {}, 1, ""), "10.0.0.9");
  EXPECT_FALSE(r.resync);
  EXPECT_TRUE(r.full);
  EXPECT_EQ(r.added.size(), 2u);
  EXPECT_EQ(holders("a"), std::vector<std::string>{"n1"});

  r = idx_.apply(delta_hb("n1", 2, "epoch-1", {held("c", 300)}, {dg("a")}), "10.0.0.9");
  EXPECT_FALSE(r.resync) << r.resync_reason;
  EXPECT_EQ(r.added.size(), 1u);
  EXPECT_EQ(r.removed.size(), 1u);
  EXPECT_TRUE(holders("a").empty());
  EXPECT_EQ(holders("c"), std::vector<std::string>{"n1"});
  auto n = idx_.node("n1");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->objects, 2u);
  EXPECT_EQ(n->bytes_held, 500u);
  EXPECT_EQ(n->seq, 2u);
  EXPECT_TRUE(n->synced);
  auto st = idx_.stats();
  EXPECT_EQ(st.objects, 2u);
  EXPECT_EQ(st.holdings, 2u);
}

TEST_F(IndexTest, LivenessCarriesWhatTheFailureDetectorReadsAndNoLabels) {
  auto m = full_hb("n1", {held("a", 100)}, {{"zone", "z1"}, {"rack", "r7"}});
  m.health = "degraded";
  m.health_reasons = {"disk slow"};
  m.netsetup = R"({"state":"ok"})";
  m.gpus = {heartbeat::gpu_group{}};
  ASSERT_FALSE(idx_.apply(m, "10.0.0.9").resync);
  ASSERT_FALSE(idx_.apply(full_hb("n2", {}), "10.0.0.8").resync);
  clock_.advance(40s);  // n1 and n2 silent past unhealthy_after
  ASSERT_FALSE(idx_.apply(delta_hb("n2", 2, "epoch-1", {}), "10.0.0.8").resync);
  auto full = idx_.nodes();
  auto live = idx_.liveness();
  ASSERT_EQ(live.size(), full.size());
  for (std::size_t i = 0; i < live.size(); ++i) {
    SCOPED_TRACE(full[i].name);
    EXPECT_EQ(live[i].name, full[i].name);
    EXPECT_EQ(live[i].ip, full[i].ip);
    EXPECT_EQ(live[i].bt_port, full[i].bt_port);
    EXPECT_EQ(live[i].health, full[i].health);
    EXPECT_EQ(live[i].health_reasons, full[i].health_reasons);
    EXPECT_EQ(live[i].healthy, full[i].healthy);
    EXPECT_EQ(live[i].leaving, full[i].leaving);
    EXPECT_DOUBLE_EQ(live[i].last_seen_s, full[i].last_seen_s);
    EXPECT_EQ(live[i].netsetup_rev, full[i].netsetup_rev);
    // The document itself is shared with the index, not copied.
    EXPECT_EQ(&live[i].netsetup.str(), &full[i].netsetup.str());
    EXPECT_EQ(live[i].seq, full[i].seq);
    EXPECT_EQ(live[i].synced, full[i].synced);
    EXPECT_TRUE(live[i].labels.empty());
    EXPECT_TRUE(live[i].gpus.empty());
  }
  EXPECT_EQ(full[0].labels.size(), 2u);
  EXPECT_EQ(full[0].gpus.size(), 1u);
  EXPECT_FALSE(live[0].healthy);  // n1: silent for 40 s
  EXPECT_TRUE(live[1].healthy);
  EXPECT_DOUBLE_EQ(live[0].last_seen_s, 40.0);
  EXPECT_EQ(live[0].health_reasons, std::vector<std::string>{"disk slow"});
  EXPECT_EQ(full[0].netsetup, R"({"state":"ok"})");
  EXPECT_NE(live[0].netsetup_rev, 0u);
  EXPECT_EQ(live[1].netsetup_rev, 0u);  // n2 sent none
}

// Every version of a node's netsetup document gets its own number, the same text keeps it, no
// document is 0, and the node snapshot carries it with the text (cached_network_model keys its
// verdicts by it).
TEST_F(IndexTest, NetsetupDocumentsAreVersioned) {
  auto with_doc = [&](std::uint64_t seq, std::string doc) {
    auto m = seq == 1 ? full_hb("n1", {}) : delta_hb("n1", seq, "epoch-1", {});
    m.netsetup = std::move(doc);
    EXPECT_FALSE(idx_.apply(m, "10.0.0.9").resync);
    return idx_.node("n1")->netsetup_rev;
  };
  auto r1 = with_doc(1, R"({"schema":1,"a":1})");
  EXPECT_NE(r1, 0u);
  EXPECT_EQ(with_doc(2, R"({"schema":1,"a":1})"), r1);
  auto r2 = with_doc(3, R"({"schema":1,"a":2})");
  EXPECT_GT(r2, r1);
  auto v = idx_.view({});
  ASSERT_EQ(v.nodes.size(), 1u);
  EXPECT_EQ(v.nodes[0].netsetup_rev, r2);
  EXPECT_EQ(v.nodes[0].netsetup, R"({"schema":1,"a":2})");
  // A snapshot built again (the node's health changed) shares the document, not a copy of it.
  {
    auto m = delta_hb("n1", 4, "epoch-1", {});
    m.netsetup = R"({"schema":1,"a":2})";
    m.health = "degraded";
    ASSERT_FALSE(idx_.apply(m, "10.0.0.9").resync);
    auto again = idx_.view({});
    EXPECT_EQ(again.nodes[0].health, "degraded");
    EXPECT_EQ(&again.nodes[0].netsetup.str(), &v.nodes[0].netsetup.str());
  }
  // A delta saying its document is unchanged keeps the one held: same version, same object.
  {
    auto m = delta_hb("n1", 5, "epoch-1", {});
    m.netsetup_unchanged = true;
    ASSERT_FALSE(idx_.apply(m, "10.0.0.9").resync);
    auto kept = idx_.view({});
    EXPECT_EQ(kept.nodes[0].netsetup_rev, r2);
    EXPECT_EQ(&kept.nodes[0].netsetup.str(), &v.nodes[0].netsetup.str());
    EXPECT_EQ(idx_.node("n1")->netsetup.str(), R"({"schema":1,"a":2})");
  }
  EXPECT_EQ(with_doc(6, ""), 0u);                       // none given (and not said unchanged): none
  EXPECT_GT(with_doc(7, R"({"schema":1,"a":1})"), r2);  // the old text again: a new version
  // Another node's first document is a version of its own.
  auto m = full_hb("n2", {});
  m.netsetup = R"({"schema":1,"a":2})";
  ASSERT_FALSE(idx_.apply(m, "10.0.0.8").resync);
  EXPECT_NE(idx_.node("n2")->netsetup_rev, idx_.node("n1")->netsetup_rev);
}

TEST_F(IndexTest, DeltaFromUnknownNodeAsksForResync) {
  auto r = idx_.apply(delta_hb("n1", 5, "epoch-1", {held("a", 1)}), "10.0.0.9");
  EXPECT_TRUE(r.resync);
  EXPECT_EQ(r.resync_reason, "unknown_node");
  EXPECT_TRUE(holders("a").empty());
  // The node is known (inventory) but not synced until its full list.
  auto n = idx_.node("n1");
  ASSERT_TRUE(n);
  EXPECT_FALSE(n->synced);
  r = idx_.apply(full_hb("n1", {held("a", 1)}, {}, 6, "epoch-1"), "10.0.0.9");
  EXPECT_FALSE(r.resync);
  EXPECT_EQ(holders("a"), std::vector<std::string>{"n1"});
}

TEST_F(IndexTest, DeltaWithAnotherEpochAsksForResync) {
  (void)idx_.apply(full_hb("n1", {held("a", 1)}, {}, 1, ""), "ip");
  auto r = idx_.apply(delta_hb("n1", 2, "old-epoch", {held("b", 1)}), "ip");
  EXPECT_TRUE(r.resync);
  EXPECT_EQ(r.resync_reason, "epoch");
  EXPECT_TRUE(holders("b").empty());
}

TEST_F(IndexTest, GapInSequenceAsksForResyncAndBlocksFurtherDeltas) {
  (void)idx_.apply(full_hb("n1", {held("a", 1)}, {}, 1, "epoch-1"), "ip");
  auto r = idx_.apply(delta_hb("n1", 3, "epoch-1", {held("b", 1)}), "ip");
  EXPECT_TRUE(r.resync);
  EXPECT_EQ(r.resync_reason, "gap");
  // Even a delta that would follow on is refused until the full list comes.
  r = idx_.apply(delta_hb("n1", 4, "epoch-1", {held("c", 1)}), "ip");
  EXPECT_TRUE(r.resync);
  EXPECT_TRUE(holders("c").empty());
  // The holdings known before the gap are kept meanwhile (best guess).
  EXPECT_EQ(holders("a"), std::vector<std::string>{"n1"});
  r = idx_.apply(full_hb("n1", {held("b", 1), held("c", 1)}, {}, 5, "epoch-1"), "ip");
  EXPECT_FALSE(r.resync);
  EXPECT_TRUE(holders("a").empty());
  EXPECT_EQ(holders("b"), std::vector<std::string>{"n1"});
  r = idx_.apply(delta_hb("n1", 6, "epoch-1", {}, {dg("b")}), "ip");
  EXPECT_FALSE(r.resync);
  EXPECT_TRUE(holders("b").empty());
}

TEST_F(IndexTest, RepeatedOrReplayedDeltaIsAGap) {
  (void)idx_.apply(full_hb("n1", {}, {}, 10, "epoch-1"), "ip");
  EXPECT_FALSE(idx_.apply(delta_hb("n1", 11, "epoch-1", {held("a", 1)}), "ip").resync);
  // The same seq again (a retried request) must not be applied twice.
  EXPECT_TRUE(idx_.apply(delta_hb("n1", 11, "epoch-1", {held("a", 1)}), "ip").resync);
}

TEST_F(IndexTest, SilentNodesTurnUnhealthyThenAreDroppedWithTheirObjects) {
  (void)idx_.apply(full_hb("n1", {held("a", 10)}, {{"zone", "z"}}, 1), "ip1");
  (void)idx_.apply(full_hb("n2", {held("a", 10)}, {{"zone", "z"}}, 1), "ip2");
  clock_.advance(20s);
  (void)idx_.apply(delta_hb("n2", 2, "epoch-1", {}), "ip2");
  EXPECT_TRUE(idx_.healthy("n1"));
  clock_.advance(15s);  // n1 silent 35 s, n2 15 s
  EXPECT_FALSE(idx_.healthy("n1"));
  EXPECT_TRUE(idx_.healthy("n2"));
  auto o = idx_.object(dg("a"));
  ASSERT_TRUE(o);
  ASSERT_EQ(o->holders.size(), 2u);
  EXPECT_FALSE(o->holders[0].healthy);
  EXPECT_TRUE(o->holders[1].healthy);
  EXPECT_TRUE(idx_.expire().empty());
  clock_.advance(90s);  // n1 silent 125 s: dropped; n2 105 s: kept
  auto dropped = idx_.expire();
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].name, "n1");
  EXPECT_EQ(dropped[0].ip, "10.0.0.1");
  EXPECT_EQ(holders("a"), std::vector<std::string>{"n2"});
  EXPECT_FALSE(idx_.node("n1"));
  EXPECT_EQ(idx_.stats().nodes, 1u);
}

TEST_F(IndexTest, FailingHealthMakesANodeUnhealthy) {
  auto m = full_hb("n1", {}, {}, 1);
  m.health = "failing";
  (void)idx_.apply(m, "ip");
  EXPECT_FALSE(idx_.healthy("n1"));
  m.health = "degraded";
  m.seq = 2;
  (void)idx_.apply(m, "ip");
  EXPECT_TRUE(idx_.healthy("n1"));
}

TEST_F(IndexTest, ViewCarriesTopologyPlatformGpusAndHolders) {
  auto m = full_hb("n2", {held("a", 10)},
                   {{"zone", "z1"}, {"rack", "r1"}, {"fabric", "f1"}, {"platform", "linux/arm64"}});
  m.gpus = {{"A100", 4}, {"A100", 4}};
  (void)idx_.apply(m, "ip");
  (void)idx_.apply(
      full_hb("n1", {}, {{"kubernetes.io/os", "linux"}, {"kubernetes.io/arch", "amd64"}}), "ip");
  std::vector<digest> want = {dg("a"), dg("nowhere")};
  auto v = idx_.view(want);
  ASSERT_EQ(v.nodes.size(), 2u);
  EXPECT_EQ(v.nodes[0].name, "n1");
  EXPECT_EQ(v.nodes[0].platform, "linux/amd64");
  EXPECT_EQ(v.nodes[1].platform, "linux/arm64");
  EXPECT_EQ(v.nodes[1].gpus, 8u);
  EXPECT_EQ(v.nodes[1].fabric, "f1");
  EXPECT_EQ(v.objects.at(dg("a")).holders, std::vector<std::uint32_t>{1});
  EXPECT_TRUE(v.objects.at(dg("a")).seen_before);
  EXPECT_TRUE(v.objects.at(dg("nowhere")).holders.empty());
  EXPECT_FALSE(v.objects.at(dg("nowhere")).seen_before);
}

// Views share one node list until something a view shows changes; these pin that a shared list
// is never stale: inventory changes, liveness lost with time and regained by a heartbeat, nodes
// dropped, and that a view already taken keeps what it saw.
TEST_F(IndexTest, ViewsFollowInventoryAndLivenessChanges) {
  (void)idx_.apply(full_hb("n1", {held("a", 10)}, {{"zone", "z1"}}), "ip");
  (void)idx_.apply(full_hb("n2", {held("a", 10)}, {{"zone", "z2"}}), "ip");
  std::vector<digest> want = {dg("a")};
  auto v1 = idx_.view(want);
  ASSERT_EQ(v1.nodes.size(), 2u);
  EXPECT_TRUE(v1.nodes[0].healthy);
  EXPECT_EQ(v1.nodes[0].zone, "z1");

  // A heartbeat that changes only objects or liveness leaves the node list as it was.
  clock_.advance(10s);
  (void)idx_.apply(full_hb("n1", {held("a", 10), held("b", 5)}, {{"zone", "z1"}}, 2), "ip");
  auto v2 = idx_.view(want);
  EXPECT_EQ(&v2.nodes[0], &v1.nodes[0]);  // the same shared list

  // New labels show at once; the older view keeps what it saw.
  (void)idx_.apply(full_hb("n1", {held("a", 10)}, {{"zone", "z9"}}, 3), "ip");
  auto v3 = idx_.view(want);
  EXPECT_EQ(v3.nodes[0].zone, "z9");
  EXPECT_EQ(v1.nodes[0].zone, "z1");

  // n2 last heard 10 s before n1: 25 s later n2 is unreachable, n1 is not.
  clock_.advance(25s);
  auto v4 = idx_.view(want);
  EXPECT_TRUE(v4.nodes[0].healthy);
  EXPECT_FALSE(v4.nodes[1].healthy);
  EXPECT_EQ(v4.nodes[1].health, "unreachable");
  // ... and healthy again with its next heartbeat.
  (void)idx_.apply(full_hb("n2", {held("a", 10)}, {{"zone", "z2"}}, 2), "ip");
  auto v5 = idx_.view(want);
  EXPECT_TRUE(v5.nodes[1].healthy);
  EXPECT_EQ(v5.nodes[1].health, "ok");
  EXPECT_EQ(v5.objects.at(dg("a")).holders, (std::vector<std::uint32_t>{0, 1}));

  // Reported health counts too, and a dropped node leaves the list.
  auto m = full_hb("n2", {held("a", 10)}, {{"zone", "z2"}}, 3);
  m.health = "failing";
  (void)idx_.apply(m, "ip");
  EXPECT_FALSE(idx_.view(want).nodes[1].healthy);
  clock_.advance(130s);
  (void)idx_.apply(full_hb("n1", {held("a", 10)}, {{"zone", "z9"}}, 4), "ip");
  (void)idx_.expire();
  auto v6 = idx_.view(want);
  ASSERT_EQ(v6.nodes.size(), 1u);
  EXPECT_EQ(v6.nodes[0].name, "n1");
  EXPECT_EQ(v6.objects.at(dg("a")).holders, std::vector<std::uint32_t>{0});
}

// A popular object's holders (64 or more) are mapped to view indexes through a bitmap rather
// than a sort; both ways must give the sorted list of every healthy or unhealthy holder.
TEST_F(IndexTest, ViewHoldersAreSortedIndexesForPopularObjects) {
  std::vector<std::string> names;
  // Applied in reverse name order, so node ids and view indexes run opposite ways.
  for (int i = 199; i >= 0; --i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "n%03d", i);
    std::vector<heartbeat::held_object> objs;
    if (i < 40) objs.push_back(held("rare", 1));
    if (i % 2 == 0 || i >= 190) objs.push_back(held("popular", 1));
    (void)idx_.apply(full_hb(buf, objs), "ip");
  }
  std::vector<digest> want = {dg("popular"), dg("rare")};
  auto v = idx_.view(want);
  ASSERT_EQ(v.nodes.size(), 200u);
  std::vector<std::uint32_t> popular, rare;
  for (std::uint32_t i = 0; i < 200; ++i) {
    if (i % 2 == 0 || i >= 190) popular.push_back(i);
    if (i < 40) rare.push_back(i);
  }
  EXPECT_EQ(v.objects.at(dg("popular")).holders, popular);
  EXPECT_EQ(v.objects.at(dg("rare")).holders, rare);
}

TEST_F(IndexTest, ObjectsOnceHeldAreRememberedAsSeen) {
  (void)idx_.apply(full_hb("n1", {held("a", 10)}), "ip");
  (void)idx_.apply(full_hb("n1", {}, {}, 2), "ip");
  EXPECT_FALSE(idx_.object(dg("a")));
  std::vector<digest> want = {dg("a")};
  auto v = idx_.view(want);
  EXPECT_TRUE(v.objects.at(dg("a")).holders.empty());
  EXPECT_TRUE(v.objects.at(dg("a")).seen_before);
}

TEST_F(IndexTest, HeldCountsOnlyTheNodesObjects) {
  (void)idx_.apply(full_hb("n1", {held("a", 10), held("b", 20)}), "ip");
  std::vector<object_ref> want = {obj("a", 10), obj("c", 5)};
  auto h = idx_.held("n1", want);
  EXPECT_EQ(h.count, 1u);
  EXPECT_EQ(h.bytes, 10u);
  EXPECT_EQ(idx_.held("nobody", want).count, 0u);
}

TEST_F(IndexTest, ManyNodesAndObjectsStayConsistent) {
  // 50 nodes × 200 objects with overlapping sets, then deltas removing half: holder counts match.
  for (int n = 0; n < 50; ++n) {
    std::vector<heartbeat::held_object> objs;
    for (int o = n; o < n + 200; ++o) objs.push_back(held("o" + std::to_string(o), 1));
    (void)idx_.apply(full_hb("n" + std::to_string(n), objs, {}, 1, "epoch-1"), "ip");
  }
  EXPECT_EQ(idx_.stats().holdings, 50u * 200u);
  for (int n = 0; n < 50; ++n) {
    std::vector<digest> rm;
    for (int o = n; o < n + 100; ++o) rm.push_back(dg("o" + std::to_string(o)));
    auto r = idx_.apply(delta_hb("n" + std::to_string(n), 2, "epoch-1", {}, rm), "ip");
    ASSERT_FALSE(r.resync);
  }
  EXPECT_EQ(idx_.stats().holdings, 50u * 100u);
  std::size_t sum = 0;
  for (int o = 0; o < 250; ++o) {
    if (auto x = idx_.object(dg("o" + std::to_string(o)))) sum += x->holders.size();
  }
  EXPECT_EQ(sum, 50u * 100u);
}

// Caps: heartbeats are unauthenticated, so a sender can name new nodes and list any digests.
TEST(IndexCaps, NewNodesBeyondMaxNodesAreRefusedKnownOnesStillHeard) {
  fake_clock clock;
  index_options o;
  o.max_nodes = 2;
  cluster_index idx(o, "e", clock.fn());
  EXPECT_EQ(idx.apply(full_hb("n1", {held("a", 1)}), "10.0.0.9").refused, 0u);
  EXPECT_EQ(idx.apply(full_hb("n2", {held("b", 1)}), "10.0.0.9").refused, 0u);
  auto r = idx.apply(full_hb("n3", {held("c", 1)}), "10.0.0.9");
  EXPECT_EQ(r.refused, 429u);
  EXPECT_NE(r.refused_reason.find("nodes.max_nodes"), std::string::npos) << r.refused_reason;
  EXPECT_NE(r.refused_reason.find("\"n3\""), std::string::npos) << r.refused_reason;
  EXPECT_FALSE(idx.node("n3"));
  EXPECT_FALSE(idx.object(dg("c")));
  // A known node is still heard, and once one is dropped a new one fits.
  EXPECT_EQ(idx.apply(full_hb("n1", {held("a", 1), held("d", 1)}, {}, 2), "10.0.0.9").refused, 0u);
  EXPECT_EQ(idx.node("n1")->objects, 2u);
  clock.advance(o.drop_after);
  EXPECT_EQ(idx.apply(full_hb("n1", {held("a", 1)}, {}, 3), "10.0.0.9").refused, 0u);
  EXPECT_EQ(idx.expire().size(), 1u);  // n2
  EXPECT_EQ(idx.apply(full_hb("n3", {held("c", 1)}), "10.0.0.9").refused, 0u);
}

TEST(IndexCaps, ObjectsPerNodeAreCappedForFullListsAndDeltas) {
  fake_clock clock;
  index_options o;
  o.max_objects_per_node = 3;
  cluster_index idx(o, "e", clock.fn());
  auto r = idx.apply(full_hb("n1", {held("a", 1), held("b", 1), held("c", 1), held("d", 1)}),
                     "10.0.0.9");
  EXPECT_EQ(r.refused, 413u);
  EXPECT_NE(r.refused_reason.find("nodes.max_objects_per_node"), std::string::npos);
  EXPECT_FALSE(idx.node("n1"));  // refused: nothing applied, not even the node
  ASSERT_EQ(idx.apply(full_hb("n1", {held("a", 1), held("b", 1)}), "10.0.0.9").refused, 0u);
  // +c: 3, fine; then +d: 4, refused; +d -a: 3, fine.
  EXPECT_EQ(idx.apply(delta_hb("n1", 2, "e", {held("c", 1)}), "10.0.0.9").refused, 0u);
  r = idx.apply(delta_hb("n1", 3, "e", {held("d", 1)}), "10.0.0.9");
  EXPECT_EQ(r.refused, 413u);
  EXPECT_EQ(idx.node("n1")->objects, 3u);
  EXPECT_EQ(idx.node("n1")->seq, 2u);
  r = idx.apply(delta_hb("n1", 3, "e", {held("d", 1)}, {dg("a")}), "10.0.0.9");
  EXPECT_EQ(r.refused, 0u) << r.refused_reason;
  EXPECT_FALSE(r.resync) << r.resync_reason;
  EXPECT_EQ(idx.node("n1")->objects, 3u);
}

TEST(IndexCaps, ANodeMovingItsEndpointReportsTheOldOneAndResyncs) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  ASSERT_FALSE(idx.apply(full_hb("n1", {held("a", 1)}), "10.0.0.9").resync);
  auto m = delta_hb("n1", 2, "e", {held("b", 1)});
  m.bt_port = 7000;
  auto r = idx.apply(m, "10.0.0.9");
  EXPECT_EQ(r.moved_from_ip, "10.0.0.1");
  EXPECT_EQ(r.moved_from_port, 6881u);
  EXPECT_TRUE(r.resync);
  EXPECT_EQ(r.resync_reason, "moved");
  // Same endpoint again: nothing moved.
  auto f = full_hb("n1", {held("a", 1)}, {}, 3, "e");
  f.bt_port = 7000;
  r = idx.apply(f, "10.0.0.9");
  EXPECT_EQ(r.moved_from_port, 0u);
}

// The cap check takes a shortcut (held + listed) below the cap; at the cap it counts exactly.
TEST(IndexCaps, ADeltaRelistingHeldObjectsAtTheCapIsCountedExactly) {
  fake_clock clock;
  index_options o;
  o.max_objects_per_node = 2;
  cluster_index idx(o, "e", clock.fn());
  ASSERT_EQ(idx.apply(full_hb("n1", {held("a", 1), held("b", 1)}), "10.0.0.9").refused, 0u);
  auto r = idx.apply(delta_hb("n1", 2, "e", {held("a", 1)}), "10.0.0.9");
  EXPECT_EQ(r.refused, 0u) << r.refused_reason;
  EXPECT_EQ(idx.node("n1")->objects, 2u);
}

// Holdings point into the object table: a full list that repeats an entry and drops another
// leaves exactly what it lists, and an object that left is still remembered as seen.
TEST(IndexHoldings, FullListWithDuplicatesReplacesTheHoldings) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  ASSERT_EQ(idx.apply(full_hb("n1", {held("a", 1), held("b", 2)}), "10.0.0.9").refused, 0u);
  ASSERT_EQ(idx.apply(full_hb("n2", {held("b", 2)}), "10.0.0.8").refused, 0u);
  auto m = full_hb("n1", {held("b", 2), held("c", 3), held("b", 2)});
  m.seq = 2;
  ASSERT_EQ(idx.apply(m, "10.0.0.9").refused, 0u);
  EXPECT_EQ(idx.node("n1")->objects, 2u);
  EXPECT_EQ(idx.node("n1")->bytes_held, 5u);
  EXPECT_FALSE(idx.object(dg("a")));
  std::vector<object_ref> want = {{dg("a"), 1}, {dg("b"), 2}, {dg("c"), 3}};
  auto h = idx.held("n1", want);
  EXPECT_EQ(h.count, 2u);
  EXPECT_EQ(h.bytes, 5u);
  std::vector<digest> ids = {dg("a"), dg("b")};
  auto v = idx.view(ids);
  EXPECT_TRUE(v.objects.at(dg("a")).seen_before);
  EXPECT_EQ(v.objects.at(dg("b")).holders.size(), 2u);
  EXPECT_EQ(idx.expire().size(), 0u);
}

}  // namespace
}  // namespace shoal::scheduler

namespace shoal::scheduler {
namespace {

using namespace testing;

std::vector<std::string> holder_names(const cluster_index& idx, std::string_view name) {
  std::vector<std::string> out;
  if (auto o = idx.object(dg(name))) {
    for (const auto& h : o->holders) out.push_back(h.node);
  }
  return out;
}

std::size_t count_hash(const std::vector<info_hash>& v, std::string_view name) {
  info_hash want;
  EXPECT_TRUE(parse_info_hash(ih_of(name), want));
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), want));
}

// A known node's full list is planned under the shared lock and applied as its difference: what
// it adds, what it leaves out, what it lists with new details; every listed info-hash is still
// in the outcome, and the change log holds only the difference.
TEST(IndexFullPlan, AFullListOfAKnownNodeAppliesOnlyItsDifference) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  ASSERT_EQ(
      idx.apply(full_hb("n1", {held("a", 1), held("b", 2), held("c", 3)}), "10.0.0.9").refused, 0u);
  const auto log0 = idx.view({}).changes;
  auto c = held("c", 30);  // a new size for c
  auto out = idx.apply(full_hb("n1", {held("b", 2), c, held("d", 4)}, {}, 2), "10.0.0.9");
  EXPECT_TRUE(out.full);
  EXPECT_EQ(out.added.size(), 3u);
  for (const char* n : {"b", "c", "d"}) EXPECT_EQ(count_hash(out.added, n), 1u) << n;
  EXPECT_FALSE(idx.object(dg("a")));
  EXPECT_EQ(holder_names(idx, "b"), std::vector<std::string>{"n1"});
  EXPECT_EQ(idx.object(dg("c"))->ref.size, 30u);
  EXPECT_EQ(holder_names(idx, "d"), std::vector<std::string>{"n1"});
  EXPECT_EQ(idx.node("n1")->objects, 3u);
  // Logged: a removed, d added (c's new size is no change of who holds it).
  EXPECT_EQ(idx.view({}).changes, log0 + 2);

  // The same list again changes nothing and still reports every info-hash.
  out = idx.apply(full_hb("n1", {held("b", 2), c, held("d", 4)}, {}, 3), "10.0.0.9");
  EXPECT_EQ(out.added.size(), 3u);
  EXPECT_EQ(idx.view({}).changes, log0 + 2);
}

// The plan is made without the exclusive lock: the node's holdings may change before it is
// applied (another heartbeat of it, another node dropping an object the list names). A plan
// whose node changed is not used; the list is applied in full, and the result is the list.
TEST(IndexFullPlan, APlanWhoseNodeChangedMeanwhileIsNotUsed) {
  fake_clock clock;
  std::function<void()> between;
  index_options o;
  o.between_plan_and_apply_for_test = [&] {
    if (auto f = std::exchange(between, nullptr)) f();
  };
  cluster_index idx(o, "e", clock.fn());
  ASSERT_EQ(idx.apply(full_hb("n1", {held("a", 1), held("b", 2)}, {}, 1, "e"), "10.0.0.9").refused,
            0u);
  ASSERT_EQ(idx.apply(full_hb("n2", {held("y", 5)}, {}, 1, "e"), "10.0.0.8").refused, 0u);

  // Between n1's plan and its apply: a delta of n1 adds x and drops a, and n2 leaves y (its
  // last holder: y leaves the object table). Runs with no lock held (apply takes the exclusive
  // one, so a held lock would deadlock here).
  between = [&] {
    ASSERT_FALSE(idx.apply(delta_hb("n1", 2, "e", {held("x", 7)}, {dg("a")}), "10.0.0.9").resync);
    ASSERT_EQ(idx.apply(full_hb("n2", {}, {}, 2, "e"), "10.0.0.8").refused, 0u);
    ASSERT_FALSE(idx.object(dg("y")));
  };
  auto out = idx.apply(full_hb("n1", {held("a", 1), held("y", 5)}, {}, 3, "e"), "10.0.0.9");
  EXPECT_FALSE(between);  // it ran
  EXPECT_TRUE(out.full);
  EXPECT_EQ(holder_names(idx, "a"), std::vector<std::string>{"n1"});
  EXPECT_EQ(holder_names(idx, "y"), std::vector<std::string>{"n1"});
  EXPECT_FALSE(idx.object(dg("b")));
  EXPECT_FALSE(idx.object(dg("x")));
  EXPECT_EQ(idx.node("n1")->objects, 2u);
  EXPECT_EQ(idx.node("n1")->bytes_held, 6u);
  EXPECT_EQ(idx.stats().holdings, 2u);

  // The next delta follows the full list's seq.
  EXPECT_FALSE(idx.apply(delta_hb("n1", 4, "e", {held("z", 1)}), "10.0.0.9").resync);
  EXPECT_EQ(idx.node("n1")->objects, 3u);
}

}  // namespace
}  // namespace shoal::scheduler
