// The scheduler's network model backed by netsetup: verdicts from validate_node, gang
// consistency from validate_cluster, plans from the rails and make_nccl_env, all from the
// discovery documents nodes attach to their heartbeats.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "netsetup/inventory.h"
#include "scheduler/network.h"
#include "topologies.h"

namespace shoal::scheduler {
namespace {

using netsetup::testing::node_state;

node_view view_of(const std::string& name, const netsetup::node_inventory& inv) {
  node_view n;
  n.name = name;
  n.netsetup = netsetup::to_json(inv).dump();
  return n;
}

TEST(NetsetupNetworkModel, ConvergedNodesPassAndGetPlans) {
  netsetup_network_model m{netsetup::policy{}};
  auto a = netsetup::testing::h100(node_state::converged, 0);
  auto b = netsetup::testing::h100(node_state::converged, 1);
  auto na = view_of("a", a.discover());
  auto nb = view_of("b", b.discover());
  auto va = m.verdict(na);
  EXPECT_EQ(va.state, validation::passed) << va.detail;
  const node_view* gang[] = {&na, &nb};
  auto st = m.gang_consistent(gang);
  EXPECT_TRUE(st) << st.error().message;
  auto plan = m.plan(na, 4);
  ASSERT_TRUE(plan.is_object()) << plan.dump();
  ASSERT_EQ(plan["gpus"].size(), 4u) << plan.dump();
  EXPECT_EQ(plan["gpus"][0]["gpu"], a.gpus[0]);
  EXPECT_EQ(plan["gpus"][0]["rdma_device"], a.rdma[0]);
  ASSERT_TRUE(plan.contains("nccl_env")) << plan.dump();
  const auto& env = plan["nccl_env"];
  ASSERT_TRUE(env.contains("NCCL_IB_HCA")) << plan.dump();
  EXPECT_EQ(env["NCCL_IB_HCA"].get<std::string>().rfind("=", 0), 0u) << "exact-match form";
  EXPECT_TRUE(env.contains("NCCL_IB_GID_INDEX"));
  EXPECT_TRUE(env.contains("NCCL_IB_TC"));
  // More GPUs than rails is said, not guessed.
  auto too_many = m.plan(na, 16);
  EXPECT_TRUE(too_many.contains("error"));
}

TEST(NetsetupNetworkModel, UnconvergedNodeFailsWithTheNamedChecks) {
  netsetup_network_model m{netsetup::policy{}};
  auto f = netsetup::testing::h100(node_state::fresh, 0);
  auto v = m.verdict(view_of("fresh", f.discover()));
  EXPECT_EQ(v.state, validation::failed);
  EXPECT_NE(v.detail.find("qos."), std::string::npos) << v.detail;
}

TEST(NetsetupNetworkModel, InconsistentGangIsRefused) {
  netsetup_network_model m{netsetup::policy{}};
  // Two nodes built with the same index share their RoCE addresses: not addressable together.
  auto a = netsetup::testing::h100(node_state::converged, 0);
  auto b = netsetup::testing::h100(node_state::converged, 0);
  auto na = view_of("a", a.discover());
  auto nb = view_of("b", b.discover());
  const node_view* gang[] = {&na, &nb};
  auto st = m.gang_consistent(gang);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("cluster."), std::string::npos) << st.error().message;
}

TEST(NetsetupNetworkModel, GarbageAndLegacyDocuments) {
  netsetup_network_model m{netsetup::policy{}};
  node_view none;
  none.name = "none";
  EXPECT_EQ(m.verdict(none).state, validation::unknown);
  node_view legacy;
  legacy.name = "legacy";
  legacy.netsetup = R"({"validation":{"passed":true,"settings":{"mtu":9000}}})";
  EXPECT_EQ(m.verdict(legacy).state, validation::passed);
  node_view broken;
  broken.name = "broken";
  broken.netsetup = R"({"schema":1,"nics":"oops"})";
  auto v = m.verdict(broken);
  EXPECT_EQ(v.state, validation::failed);
  EXPECT_FALSE(v.detail.empty());
  EXPECT_TRUE(m.plan(broken, 1).is_null());
}

// A node's own error text is cut to a bound on a character boundary: the detail goes into job
// records and failover decisions that replicas share as JSON, where a cut through a character
// made nlohmann's dump() throw on the Redis upkeep thread and end the process.
TEST(DocumentNetworkModel, ANodesErrorIsCutOnACharacterBoundary) {
  document_network_model m;
  node_view n;
  n.name = "n";
  n.netsetup = R"({"validation":{"passed":false,"error":")" + std::string(511, 'a') + "\xc3\xa9" +
               std::string(100, 'b') + R"("}})";
  auto v = m.verdict(n);
  EXPECT_EQ(v.state, validation::failed);
  EXPECT_TRUE(utf8_valid(v.detail)) << v.detail.size();
  EXPECT_LE(v.detail.size(), 520u);
  EXPECT_EQ(v.detail.substr(0, 511), std::string(511, 'a'));
  EXPECT_NO_THROW((void)nlohmann::json(v.detail).dump());
}

// The failure detector asks for every node's verdict every second and a placement for every
// candidate's: a version of a node's document is judged once, a new version again, a view
// without a version (built by hand, no document) every time; the kept verdict is the inner
// model's.
TEST(CachedNetworkModel, JudgesEachVersionOfANodesDocumentOnce) {
  cached_network_model m{std::make_unique<netsetup_network_model>(netsetup::policy{})};
  auto good = view_of("a", netsetup::testing::h100(node_state::converged, 0).discover());
  auto bad = view_of("a", netsetup::testing::h100(node_state::fresh, 0).discover());
  good.netsetup_rev = 7;
  EXPECT_FALSE(m.known("a", 7));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m.verdict(good).state, validation::passed);
  EXPECT_EQ(m.judged(), 1u);
  ASSERT_TRUE(m.known("a", 7));
  EXPECT_EQ(m.known("a", 7)->state, validation::passed);
  EXPECT_FALSE(m.known("a", 8));
  EXPECT_FALSE(m.known("b", 7));
  // The node's document changed: judged again, and the failing checks are named.
  bad.netsetup_rev = 9;
  auto v = m.verdict(bad);
  EXPECT_EQ(v.state, validation::failed);
  EXPECT_NE(v.detail.find("qos."), std::string::npos) << v.detail;
  EXPECT_EQ(m.judged(), 2u);
  EXPECT_EQ(m.known("a", 9)->detail, v.detail);
  EXPECT_FALSE(m.known("a", 7));
  // A late caller with the older version gets its verdict but does not replace the newer one.
  EXPECT_EQ(m.verdict(good).state, validation::passed);
  EXPECT_EQ(m.known("a", 9)->state, validation::failed);
  // No version: judged each time, nothing kept.
  good.netsetup_rev = 0;
  (void)m.verdict(good);
  (void)m.verdict(good);
  EXPECT_EQ(m.judged(), 3u);  // the late caller's; none for the unversioned views
  EXPECT_FALSE(m.known("a", 0));
}

TEST(CachedNetworkModel, StaysBoundedAsNodesComeAndGo) {
  cached_network_model m{std::make_unique<document_network_model>(), 4};
  node_view n;
  n.netsetup = R"({"validation":{"passed":true,"settings":{"mtu":9000}}})";
  for (std::uint64_t i = 1; i <= 10; ++i) {
    n.name = "n" + std::to_string(i);
    n.netsetup_rev = i;
    EXPECT_EQ(m.verdict(n).state, validation::passed);
    EXPECT_TRUE(m.known(n.name, i));
  }
  // At most 4 kept: the oldest went.
  int kept = 0;
  for (std::uint64_t i = 1; i <= 10; ++i) kept += m.known("n" + std::to_string(i), i) ? 1 : 0;
  EXPECT_LE(kept, 4);
  EXPECT_GE(kept, 1);
}

}  // namespace
}  // namespace shoal::scheduler
