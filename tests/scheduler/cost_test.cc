// The cost model: sources by topology, shared layers counted once, parallel/serial time, the
// documented worked example, extender scores and hard-mode thresholds — and cases where
// kube-scheduler's ImageLocality picks the wrong node while the byte-level model picks right.
#include "scheduler/cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "scheduler/index.h"
#include "scheduler/network.h"
#include "scheduler/placement.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

constexpr std::uint64_t MiB = 1 << 20;

cost_model default_model() { return cost_model::from(cost_config{}); }

// A cluster built through the real index from heartbeats: node → (zone, rack, held objects).
struct cluster {
  fake_clock clock;
  cluster_index idx{index_options{}, "e", clock.fn()};
  void node(const std::string& name, const std::string& zone, const std::string& rack,
            std::vector<heartbeat::held_object> objs) {
    (void)idx.apply(full_hb(name, std::move(objs), {{"zone", zone}, {"rack", rack}}), "ip");
  }
  // Every node's cost for these objects, by name.
  std::map<std::string, node_cost> costs(const std::vector<object_ref>& objs, const cost_model& m) {
    std::vector<digest> ids;
    for (const auto& o : objs) ids.push_back(o.id);
    auto v = idx.view(ids);
    auto d = dedup(objs);
    evaluator e(v, d, m);
    std::map<std::string, node_cost> out;
    for (std::uint32_t i = 0; i < v.nodes.size(); ++i) out[v.nodes[i].name] = e.cost(i);
    return out;
  }
  // Our choice: the best eligible node of a one-node job.
  std::string best(const std::vector<object_ref>& objs) {
    std::vector<digest> ids;
    for (const auto& o : objs) ids.push_back(o.id);
    auto v = idx.view(ids);
    job_objects jo;
    jo.by_platform["linux/amd64"] = dedup(objs);
    document_network_model net;
    auto evals = evaluate_nodes(v, jo, job_spec{}, default_model(), net, {}, {});
    auto p = choose(std::move(evals), v, job_spec{}, 0, net);
    return p.chosen.empty() ? "" : p.chosen[0];
  }
};

std::uint64_t at(const node_cost& c, source s) { return c.by_source[static_cast<std::size_t>(s)]; }

TEST(Cost, SourcesFollowTopologyAndHealth) {
  cluster c;
  c.node("a", "z1", "r1", {held("x", 100)});
  c.node("b", "z1", "r1", {});
  c.node("c", "z1", "r2", {});
  c.node("d", "z2", "r9", {});
  // "y" was held once and dropped: registry-proxy has it.
  c.node("e", "z2", "r9", {held("y", 10)});
  (void)c.idx.apply(full_hb("e", {}, {{"zone", "z2"}, {"rack", "r9"}}, 2), "ip");
  std::vector<object_ref> job = {obj("x", 100), obj("y", 10), obj("z", 1)};
  auto costs = c.costs(job, default_model());
  EXPECT_EQ(at(costs["a"], source::local), 100u);
  EXPECT_EQ(at(costs["b"], source::rack), 100u);
  EXPECT_EQ(at(costs["c"], source::zone), 100u);
  EXPECT_EQ(at(costs["d"], source::cluster), 100u);
  for (const auto& [n, cost] : costs) {
    EXPECT_EQ(at(cost, source::origin), 10u) << n;
    EXPECT_EQ(at(cost, source::upstream), 1u) << n;
    EXPECT_EQ(cost.bytes_total, 111u) << n;
  }
  // An unhealthy holder is no source.
  c.clock.advance(40s);
  (void)c.idx.apply(full_hb("b", {}, {{"zone", "z1"}, {"rack", "r1"}}, 2), "ip");
  costs = c.costs(job, default_model());
  EXPECT_EQ(at(costs["b"], source::origin), 110u);
}

TEST(Cost, SharedLayersCountOnce) {
  cluster c;
  c.node("n", "z", "r", {});
  // Two images of one pod sharing a 500 MiB base.
  std::vector<object_ref> job = {obj("base", 500 * MiB), obj("app1", 10 * MiB),
                                 obj("base", 500 * MiB), obj("app2", 20 * MiB)};
  auto costs = c.costs(job, default_model());
  EXPECT_EQ(costs["n"].bytes_total, 530 * MiB);
}

// docs/scheduler.md, "A worked example": the same numbers.
TEST(Cost, WorkedExampleFromTheDocs) {
  cluster c;
  c.node("A", "z1", "r1", {held("base", 2048 * MiB)});
  c.node("B", "z1", "r1", {held("libs", 512 * MiB)});
  c.node("C", "z1", "r2", {});
  c.node("D", "z2", "r7", {});
  c.node("E", "z2", "r7", {held("app", 256 * MiB)});
  (void)c.idx.apply(full_hb("E", {}, {{"zone", "z2"}, {"rack", "r7"}}, 2),
                    "ip");  // app: origin only
  std::vector<object_ref> job = {obj("base", 2048 * MiB), obj("libs", 512 * MiB),
                                 obj("app", 256 * MiB)};
  auto dm = default_model();
  ASSERT_FALSE(dm.parallel);  // serial is the default
  auto ser = c.costs(job, dm);
  EXPECT_DOUBLE_EQ(ser["A"].seconds, 2.5);   // 512/1024 + 256/128
  EXPECT_DOUBLE_EQ(ser["C"].seconds, 7.0);   // 2560/512 + 256/128
  EXPECT_DOUBLE_EQ(ser["D"].seconds, 12.0);  // 2560/256 + 256/128
  auto pm = default_model();
  pm.parallel = true;
  auto par = c.costs(job, pm);
  EXPECT_DOUBLE_EQ(par["A"].seconds, 2.0);   // max(512/1024, 256/128, 768/1024)
  EXPECT_DOUBLE_EQ(par["C"].seconds, 5.0);   // max(2560/512, 256/128, 2816/1024)
  EXPECT_DOUBLE_EQ(par["D"].seconds, 10.0);  // max(2560/256, 256/128, 2816/1024)
  EXPECT_DOUBLE_EQ(dm.cold_seconds(2816 * MiB), 88.0);
  EXPECT_EQ(extender_score(ser["A"], dm), 7);
  EXPECT_EQ(extender_score(ser["C"], dm), 5);
  EXPECT_EQ(extender_score(ser["D"], dm), 4);
  EXPECT_EQ(extender_score(par["A"], pm), 8);
  EXPECT_EQ(extender_score(par["C"], pm), 6);
  EXPECT_EQ(extender_score(par["D"], pm), 5);
  node_cost all_here;
  all_here.bytes_total = 100;
  all_here.by_source[0] = 100;
  EXPECT_EQ(extender_score(all_here, dm), 10);
  node_cost cold;
  cold.bytes_total = 2816 * MiB;
  cold.by_source[static_cast<std::size_t>(source::upstream)] = cold.bytes_total;
  cold.seconds = dm.seconds(cold.by_source);
  EXPECT_EQ(extender_score(cold, dm), 0);
  EXPECT_EQ(extender_score(node_cost{}, dm), 0);  // nothing known about the pod: neutral
}

TEST(Cost, IngressCapsTheParallelModel) {
  cost_model m = default_model();
  m.parallel = true;
  bytes_by_source b{};
  b[static_cast<std::size_t>(source::rack)] = 1024 * MiB;
  b[static_cast<std::size_t>(source::zone)] = 512 * MiB;
  // Each class alone takes 1 s, but 1.5 GiB through a 1 GiB/s link takes 1.5 s.
  EXPECT_DOUBLE_EQ(m.seconds(b), 1.5);
}

TEST(Cost, ThresholdsParseAndApply) {
  auto t = parse_threshold("10%");
  ASSERT_TRUE(t);
  node_cost c;
  c.bytes_total = 1000;
  c.by_source[0] = 900;  // 100 missing = exactly 10%
  EXPECT_FALSE(t->exceeded(c));
  c.by_source[0] = 899;
  EXPECT_TRUE(t->exceeded(c));
  auto b = parse_threshold("2GiB");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->is_share);
  EXPECT_EQ(b->bytes, 2ull << 30);
  auto z = parse_threshold(" 0 ");
  ASSERT_TRUE(z);
  EXPECT_TRUE(z->exceeded(c));
  for (const char* bad : {"", "%", "-5%", "101%", "ten", "10%%", "1.5.5%"})
    EXPECT_FALSE(parse_threshold(bad)) << bad;
}

// --- ImageLocality, the in-tree baseline (pkg/scheduler/framework/plugins/imagelocality) -----

struct image {
  std::string name;
  std::vector<object_ref> layers;
  [[nodiscard]] std::uint64_t size() const {
    std::uint64_t s = 0;
    for (const auto& l : layers) s += l.size;
    return s;
  }
};

// The plugin's score for one node: whole images present (all layers), spread-scaled, clamped.
std::int64_t image_locality(const std::string& node, const std::vector<image>& pod,
                            const std::map<std::string, std::set<digest>>& held) {
  const std::int64_t min_threshold = 23 * MiB;
  const std::int64_t max_threshold = 1000 * MiB * static_cast<std::int64_t>(pod.size());
  auto has = [&](const std::string& n, const image& img) {
    const auto& h = held.at(n);
    return std::all_of(img.layers.begin(), img.layers.end(),
                       [&](const object_ref& l) { return h.count(l.id) > 0; });
  };
  std::int64_t sum = 0;
  for (const auto& img : pod) {
    if (!has(node, img)) continue;
    std::int64_t with = 0;
    for (const auto& [n, h] : held) with += has(n, img) ? 1 : 0;
    sum += static_cast<std::int64_t>(img.size()) * with / static_cast<std::int64_t>(held.size());
  }
  sum = std::clamp(sum, min_threshold, max_threshold);
  return 100 * (sum - min_threshold) / (max_threshold - min_threshold);
}

std::string image_locality_pick(const std::vector<image>& pod,
                                const std::map<std::string, std::set<digest>>& held) {
  std::string best;
  std::int64_t best_score = -1;
  for (const auto& [n, h] : held) {  // ties: first by name, like any fixed order
    auto s = image_locality(n, pod, held);
    if (s > best_score) {
      best_score = s;
      best = n;
    }
  }
  return best;
}

struct scenario {
  cluster c;
  std::map<std::string, std::set<digest>> held;
  void node(const std::string& name, const std::string& rack, const std::vector<object_ref>& objs) {
    std::vector<heartbeat::held_object> h;
    for (const auto& o : objs) {
      heartbeat::held_object x;
      x.id = o.id;
      x.size = o.size;
      h.push_back(x);
      held[name].insert(o.id);
    }
    held[name];
    c.node(name, "z1", rack, h);
  }
  std::vector<object_ref> job(const std::vector<image>& pod) {
    std::vector<object_ref> out;
    for (const auto& i : pod) out.insert(out.end(), i.layers.begin(), i.layers.end());
    return out;
  }
};

// The pod's image B shares a 900 MiB base with image A on node1; its 200 MiB sidecar is on
// node2 only (node3 has B's top layer from an earlier partial pull). ImageLocality sees no B
// anywhere, credits node2 for the sidecar and picks it (1 GiB to fetch); node1 lacks 300 MiB.
TEST(ImageLocalityComparison, SharedLayers) {
  image base_a{"A", {obj("base", 900 * MiB), obj("a", 50 * MiB)}};
  image b{"B", {obj("base", 900 * MiB), obj("b", 100 * MiB)}};
  image sidecar{"S", {obj("s", 200 * MiB)}};
  scenario s;
  s.node("node1", "r1", base_a.layers);
  s.node("node2", "r1", sidecar.layers);
  s.node("node3", "r2", {obj("b", 100 * MiB)});
  s.node("node4", "r2", {});
  std::vector<image> pod = {b, sidecar};
  EXPECT_EQ(image_locality_pick(pod, s.held), "node2");
  EXPECT_EQ(s.c.best(s.job(pod)), "node1");
  auto costs = s.c.costs(s.job(pod), default_model());
  EXPECT_EQ(costs["node1"].missing(), 300 * MiB);
  EXPECT_EQ(costs["node2"].missing(), 1000 * MiB);
  EXPECT_LT(costs["node1"].seconds, costs["node2"].seconds);
}

// node1 holds 9 of the 10 layers of a 1000 MiB image (the last was evicted; node4 still has
// it); node2 holds the pod's 400 MiB second image. ImageLocality gives node1 nothing for a
// partial image.
TEST(ImageLocalityComparison, PartialImage) {
  image p{"P", {}};
  for (int i = 0; i < 10; ++i) p.layers.push_back(obj("p" + std::to_string(i), 100 * MiB));
  image q{"Q", {obj("q", 400 * MiB)}};
  scenario s;
  s.node("node1", "r1", std::vector<object_ref>(p.layers.begin(), p.layers.begin() + 9));
  s.node("node2", "r1", q.layers);
  s.node("node3", "r2", {});
  s.node("node4", "r2", {p.layers[9]});
  std::vector<image> pod = {p, q};
  EXPECT_EQ(image_locality_pick(pod, s.held), "node2");
  EXPECT_EQ(s.c.best(s.job(pod)), "node1");
}

// Q (400 MiB) is on 9 of 10 nodes, P (1000 MiB) only on node1. The spread factor scales P down
// to 100 MiB and Q up to 360 MiB, so ImageLocality prefers a node with Q, which must fetch 1 GB;
// node1 lacks 400 MiB that nine peers can send.
TEST(ImageLocalityComparison, WidelyReplicatedImage) {
  image p{"P", {obj("p", 1000 * MiB)}};
  image q{"Q", {obj("q", 400 * MiB)}};
  scenario s;
  s.node("node01", "r1", p.layers);
  for (int i = 2; i <= 10; ++i)
    s.node("node" + std::string(i < 10 ? "0" : "") + std::to_string(i), "r1", q.layers);
  std::vector<image> pod = {p, q};
  auto il = image_locality_pick(pod, s.held);
  EXPECT_NE(il, "node01");
  EXPECT_GT(image_locality(il, pod, s.held), image_locality("node01", pod, s.held));
  EXPECT_EQ(s.c.best(s.job(pod)), "node01");
}

}  // namespace
}  // namespace shoal::scheduler
