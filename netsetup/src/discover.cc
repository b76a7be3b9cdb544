#include "netsetup/discover.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "netsetup/errc.h"
#include "netsetup/tool_output.h"

namespace shoal::netsetup {
namespace {

constexpr std::string_view pci_devices = "/sys/bus/pci/devices/";
constexpr std::size_t max_gids = 1024;

std::unexpected<error> garbage(std::string where, std::string why) {
  return fail(make_error_code(errc::sysfs_garbage), where + ": " + why);
}

bool is_missing(const error& e) { return e.code == make_error_code(errc::sysfs_missing); }

std::string basename_of(std::string_view p) {
  auto s = p.rfind('/');
  return std::string(s == std::string_view::npos ? p : p.substr(s + 1));
}

std::optional<int> small_index(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v < 0 || v > 1 << 20) {
    return std::nullopt;
  }
  return v;
}

// Integer attribute that may be absent, or unreadable on some kernels and devices (EINVAL from
// `speed` on a link that is down, link attributes of VFs); content that is present must parse.
result<std::optional<std::int64_t>> read_lenient_int(const sysfs& fs, const std::string& p) {
  auto t = fs.read(p);
  if (!t) {
    if (t.error().code == make_error_code(errc::sysfs_missing) ||
        t.error().code == make_error_code(errc::sysfs_io)) {
      return std::optional<std::int64_t>{};
    }
    return fail(t.error());
  }
  auto v = parse_int(*t, fs.path(p));
  if (!v) return fail(v.error());
  return std::optional<std::int64_t>{*v};
}

status read_link(const sysfs& fs, const std::string& base, pcie_link& link) {
  auto speed = [&](const char* name, std::optional<double>& out) -> status {
    auto t = fs.read(base + name);
    if (!t) {
      if (is_missing(t.error()) || t.error().code == make_error_code(errc::sysfs_io)) return {};
      return fail(t.error());
    }
    auto v = parse_link_speed(*t, fs.path(base + name));
    if (!v) return fail(v.error());
    out = *v;
    return {};
  };
  auto width = [&](const char* name, std::optional<int>& out) -> status {
    auto v = read_lenient_int(fs, base + name);
    if (!v) return fail(v.error());
    if (*v) {
      if (**v < 0 || **v > 64) {
        return garbage(fs.path(base + name), "link width " + std::to_string(**v) + " is not 0..64");
      }
      // 0 is what the kernel prints for a function without a link of its own.
      if (**v > 0) out = static_cast<int>(**v);
    }
    return {};
  };
  if (auto s = speed("/current_link_speed", link.current_speed_gts); !s) return s;
  if (auto s = speed("/max_link_speed", link.max_speed_gts); !s) return s;
  if (auto s = width("/current_link_width", link.current_width); !s) return s;
  return width("/max_link_width", link.max_width);
}

// Where a function sits: /sys/bus/pci/devices/<bdf> links to
// /sys/devices/pci<domain>:<bus>/<root port>/.../<bdf>.
result<pci_function> read_function(const sysfs& fs, const std::string& bdf) {
  const std::string base = std::string(pci_devices) + bdf;
  pci_function f;
  f.bdf = bdf;
  auto kpath = fs.resolve(base);
  if (!kpath) return fail(kpath.error());
  std::vector<std::string> parts;
  {
    std::string_view k = *kpath;
    if (!k.starts_with("/sys/devices/")) {
      return garbage(fs.path(base), "links to " + *kpath + ", not into /sys/devices");
    }
    k.remove_prefix(std::string_view("/sys/devices/").size());
    std::size_t i = 0;
    while (i < k.size()) {
      std::size_t j = k.find('/', i);
      if (j == std::string_view::npos) j = k.size();
      parts.emplace_back(k.substr(i, j - i));
      i = j + 1;
    }
  }
  if (parts.size() < 2 || !parts.front().starts_with("pci") || parts.back() != bdf) {
    return garbage(fs.path(base), "links to " + *kpath + ", not a PCI device path");
  }
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (!is_bdf(parts[i])) {
      return garbage(fs.path(base),
                     "links to " + *kpath + ": \"" + parts[i] + "\" is not a PCI address");
    }
  }
  f.root_complex = parts.front();
  f.bridges.assign(parts.begin() + 1, parts.end() - 1);
  auto vendor = fs.read_hex(base + "/vendor");
  if (!vendor) return fail(vendor.error());
  auto device = fs.read_hex(base + "/device");
  if (!device) return fail(device.error());
  auto cls = fs.read_hex(base + "/class");
  if (!cls) return fail(cls.error());
  f.vendor = *vendor;
  f.device = *device;
  f.class_code = *cls;
  auto numa = fs.read_int_optional(base + "/numa_node");
  if (!numa) return fail(numa.error());
  if (*numa) {
    if (**numa < -1 || **numa > 4095) {
      return garbage(fs.path(base + "/numa_node"), std::to_string(**numa) + " is not a NUMA node");
    }
    f.numa_node = static_cast<int>(**numa);
  }
  if (auto s = read_link(fs, base, f.link); !s) return fail(s.error());
  auto drv = fs.link_basename(base + "/driver");
  if (!drv) return fail(drv.error());
  f.driver = drv->value_or("");
  return f;
}

// Entries of <dev>/net or <dev>/infiniband: the netdevs or RDMA devices of a function.
result<std::vector<std::string>> children(const sysfs& fs, const std::string& base,
                                          const char* sub) {
  return fs.list_optional(base + "/" + sub);
}

result<std::optional<sriov_info>> read_sriov(const sysfs& fs, const std::string& bdf) {
  const std::string base = std::string(pci_devices) + bdf;
  auto total = fs.read_int_optional(base + "/sriov_totalvfs");
  if (!total) return fail(total.error());
  if (!*total) return std::optional<sriov_info>{};
  sriov_info s;
  if (**total < 0 || **total > 65535) {
    return garbage(fs.path(base + "/sriov_totalvfs"), "not a VF count");
  }
  s.total_vfs = static_cast<int>(**total);
  auto num = fs.read_int(base + "/sriov_numvfs");
  if (!num) return fail(num.error());
  if (*num < 0 || *num > 65535) return garbage(fs.path(base + "/sriov_numvfs"), "not a VF count");
  s.num_vfs = static_cast<int>(*num);
  auto entries = fs.list(base);
  if (!entries) return fail(entries.error());
  for (const auto& e : *entries) {
    if (!e.starts_with("virtfn")) continue;
    auto idx = small_index(std::string_view(e).substr(6));
    if (!idx) continue;
    auto vpath = fs.resolve(base + "/" + e);
    if (!vpath) return fail(vpath.error());
    vf_info vf;
    vf.index = *idx;
    vf.bdf = basename_of(*vpath);
    if (!is_bdf(vf.bdf)) {
      return garbage(fs.path(base + "/" + e), "links to " + *vpath + ", not a PCI function");
    }
    const std::string vbase = std::string(pci_devices) + vf.bdf;
    auto dev = fs.read_hex(vbase + "/device");
    if (!dev) return fail(dev.error());
    vf.device = *dev;
    auto drv = fs.link_basename(vbase + "/driver");
    if (!drv) return fail(drv.error());
    vf.driver = drv->value_or("");
    auto net = children(fs, vbase, "net");
    if (!net) return fail(net.error());
    vf.netdevs = std::move(*net);
    auto ib = children(fs, vbase, "infiniband");
    if (!ib) return fail(ib.error());
    vf.rdma_devices = std::move(*ib);
    s.vfs.push_back(std::move(vf));
  }
  std::sort(s.vfs.begin(), s.vfs.end(),
            [](const vf_info& a, const vf_info& b) { return a.index < b.index; });
  return std::optional<sriov_info>{std::move(s)};
}

// Runs a tool for discovery. Failures become warnings; a tool that is not installed is reported
// once and not tried again.
class tool_probe {
 public:
  tool_probe(command_runner& r, const discover_options& o, std::vector<std::string>& warnings)
      : runner_(r), opts_(o), warnings_(warnings) {}

  std::optional<std::string> run(std::vector<std::string> argv) {
    if (!opts_.run_tools || missing_.contains(argv[0])) return std::nullopt;
    auto r = runner_.run(argv, opts_.tool_timeout);
    if (!r) {
      if (r.error().message.find("cannot run") != std::string::npos) {
        missing_.insert(argv[0]);
        warnings_.push_back(r.error().message +
                            " (tool unavailable; QoS state it reports is "
                            "left empty)");
      } else {
        warnings_.push_back(r.error().message);
      }
      return std::nullopt;
    }
    if (r->exit_code != 0) {
      std::string e = r->err.substr(0, r->err.find('\n'));
      warnings_.push_back(join_argv(argv) + ": exit " + std::to_string(r->exit_code) +
                          (e.empty() ? "" : ": " + e));
      return std::nullopt;
    }
    return std::move(r->out);
  }

  template <class T>
  std::optional<T> parsed(const std::vector<std::string>& argv,
                          result<T> (*parse)(std::string_view, std::string_view)) {
    auto out = run(argv);
    if (!out) return std::nullopt;
    auto v = parse(*out, join_argv(argv));
    if (!v) {
      warnings_.push_back(v.error().message);
      return std::nullopt;
    }
    return std::move(*v);
  }

 private:
  command_runner& runner_;
  const discover_options& opts_;
  std::vector<std::string>& warnings_;
  std::set<std::string> missing_;
};

result<std::optional<std::array<bool, 8>>> read_ecn_enable(const sysfs& fs,
                                                           const std::string& dir) {
  if (!fs.is_dir(dir)) return std::optional<std::array<bool, 8>>{};
  std::array<bool, 8> a{};
  for (int p = 0; p < 8; ++p) {
    const std::string f = dir + "/" + std::to_string(p);
    auto v = fs.read_int(f);
    if (!v) return fail(v.error());
    if (*v != 0 && *v != 1)
      return garbage(fs.path(f), "expected 0 or 1, got " + std::to_string(*v));
    a[static_cast<std::size_t>(p)] = *v == 1;
  }
  return std::optional<std::array<bool, 8>>{a};
}

result<std::optional<int>> read_small_optional(const sysfs& fs, const std::string& p, int lo,
                                               int hi) {
  auto v = fs.read_int_optional(p);
  if (!v) return fail(v.error());
  if (!*v) return std::optional<int>{};
  if (**v < lo || **v > hi) {
    return garbage(fs.path(p), std::to_string(**v) + " is outside " + std::to_string(lo) + ".." +
                                   std::to_string(hi));
  }
  return std::optional<int>{static_cast<int>(**v)};
}

result<netdev_info> read_netdev(const sysfs& fs, const std::string& name, tool_probe& tools) {
  const std::string base = "/sys/class/net/" + name;
  netdev_info n;
  n.name = name;
  // The class entry is a link into the device tree; a dangling one is a broken node.
  if (auto r = fs.resolve(base); !r) return fail(r.error());
  auto oper = fs.read(base + "/operstate");
  if (!oper) return fail(oper.error());
  n.operstate = *oper;
  if (n.operstate.empty() || n.operstate.size() > 32) {
    return garbage(fs.path(base + "/operstate"),
                   "expected a state like \"up\", got " + quote_excerpt(n.operstate));
  }
  auto mtu = fs.read_int(base + "/mtu");
  if (!mtu) return fail(mtu.error());
  if (*mtu < 0 || *mtu > (1 << 20)) return garbage(fs.path(base + "/mtu"), "not an MTU");
  n.mtu = static_cast<int>(*mtu);
  auto speed = read_lenient_int(fs, base + "/speed");
  if (!speed) return fail(speed.error());
  if (*speed && **speed > 0 && **speed <= 10'000'000) n.speed_mbps = static_cast<int>(**speed);
  auto addr = fs.read_optional(base + "/address");
  if (!addr) return fail(addr.error());
  n.address = addr->value_or("");
  auto flags = fs.read_optional(base + "/flags");
  if (!flags) return fail(flags.error());
  if (*flags) {
    auto f = parse_hex(**flags, fs.path(base + "/flags"));
    if (!f) return fail(f.error());
    n.admin_up = (*f & 0x1) != 0;
  } else {
    n.admin_up = n.operstate == "up";
  }
  if (auto dev = fs.link_basename(base + "/device"); !dev) {
    return fail(dev.error());
  } else if (*dev) {
    auto target = fs.resolve(base + "/device");
    if (!target) return fail(target.error());
    std::string b = basename_of(*target);
    if (is_bdf(b)) n.pci = b;
  }
  // ECN (mlx5): absent directories mean the driver has no such knobs.
  auto np = read_ecn_enable(fs, base + "/ecn/roce_np/enable");
  if (!np) return fail(np.error());
  n.ecn.np = *np;
  auto rp = read_ecn_enable(fs, base + "/ecn/roce_rp/enable");
  if (!rp) return fail(rp.error());
  n.ecn.rp = *rp;
  auto cnp = read_small_optional(fs, base + "/ecn/roce_np/cnp_dscp", 0, 63);
  if (!cnp) return fail(cnp.error());
  n.ecn.cnp_dscp = *cnp;
  auto cnp_prio = read_small_optional(fs, base + "/ecn/roce_np/cnp_802p_prio", 0, 7);
  if (!cnp_prio) return fail(cnp_prio.error());
  n.ecn.cnp_802p_prio = *cnp_prio;

  // Trust: the mlx5 (MLNX_OFED) sysfs mirror when present, else the kernel's dcb apptrust.
  auto trust = fs.read_optional(base + "/qos/trust");
  if (!trust) return fail(trust.error());
  if (*trust) {
    if (**trust != "dscp" && **trust != "pcp") {
      return garbage(fs.path(base + "/qos/trust"),
                     "expected dscp or pcp, got " + quote_excerpt(**trust));
    }
    n.qos.trust = **trust;
    n.qos.trust_source = "sysfs";
  } else if (auto order = tools.parsed<std::vector<std::string>>(
                 {"dcb", "-j", "apptrust", "show", "dev", name}, parse_dcb_apptrust)) {
    std::string t;
    for (const auto& o : *order) t += std::string(t.empty() ? "" : ",") + o;
    n.qos.trust = t;
    n.qos.trust_source = "dcb";
  }
  if (auto pfc = tools.parsed<dcb_pfc>({"dcb", "-j", "pfc", "show", "dev", name}, parse_dcb_pfc)) {
    n.qos.pfc = pfc->enabled;
  }
  if (auto app = tools.parsed<dcb_app>({"dcb", "-j", "app", "show", "dev", name}, parse_dcb_app)) {
    n.qos.dscp_prio = app->dscp_prio;
  }
  if (auto ets = tools.parsed<dcb_ets>({"dcb", "-j", "ets", "show", "dev", name}, parse_dcb_ets)) {
    n.qos.prio_tc = ets->prio_tc;
  }
  n.qos.pause = tools.parsed<pause_state>({"ethtool", "-a", name}, parse_ethtool_pause);
  return n;
}

bool valid_gid(std::string_view g) {
  if (g.size() != 39) return false;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (i % 5 == 4) {
      if (g[i] != ':') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(g[i]))) {
      return false;
    }
  }
  return true;
}

std::string ipv4_of_gid(std::string_view g) {
  // "0000:0000:0000:0000:0000:ffff:0a00:0001" → 10.0.0.1
  auto byte = [&](std::size_t at) {
    int v = 0;
    std::from_chars(g.data() + at, g.data() + at + 2, v, 16);
    return std::to_string(v);
  };
  return byte(30) + "." + byte(32) + "." + byte(35) + "." + byte(37);
}

// "4: ACTIVE" → "ACTIVE".
result<std::string> state_word(const sysfs& fs, const std::string& p) {
  auto t = fs.read_optional(p);
  if (!t) return fail(t.error());
  if (!*t) return std::string();
  auto colon = (*t)->find(": ");
  if (colon == std::string::npos || colon + 2 >= (*t)->size()) {
    return garbage(fs.path(p), "expected \"<n>: <STATE>\", got " + quote_excerpt(**t));
  }
  return (*t)->substr(colon + 2);
}

result<std::optional<int>> read_traffic_class(const sysfs& fs, const std::string& p) {
  auto t = fs.read_optional(p);
  if (!t) return fail(t.error());
  if (!*t) return std::optional<int>{};
  return parse_traffic_class(**t, fs.path(p));
}

result<rdma_device> read_rdma(const sysfs& fs, const std::string& name, const std::string& bdf,
                              const std::string& netdev) {
  const std::string base = "/sys/class/infiniband/" + name;
  rdma_device d;
  d.name = name;
  d.pci = bdf;
  if (auto r = fs.resolve(base); !r) return fail(r.error());
  if (auto dev = fs.resolve(base + "/device"); !dev) {
    return fail(dev.error());
  } else if (basename_of(*dev) != bdf) {
    return garbage(fs.path(base + "/device"),
                   "links to " + *dev + ", but the device lists it under " + bdf);
  }
  auto ports = fs.list(base + "/ports");
  if (!ports) return fail(ports.error());
  for (const auto& pname : *ports) {
    auto pn = small_index(pname);
    if (!pn || *pn < 1 || *pn > 255) continue;
    rdma_port p;
    p.port = *pn;
    p.netdev = netdev;
    const std::string pb = base + "/ports/" + pname;
    auto st = state_word(fs, pb + "/state");
    if (!st) return fail(st.error());
    p.state = *st;
    auto ph = state_word(fs, pb + "/phys_state");
    if (!ph) return fail(ph.error());
    p.phys_state = *ph;
    auto ll = fs.read_optional(pb + "/link_layer");
    if (!ll) return fail(ll.error());
    p.link_layer = ll->value_or("");
    auto gids = fs.list_optional(pb + "/gids");
    if (!gids) return fail(gids.error());
    std::vector<int> idx;
    for (const auto& g : *gids) {
      if (auto i = small_index(g)) idx.push_back(*i);
    }
    std::sort(idx.begin(), idx.end());
    if (idx.size() > max_gids) idx.resize(max_gids);
    for (int i : idx) {
      const std::string is = std::to_string(i);
      auto gid = fs.read(pb + "/gids/" + is);
      if (!gid) return fail(gid.error());
      if (!valid_gid(*gid)) {
        return garbage(fs.path(pb + "/gids/" + is),
                       "expected a GID like fe80:0000:...:0001, got " + quote_excerpt(*gid));
      }
      std::string lower = *gid;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
      // Unpopulated entries answer EINVAL on `types`: they are not part of the table.
      auto type = fs.read(pb + "/gid_attrs/types/" + is);
      if (!type) continue;
      auto nd = fs.read(pb + "/gid_attrs/ndevs/" + is);
      p.gids.push_back(gid_entry{i, lower, *type, nd ? *nd : std::string()});
    }
    for (const auto& g : p.gids) {
      if (g.type == "RoCE v2" && g.gid.starts_with("0000:0000:0000:0000:0000:ffff:") &&
          !netdev.empty() && g.netdev == netdev) {
        p.roce_v2_ipv4_index = g.index;
        p.roce_v2_ipv4 = ipv4_of_gid(g.gid);
        break;
      }
    }
    auto tos = read_small_optional(
        fs, "/sys/kernel/config/rdma_cm/" + name + "/ports/" + pname + "/default_roce_tos", 0, 255);
    if (!tos) return fail(tos.error());
    p.default_roce_tos = *tos;
    auto tc = read_traffic_class(fs, base + "/tc/" + pname + "/traffic_class");
    if (!tc) return fail(tc.error());
    p.traffic_class = *tc;
    d.ports.push_back(std::move(p));
  }
  std::sort(d.ports.begin(), d.ports.end(),
            [](const rdma_port& a, const rdma_port& b) { return a.port < b.port; });
  return d;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

bool is_bdf(std::string_view s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return s[11] >= '0' && s[11] <= '7';
}

bool is_gpu_class(std::uint32_t vendor, std::uint32_t class_code) {
  const std::uint32_t cls = class_code >> 8;  // base class + subclass
  const bool display = cls == 0x0300 || cls == 0x0302 || cls == 0x0380;
  return display && (vendor == 0x10de || vendor == 0x1002);
}

bool is_nic_class(std::uint32_t class_code) {
  const std::uint32_t cls = class_code >> 8;
  return cls == 0x0200 || cls == 0x0207;
}

namespace {
struct vf_pair {
  std::uint32_t vendor, pf, vf;
};
// sriov-network-operator deploy/configmap.yaml (vendor, PF device id, VF device id).
constexpr vf_pair vf_table[] = {
    {0x15b3, 0x1017, 0x1018},  // ConnectX-5
    {0x15b3, 0x1019, 0x101a},  // ConnectX-5 Ex
    {0x15b3, 0x101b, 0x101c},  // ConnectX-6
    {0x15b3, 0x101d, 0x101e},  // ConnectX-6 Dx
    {0x15b3, 0x1021, 0x101e},  // ConnectX-7
    {0x8086, 0x1592, 0x1889},  // E810-C
    {0x8086, 0x159b, 0x1889},  // E810-XXV
};
}  // namespace

std::uint32_t vf_device_of(std::uint32_t vendor, std::uint32_t pf_device) {
  for (const auto& e : vf_table) {
    if (e.vendor == vendor && e.pf == pf_device) return e.vf;
  }
  return 0;
}

bool is_known_vf_device(std::uint32_t vendor, std::uint32_t device) {
  for (const auto& e : vf_table) {
    if (e.vendor == vendor && e.vf == device) return true;
  }
  return false;
}

result<node_inventory> discover(const sysfs& fs, command_runner& runner,
                                const discover_options& opts) {
  node_inventory inv;
  inv.node = opts.node_name.empty() ? host_name() : opts.node_name;
  auto bdfs = fs.list_optional("/sys/bus/pci/devices");
  if (!bdfs) return fail(bdfs.error());
  if (bdfs->empty()) inv.warnings.push_back(fs.path("/sys/bus/pci/devices") + ": no PCI devices");

  std::vector<nic_info> nics;
  for (const auto& bdf : *bdfs) {
    if (!is_bdf(bdf)) {
      inv.warnings.push_back(fs.path(std::string(pci_devices) + bdf) +
                             ": not a PCI address, skipped");
      continue;
    }
    const std::string base = std::string(pci_devices) + bdf;
    auto cls = fs.read_hex(base + "/class");
    if (!cls) return fail(cls.error());
    auto vendor = fs.read_hex(base + "/vendor");
    if (!vendor) return fail(vendor.error());
    if (is_gpu_class(*vendor, *cls)) {
      auto f = read_function(fs, bdf);
      if (!f) return fail(f.error());
      inv.gpus.push_back(std::move(*f));
    } else if (is_nic_class(*cls)) {
      auto f = read_function(fs, bdf);
      if (!f) return fail(f.error());
      nic_info n;
      n.pci = std::move(*f);
      auto net = children(fs, base, "net");
      if (!net) return fail(net.error());
      n.netdevs = std::move(*net);
      auto ib = children(fs, base, "infiniband");
      if (!ib) return fail(ib.error());
      n.rdma_devices = std::move(*ib);
      if (auto pf = fs.link_basename(base + "/physfn"); !pf) {
        return fail(pf.error());
      } else if (*pf) {
        auto target = fs.resolve(base + "/physfn");
        if (!target) return fail(target.error());
        n.physfn = basename_of(*target);
        n.is_vf = true;
      } else {
        n.is_vf = is_known_vf_device(n.pci.vendor, n.pci.device);
      }
      auto sr = read_sriov(fs, bdf);
      if (!sr) return fail(sr.error());
      n.sriov = std::move(*sr);
      nics.push_back(std::move(n));
    }
  }
  // VFs whose PF is visible are described inside the PF, not as NICs of their own.
  std::set<std::string> nic_bdfs;
  for (const auto& n : nics) nic_bdfs.insert(n.pci.bdf);
  for (auto& n : nics) {
    if (n.is_vf && !n.physfn.empty() && nic_bdfs.contains(n.physfn)) continue;
    inv.nics.push_back(std::move(n));
  }

  tool_probe tools(runner, opts, inv.warnings);
  std::set<std::string> described;
  for (const auto& n : inv.nics) {
    for (const auto& nd : n.netdevs) {
      if (!described.insert(nd).second) continue;
      auto info = read_netdev(fs, nd, tools);
      if (!info) return fail(info.error());
      inv.netdevs.push_back(std::move(*info));
    }
  }
  for (const auto& nd : opts.extra_netdevs) {
    if (described.contains(nd)) continue;
    described.insert(nd);
    if (!fs.exists("/sys/class/net/" + nd)) {
      inv.warnings.push_back(fs.path("/sys/class/net/" + nd) + ": no such netdev");
      continue;
    }
    auto info = read_netdev(fs, nd, tools);
    if (!info) return fail(info.error());
    inv.netdevs.push_back(std::move(*info));
  }
  for (const auto& n : inv.nics) {
    for (const auto& dev : n.rdma_devices) {
      auto d = read_rdma(fs, dev, n.pci.bdf, n.netdevs.empty() ? std::string() : n.netdevs.front());
      if (!d) return fail(d.error());
      inv.rdma.push_back(std::move(*d));
    }
  }
  std::sort(inv.gpus.begin(), inv.gpus.end(),
            [](const pci_function& a, const pci_function& b) { return a.bdf < b.bdf; });
  std::sort(inv.netdevs.begin(), inv.netdevs.end(),
            [](const netdev_info& a, const netdev_info& b) { return a.name < b.name; });
  std::sort(inv.rdma.begin(), inv.rdma.end(),
            [](const rdma_device& a, const rdma_device& b) { return a.name < b.name; });
  return inv;
}

}  // namespace shoal::netsetup
