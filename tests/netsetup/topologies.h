#pragma once
// The node shapes the netsetup tests run against, each a few builder calls:
//   dgx_a100  8 GPUs, 4 dual-port ConnectX-6 (two PCI functions each) behind 4 PCIe switches,
//             two per NUMA node: each switch holds 2 GPUs and one dual-port NIC.
//   h100      8 GPUs, 8 single-port ConnectX-7, one GPU and one NIC behind each of 8 switches.
//   vela_vm   a virtual machine (IBM Vela-like): everything on pci0000:00 with no bridges,
//             8 GPUs and 4 ConnectX-6 VFs, no PF, no DCB, no ECN knobs.
// `converged` nodes already match the default policy; `fresh` ones need every change.

#include <memory>
#include <string>
#include <vector>

#include "fake_tools.h"
#include "netsetup/discover.h"
#include "netsetup/sysfs.h"
#include "sysfs_tree.h"

namespace shoal::netsetup::testing {

enum class node_state { fresh, converged };

struct node_fixture {
  std::unique_ptr<sysfs_tree> tree;
  std::unique_ptr<fake_tools> tools;
  std::string name;
  std::vector<std::string> gpus;     // BDFs in order
  std::vector<std::string> netdevs;  // rail netdevs in rail order
  std::vector<std::string> rdma;     // rail RDMA devices in rail order
  std::vector<std::string> pfs;      // rail NIC BDFs

  [[nodiscard]] sysfs fs() const { return sysfs(tree->root()); }
  // Discovery with the fake tools; fails the calling test on error.
  [[nodiscard]] node_inventory discover() const;
  [[nodiscard]] result<node_inventory> try_discover() const;
};

// `node` numbers the node in a cluster: it picks distinct IPv4 addresses (10.<rail>.0.<node+1>).
node_fixture dgx_a100(node_state s, int node = 0);
node_fixture h100(node_state s, int node = 0);
node_fixture vela_vm(int node = 0);

// DCB state for a netdev in the given state (PFC on 3 only, trust dscp, ... or the defaults).
fake_tools::dev_state dcb_state(node_state s);

}  // namespace shoal::netsetup::testing
