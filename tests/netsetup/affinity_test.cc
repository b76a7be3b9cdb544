// GPU↔NIC path types and rail assignment on the reference topologies and on hand-made chains.

#include "netsetup/affinity.h"

#include <gtest/gtest.h>

#include <map>

#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

pci_function fn(std::string rc, std::vector<std::string> bridges, int numa) {
  pci_function f;
  f.root_complex = std::move(rc);
  f.bridges = std::move(bridges);
  f.numa_node = numa;
  return f;
}

TEST(NetsetupAffinity, ClassifiesLikeNccl) {
  // GPU behind switch downstream port 19:00.0, upstream port 18:00.0, root port 17:01.0.
  auto gpu = fn("pci0000:17", {"0000:17:01.0", "0000:18:00.0", "0000:19:00.0"}, 0);
  // Same switch, other downstream port: PIX.
  EXPECT_EQ(classify(gpu, fn("pci0000:17", {"0000:17:01.0", "0000:18:00.0", "0000:19:04.0"}, 0)),
            path_type::pix);
  // Same downstream port (both functions of one card below it): PIX.
  EXPECT_EQ(classify(gpu, fn("pci0000:17", {"0000:17:01.0", "0000:18:00.0", "0000:19:00.0"}, 0)),
            path_type::pix);
  // Another switch below the same root port: PXB.
  EXPECT_EQ(classify(gpu, fn("pci0000:17", {"0000:17:01.0", "0000:20:00.0", "0000:21:00.0"}, 0)),
            path_type::pxb);
  // Other root port of the same host bridge: PHB.
  EXPECT_EQ(classify(gpu, fn("pci0000:17", {"0000:17:03.0", "0000:30:00.0"}, 0)), path_type::phb);
  // Other host bridge, same NUMA node (nvidia-smi's NODE): PHB.
  EXPECT_EQ(classify(gpu, fn("pci0000:3a", {"0000:3a:01.0"}, 0)), path_type::phb);
  // Other socket: SYS.
  EXPECT_EQ(classify(gpu, fn("pci0000:9a", {"0000:9a:01.0"}, 1)), path_type::sys);
  // Symmetric.
  auto nic = fn("pci0000:17", {"0000:17:01.0", "0000:20:00.0", "0000:21:00.0"}, 0);
  EXPECT_EQ(classify(nic, gpu), classify(gpu, nic));
  EXPECT_EQ(parse_path_type("pxb"), path_type::pxb);
  EXPECT_FALSE(parse_path_type("NODE"));
  EXPECT_EQ(to_string(path_type::sys), "SYS");
  EXPECT_LT(path_type::pix, path_type::pxb);
  EXPECT_LT(path_type::phb, path_type::sys);
}

TEST(NetsetupAffinity, DgxA100TwoGpusShareADualPortNicOnePortEach) {
  auto f = dgx_a100(node_state::converged);
  auto inv = f.discover();
  auto rails = assign_rails(inv);
  ASSERT_EQ(rails.size(), 8u);
  for (std::size_t g = 0; g < 8; ++g) {
    EXPECT_EQ(rails[g].gpu, f.gpus[g]);
    EXPECT_EQ(rails[g].path, path_type::pix);
    // Balanced: the second GPU behind a switch takes the NIC's second port.
    EXPECT_EQ(rails[g].rdma_device, f.rdma[g]) << g;
    EXPECT_EQ(rails[g].netdev, f.netdevs[g]);
    EXPECT_EQ(rails[g].index, static_cast<int>(g));
  }
  // Across sockets the same pair is SYS, across switches on one socket PHB.
  EXPECT_EQ(classify(inv.gpus[0], inv.find_nic(f.pfs[7])->pci), path_type::sys);
  EXPECT_EQ(classify(inv.gpus[0], inv.find_nic(f.pfs[2])->pci), path_type::phb);
}

TEST(NetsetupAffinity, H100OneNicPerGpu) {
  auto f = h100(node_state::converged);
  auto rails = assign_rails(f.discover());
  ASSERT_EQ(rails.size(), 8u);
  for (std::size_t g = 0; g < 8; ++g) {
    EXPECT_EQ(rails[g].nic, f.pfs[g]);
    EXPECT_EQ(rails[g].path, path_type::pix);
  }
}

TEST(NetsetupAffinity, VelaVmSpreadsEightGpusOverFourVfs) {
  auto f = vela_vm();
  auto rails = assign_rails(f.discover());
  ASSERT_EQ(rails.size(), 8u);
  std::map<std::string, int> load;
  for (const auto& r : rails) {
    EXPECT_EQ(r.path, path_type::phb);  // a VM flattens the PCIe tree
    ++load[r.rdma_device];
  }
  ASSERT_EQ(load.size(), 4u);
  for (const auto& [dev, n] : load) EXPECT_EQ(n, 2) << dev;
}

TEST(NetsetupAffinity, NearestWinsOverBalance) {
  // Two GPUs behind one switch with one NIC there; a second NIC on the other socket. Both GPUs
  // take the near NIC: distance first, balance only among equally near NICs.
  sysfs_tree t;
  auto hb0 = t.host_bridge("0000:10", 0);
  auto down = t.pcie_switch(t.bridge(hb0, "0000:10:01.0"), "0000:11:00.0",
                            {"0000:12:00.0", "0000:12:01.0", "0000:12:02.0"});
  t.gpu(down[0], "0000:13:00.0");
  t.gpu(down[1], "0000:14:00.0");
  nic_spec a;
  a.bdf = "0000:15:00.0";
  a.net = netdev_spec{.name = "near0"};
  a.rdma = "mlx5_0";
  t.nic(down[2], a);
  auto hb1 = t.host_bridge("0000:90", 1);
  nic_spec b = a;
  b.bdf = "0000:91:00.0";
  b.net = netdev_spec{.name = "far0"};
  b.rdma = "mlx5_1";
  t.nic(t.bridge(hb1, "0000:90:01.0"), b);
  fake_tools tools(&t);
  discover_options o;
  o.run_tools = false;
  auto inv = discover(sysfs(t.root()), tools, o);
  ASSERT_TRUE(inv) << inv.error().message;
  auto rails = assign_rails(*inv);
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_EQ(rails[0].rdma_device, "mlx5_0");
  EXPECT_EQ(rails[1].rdma_device, "mlx5_0");
  EXPECT_TRUE(tools.calls.empty());  // run_tools = false
}

TEST(NetsetupAffinity, InfinibandPortsAreNotRoceRails) {
  sysfs_tree t;
  auto hb = t.host_bridge("0000:10", 0);
  auto rp = t.bridge(hb, "0000:10:01.0");
  t.gpu(rp, "0000:11:00.0");
  nic_spec ib;
  ib.bdf = "0000:12:00.0";
  ib.class_code = 0x020700;
  ib.net = netdev_spec{.name = "ibp18s0"};
  ib.rdma = "mlx5_0";
  ib.port.link_layer = "InfiniBand";
  t.nic(hb, ib);
  fake_tools tools(&t);
  discover_options o;
  o.run_tools = false;
  auto inv = discover(sysfs(t.root()), tools, o);
  ASSERT_TRUE(inv) << inv.error().message;
  EXPECT_EQ(inv->nics.size(), 1u);
  EXPECT_TRUE(assign_rails(*inv).empty());
}

}  // namespace
}  // namespace shoal::netsetup
