#pragma once
// Builds real-shaped sysfs trees under a temp dir: PCI functions as directories nested under
// their bridges (/sys/devices/pci0000:17/0000:17:01.0/.../<bdf>), /sys/bus/pci/devices/<bdf> and
// the class entries (/sys/class/net, /sys/class/infiniband) as relative symlinks into it, exactly
// as the kernel lays them out. Each topology in topologies.h is a few calls of this builder.
//
// Test-only; single-threaded. The tree is removed when the builder is destroyed.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shoal::netsetup::testing {

// A place in the PCIe tree: the kernel path of a host bridge or a bridge.
struct pci_node {
  std::string kpath;  // "/sys/devices/pci0000:17/0000:17:01.0"
  int numa = -1;
};

struct link_spec {
  std::string cur_speed = "16.0 GT/s PCIe";
  int cur_width = 16;
  std::string max_speed = "16.0 GT/s PCIe";
  int max_width = 16;
};

struct gid_spec {
  int index = 0;
  std::string gid;
  std::string type;  // "RoCE v2", "IB/RoCE v1"
  std::string netdev;
};

struct netdev_spec {
  std::string name;
  std::string operstate = "up";
  bool admin_up = true;
  int mtu = 9000;
  std::optional<int> speed = 200000;
  std::string address = "0c:42:a1:00:00:01";
  bool ecn = true;               // mlx5 ecn/ directories exist
  std::array<bool, 8> ecn_np{};  // roce_np/enable/<p>
  std::array<bool, 8> ecn_rp{};
  std::optional<int> cnp_dscp;  // roce_np/cnp_dscp
  std::optional<int> cnp_802p_prio;
  std::optional<std::string> qos_trust;  // MLNX_OFED /sys/class/net/<if>/qos/trust
};

struct port_spec {
  int port = 1;
  std::string state = "4: ACTIVE";
  std::string phys_state = "5: LinkUp";
  std::string link_layer = "Ethernet";
  int gid_table_len = 8;  // entries not in `gids` are all-zero GIDs without types
  std::vector<gid_spec> gids;
  std::optional<int> traffic_class;     // mlx5 tc/<port>/traffic_class
  std::optional<int> default_roce_tos;  // configfs rdma_cm (creates the device dir)
};

struct vf_spec {
  std::string bdf;
  std::string netdev;  // empty: moved into a pod
  std::string rdma;
};

struct nic_spec {
  std::string bdf;
  std::uint32_t vendor = 0x15b3;
  std::uint32_t device = 0x101b;
  std::uint32_t class_code = 0x020000;
  std::string driver = "mlx5_core";
  link_spec link;
  std::optional<netdev_spec> net;
  std::string rdma;  // RDMA device name; empty = none
  port_spec port;
  std::optional<int> total_vfs;  // SR-IOV capable PF
  std::vector<vf_spec> vfs;      // created VFs (sriov_numvfs = vfs.size())
  std::uint32_t vf_device = 0x101c;
};

// The usual GID table of a RoCE port with one IPv4 address: link-local v1/v2 at 0/1, the IPv4
// v1/v2 at 2/3 (index 3 is what NCCL_IB_GID_INDEX=3 conventionally points at).
std::vector<gid_spec> default_gids(const std::string& netdev, const std::string& ipv4);
// "10.0.0.1" → "0000:0000:0000:0000:0000:ffff:0a00:0001"
std::string ipv4_gid(const std::string& ipv4);

class sysfs_tree {
 public:
  sysfs_tree();
  ~sysfs_tree();
  sysfs_tree(const sysfs_tree&) = delete;
  sysfs_tree& operator=(const sysfs_tree&) = delete;

  [[nodiscard]] const std::string& root() const { return root_; }
  [[nodiscard]] std::string real(const std::string& kernel_path) const {
    return root_ + kernel_path;
  }

  // "0000:17" → /sys/devices/pci0000:17
  pci_node host_bridge(const std::string& domain_bus, int numa);
  // A bridge (root port or switch port), class 0x060400.
  pci_node bridge(const pci_node& parent, const std::string& bdf);
  // A switch: its upstream port under `parent`, one downstream port per entry of `down`.
  std::vector<pci_node> pcie_switch(const pci_node& parent, const std::string& up,
                                    const std::vector<std::string>& down);
  void gpu(const pci_node& parent, const std::string& bdf, const link_spec& link = {},
           std::uint32_t device = 0x20b0);
  void nic(const pci_node& parent, const nic_spec& spec);

  // Raw access for broken-node variants.
  void write(const std::string& kernel_path, const std::string& content);
  [[nodiscard]] std::string read(const std::string& kernel_path) const;
  void remove(const std::string& kernel_path);
  // A relative symlink at `link` pointing to `target` (both kernel paths), like the kernel's.
  void symlink(const std::string& link, const std::string& target);
  void mkdirs(const std::string& kernel_path);
  // Kernel path of a netdev's directory ("/sys/devices/.../net/ens1f0").
  [[nodiscard]] std::string netdev_dir(const std::string& name) const;

 private:
  void function(const pci_node& parent, const std::string& bdf, std::uint32_t vendor,
                std::uint32_t device, std::uint32_t class_code, const std::string& driver,
                const link_spec* link);
  void netdev(const std::string& fn_kpath, const std::string& bdf, const netdev_spec& n);
  void kernel_device_link(const std::string& link, const std::string& bdf);
  void rdma(const std::string& fn_kpath, const std::string& bdf, const std::string& name,
            const port_spec& p);

  std::string root_;
};

}  // namespace shoal::netsetup::testing
