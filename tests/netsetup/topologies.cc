#include "topologies.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace shoal::netsetup::testing {
namespace {

std::string bdf(int bus, int dev = 0, int fn = 0) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0000:%02x:%02x.%d", bus, dev, fn);
  return buf;
}

std::string bus_of(int bus) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0000:%02x", bus);
  return buf;
}

std::string ip(int rail, int node) {
  return "10." + std::to_string(rail) + ".0." + std::to_string(node + 1);
}

netdev_spec netdev_in(node_state s, const std::string& name) {
  netdev_spec n;
  n.name = name;
  n.mtu = s == node_state::converged ? 9000 : 1500;
  if (s == node_state::converged) {
    n.ecn_np[3] = true;
    n.ecn_rp[3] = true;
  }
  n.cnp_dscp = 48;
  n.cnp_802p_prio = 6;
  return n;
}

port_spec port_in(node_state s, const std::string& netdev, int rail, int node) {
  port_spec p;
  p.gids = default_gids(netdev, ip(rail, node));
  p.traffic_class = s == node_state::converged ? 106 : 0;
  if (s == node_state::converged) p.default_roce_tos = 106;
  return p;
}

// A rail PF with 8 VFs on converged nodes (none on fresh ones) out of 16 the firmware allows.
nic_spec rail_nic(node_state s, const std::string& fn_bdf, std::uint32_t device,
                  std::uint32_t vf_device, const std::string& netdev, const std::string& rdma,
                  int rail, int node, int vf_bus) {
  nic_spec n;
  n.bdf = fn_bdf;
  n.device = device;
  n.vf_device = vf_device;
  n.net = netdev_in(s, netdev);
  n.rdma = rdma;
  n.port = port_in(s, netdev, rail, node);
  n.total_vfs = 16;
  if (s == node_state::converged) {
    for (int v = 0; v < 8; ++v) {
      n.vfs.push_back(vf_spec{bdf(vf_bus, v / 8, v % 8), netdev + "v" + std::to_string(v), ""});
    }
  }
  return n;
}

}  // namespace

fake_tools::dev_state dcb_state(node_state s) {
  fake_tools::dev_state d;
  d.pfc.pfc_cap = 8;
  d.ets.prio_tc = {0, 1, 2, 3, 4, 5, 6, 7};
  d.ets.tc_bw = {0, 0, 0, 0, 0, 0, 0, 0};
  d.ets.tc_tsa.fill("strict");
  if (s == node_state::converged) {
    d.pfc.enabled[3] = true;
    d.app.dscp_prio = {{26, 3}, {48, 6}};
    d.trust = {"dscp"};
    d.pause = pause_state{false, false, false};
  } else {
    d.trust = {"pcp"};
    d.pause = pause_state{true, true, true};
  }
  return d;
}

result<node_inventory> node_fixture::try_discover() const {
  discover_options o;
  o.node_name = name;
  return netsetup::discover(fs(), *tools, o);
}

node_inventory node_fixture::discover() const {
  auto inv = try_discover();
  EXPECT_TRUE(inv.has_value()) << (inv ? "" : inv.error().message);
  return inv ? *inv : node_inventory{};
}

node_fixture dgx_a100(node_state s, int node) {
  node_fixture f;
  f.tree = std::make_unique<sysfs_tree>();
  f.tools = std::make_unique<fake_tools>(f.tree.get());
  f.name = "a100-" + std::to_string(node);
  sysfs_tree& t = *f.tree;
  const int buses[4] = {0x10, 0x30, 0x90, 0xb0};
  for (int sw = 0; sw < 4; ++sw) {
    const int b = buses[sw];
    auto hb = t.host_bridge(bus_of(b), sw / 2);
    auto rp = t.bridge(hb, bdf(b, 1));
    auto down = t.pcie_switch(rp, bdf(b + 1), {bdf(b + 2, 0), bdf(b + 2, 1), bdf(b + 2, 2)});
    for (int g = 0; g < 2; ++g) {
      t.gpu(down[static_cast<std::size_t>(g)], bdf(b + 3 + g));
      f.gpus.push_back(bdf(b + 3 + g));
    }
    for (int port = 0; port < 2; ++port) {
      const int rail = sw * 2 + port;
      const std::string nd =
          "ens" + std::to_string(sw) + "f" + std::to_string(port) + "np" + std::to_string(port);
      const std::string rd = "mlx5_" + std::to_string(rail);
      t.nic(down[2],
            rail_nic(s, bdf(b + 5, 0, port), 0x101b, 0x101c, nd, rd, rail, node, b + 6 + port));
      f.netdevs.push_back(nd);
      f.rdma.push_back(rd);
      f.pfs.push_back(bdf(b + 5, 0, port));
      f.tools->devs[nd] = dcb_state(s);
    }
  }
  return f;
}

node_fixture h100(node_state s, int node) {
  node_fixture f;
  f.tree = std::make_unique<sysfs_tree>();
  f.tools = std::make_unique<fake_tools>(f.tree.get());
  f.name = "h100-" + std::to_string(node);
  sysfs_tree& t = *f.tree;
  link_spec gen5;
  gen5.cur_speed = gen5.max_speed = "32.0 GT/s PCIe";
  for (int i = 0; i < 8; ++i) {
    const int b = 0x18 + i * 0x10;
    auto hb = t.host_bridge(bus_of(b), i / 4);
    auto rp = t.bridge(hb, bdf(b, 1));
    auto down = t.pcie_switch(rp, bdf(b + 1), {bdf(b + 2, 0), bdf(b + 2, 1)});
    t.gpu(down[0], bdf(b + 3), gen5, 0x2330);
    f.gpus.push_back(bdf(b + 3));
    const std::string nd = "ens" + std::to_string(i) + "np0";
    const std::string rd = "mlx5_" + std::to_string(i);
    nic_spec n = rail_nic(s, bdf(b + 4), 0x1021, 0x101e, nd, rd, i, node, b + 5);
    n.link = gen5;
    t.nic(down[1], n);
    f.netdevs.push_back(nd);
    f.rdma.push_back(rd);
    f.pfs.push_back(bdf(b + 4));
    f.tools->devs[nd] = dcb_state(s);
  }
  return f;
}

node_fixture vela_vm(int node) {
  node_fixture f;
  f.tree = std::make_unique<sysfs_tree>();
  f.tools = std::make_unique<fake_tools>(f.tree.get());
  f.name = "vela-" + std::to_string(node);
  sysfs_tree& t = *f.tree;
  auto hb = t.host_bridge("0000:00", -1);
  for (int g = 0; g < 8; ++g) {
    link_spec l;
    t.gpu(hb, bdf(0, 5 + g), l);
    f.gpus.push_back(bdf(0, 5 + g));
  }
  for (int v = 0; v < 4; ++v) {
    nic_spec n;
    n.bdf = bdf(0, 0x10 + v);
    n.device = 0x101c;  // ConnectX-6 VF; no physfn: the PF stays with the hypervisor
    netdev_spec nd;
    nd.name = "enp0s" + std::to_string(0x10 + v);
    nd.ecn = false;
    n.net = nd;
    n.rdma = "mlx5_" + std::to_string(v);
    n.port.gids = default_gids(nd.name, ip(v, node));
    t.nic(hb, n);
    f.netdevs.push_back(nd.name);
    f.rdma.push_back(n.rdma);
    f.pfs.push_back(n.bdf);
  }
  return f;
}

}  // namespace shoal::netsetup::testing
