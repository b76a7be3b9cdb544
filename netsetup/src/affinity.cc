#include "netsetup/affinity.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

namespace shoal::netsetup {

std::string_view to_string(path_type p) {
  switch (p) {
    case path_type::pix:
      return "PIX";
    case path_type::pxb:
      return "PXB";
    case path_type::phb:
      return "PHB";
    case path_type::sys:
      return "SYS";
  }
  return "SYS";
}

std::optional<path_type> parse_path_type(std::string_view s) {
  std::string u(s);
  for (auto& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (u == "PIX") return path_type::pix;
  if (u == "PXB") return path_type::pxb;
  if (u == "PHB") return path_type::phb;
  if (u == "SYS") return path_type::sys;
  return std::nullopt;
}

path_type classify(const pci_function& a, const pci_function& b) {
  if (a.root_complex != b.root_complex || a.root_complex.empty()) {
    // Different host bridges. Unknown NUMA (-1) on both sides means a single-node platform.
    return a.numa_node == b.numa_node ? path_type::phb : path_type::sys;
  }
  const auto& pa = a.bridges;
  const auto& pb = b.bridges;
  std::size_t common = 0;
  while (common < pa.size() && common < pb.size() && pa[common] == pb[common]) ++common;
  if (common == 0) return path_type::phb;  // only the host bridge is shared
  // A switch is an upstream port with downstream ports below it. The devices share the switch
  // when their chains differ at most in the last element (their downstream ports).
  if (common + 1 >= pa.size() && common + 1 >= pb.size()) return path_type::pix;
  return path_type::pxb;
}

std::vector<rail> assign_rails(const node_inventory& inv) {
  struct candidate {
    const nic_info* nic;
    const rdma_device* dev;
    int port;
    std::string netdev;
  };
  std::vector<candidate> cands;
  for (const auto& n : inv.nics) {
    if (n.rdma_devices.empty()) continue;
    const rdma_device* dev = inv.find_rdma(n.rdma_devices.front());
    int port = 1;
    if (dev != nullptr && !dev->ports.empty()) {
      const auto& p = dev->ports.front();
      if (!p.link_layer.empty() && p.link_layer != "Ethernet") continue;  // InfiniBand: not RoCE
      port = p.port;
    }
    cands.push_back({&n, dev, port, n.netdevs.empty() ? std::string() : n.netdevs.front()});
  }
  std::vector<rail> rails;
  if (cands.empty()) return rails;
  std::vector<int> load(cands.size(), 0);
  std::map<std::string, int> rail_index;  // NIC BDF → rail number
  for (const auto& g : inv.gpus) {
    std::size_t best = 0;
    std::tuple<path_type, int, std::string_view> best_key{path_type::sys, 0, {}};
    for (std::size_t i = 0; i < cands.size(); ++i) {
      std::tuple<path_type, int, std::string_view> key{classify(g, cands[i].nic->pci), load[i],
                                                       cands[i].nic->pci.bdf};
      if (i == 0 || key < best_key) {
        best = i;
        best_key = key;
      }
    }
    ++load[best];
    const auto& c = cands[best];
    auto [it, inserted] = rail_index.emplace(c.nic->pci.bdf, static_cast<int>(rail_index.size()));
    rails.push_back(rail{it->second, g.bdf, c.nic->pci.bdf,
                         c.dev != nullptr ? c.dev->name : c.nic->rdma_devices.front(), c.port,
                         c.netdev, std::get<0>(best_key)});
  }
  return rails;
}

}  // namespace shoal::netsetup
