// Placement: eligibility (health, selector, GPUs, platform, network), ranking, gangs inside one
// fabric segment with consistent network settings, standby, GPU reservations, the job parser,
// and the placer end to end over a fake registry-proxy.
#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

// A network model whose verdicts tests set per node.
class fake_network final : public network_model {
 public:
  std::map<std::string, network_verdict> verdicts;
  std::set<std::pair<std::string, std::string>> incompatible;  // pairs that cannot share a gang
  network_verdict verdict(const node_view& n) const override {
    auto it = verdicts.find(n.name);
    return it == verdicts.end() ? network_verdict{} : it->second;
  }
  status gang_consistent(std::span<const node_view* const> nodes) const override {
    for (const auto* a : nodes) {
      for (const auto* b : nodes) {
        if (incompatible.count({a->name, b->name}))
          return fail(errc::invalid_argument, a->name + " vs " + b->name);
      }
    }
    return {};
  }
  json plan(const node_view& n, std::uint32_t gpus) const override {
    return {{"node", n.name}, {"gpus", gpus}, {"nccl", {{"NCCL_IB_HCA", "mlx5_0"}}}};
  }
};

struct node_spec {
  std::string name, zone = "z1", rack = "r1", fabric;
  std::uint32_t gpus = 8;
  std::vector<heartbeat::held_object> objs;
  std::string platform = "linux/amd64";
  std::map<std::string, std::string> extra;
};

class PlacementTest : public ::testing::Test {
 protected:
  PlacementTest() : idx_(index_options{}, "e", clock_.fn()) {}
  void add(const node_spec& s) {
    std::map<std::string, std::string> labels = s.extra;
    labels["zone"] = s.zone;
    labels["rack"] = s.rack;
    labels["platform"] = s.platform;
    if (!s.fabric.empty()) labels["fabric"] = s.fabric;
    auto m = full_hb(s.name, s.objs, labels);
    if (s.gpus) m.gpus = {{"H100", s.gpus}};
    (void)idx_.apply(m, "ip");
  }
  placement run(const job_spec& job, const std::vector<object_ref>& objs, std::uint32_t standby = 0,
                const std::map<std::string, std::uint32_t>& reserved = {},
                evaluate_options o = {}) {
    std::vector<digest> ids;
    for (const auto& x : objs) ids.push_back(x.id);
    view_ = idx_.view(ids);
    job_objects jo;
    for (const auto& p : platforms_of(view_, job)) jo.by_platform[p] = dedup(objs);
    auto evals = evaluate_nodes(view_, jo, job, cost_model::from(cost_config{}), net_, reserved, o);
    return choose(std::move(evals), view_, job, standby, net_);
  }
  const node_eval* find(const placement& p, const std::string& n) {
    for (const auto& e : p.nodes) {
      if (e.name == n) return &e;
    }
    return nullptr;
  }
  fake_clock clock_;
  cluster_index idx_;
  fake_network net_;
  cluster_view view_;
};

// rank = false (the extender) skips only the ranking: the same evaluations, in view order.
TEST_F(PlacementTest, UnrankedEvaluationKeepsViewOrderAndTheSameCosts) {
  add({.name = "cold"});
  add({.name = "warm", .objs = {held("l1", 100 * MiB), held("l2", 50 * MiB)}});
  add({.name = "half", .rack = "r2", .objs = {held("l1", 100 * MiB)}});
  std::vector<object_ref> objs = {obj("l1", 100 * MiB), obj("l2", 50 * MiB)};
  std::vector<digest> ids;
  for (const auto& x : objs) ids.push_back(x.id);
  auto v = idx_.view(ids);
  job_objects jo;
  job_spec job;
  for (const auto& p : platforms_of(v, job)) jo.by_platform[p] = objs;
  auto m = cost_model::from(cost_config{});
  auto ranked = evaluate_nodes(v, jo, job, m, net_, {}, {});
  auto plain = evaluate_nodes(v, jo, job, m, net_, {}, {.rank = false});
  ASSERT_EQ(plain.size(), 3u);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].name, "warm");
  for (std::uint32_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].index, i);
    EXPECT_EQ(plain[i].name, v.nodes[i].name);
    EXPECT_EQ(plain[i].rank, 0);
    const auto* r = &ranked[0];
    for (const auto& e : ranked) {
      if (e.name == plain[i].name) r = &e;
    }
    EXPECT_EQ(plain[i].cost.by_source, r->cost.by_source) << plain[i].name;
    EXPECT_EQ(plain[i].cost.seconds, r->cost.seconds);
    EXPECT_EQ(plain[i].eligible, r->eligible);
  }
}

TEST_F(PlacementTest, OneNodeGoesWhereTheDataIsAndEveryNodeIsExplained) {
  add({.name = "cold"});
  add({.name = "warm", .objs = {held("l1", 100 * MiB), held("l2", 50 * MiB)}});
  add({.name = "half", .rack = "r2", .objs = {held("l1", 100 * MiB)}});
  job_spec job;
  job.gpus = 2;
  auto p = run(job, {obj("l1", 100 * MiB), obj("l2", 50 * MiB), obj("l3", 10 * MiB)}, 1);
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.chosen, std::vector<std::string>{"warm"});
  EXPECT_EQ(p.standby, std::vector<std::string>{"half"});
  const auto* w = find(p, "warm");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rank, 1);
  EXPECT_EQ(w->cost.present(), 150 * MiB);
  EXPECT_EQ(w->cost.missing(), 10 * MiB);
  auto j = to_json(p, view_, job, net_);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][0]["node"], "warm");
  EXPECT_EQ(j["nodes"][0]["role"], "chosen");
  EXPECT_EQ(j["nodes"][0]["bytes_present"], 150 * MiB);
  EXPECT_EQ(j["nodes"][0]["missing_by_source"]["upstream"], 10 * MiB);
  EXPECT_EQ(j["nodes"][0]["gpus"]["fit"], true);
  EXPECT_TRUE(j["nodes"][0]["network_plan"].is_object());  // the seam: plan for chosen nodes
  EXPECT_EQ(j["nodes"][1]["role"], "standby");
  EXPECT_TRUE(j["nodes"][2]["network_plan"].is_null());
  EXPECT_GT(j["nodes"][2]["estimated_seconds"].get<double>(),
            j["nodes"][0]["estimated_seconds"].get<double>());
}

TEST_F(PlacementTest, IneligibleNodesSayWhy) {
  add({.name = "few-gpus", .gpus = 2, .objs = {held("l1", 100)}});
  add({.name = "other-zone", .zone = "z2", .objs = {held("l1", 100)}});
  add({.name = "netfail", .objs = {held("l1", 100)}});
  add({.name = "ok"});
  add({.name = "excluded", .objs = {held("l1", 100)}});
  add({.name = "sick", .objs = {held("l1", 100)}});
  clock_.advance(40s);
  // Refresh everyone but "sick" (same holdings, new heartbeat).
  add({.name = "few-gpus", .gpus = 2, .objs = {held("l1", 100)}});
  add({.name = "other-zone", .zone = "z2", .objs = {held("l1", 100)}});
  add({.name = "netfail", .objs = {held("l1", 100)}});
  add({.name = "ok"});
  add({.name = "excluded", .objs = {held("l1", 100)}});
  net_.verdicts["netfail"] = {validation::failed, "", "link.mtu: 1500 != 9000"};
  job_spec job;
  job.gpus = 4;
  job.selector = {{"zone", "z1"}};
  job.exclude = {"excluded"};
  auto p = run(job, {obj("l1", 100)});
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.chosen, std::vector<std::string>{"ok"});
  auto why = [&](const std::string& n) {
    const auto* e = find(p, n);
    return e && !e->reasons.empty() ? e->reasons.front() : std::string();
  };
  EXPECT_NE(why("few-gpus").find("needs 4 GPUs, 2 free"), std::string::npos) << why("few-gpus");
  EXPECT_NE(why("other-zone").find("label zone=z1 does not match (z2)"), std::string::npos)
      << why("other-zone");
  EXPECT_NE(why("netfail").find("network validation failed: link.mtu"), std::string::npos)
      << why("netfail");
  EXPECT_EQ(why("excluded"), "excluded");
  EXPECT_NE(why("sick").find("unhealthy"), std::string::npos) << why("sick");
}

TEST_F(PlacementTest, ReservedGpusAreNotFree) {
  add({.name = "a", .objs = {held("l1", 100)}});
  add({.name = "b"});
  job_spec job;
  job.gpus = 6;
  auto p = run(job, {obj("l1", 100)}, 0, {{"a", 4}});
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(p.chosen, std::vector<std::string>{"b"});
  EXPECT_EQ(find(p, "a")->gpus_free(), 4u);
}

TEST_F(PlacementTest, GangStaysInsideOneFabricSegment) {
  // f1 has the data on two nodes but only two nodes; f2 has three colder nodes.
  add({.name = "f1-a", .fabric = "f1", .objs = {held("big", 1000 * MiB)}});
  add({.name = "f1-b", .fabric = "f1", .objs = {held("big", 1000 * MiB)}});
  add({.name = "f2-a", .rack = "r2", .fabric = "f2"});
  add({.name = "f2-b", .rack = "r2", .fabric = "f2"});
  add({.name = "f2-c", .rack = "r2", .fabric = "f2", .objs = {held("big", 1000 * MiB)}});
  add({.name = "nofabric", .objs = {held("big", 1000 * MiB)}});
  job_spec job;
  job.nodes = 3;
  job.gpus = 8;
  auto p = run(job, {obj("big", 1000 * MiB)}, 0);
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.segment, "f2");
  std::set<std::string> chosen(p.chosen.begin(), p.chosen.end());
  EXPECT_EQ(chosen, (std::set<std::string>{"f2-a", "f2-b", "f2-c"}));
  EXPECT_EQ(p.chosen.front(), "f2-c");  // best first
  // Two nodes: f1 (both warm) beats f2 (one warm, one cold: max time decides).
  job.nodes = 2;
  p = run(job, {obj("big", 1000 * MiB)}, 1);
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.segment, "f1");
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"f1-a", "f1-b"}));
  EXPECT_TRUE(p.standby.empty());  // f1 has no third node; standby never leaves the segment
  // Four nodes: no segment has four.
  job.nodes = 4;
  p = run(job, {obj("big", 1000 * MiB)});
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(p.reason.find("no fabric segment has 4 eligible nodes"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("largest: f2 with 3"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("1 eligible nodes have no fabric label"), std::string::npos) << p.reason;
  EXPECT_TRUE(p.chosen.empty());
}

TEST_F(PlacementTest, GangNeedsEnoughGpusOnEveryMember) {
  add({.name = "a", .fabric = "f", .gpus = 8});
  add({.name = "b", .fabric = "f", .gpus = 4});
  add({.name = "c", .fabric = "f", .gpus = 8});
  job_spec job;
  job.nodes = 3;
  job.gpus = 8;
  auto p = run(job, {});
  EXPECT_FALSE(p.feasible);  // all-or-nothing: b cannot take 8
  job.nodes = 2;
  p = run(job, {});
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"a", "c"}));
}

TEST_F(PlacementTest, GangUsesOnlyConsistentNetworkSettings) {
  add({.name = "a", .fabric = "f"});
  add({.name = "b", .fabric = "f"});
  add({.name = "c", .fabric = "f"});
  add({.name = "d", .fabric = "f"});
  net_.verdicts["a"] = {validation::passed, "mtu9000", ""};
  net_.verdicts["b"] = {validation::passed, "mtu9000", ""};
  net_.verdicts["c"] = {validation::passed, "mtu4200", ""};
  // d: unknown (no netsetup yet)
  job_spec job;
  job.nodes = 3;
  auto p = run(job, {});
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"a", "b", "d"}));
  // Requiring validation drops d: no consistent group of three is left.
  job.require_network_validation = true;
  p = run(job, {});
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(find(p, "d")->reasons.front().find("network validation required, state unknown"),
            std::string::npos);
  job.nodes = 2;
  p = run(job, {});
  ASSERT_TRUE(p.feasible);
  EXPECT_EQ(std::set<std::string>(p.chosen.begin(), p.chosen.end()),
            (std::set<std::string>{"a", "b"}));
  // The cluster-level check (netsetup's validate_cluster) can still refuse a set.
  net_.incompatible.insert({"a", "b"});
  p = run(job, {});
  EXPECT_FALSE(p.feasible);
  EXPECT_NE(p.reason.find("a vs b"), std::string::npos) << p.reason;
}

TEST_F(PlacementTest, EvaluatingFiveThousandNodesIsFast) {
  for (int i = 0; i < 5000; ++i) {
    std::vector<heartbeat::held_object> objs;
    for (int l = 0; l < 40; ++l) {
      if ((i + l) % 3 == 0) objs.push_back(held("layer" + std::to_string(l), 10 * MiB));
    }
    add({.name = "n" + std::to_string(i),
         .rack = "r" + std::to_string(i % 50),
         .fabric = "f" + std::to_string(i % 10),
         .objs = objs});
  }
  std::vector<object_ref> job_objs;
  for (int l = 0; l < 40; ++l) job_objs.push_back(obj("layer" + std::to_string(l), 10 * MiB));
  job_spec job;
  job.nodes = 8;
  auto t0 = std::chrono::steady_clock::now();
  auto p = run(job, job_objs);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_TRUE(p.feasible) << p.reason;
  EXPECT_EQ(p.chosen.size(), 8u);
  // Generous bound (ASan, a loaded machine): kube-scheduler allows 5 s for the whole call.
  EXPECT_LT(ms, 2500) << "placement over 5000 nodes × 40 objects took " << ms << " ms";
  std::printf("[ measure ] 5000 nodes × 40 objects, 8-node gang: %lld ms\n",
              static_cast<long long>(ms));
}

TEST(ParseJob, AcceptsTheDocumentedShapeAndRefusesTypos) {
  auto j = json::parse(
      R"({"images":["nginx","127.0.0.1:5000/team/app:v1"],"datasets":["imagenet@2024-01"],
                           "nodes":2,"gpus":8,"selector":{"zone":"z1"},"exclude":["n3"],
                           "require_network_validation":true,"platform":"linux/arm64"})");
  auto job = parse_job(j);
  ASSERT_TRUE(job) << job.error().message;
  EXPECT_EQ(job->images.size(), 2u);
  EXPECT_EQ(job->nodes, 2u);
  EXPECT_EQ(job->gpus, 8u);
  EXPECT_EQ(job->selector.at("zone"), "z1");
  EXPECT_EQ(*job->require_network_validation, true);
  struct tc {
    const char* body;
    const char* needle;
  };
  for (auto c : std::vector<tc>{{R"({"gpu":1})", "unknown job field \"gpu\""},
                                {R"({"images":"nginx"})", "images must be a list"},
                                {R"({"images":["UPPER/Case"]})", "invalid repository name"},
                                {R"({"nodes":0})", "nodes must be an integer in 1..1024"},
                                {R"({"nodes":-1})", "nodes"},
                                {R"({"gpus":1.5})", "gpus"},
                                {R"({"datasets":["noversion"]})", "name@version"},
                                {R"({"selector":{"zone":1}})", "selector"},
                                {R"({"platform":"amd64"})", "platform"},
                                {R"([])", "JSON object"}}) {
    auto r = parse_job(json::parse(c.body));
    ASSERT_FALSE(r) << c.body;
    EXPECT_NE(r.error().message.find(c.needle), std::string::npos)
        << c.body << ": " << r.error().message;
  }
}

// The placer with resolution through a fake registry-proxy: multi-arch images, reservations,
// unknown datasets.
class PlacerTest : public ::testing::Test {
 protected:
  PlacerTest()
      : idx_(index_options{}, "e", clock_.fn()),
        res_(src_, resolver_options{}, clock_.fn()),
        placer_(idx_, res_, ds_, net_, opts(), clock_.fn()) {}
  static placer_options opts() {
    placer_options o;
    o.cost = cost_model::from(cost_config{});
    o.reservation_ttl = 60s;
    return o;
  }
  fake_clock clock_;
  cluster_index idx_;
  fake_source src_;
  resolver res_;
  fake_datasets ds_;
  document_network_model net_;
  placer placer_;
};

TEST_F(PlacerTest, ResolvesPerPlatformAndReservesGpus) {
  auto amd = image_manifest({{"amd-l1", 100 * MiB}}, "amd-config");
  auto arm = image_manifest({{"arm-l1", 100 * MiB}}, "arm-config");
  src_.put("docker.io", "library/app", amd);
  src_.put("docker.io", "library/app", arm);
  src_.put("docker.io", "library/app",
           index_manifest({{"linux/amd64", amd}, {"linux/arm64/v8", arm}}), "latest");
  auto add = [&](const std::string& n, const std::string& plat,
                 std::vector<heartbeat::held_object> objs) {
    auto m = full_hb(n, std::move(objs), {{"platform", plat}, {"zone", "z"}, {"rack", "r"}});
    m.gpus = {{"H100", 8}};
    (void)idx_.apply(m, "ip");
  };
  add("x86", "linux/amd64", {});
  add("arm", "linux/arm64", {held("arm-l1", 100 * MiB)});
  job_spec job;
  job.images = {"app"};
  job.gpus = 6;
  auto r = placer_.place(job, 0, true, 2s);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(r->p.feasible) << r->p.reason;
  EXPECT_EQ(r->p.chosen, std::vector<std::string>{"arm"});
  EXPECT_EQ(r->p.objects.by_platform.size(), 2u);
  EXPECT_FALSE(r->p.reservation.empty());
  EXPECT_EQ(placer_.reserved().at("arm"), 6u);
  // The reservation holds: the same job goes to x86 now.
  r = placer_.place(job, 0, true, 2s);
  ASSERT_TRUE(r && r->p.feasible);
  EXPECT_EQ(r->p.chosen, std::vector<std::string>{"x86"});
  // A third finds no GPUs; after the TTL both are free again.
  r = placer_.place(job, 0, false, 2s);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->p.feasible);
  clock_.advance(61s);
  (void)idx_.apply(full_hb("x86", {}, {{"platform", "linux/amd64"}}, 2), "ip");
  EXPECT_TRUE(placer_.reserved().empty());
}

// Reserving placements at once on one replica: each looks at the reservations and then adds its
// own, so two at once both found the same GPUs free and reserved them twice. The clock here
// sleeps when read, which holds every thread between its look and its reservation.
TEST_F(PlacerTest, ConcurrentPlacementsNeverReserveTheSameGpus) {
  auto m = full_hb("only", {}, {{"platform", "linux/amd64"}, {"zone", "z"}, {"rack", "r"}});
  m.gpus = {{"H100", 8}};
  (void)idx_.apply(m, "ip");
  placer slow(idx_, res_, ds_, net_, opts(), [this] {
    std::this_thread::sleep_for(20ms);
    return clock_.now();
  });
  job_spec job;
  job.gpus = 8;
  std::atomic<int> feasible{0}, errors{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      auto r = slow.place(job, 0, true, 1s);
      if (!r)
        ++errors;
      else if (r->p.feasible)
        ++feasible;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(feasible.load(), 1);
  EXPECT_EQ(slow.reserved().at("only"), 8u);
}

TEST_F(PlacerTest, UnresolvableImagesMakeNodesIneligibleWithTheReason) {
  // An index with only an amd64 image (a single-platform manifest is taken for any platform:
  // its platform is only in the config blob).
  auto amd = image_manifest({{"only-amd", 10}});
  src_.put("docker.io", "library/amdonly", amd);
  src_.put("docker.io", "library/amdonly", index_manifest({{"linux/amd64", amd}}), "v1");
  (void)idx_.apply(full_hb("arm", {}, {{"platform", "linux/arm64"}}), "ip");
  (void)idx_.apply(full_hb("x86", {}, {{"platform", "linux/amd64"}}), "ip");
  job_spec job;
  job.images = {"amdonly:v1", "docker.io/library/missing:v9"};
  auto r = placer_.place(job, 0, false, 2s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->p.feasible);
  EXPECT_NE(r->p.reason.find("cannot resolve for linux/"), std::string::npos) << r->p.reason;
  for (const auto& e : r->p.nodes) {
    std::string all;
    for (const auto& why : e.reasons) all += why + "\n";
    EXPECT_NE(all.find("missing:v9"), std::string::npos) << all;
    if (e.name == "arm") {
      EXPECT_NE(all.find("has no image for linux/arm64"), std::string::npos) << all;
    }
  }
  job.images = {"amdonly:v1"};
  r = placer_.place(job, 0, false, 2s);
  ASSERT_TRUE(r && r->p.feasible);
  EXPECT_EQ(r->p.chosen, std::vector<std::string>{"x86"});
}

TEST_F(PlacerTest, DatasetsGoThroughTheCatalogSeam) {
  (void)idx_.apply(full_hb("n1", {held("shard0", 500)}), "ip");
  (void)idx_.apply(full_hb("n2", {}), "ip");
  job_spec job;
  job.datasets = {"imagenet@1"};
  auto r = placer_.place(job, 0, false, 1s);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::not_found));
  ds_.sets["imagenet@1"] = {obj("shard0", 500), obj("shard1", 500)};
  r = placer_.place(job, 0, false, 1s);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->p.chosen, std::vector<std::string>{"n1"});
  no_datasets none;
  auto u = none.lookup("imagenet@1");
  ASSERT_FALSE(u);
  EXPECT_NE(u.error().message.find("unknown dataset imagenet@1"), std::string::npos);
}

}  // namespace
}  // namespace shoal::scheduler
