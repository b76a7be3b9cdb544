// Validation: converged nodes pass; each broken node is caught by its named check; cross-node
// checks over several nodes' discovery documents.

#include "netsetup/validate.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

std::vector<const check_result*> failures(const std::vector<check_result>& rs) {
  std::vector<const check_result*> out;
  for (const auto& r : rs) {
    if (r.status == check_status::fail) out.push_back(&r);
  }
  return out;
}

std::string dump(const std::vector<const check_result*>& rs) {
  std::string s;
  for (const auto* r : rs) s += "\n  " + r->name + " " + r->subject + ": " + r->message;
  return s;
}

TEST(NetsetupValidate, ConvergedNodesPass) {
  for (auto* make : {+[] { return h100(node_state::converged); },
                     +[] { return dgx_a100(node_state::converged); }}) {
    auto f = make();
    auto rs = validate_node(f.discover(), policy{});
    EXPECT_TRUE(passed(rs)) << f.name << dump(failures(rs));
    EXPECT_TRUE(failures(rs).empty()) << f.name << dump(failures(rs));
    std::set<std::string> names;
    for (const auto& r : rs) names.insert(r.name);
    for (const char* n : {"link.up", "link.mtu", "qos.trust", "qos.dscp_map", "qos.pfc",
                          "qos.global_pause", "ecn.enabled", "roce.gid", "roce.default_tos",
                          "sriov.vfs_available", "topology.gpu_nic", "pcie.link"}) {
      EXPECT_TRUE(names.contains(n)) << f.name << " has no " << n << " check";
    }
  }
}

TEST(NetsetupValidate, FreshNodeFailsTheChecksThePlanWouldFix) {
  auto f = h100(node_state::fresh);
  auto rs = validate_node(f.discover(), policy{});
  EXPECT_FALSE(passed(rs));
  std::set<std::string> failed;
  for (const auto* r : failures(rs)) failed.insert(r->name);
  EXPECT_EQ(failed, (std::set<std::string>{"link.mtu", "qos.trust", "qos.dscp_map", "qos.pfc",
                                           "qos.global_pause", "ecn.enabled", "roce.default_tos",
                                           "sriov.vfs_available"}));
}

TEST(NetsetupValidate, VelaVmPassesWithQosLeftToTheHost) {
  auto f = vela_vm();
  auto rs = validate_node(f.discover(), policy{});
  // The VM's RDMA-CM ToS is unset (a warning); its GPUs sit at PHB from every VF (a warning).
  EXPECT_TRUE(passed(rs)) << dump(failures(rs));
  int skipped = 0;
  for (const auto& r : rs) {
    if (r.name == "qos.pfc") {
      EXPECT_EQ(r.status, check_status::skip);
      ++skipped;
    }
    if (r.name == "topology.gpu_nic") {
      EXPECT_EQ(r.status, check_status::fail);
      EXPECT_EQ(r.sev, severity::warning);
      EXPECT_NE(r.message.find("PHB"), std::string::npos);
    }
    if (r.name == "sriov.vfs_available") {
      EXPECT_EQ(r.status, check_status::pass);
    }
  }
  EXPECT_EQ(skipped, 4);
}

// A broken node: a damage applied to a converged H100, and the check that must catch it.
struct broken_node {
  const char* what;
  std::function<void(node_fixture&)> damage;
  const char* check;
  const char* subject;
  const char* message;  // a substring of the failure message
};

TEST(NetsetupValidate, EachBrokenNodeIsCaughtByItsNamedCheck) {
  const std::vector<broken_node> cases = {
      {"no RoCE v2 GID",
       [](node_fixture& f) {
         // Only the link-local entries: no IPv4 address on the netdev.
         for (int i : {2, 3}) {
           const std::string pd = "/sys/class/infiniband/mlx5_4/ports/1";
           f.tree->write(pd + "/gids/" + std::to_string(i),
                         "0000:0000:0000:0000:0000:0000:0000:0000\n");
           f.tree->remove(pd + "/gid_attrs/types/" + std::to_string(i));
         }
       },
       "roce.gid", "mlx5_4 port 1", "no RoCE v2 IPv4 GID on ens4np0"},
      {"RoCE v1 only",
       [](node_fixture& f) {
         f.tree->write("/sys/class/infiniband/mlx5_4/ports/1/gid_attrs/types/3", "IB/RoCE v1\n");
       },
       "roce.gid", "mlx5_4 port 1", "3 IB/RoCE v1 on ens4np0"},
      {"MTU mismatch",
       [](node_fixture& f) { f.tree->write(f.tree->netdev_dir("ens2np0") + "/mtu", "1500\n"); },
       "link.mtu", "ens2np0", "MTU 1500, want 9000"},
      {"PFC off", [](node_fixture& f) { f.tools->devs["ens1np0"].pfc.enabled.fill(false); },
       "qos.pfc", "ens1np0", "off on priority 3: RoCE is lossy"},
      {"PFC on the wrong priority",
       [](node_fixture& f) {
         f.tools->devs["ens1np0"].pfc.enabled.fill(false);
         f.tools->devs["ens1np0"].pfc.enabled[4] = true;
       },
       "qos.pfc", "ens1np0", "PFC is on 4 but off on priority 3"},
      {"PFC on too many priorities",
       [](node_fixture& f) { f.tools->devs["ens1np0"].pfc.enabled[0] = true; }, "qos.pfc",
       "ens1np0", "PFC is on 0,3; want priority 3 only"},
      {"VFs exhausted",
       [](node_fixture& f) {
         for (int v = 0; v < 8; ++v) {
           const std::string vf = "ens6np0v" + std::to_string(v);
           f.tree->remove(f.tree->netdev_dir(vf));
           f.tree->remove("/sys/class/net/" + vf);
         }
       },
       "sriov.vfs_available", "", "VFs exhausted: 8 of 8 in use"},
      {"no VFs created",
       [](node_fixture& f) {
         f.tree->write("/sys/bus/pci/devices/" + f.pfs[6] + "/sriov_numvfs", "0\n");
       },
       "sriov.vfs_available", "", "0 VFs exist (firmware allows 16), policy wants 8"},
      {"link down",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens7np0") + "/operstate", "down\n");
         f.tree->write("/sys/class/infiniband/mlx5_7/ports/1/state", "1: DOWN\n");
         f.tree->write("/sys/class/infiniband/mlx5_7/ports/1/phys_state", "3: Disabled\n");
       },
       "link.up", "ens7np0", "link is down; RDMA port mlx5_7/1 DOWN Disabled"},
      {"degraded PCIe link (NIC)",
       [](node_fixture& f) {
         f.tree->write("/sys/bus/pci/devices/" + f.pfs[3] + "/current_link_width", "8\n");
       },
       "pcie.link", "", "degraded PCIe link: NIC ens3np0 at x8 32 GT/s (capable of x16 32 GT/s)"},
      {"degraded PCIe link (GPU speed)",
       [](node_fixture& f) {
         f.tree->write("/sys/bus/pci/devices/" + f.gpus[5] + "/current_link_speed",
                       "2.5 GT/s PCIe\n");
       },
       "pcie.link", "", "GPU at x16 2.5 GT/s"},
      {"trust pcp", [](node_fixture& f) { f.tools->devs["ens0np0"].trust = {"pcp"}; }, "qos.trust",
       "ens0np0", "trust is pcp, want dscp"},
      {"DSCP 26 on the wrong priority",
       [](node_fixture& f) {
         f.tools->devs["ens0np0"].app.dscp_prio = {{26, 0}, {48, 6}};
       },
       "qos.dscp_map", "ens0np0", "DSCP 26 -> priority 0, want 3"},
      {"global pause on", [](node_fixture& f) { f.tools->devs["ens0np0"].pause.rx = true; },
       "qos.global_pause", "ens0np0", "global pause is on (rx on, tx off)"},
      {"ECN off",
       [](node_fixture& f) {
         f.tree->write(f.tree->netdev_dir("ens5np0") + "/ecn/roce_rp/enable/3", "0\n");
       },
       "ecn.enabled", "ens5np0", "reaction point off"},
      {"dcb not installed", [](node_fixture& f) { f.tools->not_installed.insert("dcb"); },
       "qos.pfc", "ens0np0", "PFC state unreadable"},
  };
  for (const auto& c : cases) {
    auto f = h100(node_state::converged);
    c.damage(f);
    auto rs = validate_node(f.discover(), policy{});
    EXPECT_FALSE(passed(rs)) << c.what;
    bool caught = false;
    for (const auto* r : failures(rs)) {
      if (r->name == c.check && (*c.subject == '\0' || r->subject == c.subject) &&
          r->message.find(c.message) != std::string::npos) {
        caught = true;
        EXPECT_EQ(r->sev, severity::error) << c.what;
        EXPECT_EQ(r->node, "h100-0");
      }
    }
    EXPECT_TRUE(caught) << c.what << ": not caught by " << c.check << dump(failures(rs));
  }
}

TEST(NetsetupValidate, GpuFartherThanThePolicyAllowsIsAWarning) {
  auto f = h100(node_state::converged);
  policy pol;
  pol.max_gpu_nic_distance = "PIX";
  EXPECT_TRUE(passed(validate_node(f.discover(), pol)));
  // Take GPU 0's NIC away: its nearest NIC is now on another host bridge.
  f.tree->remove("/sys/bus/pci/devices/" + f.pfs[0]);
  auto rs = validate_node(f.discover(), pol);
  bool warned = false;
  for (const auto* r : failures(rs)) {
    if (r->name == "topology.gpu_nic" && r->subject == f.gpus[0]) {
      warned =
          r->sev == severity::warning && r->message.find("farther than PIX") != std::string::npos;
    }
  }
  EXPECT_TRUE(warned) << dump(failures(rs));
  EXPECT_TRUE(passed(rs));
}

std::vector<node_inventory> cluster_of(std::vector<node_fixture>& fs) {
  std::vector<node_inventory> out;
  for (auto& f : fs) out.push_back(f.discover());
  return out;
}

check_result find(const std::vector<check_result>& rs, const std::string& name) {
  for (const auto& r : rs) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no check " << name;
  return {};
}

TEST(NetsetupValidateCluster, ConsistentNodesPass) {
  std::vector<node_fixture> fs;
  for (int n = 0; n < 3; ++n) fs.push_back(h100(node_state::converged, n));
  auto nodes = cluster_of(fs);
  policy pol;
  pol.gid_subnet_prefix = 16;  // rail k is 10.k.0.0/16 on every node
  auto rs = validate_cluster(nodes, pol);
  EXPECT_TRUE(passed(rs)) << dump(failures(rs));
  EXPECT_TRUE(failures(rs).empty()) << dump(failures(rs));
  EXPECT_NE(find(rs, "cluster.gid").message.find("24 RoCE v2 IPv4 GIDs"), std::string::npos);
  EXPECT_EQ(find(rs, "cluster.qos").node, "cluster");
}

TEST(NetsetupValidateCluster, CatchesDifferencesBetweenNodes) {
  struct cross_case {
    const char* what;
    std::function<void(node_fixture&)> damage_node1;
    const char* check;
    const char* message;
  };
  const std::vector<cross_case> cases = {
      {"MTU differs",
       [](node_fixture& f) {
         for (const auto& nd : f.netdevs) f.tree->write(f.tree->netdev_dir(nd) + "/mtu", "4200\n");
       },
       "cluster.mtu", "MTUs differ: 4200 on h100-1; 9000 on h100-0 h100-2"},
      {"QoS differs",
       [](node_fixture& f) {
         for (const auto& nd : f.netdevs) f.tools->devs[nd].trust = {"pcp"};
       },
       "cluster.qos", "trust pcp"},
      {"lossless priority differs",
       [](node_fixture& f) {
         for (const auto& nd : f.netdevs) {
           f.tools->devs[nd].pfc.enabled.fill(false);
           f.tools->devs[nd].pfc.enabled[4] = true;
           f.tools->devs[nd].app.dscp_prio = {{26, 4}, {48, 6}};
         }
       },
       "cluster.priority", "ToS 106 -> priority 4, PFC on 4"},
      {"duplicate GID address",
       [](node_fixture& f) {
         f.tree->write("/sys/class/infiniband/mlx5_2/ports/1/gids/3", ipv4_gid("10.2.0.1") + "\n");
       },
       "cluster.gid", "10.2.0.1 is used by h100-0 mlx5_2 and h100-1 mlx5_2"},
      {"missing GID",
       [](node_fixture& f) {
         f.tree->write("/sys/class/infiniband/mlx5_1/ports/1/gid_attrs/types/3", "IB/RoCE v1\n");
       },
       "cluster.gid", "h100-1 mlx5_1 has no RoCE v2 IPv4 GID"},
      {"rail in another subnet",
       [](node_fixture& f) {
         f.tree->write("/sys/class/infiniband/mlx5_6/ports/1/gids/3",
                       ipv4_gid("192.168.6.2") + "\n");
       },
       "cluster.gid", "rail 6 spans 2 /16 subnets"},
  };
  policy pol;
  pol.gid_subnet_prefix = 16;
  for (const auto& c : cases) {
    std::vector<node_fixture> fs;
    for (int n = 0; n < 3; ++n) fs.push_back(h100(node_state::converged, n));
    c.damage_node1(fs[1]);
    auto rs = validate_cluster(cluster_of(fs), pol);
    EXPECT_FALSE(passed(rs)) << c.what;
    auto r = find(rs, c.check);
    EXPECT_EQ(r.status, check_status::fail) << c.what << dump(failures(rs));
    EXPECT_NE(r.message.find(c.message), std::string::npos) << c.what << ": " << r.message;
  }
}

TEST(NetsetupValidateCluster, OneSettingEverywhereStillFailsWhenTrafficMissesThePfcPriority) {
  std::vector<node_fixture> fs;
  for (int n = 0; n < 3; ++n) {
    fs.push_back(h100(node_state::converged, n));
    for (const auto& nd : fs.back().netdevs) {
      fs.back().tools->devs[nd].pfc.enabled.fill(false);
      fs.back().tools->devs[nd].pfc.enabled[4] = true;
      fs.back().tools->devs[nd].app.dscp_prio = {{26, 3}, {48, 6}};
    }
  }
  policy pol;
  pol.gid_subnet_prefix = 16;
  auto rs = validate_cluster(cluster_of(fs), pol);
  std::vector<std::string> names;
  for (const auto& r : rs) names.push_back(r.name);
  EXPECT_EQ(names, (std::vector<std::string>{"cluster.mtu", "cluster.qos", "cluster.priority",
                                             "cluster.gid", "cluster.rails"}));
  EXPECT_EQ(find(rs, "cluster.qos").status, check_status::pass);
  auto r = find(rs, "cluster.priority");
  EXPECT_EQ(r.status, check_status::fail);
  EXPECT_NE(r.message.find("not the same on every node: ToS 106 -> priority 3, PFC on 4 on h100-0 "
                           "h100-1 h100-2"),
            std::string::npos)
      << r.message;
}

TEST(NetsetupValidateCluster, RailCountsAndVmsAndOneNode) {
  std::vector<node_fixture> fs;
  fs.push_back(h100(node_state::converged, 0));
  fs.push_back(dgx_a100(node_state::converged, 1));
  fs.push_back(vela_vm(2));
  auto rs = validate_cluster(cluster_of(fs), policy{});
  auto rails = find(rs, "cluster.rails");
  EXPECT_EQ(rails.status, check_status::fail);
  EXPECT_EQ(rails.sev, severity::warning);
  EXPECT_NE(rails.message.find("4 on vela-2"), std::string::npos) << rails.message;
  EXPECT_NE(find(rs, "cluster.qos").message.find("not visible on vela-2"), std::string::npos);
  std::vector<node_inventory> one{fs[0].discover()};
  auto single = validate_cluster(one, policy{});
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0].status, check_status::skip);
}

TEST(NetsetupValidateCluster, GarbageAddressesInAPeerDocumentAreReportedNotTrusted) {
  std::vector<node_fixture> fs;
  fs.push_back(h100(node_state::converged, 0));
  fs.push_back(h100(node_state::converged, 1));
  auto nodes = cluster_of(fs);
  nodes[1].rdma[0].ports[0].roce_v2_ipv4 = "10.0.0.1.7";
  nodes[1].rdma[1].ports[0].roce_v2_ipv4 = "999.1.1.1";
  policy pol;
  pol.gid_subnet_prefix = 8;
  auto r = find(validate_cluster(nodes, pol), "cluster.gid");
  EXPECT_EQ(r.status, check_status::fail);
  EXPECT_NE(r.message.find("\"10.0.0.1.7\", not an IPv4 address"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("\"999.1.1.1\""), std::string::npos) << r.message;
}

TEST(NetsetupValidate, ResultsAsJson) {
  auto f = h100(node_state::converged);
  auto j = to_json(validate_node(f.discover(), policy{}));
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[0]["name"], "link.up");
  EXPECT_EQ(j[0]["status"], "pass");
  EXPECT_EQ(j[0]["severity"], "error");
  EXPECT_EQ(j[0]["node"], "h100-0");
}

}  // namespace
}  // namespace shoal::netsetup
