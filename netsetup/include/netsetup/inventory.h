#pragma once
// What discovery learns about one node: GPUs and NICs with their PCIe position, netdevs with
// link and QoS state, RDMA devices with their GID tables. This is the "discovery document" peerd
// sends with its heartbeat and `validate --peer` reads back: to_json() / inventory_from_json()
// are its only serialization, versioned by `schema` (docs/netsetup.md documents every field).
//
// Plain values: copyable, no hidden state, safe to share read-only between threads.

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "netsetup/tool_output.h"

namespace shoal::netsetup {

inline constexpr int inventory_schema = 1;

// PCIe link of a function as the kernel reports it; empty when the kernel does not say.
struct pcie_link {
  std::optional<double> current_speed_gts;
  std::optional<int> current_width;
  std::optional<double> max_speed_gts;
  std::optional<int> max_width;
  friend bool operator==(const pcie_link&, const pcie_link&) = default;
};

// One PCI function (a GPU, a NIC PF or a VF) and where it sits in the PCIe tree.
struct pci_function {
  std::string bdf;                   // "0000:17:00.0"
  std::uint32_t vendor = 0;          // 0x10de, 0x15b3, ...
  std::uint32_t device = 0;          // 0x20b0, 0x101b, ...
  std::uint32_t class_code = 0;      // 0x030200, 0x020000, ...
  std::string driver;                // bound driver ("mlx5_core"), "" when unbound
  int numa_node = -1;                // -1 when the platform does not say
  std::string root_complex;          // "pci0000:17": the host bridge the function hangs off
  std::vector<std::string> bridges;  // BDFs from the root port down to the function's parent
  pcie_link link;
  friend bool operator==(const pci_function&, const pci_function&) = default;
};

// A virtual function of a PF, as seen from the host.
struct vf_info {
  int index = 0;  // N of virtfnN
  std::string bdf;
  std::uint32_t device = 0;  // VF device id (differs from the PF's)
  std::string driver;
  std::vector<std::string> netdevs;  // empty when the VF's netdev moved into a pod
  std::vector<std::string> rdma_devices;
  friend bool operator==(const vf_info&, const vf_info&) = default;
};

struct sriov_info {
  int total_vfs = 0;  // sriov_totalvfs: what the device (firmware) allows
  int num_vfs = 0;    // sriov_numvfs: how many exist now
  std::vector<vf_info> vfs;
  friend bool operator==(const sriov_info&, const sriov_info&) = default;
};

// A network function: a PF on bare metal, or a VF a virtual machine was given.
struct nic_info {
  pci_function pci;
  bool is_vf = false;
  std::string physfn;  // the PF's BDF when the PF is visible
  std::vector<std::string> netdevs;
  std::vector<std::string> rdma_devices;
  std::optional<sriov_info> sriov;  // present on SR-IOV capable PFs
  friend bool operator==(const nic_info&, const nic_info&) = default;
};

// Host QoS of a netdev. Each part is empty when it could not be read (tool missing, VF, ...).
struct netdev_qos {
  std::optional<std::string> trust;        // "dscp", "pcp", or the dcb apptrust order "pcp,dscp"
  std::string trust_source;                // "sysfs" (mlx5 qos/trust), "dcb", or ""
  std::optional<std::array<bool, 8>> pfc;  // PFC enabled, by priority
  std::optional<std::vector<std::pair<int, int>>> dscp_prio;  // explicit APP entries
  std::optional<std::array<int, 8>> prio_tc;                  // ETS priority → traffic class
  std::optional<pause_state> pause;                           // global (802.3x) pause
  friend bool operator==(const netdev_qos&, const netdev_qos&) = default;
};

// mlx5 ECN/DCQCN knobs under /sys/class/net/<if>/ecn; empty when the driver has none.
struct netdev_ecn {
  std::optional<std::array<bool, 8>> np;  // roce_np/enable/<prio>: CNP generation
  std::optional<std::array<bool, 8>> rp;  // roce_rp/enable/<prio>: rate reaction
  std::optional<int> cnp_dscp;            // roce_np/cnp_dscp
  std::optional<int> cnp_802p_prio;       // roce_np/cnp_802p_prio
  friend bool operator==(const netdev_ecn&, const netdev_ecn&) = default;
};

struct netdev_info {
  std::string name;
  std::string pci;        // BDF of the backing function, "" for virtual devices
  std::string operstate;  // "up", "down", "lowerlayerdown", "unknown", ...
  bool admin_up = false;  // IFF_UP in `flags`
  int mtu = 0;
  std::optional<int> speed_mbps;
  std::string address;
  netdev_qos qos;
  netdev_ecn ecn;
  friend bool operator==(const netdev_info&, const netdev_info&) = default;
};

struct gid_entry {
  int index = 0;
  std::string gid;     // "0000:0000:0000:0000:0000:ffff:0a00:0001"
  std::string type;    // "RoCE v2", "IB/RoCE v1"
  std::string netdev;  // gid_attrs/ndevs/<index>
  friend bool operator==(const gid_entry&, const gid_entry&) = default;
};

struct rdma_port {
  int port = 1;
  std::string state;                      // "ACTIVE", "DOWN", ... (the word after "4: ")
  std::string phys_state;                 // "LinkUp", "Disabled", ...
  std::string link_layer;                 // "Ethernet" or "InfiniBand"
  std::string netdev;                     // the netdev this port carries
  std::vector<gid_entry> gids;            // configured (non-zero) entries only
  std::optional<int> roce_v2_ipv4_index;  // lowest RoCE v2 IPv4 GID on `netdev`
  std::string roce_v2_ipv4;               // its address, "10.0.0.1"
  std::optional<int> default_roce_tos;    // configfs rdma_cm default_roce_tos
  std::optional<int> traffic_class;       // mlx5 tc/<port>/traffic_class
  friend bool operator==(const rdma_port&, const rdma_port&) = default;
};

struct rdma_device {
  std::string name;  // "mlx5_0"
  std::string pci;
  std::vector<rdma_port> ports;
  friend bool operator==(const rdma_device&, const rdma_device&) = default;
};

struct node_inventory {
  int schema = inventory_schema;
  std::string node;
  std::vector<pci_function> gpus;     // sorted by BDF
  std::vector<nic_info> nics;         // sorted by BDF; VFs with a visible PF sit in their PF
  std::vector<netdev_info> netdevs;   // sorted by name
  std::vector<rdma_device> rdma;      // sorted by name
  std::vector<std::string> warnings;  // what could not be read, and why

  [[nodiscard]] const pci_function* find_gpu(std::string_view bdf) const;
  [[nodiscard]] const nic_info* find_nic(std::string_view bdf) const;
  [[nodiscard]] const netdev_info* find_netdev(std::string_view name) const;
  [[nodiscard]] const rdma_device* find_rdma(std::string_view name) const;
  friend bool operator==(const node_inventory&, const node_inventory&) = default;
};

// The discovery document. Includes the derived GPU→NIC rails for readers; they are recomputed,
// not trusted, when a document is read back.
[[nodiscard]] nlohmann::json to_json(const node_inventory& inv);
// Strict reader for documents from peers: wrong types, unknown schema versions and out-of-range
// values are errc::bad_document errors naming the field ("nics[2].pci.numa_node: ...").
[[nodiscard]] result<node_inventory> inventory_from_json(const nlohmann::json& doc);
[[nodiscard]] result<node_inventory> parse_inventory(std::string_view text);

// "0x15b3" → "15b3": the spelling PCI ids have in device-plugin selectors.
[[nodiscard]] std::string hex4(std::uint32_t id);

}  // namespace shoal::netsetup
