// GPU bin-packing and tie-breaking in the ranking (placement.h, docs/scheduler.md "Packing"):
// a small job fills a partly used node rather than a free one when the data is about equal, data
// still wins when the difference is large, a gang of part-node jobs leaves whole nodes free, equal
// nodes are chosen by the job's data (rendezvous hash), not by name, and the placer applies
// placement.packing_seconds_per_gpu.
#include <gtest/gtest.h>

#include <set>

#include "scheduler/network.h"
#include "scheduler/placement.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

constexpr std::uint64_t MiB = 1 << 20;
constexpr std::uint64_t GiB = 1024 * MiB;

class PackingTest : public ::testing::Test {
 protected:
  PackingTest() : idx_(index_options{}, "e", clock_.fn()) {}
  void add(const std::string& name, std::vector<heartbeat::held_object> objs = {},
           const std::string& fabric = "f1") {
    auto m = full_hb(name, std::move(objs), {{"zone", "z1"}, {"rack", "r1"}, {"fabric", fabric}});
    m.gpus = {{"H100", 8}};
    (void)idx_.apply(m, "ip");
  }
  // Evaluates and chooses with the default cost model; `reserved` are GPUs in use per node.
  placement run(const job_spec& job, const std::vector<object_ref>& objs,
                const std::map<std::string, std::uint32_t>& reserved,
                double packing = default_packing_seconds_per_gpu) {
    std::vector<digest> ids;
    for (const auto& x : objs) ids.push_back(x.id);
    view_ = idx_.view(ids);
    job_objects jo;
    for (const auto& p : platforms_of(view_, job)) jo.by_platform[p] = dedup(objs);
    auto evals = evaluate_nodes(view_, jo, job, model_, net_, reserved,
                                {.packing_seconds_per_gpu = packing});
    return choose(std::move(evals), view_, job, 0, net_);
  }
  const node_eval& find(const placement& p, const std::string& n) {
    for (const auto& e : p.nodes) {
      if (e.name == n) return e;
    }
    ADD_FAILURE() << n << " not evaluated";
    return p.nodes.front();
  }
  fake_clock clock_;
  cluster_index idx_;
  document_network_model net_;
  cost_model model_ = cost_model::from(cost_config{});
  cluster_view view_;
};

TEST_F(PackingTest, OneGpuJobFillsThePartlyUsedNodeWhenDataIsEqual) {
  // By name, "a-free" would win every tie; packing sends the job to the fullest node it fits.
  add("a-free");
  add("b-half");
  add("c-busy");
  add("d-full");
  const std::map<std::string, std::uint32_t> used = {{"b-half", 4}, {"c-busy", 6}, {"d-full", 8}};
  job_spec job;
  job.gpus = 1;
  auto p = run(job, {}, used);
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.chosen, std::vector<std::string>{"c-busy"});
  // The ranking is best fit: 1 GPU left, then 3, then 7; the full node is not eligible.
  ASSERT_GE(p.nodes.size(), 3u);
  EXPECT_EQ(p.nodes[1].name, "b-half");
  EXPECT_EQ(p.nodes[2].name, "a-free");
  EXPECT_FALSE(find(p, "d-full").eligible);
  EXPECT_DOUBLE_EQ(find(p, "c-busy").packing_seconds, 1 * default_packing_seconds_per_gpu);
  EXPECT_DOUBLE_EQ(find(p, "a-free").packing_seconds, 7 * default_packing_seconds_per_gpu);
  EXPECT_DOUBLE_EQ(find(p, "d-full").packing_seconds, 0);
  // The answer explains it: the packing term and the seconds the ranking sorts on.
  auto j = to_json(find(p, "a-free"));
  EXPECT_DOUBLE_EQ(j["packing_seconds"].get<double>(), 7 * default_packing_seconds_per_gpu);
  EXPECT_DOUBLE_EQ(j["rank_seconds"].get<double>(),
                   j["estimated_seconds"].get<double>() + j["packing_seconds"].get<double>());
  // Without packing the nodes tie and name order is back.
  p = run(job, {}, used, 0);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.chosen, std::vector<std::string>{"a-free"});
  EXPECT_DOUBLE_EQ(find(p, "c-busy").packing_seconds, 0);
  // A job that asks for no GPUs has nothing to pack.
  job.gpus = 0;
  p = run(job, {}, used);
  EXPECT_EQ(p.chosen, std::vector<std::string>{"a-free"});
  EXPECT_DOUBLE_EQ(find(p, "a-free").packing_seconds, 0);
}

TEST_F(PackingTest, DataStillBeatsPackingWhenTheDifferenceIsLarge) {
  // "a-free" holds the job's dataset; "b-busy" (2 GPUs free) would fetch it from a-free, in its
  // rack, at the default 1 GiB/s. Packing costs a-free 7 × 30 s = 210 s, b-busy 30 s.
  for (std::uint64_t size : {400 * GiB, 40 * GiB}) {
    const std::string sfx = "-" + std::to_string(size / GiB);
    const std::string a_free = "a-free" + sfx, b_busy = "b-busy" + sfx, shard = "shard" + sfx;
    add(a_free, {held(shard, size)});
    add(b_busy);
    job_spec job;
    job.gpus = 1;
    job.candidates = {a_free, b_busy};  // the pair of this round only
    auto p = run(job, {obj(shard, size)}, {{b_busy, 6}});
    ASSERT_TRUE(p.feasible) << p.reason;
    const auto& a = find(p, a_free);
    const auto& b = find(p, b_busy);
    EXPECT_DOUBLE_EQ(a.cost.seconds, 0);
    EXPECT_DOUBLE_EQ(b.cost.seconds, static_cast<double>(size) / GiB);
    EXPECT_DOUBLE_EQ(a.rank_seconds, 7 * default_packing_seconds_per_gpu);
    EXPECT_DOUBLE_EQ(b.rank_seconds, b.cost.seconds + default_packing_seconds_per_gpu);
    // 400 GiB: 400 s of fetching + 30 > 210, data wins. 40 GiB: 40 + 30 < 210, packing wins.
    EXPECT_EQ(p.chosen, std::vector<std::string>{size == 400 * GiB ? a_free : b_busy})
        << size / GiB << " GiB";
  }
}

TEST_F(PackingTest, GangOfPartNodeJobsKeepsWholeNodesFree) {
  // Two whole nodes sort first by name; two half-used nodes fit a 2 × 4-GPU gang exactly.
  add("a-whole");
  add("b-whole");
  add("c-part");
  add("d-part");
  const std::map<std::string, std::uint32_t> used = {{"c-part", 4}, {"d-part", 4}};
  job_spec job;
  job.nodes = 2;
  job.gpus = 4;
  auto p = run(job, {obj("img", 1 * GiB)}, used);
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"c-part", "d-part"}));
  // The same across segments: the segment whose best K are cheapest in rank seconds wins, not
  // the first of two segments equal in time-to-ready (f0 sorts before f1).
  add("e-whole", {}, "f0");
  add("f-whole", {}, "f0");
  p = run(job, {obj("img", 1 * GiB)}, used);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.segment, "f1");
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"c-part", "d-part"}));
  // A gang of whole nodes has nothing to pack: it goes where the data is.
  add("g-warm", {held("img", 1 * GiB)}, "f0");
  job.gpus = 8;
  p = run(job, {obj("img", 1 * GiB)}, used);
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.segment, "f0");
  EXPECT_EQ(p.chosen.front(), "g-warm");
  EXPECT_DOUBLE_EQ(find(p, "g-warm").packing_seconds, 0);
}

TEST_F(PackingTest, EqualNodesAreChosenByTheJobsDataNotByName) {
  for (int i = 0; i < 12; ++i) add("n" + std::to_string(10 + i));
  job_spec job;
  job.gpus = 8;
  std::set<std::string> chosen;
  for (int d = 0; d < 40; ++d) {
    const std::string shard = "dataset-" + std::to_string(d);
    auto p = run(job, {obj(shard, 50 * GiB), obj("base-layer", 1 * GiB)}, {});
    ASSERT_TRUE(p.feasible) << p.reason;
    chosen.insert(p.chosen.front());
    // Deterministic: the same data goes to the same node.
    auto again = run(job, {obj("base-layer", 1 * GiB), obj(shard, 50 * GiB)}, {});
    EXPECT_EQ(again.chosen, p.chosen) << shard;
    // The largest object names the data: another small layer does not move the job.
    auto more = run(job, {obj(shard, 50 * GiB), obj("base-layer", 1 * GiB), obj("x", MiB)}, {});
    EXPECT_EQ(more.chosen, p.chosen) << shard;
    // Equal nodes come in ascending tie key, and the answer shows it.
    for (std::size_t i = 1; i < p.nodes.size(); ++i) {
      ASSERT_DOUBLE_EQ(p.nodes[i].rank_seconds, p.nodes[0].rank_seconds);
      EXPECT_LT(p.nodes[i - 1].tie_key, p.nodes[i].tie_key);
    }
    EXPECT_EQ(to_json(p.nodes[0])["tie_key"].get<std::string>().size(), 16u);
  }
  // Name order would have put all 40 on n10; the hash spreads different data over the nodes.
  EXPECT_GE(chosen.size(), 6u);
  // A job without objects has no data to hash: name order.
  auto p = run(job, {}, {});
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.chosen, std::vector<std::string>{"n10"});
  EXPECT_EQ(p.nodes[0].tie_key, 0u);
}

// The placer applies placement.packing_seconds_per_gpu from its options.
TEST(PackingPlacer, UsesTheConfiguredPackingWeight) {
  fake_clock clock;
  cluster_index idx(index_options{}, "e", clock.fn());
  fake_source src;
  resolver res(src, resolver_options{}, clock.fn());
  fake_datasets ds;
  document_network_model net;
  for (const char* n : {"a-free", "b-busy"}) {
    auto m = full_hb(n, {});
    m.gpus = {{"H100", 8}};
    (void)idx.apply(m, "ip");
  }
  for (double packing : {default_packing_seconds_per_gpu, 0.0}) {
    placer_options o;
    o.cost = cost_model::from(cost_config{});
    o.packing_seconds_per_gpu = packing;
    placer pl(idx, res, ds, net, o, clock.fn());
    // Six GPUs of b-busy are taken by a reservation of the same placer.
    job_spec six;
    six.gpus = 6;
    six.candidates = {"b-busy"};
    auto r = pl.place(six, 0, true, 1s);
    ASSERT_TRUE(r && r->p.feasible);
    job_spec one;
    one.gpus = 1;
    r = pl.place(one, 0, false, 1s);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE(r->p.feasible) << r->p.reason;
    EXPECT_EQ(r->p.chosen, std::vector<std::string>{packing > 0 ? "b-busy" : "a-free"})
        << "packing " << packing;
  }
}

TEST(PackingConfig, DefaultAndBounds) {
  placement_config c;
  EXPECT_DOUBLE_EQ(c.packing_seconds_per_gpu, default_packing_seconds_per_gpu);
  EXPECT_DOUBLE_EQ(evaluate_options{}.packing_seconds_per_gpu, default_packing_seconds_per_gpu);
  EXPECT_DOUBLE_EQ(placer_options{}.packing_seconds_per_gpu, default_packing_seconds_per_gpu);
  for (const char* bad :
       {"placement: {packing_seconds_per_gpu: -1}", "placement: {packing_seconds_per_gpu: 4000}",
        "placement: {packing_seconds_per_gpu: lots}"}) {
    scheduler_config x;
    EXPECT_FALSE(config::load_string(bad, "test.yaml", x)) << bad;
  }
  scheduler_config ok;
  ASSERT_TRUE(config::load_string("placement: {packing_seconds_per_gpu: 0}", "test.yaml", ok));
  EXPECT_DOUBLE_EQ(ok.placement.packing_seconds_per_gpu, 0);
}

}  // namespace
}  // namespace shoal::scheduler
