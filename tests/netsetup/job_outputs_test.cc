// NCCL environment per pod and the cluster configs, with the field names the consuming projects
// read (sriov-network-device-plugin pkg/types, k8s-rdma-shared-dev-plugin pkg/types,
// network-attachment-definition-client types.go).

#include "netsetup/job_outputs.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "netsetup/errc.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

TEST(NetsetupNcclEnv, PodGetsItsGpusRailsInExactMatchForm) {
  auto f = h100(node_state::converged);
  auto inv = f.discover();
  std::vector<std::string> gpus = {f.gpus[2], "3"};  // a BDF and an index
  auto env = make_nccl_env(inv, gpus, policy{});
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_EQ(*env->get("NCCL_IB_HCA"), "=mlx5_2:1,mlx5_3:1");
  EXPECT_EQ(*env->get("NCCL_IB_GID_INDEX"), "3");
  EXPECT_EQ(*env->get("NCCL_IB_TC"), "106");
  EXPECT_EQ(*env->get("NCCL_SOCKET_IFNAME"), "=ens2np0,ens3np0");
  EXPECT_EQ(*env->get("NCCL_NET_GDR_LEVEL"), "PXB");
  EXPECT_EQ(env->get("NCCL_IB_ROCE_VERSION_NUM"), nullptr);
  EXPECT_EQ(to_shell(*env).substr(0, 39), "export NCCL_IB_HCA='=mlx5_2:1,mlx5_3:1'");
}

TEST(NetsetupNcclEnv, SharedNicAppearsOnceAndAllGpusIsTheDefault) {
  auto f = dgx_a100(node_state::converged);
  auto inv = f.discover();
  auto env = make_nccl_env(inv, {}, policy{});
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_EQ(*env->get("NCCL_IB_HCA"),
            "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1");
  auto vm = vela_vm();
  auto venv = make_nccl_env(vm.discover(), {}, policy{});
  ASSERT_TRUE(venv);
  EXPECT_EQ(*venv->get("NCCL_IB_HCA"), "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1");
}

TEST(NetsetupNcclEnv, DifferentGidIndicesLeaveTheChoiceToNccl) {
  auto f = h100(node_state::converged);
  const std::string pd = "/sys/class/infiniband/mlx5_1/ports/1";
  f.tree->write(pd + "/gid_attrs/types/3", "IB/RoCE v1\n");
  f.tree->write(pd + "/gids/5", ipv4_gid("10.1.0.1") + "\n");
  f.tree->write(pd + "/gid_attrs/types/5", "RoCE v2\n");
  f.tree->write(pd + "/gid_attrs/ndevs/5", "ens1np0\n");
  policy pol;
  pol.nccl.socket_ifname = "=eth0";
  pol.traffic_class = 104;
  auto env = make_nccl_env(f.discover(), std::vector<std::string>{"0", "1"}, pol);
  ASSERT_TRUE(env) << env.error().message;
  EXPECT_EQ(env->get("NCCL_IB_GID_INDEX"), nullptr);
  EXPECT_EQ(*env->get("NCCL_IB_ROCE_VERSION_NUM"), "2");
  EXPECT_EQ(*env->get("NCCL_IB_ADDR_FAMILY"), "AF_INET");
  EXPECT_EQ(*env->get("NCCL_SOCKET_IFNAME"), "=eth0");
  EXPECT_EQ(*env->get("NCCL_IB_TC"), "104");
  ASSERT_EQ(env->notes.size(), 1u);
}

TEST(NetsetupNcclEnv, UnknownGpusAreErrors) {
  auto f = h100(node_state::converged);
  auto inv = f.discover();
  for (std::string bad : {"0000:ff:00.0", "8", "-1", "x", ""}) {
    std::vector<std::string> g{bad};
    auto env = make_nccl_env(inv, g, policy{});
    ASSERT_FALSE(env) << bad;
    EXPECT_EQ(env.error().code, make_error_code(errc::bad_request));
  }
  EXPECT_EQ(to_shell(nccl_env{{{"A", "it's"}}, {}}), "export A='it'\\''s'\n");
}

TEST(NetsetupClusterConfig, SriovDevicePluginResourceList) {
  auto f = h100(node_state::converged);
  policy pol;
  auto j = sriov_device_plugin_config(f.discover(), pol);
  ASSERT_EQ(j["resourceList"].size(), 8u);
  const auto& r = j["resourceList"][1];
  EXPECT_EQ(r["resourceName"], "rdma_rail1");
  EXPECT_EQ(r["resourcePrefix"], "nvidia.com");
  ASSERT_TRUE(r["selectors"].is_array());
  const auto& sel = r["selectors"][0];
  EXPECT_EQ(sel["vendors"], nlohmann::json::array({"15b3"}));
  EXPECT_EQ(sel["devices"], nlohmann::json::array({"101e"}));  // the VF id, not the PF's 1021
  EXPECT_EQ(sel["drivers"], nlohmann::json::array({"mlx5_core"}));
  EXPECT_EQ(sel["pfNames"], nlohmann::json::array({"ens1np0"}));
  EXPECT_EQ(sel["isRdma"], true);
  EXPECT_FALSE(r.contains("isRdma"));  // current plugins read it inside the selector
  // A fresh node has no VFs yet: the VF id comes from the PF id.
  auto fresh = dgx_a100(node_state::fresh);
  auto fj = sriov_device_plugin_config(fresh.discover(), pol);
  EXPECT_EQ(fj["resourceList"][0]["selectors"][0]["devices"], nlohmann::json::array({"101c"}));
  // A VM names the VFs it was given.
  auto vm = vela_vm();
  auto vj = sriov_device_plugin_config(vm.discover(), pol);
  ASSERT_EQ(vj["resourceList"].size(), 4u);
  EXPECT_EQ(vj["resourceList"][2]["selectors"][0]["pciAddresses"],
            nlohmann::json::array({vm.pfs[2]}));
  EXPECT_FALSE(vj["resourceList"][2]["selectors"][0].contains("pfNames"));
}

TEST(NetsetupClusterConfig, NetworkAttachmentDefinitions) {
  auto f = h100(node_state::converged);
  auto inv = f.discover();
  policy pol;
  auto none = network_attachment_definitions(inv, pol);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("cluster.ipam is empty"), std::string::npos);
  pol.cluster.ipam = R"({"type":"whereabouts","range":"10.0.0.0/8"})";
  pol.cluster.network_namespace = "training";
  auto nads = network_attachment_definitions(inv, pol);
  ASSERT_TRUE(nads) << nads.error().message;
  ASSERT_EQ(nads->size(), 8u);
  const auto& nad = (*nads)[4];
  EXPECT_EQ(nad["apiVersion"], "k8s.cni.cncf.io/v1");
  EXPECT_EQ(nad["kind"], "NetworkAttachmentDefinition");
  EXPECT_EQ(nad["metadata"]["name"], "shoal-rdma-rail4");
  EXPECT_EQ(nad["metadata"]["namespace"], "training");
  EXPECT_EQ(nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"],
            "nvidia.com/rdma_rail4");
  ASSERT_TRUE(nad["spec"]["config"].is_string());  // the CNI config is a JSON string
  auto cni = nlohmann::json::parse(nad["spec"]["config"].get<std::string>());
  EXPECT_EQ(cni["type"], "sriov");
  EXPECT_EQ(cni["name"], "shoal-rdma-rail4");
  EXPECT_EQ(cni["cniVersion"], "0.4.0");
  EXPECT_EQ(cni["ipam"]["type"], "whereabouts");
  pol.cluster.ipam = "[1,2]";
  EXPECT_FALSE(network_attachment_definitions(inv, pol));
}

TEST(NetsetupClusterConfig, RdmaSharedDevicePlugin) {
  auto f = dgx_a100(node_state::converged);
  policy pol;
  pol.cluster.rdma_hca_max = 63;
  auto j = rdma_shared_device_plugin_config(f.discover(), pol);
  EXPECT_EQ(j["periodicUpdateInterval"], 60);
  ASSERT_EQ(j["configList"].size(), 8u);
  const auto& c = j["configList"][7];
  EXPECT_EQ(c["resourceName"], "rdma_shared_rail7");
  EXPECT_EQ(c["resourcePrefix"], "nvidia.com");
  EXPECT_EQ(c["rdmaHcaMax"], 63);
  EXPECT_EQ(c["selectors"]["vendors"], nlohmann::json::array({"15b3"}));
  EXPECT_EQ(c["selectors"]["deviceIDs"], nlohmann::json::array({"101b"}));  // not "devices"
  EXPECT_EQ(c["selectors"]["ifNames"], nlohmann::json::array({"ens3f1np1"}));
  pol.cluster.ipam = R"({"type":"dhcp"})";
  auto all = cluster_configs(f.discover(), pol);
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_TRUE(all->contains("sriovDevicePlugin"));
  EXPECT_TRUE(all->contains("networkAttachmentDefinitions"));
  EXPECT_TRUE(all->contains("rdmaSharedDevicePlugin"));
}

}  // namespace
}  // namespace shoal::netsetup
