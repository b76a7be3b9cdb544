// Discovery against real-shaped sysfs trees: what each topology yields, field by field, and the
// discovery document's JSON round trip.

#include "netsetup/discover.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "netsetup/affinity.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

TEST(NetsetupDiscover, DgxA100FindsGpusNicsAndTheirPcieChains) {
  auto f = dgx_a100(node_state::converged);
  auto inv = f.discover();
  ASSERT_EQ(inv.gpus.size(), 8u);
  ASSERT_EQ(inv.nics.size(), 8u);  // 4 dual-port NICs = 8 functions; VFs sit inside their PFs
  EXPECT_EQ(inv.node, "a100-0");
  const pci_function& g0 = inv.gpus[0];
  EXPECT_EQ(g0.bdf, "0000:13:00.0");
  EXPECT_EQ(g0.vendor, 0x10deu);
  EXPECT_EQ(g0.class_code, 0x030200u);
  EXPECT_EQ(g0.driver, "nvidia");
  EXPECT_EQ(g0.root_complex, "pci0000:10");
  EXPECT_EQ(g0.bridges, (std::vector<std::string>{"0000:10:01.0", "0000:11:00.0", "0000:12:00.0"}));
  EXPECT_EQ(g0.numa_node, 0);
  EXPECT_EQ(inv.gpus[7].numa_node, 1);
  EXPECT_EQ(g0.link.current_speed_gts, 16.0);
  EXPECT_EQ(g0.link.max_width, 16);

  const nic_info* n = inv.find_nic("0000:15:00.1");
  ASSERT_NE(n, nullptr);
  EXPECT_FALSE(n->is_vf);
  EXPECT_EQ(n->pci.device, 0x101bu);
  EXPECT_EQ(n->pci.bridges.back(), "0000:12:02.0");
  EXPECT_EQ(n->netdevs, std::vector<std::string>{"ens0f1np1"});
  EXPECT_EQ(n->rdma_devices, std::vector<std::string>{"mlx5_1"});
  ASSERT_TRUE(n->sriov.has_value());
  EXPECT_EQ(n->sriov->total_vfs, 16);
  EXPECT_EQ(n->sriov->num_vfs, 8);
  ASSERT_EQ(n->sriov->vfs.size(), 8u);
  EXPECT_EQ(n->sriov->vfs[0].device, 0x101cu);
  EXPECT_EQ(n->sriov->vfs[0].netdevs, std::vector<std::string>{"ens0f1np1v0"});
  EXPECT_EQ(n->sriov->vfs[3].index, 3);
}

TEST(NetsetupDiscover, NetdevLinkQosAndEcnState) {
  auto f = dgx_a100(node_state::converged);
  auto inv = f.discover();
  const netdev_info* nd = inv.find_netdev("ens2f0np0");
  ASSERT_NE(nd, nullptr);
  EXPECT_EQ(nd->pci, "0000:95:00.0");
  EXPECT_EQ(nd->operstate, "up");
  EXPECT_TRUE(nd->admin_up);
  EXPECT_EQ(nd->mtu, 9000);
  EXPECT_EQ(nd->speed_mbps, 200000);
  EXPECT_EQ(nd->qos.trust, "dscp");
  EXPECT_EQ(nd->qos.trust_source, "dcb");
  ASSERT_TRUE(nd->qos.pfc);
  EXPECT_TRUE((*nd->qos.pfc)[3]);
  EXPECT_FALSE((*nd->qos.pfc)[4]);
  EXPECT_EQ(nd->qos.dscp_prio, (std::vector<std::pair<int, int>>{{26, 3}, {48, 6}}));
  ASSERT_TRUE(nd->qos.pause);
  EXPECT_FALSE(nd->qos.pause->rx);
  ASSERT_TRUE(nd->ecn.np && nd->ecn.rp);
  EXPECT_TRUE((*nd->ecn.np)[3]);
  EXPECT_FALSE((*nd->ecn.np)[2]);
  EXPECT_EQ(nd->ecn.cnp_dscp, 48);
  EXPECT_EQ(nd->ecn.cnp_802p_prio, 6);
  EXPECT_TRUE(inv.warnings.empty()) << inv.warnings.front();
}

TEST(NetsetupDiscover, RdmaDevicesMapToNetdevsWithTheRoceV2Ipv4GidIndex) {
  auto f = h100(node_state::converged, 2);
  auto inv = f.discover();
  ASSERT_EQ(inv.rdma.size(), 8u);
  const rdma_device* d = inv.find_rdma("mlx5_5");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->pci, f.pfs[5]);
  ASSERT_EQ(d->ports.size(), 1u);
  const rdma_port& p = d->ports[0];
  EXPECT_EQ(p.state, "ACTIVE");
  EXPECT_EQ(p.phys_state, "LinkUp");
  EXPECT_EQ(p.link_layer, "Ethernet");
  EXPECT_EQ(p.netdev, "ens5np0");
  ASSERT_EQ(p.gids.size(), 4u);  // the zero entries of the 8-entry table are not listed
  EXPECT_EQ(p.gids[2].type, "IB/RoCE v1");
  EXPECT_EQ(p.roce_v2_ipv4_index, 3);
  EXPECT_EQ(p.roce_v2_ipv4, "10.5.0.3");
  EXPECT_EQ(p.traffic_class, 106);  // parsed from MLNX_OFED's "Global tclass=106"
  EXPECT_EQ(p.default_roce_tos, 106);
}

// A fresh MLNX_OFED node: traffic_class exists but is empty until a class is written.
// Discovery used to fail on it ("expected a traffic class 0..255").
TEST(NetsetupDiscover, AnUnsetOfedTrafficClassIsUnsetNotGarbage) {
  auto f = h100(node_state::converged);
  f.tree->write("/sys/class/infiniband/mlx5_5/tc/1/traffic_class", "\n");
  auto inv = f.try_discover();
  ASSERT_TRUE(inv) << inv.error().to_string();
  const rdma_device* d = inv->find_rdma("mlx5_5");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->ports.size(), 1u);
  EXPECT_FALSE(d->ports[0].traffic_class.has_value());
}

TEST(NetsetupDiscover, GidIndexFollowsTheTableNotAConvention) {
  auto f = h100(node_state::converged);
  // An extra address (a VLAN netdev) puts a RoCE v2 IPv4 entry at 3 that is not on ens0np0;
  // the netdev's own entry moves to 5.
  const std::string pd = "/sys/class/infiniband/mlx5_0/ports/1";
  f.tree->write(pd + "/gid_attrs/ndevs/3", "ens0np0.100\n");
  f.tree->write(pd + "/gids/4", ipv4_gid("10.0.0.9") + "\n");
  f.tree->write(pd + "/gid_attrs/types/4", "IB/RoCE v1\n");
  f.tree->write(pd + "/gid_attrs/ndevs/4", "ens0np0\n");
  f.tree->write(pd + "/gids/5", ipv4_gid("10.0.0.9") + "\n");
  f.tree->write(pd + "/gid_attrs/types/5", "RoCE v2\n");
  f.tree->write(pd + "/gid_attrs/ndevs/5", "ens0np0\n");
  auto inv = f.discover();
  const auto& p = inv.find_rdma("mlx5_0")->ports[0];
  EXPECT_EQ(p.roce_v2_ipv4_index, 5);
  EXPECT_EQ(p.roce_v2_ipv4, "10.0.0.9");
}

TEST(NetsetupDiscover, VelaVmSeesOnlyVfs) {
  auto f = vela_vm();
  auto inv = f.discover();
  ASSERT_EQ(inv.gpus.size(), 8u);
  ASSERT_EQ(inv.nics.size(), 4u);
  for (const auto& n : inv.nics) {
    EXPECT_TRUE(n.is_vf) << n.pci.bdf;  // recognised by its VF device id; no physfn in a VM
    EXPECT_TRUE(n.physfn.empty());
    EXPECT_FALSE(n.sriov.has_value());
    EXPECT_TRUE(n.pci.bridges.empty());
  }
  EXPECT_EQ(inv.gpus[0].numa_node, -1);
  const netdev_info* nd = inv.find_netdev("enp0s16");
  ASSERT_NE(nd, nullptr);
  EXPECT_FALSE(nd->qos.pfc.has_value());  // dcb: Operation not supported on a VF
  EXPECT_FALSE(nd->ecn.np.has_value());
  EXPECT_FALSE(inv.warnings.empty());
  EXPECT_NE(inv.warnings.front().find("Operation not supported"), std::string::npos);
  EXPECT_EQ(inv.find_rdma("mlx5_0")->ports[0].roce_v2_ipv4_index, 3);
}

TEST(NetsetupDiscover, VfsInUseHaveNoHostNetdev) {
  auto f = h100(node_state::converged);
  // A VF handed to a pod: its netdev moved into the pod's namespace.
  for (int v = 0; v < 3; ++v) {
    const std::string vf = "ens0np0v" + std::to_string(v);
    const std::string dir = f.tree->netdev_dir(vf);
    f.tree->remove(dir);
    f.tree->remove("/sys/class/net/" + vf);
  }
  auto inv = f.discover();
  const auto& vfs = inv.find_nic(f.pfs[0])->sriov->vfs;
  EXPECT_TRUE(vfs[0].netdevs.empty());
  EXPECT_TRUE(vfs[2].netdevs.empty());
  EXPECT_EQ(vfs[3].netdevs.size(), 1u);
}

TEST(NetsetupDiscover, MissingToolIsOneWarningAndEmptyQos) {
  auto f = h100(node_state::converged);
  f.tools->not_installed = {"dcb"};
  auto inv = f.discover();
  int dcb_warnings = 0;
  for (const auto& w : inv.warnings) dcb_warnings += w.find("dcb") != std::string::npos;
  EXPECT_EQ(dcb_warnings, 1);
  EXPECT_FALSE(inv.netdevs[0].qos.pfc.has_value());
  EXPECT_TRUE(inv.netdevs[0].qos.pause.has_value());  // ethtool still ran
  int dcb_calls = 0;
  for (const auto& c : f.tools->calls) dcb_calls += c[0] == "dcb";
  EXPECT_EQ(dcb_calls, 1);  // not retried for every netdev
}

TEST(NetsetupDiscover, QosTrustFromTheMlx5SysfsFile) {
  auto f = h100(node_state::converged);
  f.tree->write(f.tree->netdev_dir("ens1np0") + "/qos/trust", "pcp\n");
  auto inv = f.discover();
  EXPECT_EQ(inv.find_netdev("ens1np0")->qos.trust, "pcp");
  EXPECT_EQ(inv.find_netdev("ens1np0")->qos.trust_source, "sysfs");
  EXPECT_EQ(inv.find_netdev("ens0np0")->qos.trust_source, "dcb");
}

TEST(NetsetupDiscover, ExtraNetdevsAreDescribedAndUnknownOnesWarn) {
  auto f = h100(node_state::converged);
  netdev_spec v;
  v.name = "veth0";
  v.ecn = false;
  f.tree->mkdirs("/sys/devices/virtual/net");
  f.tree->write("/sys/devices/virtual/net/veth0/mtu", "1500\n");
  f.tree->write("/sys/devices/virtual/net/veth0/operstate", "down\n");
  f.tree->write("/sys/devices/virtual/net/veth0/flags", "0x1002\n");
  f.tree->symlink("/sys/class/net/veth0", "/sys/devices/virtual/net/veth0");
  discover_options o;
  o.node_name = "n";
  o.extra_netdevs = {"veth0", "nosuch0"};
  auto inv = discover(f.fs(), *f.tools, o);
  ASSERT_TRUE(inv) << inv.error().message;
  const netdev_info* nd = inv->find_netdev("veth0");
  ASSERT_NE(nd, nullptr);
  EXPECT_EQ(nd->pci, "");
  EXPECT_FALSE(nd->admin_up);
  EXPECT_EQ(nd->mtu, 1500);
  bool warned = false;
  for (const auto& w : inv->warnings) warned = warned || w.find("nosuch0") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST(NetsetupDiscover, DocumentRoundTripsThroughJson) {
  for (auto* make : {+[] { return dgx_a100(node_state::converged); },
                     +[] { return dgx_a100(node_state::fresh); }, +[] { return vela_vm(); }}) {
    auto f = make();
    auto inv = f.discover();
    nlohmann::json doc = to_json(inv);
    EXPECT_EQ(doc["schema"], 1);
    EXPECT_EQ(doc["rails"].size(), inv.gpus.size());
    auto back = parse_inventory(doc.dump());
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, inv) << f.name;
  }
}

TEST(NetsetupDiscover, DocumentFieldSpelling) {
  auto f = h100(node_state::converged);
  auto doc = to_json(f.discover());
  const auto& nic = doc["nics"][0];
  EXPECT_EQ(nic["pci"]["vendor"], "15b3");
  EXPECT_EQ(nic["pci"]["device"], "1021");
  EXPECT_EQ(nic["pci"]["class"], "020000");
  EXPECT_EQ(nic["sriov"]["vfs"][0]["device"], "101e");
  EXPECT_EQ(doc["netdevs"][0]["qos"]["pfc"][3], true);
  EXPECT_EQ(doc["rails"][0]["path"], "PIX");
  EXPECT_EQ(doc["rdma"][0]["ports"][0]["roce_v2_ipv4_index"], 3);
}

TEST(NetsetupDiscover, IsBdfAndClasses) {
  EXPECT_TRUE(is_bdf("0000:17:00.0"));
  EXPECT_TRUE(is_bdf("0001:af:1f.7"));
  EXPECT_FALSE(is_bdf("0000:17:00.8"));
  EXPECT_FALSE(is_bdf("0000:17:00"));
  EXPECT_FALSE(is_bdf("pci0000:17"));
  EXPECT_TRUE(is_gpu_class(0x10de, 0x030200));
  EXPECT_TRUE(is_gpu_class(0x10de, 0x030000));
  EXPECT_FALSE(is_gpu_class(0x1a03, 0x030000));  // a BMC's VGA
  EXPECT_FALSE(is_gpu_class(0x10de, 0x040300));  // the GPU's audio function
  EXPECT_TRUE(is_nic_class(0x020000));
  EXPECT_TRUE(is_nic_class(0x020700));
  EXPECT_FALSE(is_nic_class(0x060400));
  EXPECT_EQ(vf_device_of(0x15b3, 0x101b), 0x101cu);
  EXPECT_TRUE(is_known_vf_device(0x15b3, 0x101e));
  EXPECT_FALSE(is_known_vf_device(0x15b3, 0x101b));
}

}  // namespace
}  // namespace shoal::netsetup
