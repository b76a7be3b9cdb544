#include "netsetup/validate.h"

#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "json_text.h"
#include "netsetup/affinity.h"
#include "netsetup/plan.h"

namespace shoal::netsetup {
namespace {

struct collector {
  std::vector<check_result>& out;
  const std::string& node;
  void add(std::string name, severity sev, check_status st, std::string subject,
           std::string message) {
    out.push_back(
        check_result{std::move(name), sev, st, node, std::move(subject), std::move(message)});
  }
  void pass(std::string name, std::string subject, std::string msg, severity s = severity::error) {
    add(std::move(name), s, check_status::pass, std::move(subject), std::move(msg));
  }
  void fail(std::string name, std::string subject, std::string msg, severity s = severity::error) {
    add(std::move(name), s, check_status::fail, std::move(subject), std::move(msg));
  }
  void skip(std::string name, std::string subject, std::string msg, severity s = severity::error) {
    add(std::move(name), s, check_status::skip, std::move(subject), std::move(msg));
  }
};

std::string prios(const std::array<bool, 8>& a) {
  std::string s;
  for (int i = 0; i < 8; ++i) {
    if (a[static_cast<std::size_t>(i)]) s += std::string(s.empty() ? "" : ",") + std::to_string(i);
  }
  return s.empty() ? "none" : s;
}

std::string speed_text(const std::optional<double>& s) {
  if (!s) return "?";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g GT/s", *s);
  return buf;
}

// Priority a DSCP classifies to under a node's APP table (explicit entry, else the mlx5/E810
// default grouping DSCP >> 3). -1 when entries conflict.
int priority_of(const std::vector<std::pair<int, int>>& map, int dscp) {
  std::set<int> p;
  for (auto [d, pr] : map) {
    if (d == dscp) p.insert(pr);
  }
  if (p.empty()) return dscp >> 3;
  return p.size() == 1 ? *p.begin() : -1;
}

// "10.0.0.1" → 0x0a000001; nullopt for anything else (documents from peers are untrusted).
std::optional<std::uint32_t> parse_ipv4(std::string_view s) {
  std::uint32_t ip = 0;
  std::size_t pos = 0;
  for (int part_no = 0; part_no < 4; ++part_no) {
    std::size_t dot = s.find('.', pos);
    const bool last = part_no == 3;
    if (last != (dot == std::string_view::npos)) return std::nullopt;
    if (last) dot = s.size();
    std::string_view part = s.substr(pos, dot - pos);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || part.size() > 3 || ec != std::errc{} || p != part.data() + part.size() ||
        v > 255) {
      return std::nullopt;
    }
    ip = (ip << 8) | v;
    pos = dot + 1;
  }
  return ip;
}

void check_pcie(collector& c, const pci_function& f, const std::string& what) {
  const auto& l = f.link;
  if (!l.current_width || !l.max_width || !l.current_speed_gts || !l.max_speed_gts) {
    c.skip("pcie.link", f.bdf, what + ": the kernel reports no link speed or width");
    return;
  }
  const bool width_ok = *l.current_width >= *l.max_width;
  const bool speed_ok = *l.current_speed_gts + 1e-9 >= *l.max_speed_gts;
  std::string state = what + " at x" + std::to_string(*l.current_width) + " " +
                      speed_text(l.current_speed_gts) + " (capable of x" +
                      std::to_string(*l.max_width) + " " + speed_text(l.max_speed_gts) + ")";
  if (width_ok && speed_ok) {
    c.pass("pcie.link", f.bdf, state);
  } else {
    c.fail("pcie.link", f.bdf,
           "degraded PCIe link: " + state + "; reseat the card or check the riser and slot");
  }
}

void check_qos(collector& c, const netdev_info& nd, const policy& pol) {
  const auto& q = nd.qos;
  const std::string& n = nd.name;
  if (!q.trust) {
    c.fail("qos.trust", n, "trust mode unreadable (no qos/trust file and dcb apptrust failed)");
  } else if (*q.trust == pol.trust) {
    c.pass("qos.trust", n, "trust " + *q.trust);
  } else {
    c.fail("qos.trust", n,
           "trust is " + (q.trust->empty() ? "none" : *q.trust) + ", want " + pol.trust +
               ": RoCE lands on the wrong priority");
  }
  if (!q.dscp_prio) {
    c.fail("qos.dscp_map", n, "DSCP map unreadable (dcb app show failed)");
  } else {
    const int got = priority_of(*q.dscp_prio, pol.data_dscp());
    bool explicit_entry = false;
    for (auto [d, p] : *q.dscp_prio) explicit_entry = explicit_entry || d == pol.data_dscp();
    if (got == pol.pfc_priority && explicit_entry) {
      c.pass("qos.dscp_map", n,
             "DSCP " + std::to_string(pol.data_dscp()) + " -> priority " + std::to_string(got));
    } else if (!explicit_entry) {
      c.fail("qos.dscp_map", n,
             "no APP entry for DSCP " + std::to_string(pol.data_dscp()) +
                 " (relies on the driver default); want priority " +
                 std::to_string(pol.pfc_priority));
    } else {
      c.fail("qos.dscp_map", n,
             "DSCP " + std::to_string(pol.data_dscp()) + " -> priority " +
                 (got < 0 ? "conflicting" : std::to_string(got)) + ", want " +
                 std::to_string(pol.pfc_priority));
    }
  }
  if (!q.pfc) {
    c.fail("qos.pfc", n, "PFC state unreadable (dcb pfc show failed)");
  } else {
    std::array<bool, 8> want{};
    want[static_cast<std::size_t>(pol.pfc_priority)] = true;
    if (*q.pfc == want) {
      c.pass("qos.pfc", n, "PFC on priority " + prios(*q.pfc) + " only");
    } else if (!(*q.pfc)[static_cast<std::size_t>(pol.pfc_priority)]) {
      c.fail("qos.pfc", n,
             "PFC is on " + prios(*q.pfc) + " but off on priority " +
                 std::to_string(pol.pfc_priority) + ": RoCE is lossy");
    } else {
      c.fail("qos.pfc", n,
             "PFC is on " + prios(*q.pfc) + "; want priority " + std::to_string(pol.pfc_priority) +
                 " only");
    }
  }
  if (!pol.disable_global_pause) {
    c.skip("qos.global_pause", n, "the policy leaves global pause alone");
  } else if (!q.pause) {
    c.fail("qos.global_pause", n, "global pause unreadable (ethtool -a failed)");
  } else if (q.pause->rx || q.pause->tx) {
    c.fail("qos.global_pause", n,
           std::string("global pause is on (rx ") + (q.pause->rx ? "on" : "off") + ", tx " +
               (q.pause->tx ? "on" : "off") + ")");
  } else {
    c.pass("qos.global_pause", n, "global pause off");
  }
  const auto ep = static_cast<std::size_t>(pol.ecn_priority);
  if (!nd.ecn.np || !nd.ecn.rp) {
    c.fail("ecn.enabled", n, "no ECN knobs (ecn/roce_np, ecn/roce_rp) on this netdev");
  } else if ((*nd.ecn.np)[ep] && (*nd.ecn.rp)[ep]) {
    c.pass("ecn.enabled", n, "ECN on priority " + std::to_string(pol.ecn_priority));
  } else {
    c.fail("ecn.enabled", n,
           std::string("ECN on priority ") + std::to_string(pol.ecn_priority) +
               ": notification point " + ((*nd.ecn.np)[ep] ? "on" : "off") + ", reaction point " +
               ((*nd.ecn.rp)[ep] ? "on" : "off"));
  }
}

void check_port(collector& c, const rdma_device& d, const rdma_port& p, const policy& pol) {
  const std::string subject = d.name + " port " + std::to_string(p.port);
  if (p.roce_v2_ipv4_index) {
    c.pass("roce.gid", subject,
           "RoCE v2 IPv4 GID at index " + std::to_string(*p.roce_v2_ipv4_index) + " (" +
               p.roce_v2_ipv4 + ") on " + p.netdev);
  } else {
    std::string seen;
    for (const auto& g : p.gids) {
      if (seen.size() > 200) break;
      seen += std::string(seen.empty() ? "" : "; ") + std::to_string(g.index) + " " + g.type +
              " on " + (g.netdev.empty() ? "?" : g.netdev);
    }
    c.fail("roce.gid", subject,
           "no RoCE v2 IPv4 GID on " + (p.netdev.empty() ? std::string("its netdev") : p.netdev) +
               " (table: " + (seen.empty() ? "empty" : seen) +
               "); give the netdev an IPv4 address");
  }
  if (pol.rdma_cm_tos < 0) {
    c.skip("roce.default_tos", subject, "the policy leaves the RDMA-CM ToS alone",
           severity::warning);
  } else if (p.default_roce_tos == pol.rdma_cm_tos) {
    c.pass("roce.default_tos", subject, "RDMA-CM default ToS " + std::to_string(pol.rdma_cm_tos),
           severity::warning);
  } else {
    c.fail("roce.default_tos", subject,
           "RDMA-CM default ToS is " +
               (p.default_roce_tos ? std::to_string(*p.default_roce_tos) : std::string("unset")) +
               ", want " + std::to_string(pol.rdma_cm_tos),
           severity::warning);
  }
}

void check_sriov(collector& c, const nic_info& nic, const policy& pol) {
  const std::string& bdf = nic.pci.bdf;
  if (nic.is_vf) {
    c.pass("sriov.vfs_available", bdf, "this function is a VF given to this machine");
    return;
  }
  if (pol.vfs_per_pf == 0) {
    c.skip("sriov.vfs_available", bdf, "the policy leaves SR-IOV alone");
    return;
  }
  if (!nic.sriov) {
    c.fail("sriov.vfs_available", bdf, "no SR-IOV capability");
    return;
  }
  const auto& s = *nic.sriov;
  int free = 0;
  for (const auto& vf : s.vfs) free += vf.netdevs.empty() ? 0 : 1;
  if (s.num_vfs < pol.vfs_per_pf) {
    c.fail("sriov.vfs_available", bdf,
           std::to_string(s.num_vfs) + " VFs exist (firmware allows " +
               std::to_string(s.total_vfs) + "), policy wants " + std::to_string(pol.vfs_per_pf));
  } else if (free < pol.min_free_vfs) {
    c.fail("sriov.vfs_available", bdf,
           "VFs exhausted: " + std::to_string(s.num_vfs - free) + " of " +
               std::to_string(s.num_vfs) + " in use, need " + std::to_string(pol.min_free_vfs) +
               " free");
  } else {
    c.pass("sriov.vfs_available", bdf,
           std::to_string(free) + " of " + std::to_string(s.num_vfs) + " VFs free");
  }
}

// What validate_cluster gathers from every node before it compares them.
struct cluster_survey {
  // A value seen on the nodes → the nodes it was seen on.
  using groups = std::map<std::string, std::set<std::string>>;
  groups mtus;        // MTU → nodes
  groups qos;         // QoS signature → nodes
  groups lossless;    // lossless priority → nodes
  groups rail_count;  // number of rails → nodes
  std::vector<std::string> gid_problems;
  std::map<std::string, std::string> ip_owner;  // IPv4 → node/port
  std::map<int, std::map<std::uint32_t, std::set<std::string>>> rail_subnets;
  std::set<std::string> qos_unknown;
};

// One managed netdev: its MTU, and its QoS signature and lossless priority when visible (not a
// VF, trust, PFC and DSCP map readable).
void survey_netdev(cluster_survey& s, const node_inventory& inv, const netdev_info& nd,
                   const policy& pol) {
  s.mtus[std::to_string(nd.mtu)].insert(inv.node);
  const nic_info* nic = nd.pci.empty() ? nullptr : inv.find_nic(nd.pci);
  if ((nic != nullptr && nic->is_vf) || !nd.qos.trust || !nd.qos.pfc || !nd.qos.dscp_prio) {
    s.qos_unknown.insert(inv.node);
    return;
  }
  const auto ep = static_cast<std::size_t>(pol.ecn_priority);
  std::string sig = "trust " + *nd.qos.trust + ", DSCP " + std::to_string(pol.data_dscp()) + "->" +
                    std::to_string(priority_of(*nd.qos.dscp_prio, pol.data_dscp())) +
                    ", CNP DSCP " + std::to_string(pol.cnp_dscp) + "->" +
                    std::to_string(priority_of(*nd.qos.dscp_prio, pol.cnp_dscp)) + ", PFC " +
                    prios(*nd.qos.pfc) + ", ECN " +
                    (nd.ecn.np && nd.ecn.rp && (*nd.ecn.np)[ep] && (*nd.ecn.rp)[ep] ? "on" : "off");
  s.qos[sig].insert(inv.node);
  // The priority the job's traffic class lands on must be the one with PFC.
  const int lands = priority_of(*nd.qos.dscp_prio, pol.data_dscp());
  std::string l = "ToS " + std::to_string(pol.traffic_class) + " -> priority " +
                  std::to_string(lands) + ", PFC on " + prios(*nd.qos.pfc);
  s.lossless[l].insert(inv.node);
}

// One node's rails: how many, and each RDMA device's RoCE v2 IPv4 GID (present, distinct, an
// address, and its subnet per rail when the policy names a prefix).
void survey_rails(cluster_survey& s, const node_inventory& inv, const policy& pol) {
  auto rails = assign_rails(inv);
  std::set<int> rail_ids;
  for (const auto& r : rails) rail_ids.insert(r.index);
  s.rail_count[std::to_string(rail_ids.size())].insert(inv.node);
  std::set<std::string> seen_dev;
  for (const auto& r : rails) {
    if (!seen_dev.insert(r.rdma_device).second) continue;
    const rdma_device* d = inv.find_rdma(r.rdma_device);
    const rdma_port* port = nullptr;
    if (d != nullptr) {
      for (const auto& p : d->ports) {
        if (p.port == r.port) port = &p;
      }
    }
    const std::string where = inv.node + " " + r.rdma_device;
    if (port == nullptr || !port->roce_v2_ipv4_index) {
      s.gid_problems.push_back(where + " has no RoCE v2 IPv4 GID");
      continue;
    }
    auto [it, fresh] = s.ip_owner.emplace(port->roce_v2_ipv4, where);
    if (!fresh) {
      s.gid_problems.push_back(port->roce_v2_ipv4 + " is used by " + it->second + " and " + where);
    }
    auto ip = parse_ipv4(port->roce_v2_ipv4);
    if (!ip) {
      s.gid_problems.push_back(where + " reports GID address \"" +
                               port->roce_v2_ipv4.substr(0, 40) + "\", not an IPv4 address");
      continue;
    }
    if (pol.gid_subnet_prefix > 0) {
      const std::uint32_t mask =
          pol.gid_subnet_prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> pol.gid_subnet_prefix);
      std::uint32_t net = *ip & mask;
      s.rail_subnets[r.index][net].insert(inv.node);
    }
  }
}

// "value on node node; value on node" for a failure message.
std::string describe_groups(const cluster_survey::groups& m) {
  std::string s;
  for (const auto& [k, ns] : m) {
    s += std::string(s.empty() ? "" : "; ") + k + " on";
    for (const auto& n : ns) s += " " + n;
  }
  return s;
}

// Whether on every node's managed netdevs the traffic class lands on a PFC-enabled priority.
bool traffic_class_lossless(std::span<const node_inventory> nodes, const policy& pol) {
  bool ok = true;
  for (const auto& inv : nodes) {
    for (const auto& name : managed_netdevs(inv, pol)) {
      const netdev_info* nd = inv.find_netdev(name);
      if (nd == nullptr || !nd->qos.pfc || !nd->qos.dscp_prio) continue;
      const int lands = priority_of(*nd->qos.dscp_prio, pol.data_dscp());
      if (lands < 0 || !(*nd->qos.pfc)[static_cast<std::size_t>(lands)]) ok = false;
    }
  }
  return ok;
}

// cluster.qos and cluster.priority: one QoS signature, and one lossless priority that the
// traffic class lands on, on every node where QoS is visible.
void report_qos(collector& c, const cluster_survey& s, std::span<const node_inventory> nodes,
                const policy& pol) {
  if (s.qos.empty()) {
    c.skip("cluster.qos", "cluster", "QoS not visible on any node (VFs)");
    c.skip("cluster.priority", "cluster", "QoS not visible on any node (VFs)");
    return;
  }
  std::string unknown;
  for (const auto& n : s.qos_unknown) unknown += " " + n;
  const std::string note = unknown.empty() ? "" : " (not visible on" + unknown + ")";
  if (s.qos.size() == 1) {
    c.pass("cluster.qos", "cluster", s.qos.begin()->first + note);
  } else {
    c.fail("cluster.qos", "cluster", "QoS differs: " + describe_groups(s.qos) + note);
  }
  // And on that one setting the traffic class must land on the PFC priority.
  bool lossless_ok = s.lossless.size() == 1 && traffic_class_lossless(nodes, pol);
  if (lossless_ok) {
    c.pass("cluster.priority", "cluster", s.lossless.begin()->first + " on every node" + note);
  } else {
    c.fail("cluster.priority", "cluster",
           "the lossless priority is not the same on every node: " + describe_groups(s.lossless) +
               note);
  }
}

// cluster.gid: every rail's GIDs present, distinct, IPv4, and each rail in one subnet.
void report_gids(collector& c, cluster_survey& s, const policy& pol) {
  for (const auto& [rail, subnets] : s.rail_subnets) {
    if (subnets.size() > 1) {
      s.gid_problems.push_back("rail " + std::to_string(rail) + " spans " +
                               std::to_string(subnets.size()) + " /" +
                               std::to_string(pol.gid_subnet_prefix) + " subnets");
    }
  }
  if (s.gid_problems.empty()) {
    c.pass("cluster.gid", "cluster",
           std::to_string(s.ip_owner.size()) + " RoCE v2 IPv4 GIDs, all present and distinct");
  } else {
    std::string msg;
    for (const auto& p : s.gid_problems) msg += std::string(msg.empty() ? "" : "; ") + p;
    c.fail("cluster.gid", "cluster", msg);
  }
}

}  // namespace

std::string_view to_string(severity s) { return s == severity::error ? "error" : "warning"; }

std::string_view to_string(check_status s) {
  switch (s) {
    case check_status::pass:
      return "pass";
    case check_status::fail:
      return "fail";
    case check_status::skip:
      return "skip";
  }
  return "skip";
}

std::vector<check_result> validate_node(const node_inventory& inv, const policy& pol) {
  std::vector<check_result> out;
  collector c{out, inv.node};
  std::set<std::string> seen_nics;
  for (const auto& name : managed_netdevs(inv, pol)) {
    const netdev_info* nd = inv.find_netdev(name);
    if (nd == nullptr) {
      c.fail("link.up", name, "no such netdev");
      continue;
    }
    const nic_info* nic = nd->pci.empty() ? nullptr : inv.find_nic(nd->pci);
    const bool vf = nic != nullptr && nic->is_vf;
    std::string port_state;
    bool ports_ok = true;
    if (nic != nullptr) {
      for (const auto& dn : nic->rdma_devices) {
        const rdma_device* d = inv.find_rdma(dn);
        if (d == nullptr) continue;
        for (const auto& p : d->ports) {
          const bool ok = (p.state.empty() || p.state == "ACTIVE") &&
                          (p.phys_state.empty() || p.phys_state == "LinkUp");
          ports_ok = ports_ok && ok;
          if (!ok)
            port_state +=
                " " + d->name + "/" + std::to_string(p.port) + " " + p.state + " " + p.phys_state;
        }
      }
    }
    if (nd->operstate == "up" && ports_ok) {
      c.pass("link.up", name,
             "up" + (nd->speed_mbps ? " at " + std::to_string(*nd->speed_mbps) + " Mb/s" : ""));
    } else {
      c.fail("link.up", name,
             "link is " + nd->operstate + (nd->admin_up ? "" : " (administratively down)") +
                 (port_state.empty() ? "" : "; RDMA port" + port_state));
    }
    if (nd->mtu == pol.mtu) {
      c.pass("link.mtu", name, "MTU " + std::to_string(nd->mtu));
    } else {
      c.fail("link.mtu", name,
             "MTU " + std::to_string(nd->mtu) + ", want " + std::to_string(pol.mtu));
    }
    if (vf) {
      for (const char* n :
           {"qos.trust", "qos.dscp_map", "qos.pfc", "qos.global_pause", "ecn.enabled"}) {
        c.skip(n, name, "a VF: QoS and ECN are set on the host's PF and not visible here");
      }
    } else {
      check_qos(c, *nd, pol);
    }
    if (nic != nullptr && seen_nics.insert(nic->pci.bdf).second) {
      for (const auto& dn : nic->rdma_devices) {
        if (const rdma_device* d = inv.find_rdma(dn)) {
          for (const auto& p : d->ports) check_port(c, *d, p, pol);
        }
      }
      check_sriov(c, *nic, pol);
      check_pcie(c, nic->pci, "NIC " + name);
    }
  }
  const path_type limit = parse_path_type(pol.max_gpu_nic_distance).value_or(path_type::pxb);
  auto rails = assign_rails(inv);
  for (const auto& g : inv.gpus) {
    const rail* r = nullptr;
    for (const auto& x : rails) {
      if (x.gpu == g.bdf) r = &x;
    }
    if (r == nullptr) {
      c.fail("topology.gpu_nic", g.bdf, "no RDMA NIC for this GPU", severity::warning);
    } else if (r->path <= limit) {
      c.pass("topology.gpu_nic", g.bdf,
             "rail " + std::to_string(r->index) + ": " + r->rdma_device + " (" + r->netdev +
                 ") at " + std::string(to_string(r->path)),
             severity::warning);
    } else {
      c.fail("topology.gpu_nic", g.bdf,
             "nearest NIC " + r->rdma_device + " is " + std::string(to_string(r->path)) +
                 ", farther than " + pol.max_gpu_nic_distance + ": no GPUDirect RDMA",
             severity::warning);
    }
    check_pcie(c, g, "GPU");
  }
  return out;
}

std::vector<check_result> validate_cluster(std::span<const node_inventory> nodes,
                                           const policy& pol) {
  std::vector<check_result> out;
  static const std::string cluster = "cluster";
  collector c{out, cluster};
  if (nodes.size() < 2) {
    c.skip("cluster.mtu", "cluster", "fewer than two nodes");
    return out;
  }
  cluster_survey s;
  for (const auto& inv : nodes) {
    for (const auto& name : managed_netdevs(inv, pol)) {
      if (const netdev_info* nd = inv.find_netdev(name)) survey_netdev(s, inv, *nd, pol);
    }
    survey_rails(s, inv, pol);
  }
  if (s.mtus.size() == 1) {
    c.pass("cluster.mtu", "cluster", "MTU " + s.mtus.begin()->first + " on every node");
  } else {
    c.fail("cluster.mtu", "cluster",
           "MTUs differ: " + describe_groups(s.mtus) + " (NCCL would use the smallest)");
  }
  report_qos(c, s, nodes, pol);
  report_gids(c, s, pol);
  if (s.rail_count.size() == 1) {
    c.pass("cluster.rails", "cluster", s.rail_count.begin()->first + " rails on every node",
           severity::warning);
  } else {
    c.fail("cluster.rails", "cluster", "rail counts differ: " + describe_groups(s.rail_count),
           severity::warning);
  }
  return out;
}

bool passed(const std::vector<check_result>& results) {
  for (const auto& r : results) {
    if (r.status == check_status::fail && r.sev == severity::error) return false;
  }
  return true;
}

nlohmann::json to_json(const std::vector<check_result>& results) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : results) {
    arr.push_back(nlohmann::json{{"name", r.name},
                                 {"severity", std::string(to_string(r.sev))},
                                 {"status", std::string(to_string(r.status))},
                                 {"node", r.node},
                                 {"subject", r.subject},
                                 {"message", r.message}});
  }
  detail::make_printable(arr);
  return arr;
}

}  // namespace shoal::netsetup
