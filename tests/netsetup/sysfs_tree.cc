#include "sysfs_tree.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace shoal::netsetup::testing {
namespace {

std::string hex(std::uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%0*x", width, v);
  return buf;
}

std::string parent_of(const std::string& p) { return p.substr(0, p.rfind('/')); }

// Trees of test processes that were killed (a ctest timeout sends SIGKILL: no destructors) would
// stay in /dev/shm; their names carry the pid, so the next run removes those of dead processes.
void sweep_stale(const std::string& base) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename();
    if (!name.starts_with("shoal-netsetup-")) continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + 15));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::string ipv4_gid(const std::string& ipv4) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (std::sscanf(ipv4.c_str(), "%u.%u.%u.%u", &a, &b, &c, &d) != 4) {
    throw std::runtime_error("bad ipv4 " + ipv4);
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a, b, c, d);
  return buf;
}

std::vector<gid_spec> default_gids(const std::string& netdev, const std::string& ipv4) {
  const std::string ll = "fe80:0000:0000:0000:0e42:a1ff:fe00:0001";
  return {{0, ll, "IB/RoCE v1", netdev},
          {1, ll, "RoCE v2", netdev},
          {2, ipv4_gid(ipv4), "IB/RoCE v1", netdev},
          {3, ipv4_gid(ipv4), "RoCE v2", netdev}};
}

sysfs_tree::sysfs_tree() {
  // A tree is a few thousand tiny files. On this project's ext4 VM disks each create costs ~1 ms
  // (3 s per topology); on tmpfs the same tree takes ~50 ms. $TMPDIR still wins when set.
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "";
  if (base.empty()) base = ::access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  sweep_stale(base);
  std::string tmpl = base + "/shoal-netsetup-" + std::to_string(::getpid()) + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  root_ = tmpl;
  mkdirs("/sys/bus/pci/devices");
  mkdirs("/sys/bus/pci/drivers");
  mkdirs("/sys/class/net");
  mkdirs("/sys/class/infiniband");
}

sysfs_tree::~sysfs_tree() {
  std::error_code ec;
  fs::remove_all(root_, ec);
}

void sysfs_tree::kernel_device_link(const std::string& link, const std::string& bdf) {
  // The kernel writes "../../../<bdf>" for <fn>/net/<if>/device, not the shorter "../..".
  std::error_code ec;
  fs::remove(real(link), ec);
  fs::create_symlink("../../../" + bdf, real(link));
}

void sysfs_tree::mkdirs(const std::string& kernel_path) {
  fs::create_directories(real(kernel_path));
}

void sysfs_tree::write(const std::string& kernel_path, const std::string& content) {
  mkdirs(parent_of(kernel_path));
  std::ofstream out(real(kernel_path), std::ios::binary | std::ios::trunc);
  out << content;
  if (!out) throw std::runtime_error("write " + kernel_path);
}

std::string sysfs_tree::read(const std::string& kernel_path) const {
  std::ifstream in(real(kernel_path), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void sysfs_tree::remove(const std::string& kernel_path) { fs::remove_all(real(kernel_path)); }

void sysfs_tree::symlink(const std::string& link, const std::string& target) {
  mkdirs(parent_of(link));
  fs::path rel = fs::path(target).lexically_relative(fs::path(parent_of(link)));
  std::error_code ec;
  fs::remove(real(link), ec);
  fs::create_symlink(rel, real(link));
}

std::string sysfs_tree::netdev_dir(const std::string& name) const {
  fs::path p = fs::read_symlink(real("/sys/class/net/" + name));
  fs::path abs = (fs::path("/sys/class/net") / p).lexically_normal();
  return abs.string();
}

pci_node sysfs_tree::host_bridge(const std::string& domain_bus, int numa) {
  pci_node n{"/sys/devices/pci" + domain_bus, numa};
  mkdirs(n.kpath);
  return n;
}

void sysfs_tree::function(const pci_node& parent, const std::string& bdf, std::uint32_t vendor,
                          std::uint32_t device, std::uint32_t class_code, const std::string& driver,
                          const link_spec* link) {
  const std::string k = parent.kpath + "/" + bdf;
  mkdirs(k);
  write(k + "/vendor", hex(vendor, 4) + "\n");
  write(k + "/device", hex(device, 4) + "\n");
  write(k + "/class", hex(class_code, 6) + "\n");
  write(k + "/numa_node", std::to_string(parent.numa) + "\n");
  if (link != nullptr) {
    write(k + "/current_link_speed", link->cur_speed + "\n");
    write(k + "/current_link_width", std::to_string(link->cur_width) + "\n");
    write(k + "/max_link_speed", link->max_speed + "\n");
    write(k + "/max_link_width", std::to_string(link->max_width) + "\n");
  }
  if (!driver.empty()) {
    mkdirs("/sys/bus/pci/drivers/" + driver);
    symlink(k + "/driver", "/sys/bus/pci/drivers/" + driver);
  }
  symlink("/sys/bus/pci/devices/" + bdf, k);
}

pci_node sysfs_tree::bridge(const pci_node& parent, const std::string& bdf) {
  link_spec l;
  function(parent, bdf, 0x8086, 0x347a, 0x060400, "pcieport", &l);
  return pci_node{parent.kpath + "/" + bdf, parent.numa};
}

std::vector<pci_node> sysfs_tree::pcie_switch(const pci_node& parent, const std::string& up,
                                              const std::vector<std::string>& down) {
  link_spec l;
  function(parent, up, 0x1000, 0xc010, 0x060400, "pcieport", &l);
  pci_node upstream{parent.kpath + "/" + up, parent.numa};
  std::vector<pci_node> out;
  for (const auto& d : down) {
    function(upstream, d, 0x1000, 0xc010, 0x060400, "pcieport", &l);
    out.push_back(pci_node{upstream.kpath + "/" + d, parent.numa});
  }
  return out;
}

void sysfs_tree::gpu(const pci_node& parent, const std::string& bdf, const link_spec& link,
                     std::uint32_t device) {
  function(parent, bdf, 0x10de, device, 0x030200, "nvidia", &link);
}

void sysfs_tree::netdev(const std::string& fn_kpath, const std::string& bdf, const netdev_spec& n) {
  const std::string d = fn_kpath + "/net/" + n.name;
  mkdirs(d);
  write(d + "/operstate", n.operstate + "\n");
  write(d + "/mtu", std::to_string(n.mtu) + "\n");
  if (n.speed) write(d + "/speed", std::to_string(*n.speed) + "\n");
  write(d + "/address", n.address + "\n");
  write(d + "/flags", n.admin_up ? "0x1003\n" : "0x1002\n");
  kernel_device_link(d + "/device", bdf);
  symlink("/sys/class/net/" + n.name, d);
  if (n.ecn) {
    for (int p = 0; p < 8; ++p) {
      write(d + "/ecn/roce_np/enable/" + std::to_string(p),
            n.ecn_np[static_cast<std::size_t>(p)] ? "1\n" : "0\n");
      write(d + "/ecn/roce_rp/enable/" + std::to_string(p),
            n.ecn_rp[static_cast<std::size_t>(p)] ? "1\n" : "0\n");
    }
    if (n.cnp_dscp) write(d + "/ecn/roce_np/cnp_dscp", std::to_string(*n.cnp_dscp) + "\n");
    if (n.cnp_802p_prio) {
      write(d + "/ecn/roce_np/cnp_802p_prio", std::to_string(*n.cnp_802p_prio) + "\n");
    }
  }
  if (n.qos_trust) write(d + "/qos/trust", *n.qos_trust + "\n");
}

void sysfs_tree::rdma(const std::string& fn_kpath, const std::string& bdf, const std::string& name,
                      const port_spec& p) {
  const std::string d = fn_kpath + "/infiniband/" + name;
  mkdirs(d);
  kernel_device_link(d + "/device", bdf);
  symlink("/sys/class/infiniband/" + name, d);
  const std::string pd = d + "/ports/" + std::to_string(p.port);
  write(pd + "/state", p.state + "\n");
  write(pd + "/phys_state", p.phys_state + "\n");
  write(pd + "/link_layer", p.link_layer + "\n");
  for (int i = 0; i < p.gid_table_len; ++i) {
    const std::string is = std::to_string(i);
    const gid_spec* g = nullptr;
    for (const auto& x : p.gids) {
      if (x.index == i) g = &x;
    }
    // Unpopulated entries read as zero GIDs; their types/ndevs answer EINVAL on a real kernel,
    // which the tree models by leaving the files out.
    write(pd + "/gids/" + is, (g ? g->gid : "0000:0000:0000:0000:0000:0000:0000:0000") + "\n");
    mkdirs(pd + "/gid_attrs/types");
    mkdirs(pd + "/gid_attrs/ndevs");
    if (g != nullptr) {
      write(pd + "/gid_attrs/types/" + is, g->type + "\n");
      write(pd + "/gid_attrs/ndevs/" + is, g->netdev + "\n");
    }
  }
  if (p.traffic_class) {
    write(d + "/tc/" + std::to_string(p.port) + "/traffic_class",
          "Global tclass=" + std::to_string(*p.traffic_class) + "\n");
  }
  if (p.default_roce_tos) {
    write("/sys/kernel/config/rdma_cm/" + name + "/ports/" + std::to_string(p.port) +
              "/default_roce_tos",
          std::to_string(*p.default_roce_tos) + "\n");
  }
}

void sysfs_tree::nic(const pci_node& parent, const nic_spec& s) {
  function(parent, s.bdf, s.vendor, s.device, s.class_code, s.driver, &s.link);
  const std::string k = parent.kpath + "/" + s.bdf;
  if (s.net) netdev(k, s.bdf, *s.net);
  if (!s.rdma.empty()) rdma(k, s.bdf, s.rdma, s.port);
  if (s.total_vfs) {
    write(k + "/sriov_totalvfs", std::to_string(*s.total_vfs) + "\n");
    write(k + "/sriov_numvfs", std::to_string(s.vfs.size()) + "\n");
    for (std::size_t i = 0; i < s.vfs.size(); ++i) {
      const vf_spec& v = s.vfs[i];
      // VFs sit beside their PF under the same bridge; the kernel links them both ways.
      function(parent, v.bdf, s.vendor, s.vf_device, s.class_code, s.driver, nullptr);
      const std::string vk = parent.kpath + "/" + v.bdf;
      symlink(k + "/virtfn" + std::to_string(i), vk);
      symlink(vk + "/physfn", k);
      if (!v.netdev.empty()) {
        netdev_spec n;
        n.name = v.netdev;
        n.ecn = false;
        n.mtu = 1500;
        netdev(vk, v.bdf, n);
      }
      if (!v.rdma.empty()) {
        port_spec p;
        p.gids = {};
        rdma(vk, v.bdf, v.rdma, p);
      }
    }
  }
}

}  // namespace shoal::netsetup::testing
