#pragma once
// GPU↔NIC distance the way NCCL names it, and the rail NIC of each GPU.
//
// From the PCIe chains discovery records (root complex, then bridges down to the device):
//   PIX  both hang off the same PCIe switch (same upstream port, or the same bridge)
//   PXB  they share a bridge further up (a parent switch or the root port), but not the switch
//   PHB  same NUMA node but different root ports or host bridges (NCCL folds nvidia-smi's NODE
//        into PHB because its CPU node is a NUMA domain)
//   SYS  different NUMA nodes: the path crosses the inter-socket link
// docs/netsetup.md explains the mapping and where it approximates NCCL.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "netsetup/inventory.h"

namespace shoal::netsetup {

// Ordered like NCCL's PATH_* values: smaller is closer.
enum class path_type : std::uint8_t { pix = 4, pxb = 5, phb = 8, sys = 9 };

[[nodiscard]] std::string_view to_string(path_type p);
// "PIX", "PXB", "PHB", "SYS" (case-insensitive); nullopt otherwise.
[[nodiscard]] std::optional<path_type> parse_path_type(std::string_view s);

[[nodiscard]] path_type classify(const pci_function& a, const pci_function& b);

// A GPU and the NIC it should use.
struct rail {
  int index = 0;            // rail number: NICs numbered by the first GPU that uses them
  std::string gpu;          // GPU BDF
  std::string nic;          // NIC function BDF
  std::string rdma_device;  // "mlx5_0"
  int port = 1;
  std::string netdev;  // "ens1f0np0"
  path_type path = path_type::sys;
  friend bool operator==(const rail&, const rail&) = default;
};

// One rail per GPU (GPUs in BDF order) among the NIC functions that have an RDMA device on an
// Ethernet port: the nearest path type first; among equally near NICs the one with the fewest
// GPUs so far, then the lowest BDF. GPUs with no RDMA NIC at all get no rail.
[[nodiscard]] std::vector<rail> assign_rails(const node_inventory& inv);

}  // namespace shoal::netsetup
