// Kept job scores (scores.h) against the full evaluation (evaluator, cost.h): after random
// holding changes through real heartbeats (deltas, full lists, objects losing their last holder,
// objects leaving the "seen" window, nodes turning unhealthy) every node's cost and score must be
// what a fresh evaluation finds; a change must touch only the nodes it can move; and a state that
// cannot follow (a node list that changed, a log that no longer reaches back, racks spanning
// zones) must say so.
#include "scheduler/scores.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
constexpr std::uint64_t MiB = 1 << 20;

std::string node_name(int i) { return "node-" + std::to_string(100 + i); }
std::string object_name(int k) { return "obj-" + std::to_string(k); }

class ScoresTest : public ::testing::Test {
 protected:
  static constexpr int nodes = 60, objects = 40;

  ScoresTest() : idx_(options(), "e", clock_.fn()), model_(cost_model::from(cost_config{})) {
    for (int k = 0; k < objects; ++k) size_[k] = (1 + (k * 37) % 100) * MiB;
    for (int k = 0; k < 28; ++k) job_.push_back(obj(object_name(k), size_[k]));
    // Two objects no node has ever held (upstream for everyone).
    job_.push_back(obj("never-1", 5 * MiB));
    job_.push_back(obj("never-2", 7 * MiB));
    for (int i = 0; i < nodes; ++i) {
      std::vector<heartbeat::held_object> list;
      for (int k = 0; k < objects; ++k) {
        // Low k are popular (on most nodes), high k rare.
        if (rng_() % 100 < static_cast<unsigned>(90 - 2 * k)) {
          list.push_back(held(object_name(k), size_[k]));
          held_[i].insert(k);
        }
      }
      (void)idx_.apply(full_hb(node_name(i), list, labels(i)), "ip");
      seq_[i] = 1;
    }
  }
  static index_options options() {
    index_options o;
    o.max_seen = 48;  // small: objects leave the seen window while the test runs
    return o;
  }
  // Zones z0..z2 and racks of 6 nodes; some nodes have no rack, one neither rack nor zone.
  static std::map<std::string, std::string> labels(int i) {
    std::map<std::string, std::string> l;
    if (i != 7) l["zone"] = "z" + std::to_string(i % 3);
    if (i % 10 != 0) l["rack"] = "r" + std::to_string(i / 6);
    return l;
  }
  // A delta from node i (with its labels, as peerd sends every heartbeat).
  heartbeat::message delta(int i, std::vector<heartbeat::held_object> added,
                           std::vector<digest> removed = {}) {
    auto m = delta_hb(node_name(i), ++seq_[i], "e", std::move(added), std::move(removed));
    m.labels = labels(i);
    return m;
  }
  std::vector<digest> ids() const {
    std::vector<digest> out;
    for (const auto& o : job_) out.push_back(o.id);
    return out;
  }
  // One node adds one object and drops another.
  void random_delta() {
    const int i = static_cast<int>(rng_() % nodes);
    std::vector<heartbeat::held_object> added;
    std::vector<digest> removed;
    const int add = static_cast<int>(rng_() % (objects + 20));  // some outside the job, some new
    if (!held_[i].count(add)) {
      added.push_back(held(object_name(add), add < objects ? size_[add] : 3 * MiB));
      held_[i].insert(add);
    }
    if (!held_[i].empty() && rng_() % 3 != 0) {
      auto it = held_[i].begin();
      std::advance(it, static_cast<long>(rng_() % held_[i].size()));
      if (*it != add) {
        removed.push_back(dg(object_name(*it)));
        held_[i].erase(it);
      }
    }
    auto out = idx_.apply(delta(i, added, removed), "ip");
    ASSERT_FALSE(out.resync) << out.resync_reason;
  }
  // Every holder of object k drops it (the object leaves the index: origin, or upstream once it
  // leaves the seen window).
  void drop_everywhere(int k) {
    for (int i = 0; i < nodes; ++i) {
      if (!held_[i].erase(k)) continue;
      auto out = idx_.apply(delta(i, {}, {dg(object_name(k))}), "ip");
      ASSERT_FALSE(out.resync);
    }
  }
  // The state against a full evaluation of a fresh view, node by node.
  void expect_same(const job_scores& s) {
    auto v = idx_.view(ids());
    ASSERT_TRUE(s.on(v.nodes));
    ASSERT_EQ(s.size(), v.nodes.size());
    evaluator ev(v, job_, model_);
    for (std::uint32_t i = 0; i < v.nodes.size(); ++i) {
      const auto want = ev.cost(i);
      const auto got = s.cost(i);
      EXPECT_EQ(got.bytes_total, want.bytes_total) << v.nodes[i].name;
      if (!v.nodes[i].healthy) {
        EXPECT_EQ(s.score(i), 0) << v.nodes[i].name;
        EXPECT_EQ(got.present(), want.present()) << v.nodes[i].name;
        continue;
      }
      EXPECT_EQ(got.by_source, want.by_source) << v.nodes[i].name;
      EXPECT_DOUBLE_EQ(got.seconds, want.seconds) << v.nodes[i].name;
      EXPECT_EQ(s.score(i), extender_score(want, model_)) << v.nodes[i].name;
    }
  }

  fake_clock clock_;
  cluster_index idx_;
  cost_model model_;
  std::mt19937_64 rng_{20261204};
  std::map<int, std::uint64_t> size_;
  std::vector<object_ref> job_;
  std::map<int, std::set<int>> held_;
  std::map<int, std::uint64_t> seq_;
};

TEST_F(ScoresTest, KeptScoresFollowRandomChangesLikeAFullEvaluation) {
  auto s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  expect_same(*s);
  std::size_t sums_moved = 0;
  for (int round = 0; round < 120; ++round) {
    const int changes = 1 + static_cast<int>(rng_() % 6);
    for (int c = 0; c < changes; ++c) random_delta();
    if (round % 25 == 7) drop_everywhere(static_cast<int>(20 + rng_() % 8));
    ASSERT_TRUE(s->catch_up(idx_)) << "round " << round;
    sums_moved += s->rescored() > static_cast<std::size_t>(changes) ? 1 : 0;
    expect_same(*s);
    if (HasFailure()) FAIL() << "round " << round;
  }
  // Racks, zones or the cluster gained or lost an object now and then, not on every round.
  EXPECT_GT(sums_moved, 0u);
  EXPECT_LT(sums_moved, 120u);
}

TEST_F(ScoresTest, AChangeTouchesOnlyTheNodesItCanMove) {
  auto s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  // Object 0 is on a node of node 8's rack (r1: nodes 6..11) already: node 8 gaining it moves
  // only node 8.
  int other = -1;
  for (int i = 6; i < 12; ++i) {
    if (i != 8 && held_[i].count(0)) other = i;
  }
  ASSERT_NE(other, -1);
  if (held_[8].count(0)) {
    (void)idx_.apply(delta(8, {}, {dg(object_name(0))}), "ip");
    held_[8].erase(0);
    ASSERT_TRUE(s->catch_up(idx_));
  }
  (void)idx_.apply(delta(8, {held(object_name(0), size_[0])}), "ip");
  ASSERT_TRUE(s->catch_up(idx_));
  EXPECT_EQ(s->rescored(), 1u);
  expect_same(*s);
  // A job object nobody held: its first holder moves every node (cluster and origin bytes).
  (void)idx_.apply(delta(8, {held("never-1", 5 * MiB)}), "ip");
  ASSERT_TRUE(s->catch_up(idx_));
  EXPECT_EQ(s->rescored(), static_cast<std::size_t>(nodes));
  expect_same(*s);
  // Nothing new: nothing to do.
  ASSERT_TRUE(s->catch_up(idx_));
  EXPECT_EQ(s->rescored(), 0u);
}

// An object nobody holds any more is fetched from registry-proxy (origin) while the index
// remembers it, and from upstream once it leaves the window of max_seen objects.
TEST_F(ScoresTest, AnObjectLeavingTheSeenWindowMovesToUpstream) {
  auto s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  drop_everywhere(25);
  ASSERT_TRUE(s->catch_up(idx_));
  expect_same(*s);
  const auto origin = static_cast<std::size_t>(source::origin);
  const auto upstream = static_cast<std::size_t>(source::upstream);
  const auto before = s->cost(1);
  EXPECT_GE(before.by_source[origin], size_[25]);
  // 60 objects no one else has pass through node 1 (each enters, then leaves the index).
  for (int n = 0; n < 60; ++n) {
    const std::string name = "churn-" + std::to_string(n);
    (void)idx_.apply(delta(1, {held(name, MiB)}), "ip");
    (void)idx_.apply(delta(1, {}, {dg(name)}), "ip");
  }
  ASSERT_TRUE(s->catch_up(idx_));
  expect_same(*s);
  const auto after = s->cost(1);
  EXPECT_EQ(after.by_source[origin], before.by_source[origin] - size_[25]);
  EXPECT_EQ(after.by_source[upstream], before.by_source[upstream] + size_[25]);
}

TEST_F(ScoresTest, ANodeListThatChangedCannotBeFollowed) {
  auto s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  // A node reports failing: its holdings stop counting as sources, a different node list.
  auto m = full_hb(node_name(3), {}, labels(3), ++seq_[3]);
  m.health = "failing";
  for (int k : held_[3]) m.objects.push_back(held(object_name(k), size_[k]));
  (void)idx_.apply(m, "ip");
  EXPECT_FALSE(s->catch_up(idx_));
  s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  expect_same(*s);
  // A new node.
  (void)idx_.apply(full_hb("node-new", {held(object_name(1), size_[1])}, labels(1)), "ip");
  EXPECT_FALSE(s->catch_up(idx_));
  // Time alone (a node silent past unhealthy_after) changes health too.
  s = job_scores::build(idx_.view(ids()), job_, model_);
  ASSERT_TRUE(s);
  clock_.advance(std::chrono::seconds(31));
  for (int i = 0; i < nodes; ++i) {
    if (i == 5) continue;
    (void)idx_.apply(full_hb(node_name(i), {}, labels(i), ++seq_[i], "e"), "ip");
    held_[i].clear();
  }
  (void)idx_.apply(full_hb("node-new", {}, labels(1), 2, "e"), "ip");
  EXPECT_FALSE(s->catch_up(idx_));
}

heartbeat::message labelled(heartbeat::message m) {
  m.labels = {{"zone", "z"}, {"rack", "r"}};
  return m;
}

TEST(ScoresLimits, ALogThatNoLongerReachesBackMeansRebuild) {
  fake_clock clock;
  index_options o;
  o.change_log = 4;
  cluster_index idx(o, "e", clock.fn());
  const auto model = cost_model::from(cost_config{});
  (void)idx.apply(full_hb("a", {held("x", MiB)}, {{"zone", "z"}, {"rack", "r"}}), "ip");
  std::vector<object_ref> job = {obj("x", MiB), obj("y", MiB)};
  auto s = job_scores::build(idx.view(std::vector<digest>{dg("x"), dg("y")}), job, model);
  ASSERT_TRUE(s);
  (void)idx.apply(labelled(delta_hb("a", 2, "e", {held("y", MiB)})), "ip");
  EXPECT_TRUE(s->catch_up(idx));
  EXPECT_EQ(s->cost(0).present(), 2 * MiB);
  for (int i = 0; i < 5; ++i)
    (void)idx.apply(labelled(delta_hb("a", 3 + i, "e", {held("z" + std::to_string(i), 1)})), "ip");
  EXPECT_FALSE(s->catch_up(idx));
}

TEST(ScoresLimits, RacksSpanningZonesAreNotKept) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  // Rack "a/b" in zone "z" and rack "b" in zone "z/a" are both named "z/a/b".
  (void)idx.apply(full_hb("n1", {held("x", MiB)}, {{"zone", "z"}, {"rack", "a/b"}}), "ip");
  (void)idx.apply(full_hb("n2", {}, {{"zone", "z/a"}, {"rack", "b"}}), "ip");
  const auto model = cost_model::from(cost_config{});
  std::vector<object_ref> job = {obj("x", MiB)};
  EXPECT_FALSE(job_scores::build(idx.view(std::vector<digest>{dg("x")}), job, model));
  score_cache cache;
  bool called = false;
  EXPECT_EQ(cache.with(idx, "linux/amd64", job, model, [&](const job_scores&) { called = true; }),
            score_cache::outcome::none);
  EXPECT_FALSE(called);
}

TEST(ScoresLimits, TheCacheBuildsOnceThenFollowsAndEvictsTheLeastRecent) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  (void)idx.apply(full_hb("n1", {held("x", MiB)}, {{"zone", "z"}, {"rack", "r"}}), "ip");
  (void)idx.apply(full_hb("n2", {}, {{"zone", "z"}, {"rack", "r"}}), "ip");
  const auto model = cost_model::from(cost_config{});
  score_cache cache(2);
  std::vector<object_ref> a = {obj("x", MiB)}, b = {obj("y", MiB)}, c = {obj("x", 2 * MiB)};
  auto with = [&](const std::vector<object_ref>& job, int node = 1) {
    int score = -1;
    auto how = cache.with(idx, "linux/amd64", job, model,
                          [&](const job_scores& s) { score = s.score(node); });
    EXPECT_NE(score, -1);
    return how;
  };
  EXPECT_EQ(with(a), score_cache::outcome::built);
  EXPECT_EQ(with(a), score_cache::outcome::caught_up);
  EXPECT_EQ(with(b), score_cache::outcome::built);
  EXPECT_EQ(with(c), score_cache::outcome::built);  // other sizes: another job; a goes
  EXPECT_EQ(with(b), score_cache::outcome::caught_up);
  EXPECT_EQ(with(a), score_cache::outcome::built);
  // n2 gains x: the kept state follows and n2 is now local.
  (void)idx.apply(labelled(delta_hb("n2", 2, "e", {held("x", MiB)})), "ip");
  int score = -1;
  EXPECT_EQ(
      cache.with(idx, "linux/amd64", a, model, [&](const job_scores& s) { score = s.score(1); }),
      score_cache::outcome::caught_up);
  EXPECT_EQ(score, 10);
  // A new node: the kept state cannot follow and is built again.
  (void)idx.apply(full_hb("n3", {}, {{"zone", "z"}, {"rack", "r"}}), "ip");
  EXPECT_EQ(with(a), score_cache::outcome::rebuilt);
}

}  // namespace
}  // namespace shoal::scheduler

namespace shoal::scheduler {
namespace {

// Scores from bounds (no logarithm per node) are extender_score()'s, on a sweep of times and on
// the bounds themselves and their neighbouring doubles.
TEST(ScoreBounds, AreTheLogarithmicScoreExactly) {
  const auto model = cost_model::from(cost_config{});
  for (std::uint64_t total : {1ull, 1000ull, 123'456'789ull, 7ull << 30, 3ull << 40}) {
    node_cost c;
    c.bytes_total = total;
    const double cold = model.cold_seconds(total);
    const score_bounds b(cold);
    std::size_t checked = 0;
    auto check = [&](double t) {
      c.seconds = t;
      ASSERT_EQ(b.score(t), extender_score(c, model)) << "total " << total << " t " << t;
      ++checked;
    };
    for (double t = cold * 1e-9; t < cold * 4; t *= 1.01) check(t);
    for (int j = 0; j <= 10; ++j) {
      // Where the score steps from j to j + 1, and the doubles around it.
      const double edge = std::expm1(std::log1p(cold) * (10.5 - j) / 10.0);
      double t = edge;
      for (int step = 0; step < 4; ++step) t = std::nextafter(t, 0.0);
      for (int step = 0; step < 8; ++step, t = std::nextafter(t, cold * 10)) check(t);
    }
    check(0);
    check(cold);
    EXPECT_GT(checked, 1000u);
  }
}

}  // namespace
}  // namespace shoal::scheduler
