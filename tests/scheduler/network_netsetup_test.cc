// The scheduler's network model backed by netsetup: verdicts from validate_node, gang
// consistency from validate_cluster, plans from the rails and make_nccl_env, all from the
// discovery documents nodes attach to their heartbeats.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace shoal::scheduler
