#include "netsetup/plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "json_text.h"
#include "netsetup/affinity.h"

namespace shoal::netsetup {
namespace {

std::string list_prios(const std::array<bool, 8>& a) {
  std::string s;
  for (int i = 0; i < 8; ++i) {
    if (a[static_cast<std::size_t>(i)]) s += std::string(s.empty() ? "" : ",") + std::to_string(i);
  }
  return s.empty() ? "none" : s;
}

std::string dscp_text(const std::vector<std::pair<int, int>>& m) {
  std::string s;
  for (auto [d, p] : m)
    s += std::string(s.empty() ? "" : " ") + std::to_string(d) + ":" + std::to_string(p);
  return s.empty() ? "no entries" : s;
}

// True when each wanted DSCP maps to exactly the wanted priority and nothing else.
bool dscp_map_ok(const std::vector<std::pair<int, int>>& have,
                 const std::vector<std::pair<int, int>>& want) {
  for (auto [d, p] : want) {
    bool found = false, other = false;
    for (auto [hd, hp] : have) {
      if (hd != d) continue;
      if (hp == p)
        found = true;
      else
        other = true;
    }
    if (!found || other) return false;
  }
  return true;
}

plan_op write_op(std::string subject, std::string what, std::string why, std::string before,
                 std::string path, std::string value, verify_spec v) {
  plan_op op;
  op.k = plan_op::kind::write;
  op.subject = std::move(subject);
  op.what = std::move(what);
  op.why = std::move(why);
  op.before = std::move(before);
  op.path = std::move(path);
  op.value = std::move(value);
  op.verify = std::move(v);
  return op;
}

plan_op command_op(std::string subject, std::string what, std::string why, std::string before,
                   std::vector<std::string> argv, verify_spec v) {
  plan_op op;
  op.k = plan_op::kind::command;
  op.subject = std::move(subject);
  op.what = std::move(what);
  op.why = std::move(why);
  op.before = std::move(before);
  op.argv = std::move(argv);
  op.verify = std::move(v);
  return op;
}

verify_spec file_int(std::string path, std::int64_t v) {
  verify_spec s;
  s.k = verify_spec::kind::file_int;
  s.path = std::move(path);
  s.expect = v;
  return s;
}

void plan_sriov(plan& p, const nic_info& nic, const policy& pol) {
  const std::string& bdf = nic.pci.bdf;
  const int want = pol.vfs_per_pf;
  if (!nic.sriov) {
    p.problems.push_back(bdf + ": no SR-IOV capability (no sriov_totalvfs); cannot create " +
                         std::to_string(want) + " VFs (enable SRIOV_EN in the NIC firmware)");
    return;
  }
  const auto& s = *nic.sriov;
  if (s.total_vfs < want) {
    p.problems.push_back(bdf + ": firmware allows " + std::to_string(s.total_vfs) +
                         " VFs, policy wants " + std::to_string(want) +
                         " (raise NUM_OF_VFS with mlxconfig and reset the NIC)");
    return;
  }
  if (s.num_vfs == want) return;
  const std::string path = "/sys/bus/pci/devices/" + bdf + "/sriov_numvfs";
  if (s.num_vfs != 0) {
    int in_use = 0;
    for (const auto& vf : s.vfs) in_use += vf.netdevs.empty() ? 1 : 0;
    plan_op reset = write_op(bdf, "remove the " + std::to_string(s.num_vfs) + " VFs",
                             "the kernel refuses to change a non-zero VF count directly; " +
                                 std::to_string(in_use) + " of them are in use by pods",
                             std::to_string(s.num_vfs), path, "0", file_int(path, 0));
    reset.disruptive = true;
    p.ops.push_back(std::move(reset));
  }
  p.ops.push_back(write_op(bdf, "create " + std::to_string(want) + " VFs",
                           std::to_string(s.num_vfs) + " VFs exist, the policy wants " +
                               std::to_string(want) + " per rail PF",
                           std::to_string(s.num_vfs), path, std::to_string(want),
                           file_int(path, want)));
}

void plan_qos(plan& p, const netdev_info& nd, const policy& pol) {
  const std::string& n = nd.name;
  const auto& q = nd.qos;
  // Trust.
  if (!q.trust) {
    p.problems.push_back(n +
                         ": trust mode unreadable (no qos/trust, dcb apptrust failed); "
                         "cannot set trust " +
                         pol.trust);
  } else if (*q.trust != pol.trust) {
    verify_spec v;
    v.netdev = n;
    v.text = pol.trust;
    if (q.trust_source == "sysfs") {
      v.k = verify_spec::kind::file_text;
      v.path = "/sys/class/net/" + n + "/qos/trust";
      p.ops.push_back(write_op(n, "set trust " + pol.trust,
                               "trust is " + *q.trust + "; RoCE is classified by " + pol.trust,
                               *q.trust, v.path, pol.trust, v));
    } else {
      v.k = verify_spec::kind::trust;
      p.ops.push_back(command_op(n, "set trust " + pol.trust,
                                 "trust is " + (q.trust->empty() ? "none" : *q.trust) +
                                     "; RoCE is classified by " + pol.trust,
                                 *q.trust, {"dcb", "apptrust", "set", "dev", n, "order", pol.trust},
                                 v));
    }
  }
  // DSCP → priority for data and CNPs.
  std::vector<std::pair<int, int>> want = {{pol.data_dscp(), pol.pfc_priority},
                                           {pol.cnp_dscp, pol.cnp_priority}};
  std::sort(want.begin(), want.end());
  if (!q.dscp_prio) {
    p.problems.push_back(n + ": DSCP map unreadable (dcb app show failed); cannot map DSCP " +
                         std::to_string(pol.data_dscp()) + " to priority " +
                         std::to_string(pol.pfc_priority));
  } else if (!dscp_map_ok(*q.dscp_prio, want)) {
    verify_spec v;
    v.k = verify_spec::kind::dscp_map;
    v.netdev = n;
    v.dscp = want;
    std::vector<std::string> argv = {"dcb", "app", "replace", "dev", n, "dscp-prio"};
    for (auto [d, pr] : want) argv.push_back(std::to_string(d) + ":" + std::to_string(pr));
    p.ops.push_back(command_op(n, "map " + dscp_text(want) + " (dscp:priority)",
                               "the APP table has " + dscp_text(*q.dscp_prio) + "; RoCE (DSCP " +
                                   std::to_string(pol.data_dscp()) +
                                   ") and CNPs need explicit entries",
                               dscp_text(*q.dscp_prio), std::move(argv), v));
  }
  // PFC on the one lossless priority.
  if (!q.pfc) {
    p.problems.push_back(n +
                         ": PFC state unreadable (dcb pfc show failed); cannot enable PFC "
                         "on priority " +
                         std::to_string(pol.pfc_priority));
  } else {
    std::array<bool, 8> want_pfc{};
    want_pfc[static_cast<std::size_t>(pol.pfc_priority)] = true;
    if (*q.pfc != want_pfc) {
      verify_spec v;
      v.k = verify_spec::kind::pfc;
      v.netdev = n;
      v.expect = pol.pfc_priority;
      p.ops.push_back(
          command_op(n, "enable PFC on priority " + std::to_string(pol.pfc_priority) + " only",
                     "PFC is on " + list_prios(*q.pfc) + "; RoCE needs it on priority " +
                         std::to_string(pol.pfc_priority) + " and nowhere else",
                     list_prios(*q.pfc),
                     {"dcb", "pfc", "set", "dev", n, "prio-pfc", "all:off",
                      std::to_string(pol.pfc_priority) + ":on"},
                     v));
    }
  }
  // Global pause.
  if (pol.disable_global_pause) {
    if (!q.pause) {
      p.problems.push_back(n + ": global pause unreadable (ethtool -a failed)");
    } else if (q.pause->rx || q.pause->tx) {
      verify_spec v;
      v.k = verify_spec::kind::pause_off;
      v.netdev = n;
      std::string before =
          std::string("rx ") + (q.pause->rx ? "on" : "off") + " tx " + (q.pause->tx ? "on" : "off");
      p.ops.push_back(
          command_op(n, "turn global pause off",
                     "global pause is " + before +
                         "; it stalls every priority and "
                         "must be off when PFC is used",
                     before, {"ethtool", "-A", n, "autoneg", "off", "rx", "off", "tx", "off"}, v));
    }
  }
}

void plan_ecn(plan& p, const netdev_info& nd, const policy& pol) {
  const std::string& n = nd.name;
  const auto prio = static_cast<std::size_t>(pol.ecn_priority);
  if (!nd.ecn.np || !nd.ecn.rp) {
    p.problems.push_back(n +
                         ": no ECN knobs (ecn/roce_np, ecn/roce_rp); cannot enable ECN on "
                         "priority " +
                         std::to_string(pol.ecn_priority));
    return;
  }
  struct point {
    const char* dir;
    const std::array<bool, 8>& state;
    const char* role;
  };
  for (const point& pt : {point{"roce_np", *nd.ecn.np, "notification point (CNP generation)"},
                          point{"roce_rp", *nd.ecn.rp, "reaction point (DCQCN rate control)"}}) {
    if (pt.state[prio]) continue;
    const std::string path =
        "/sys/class/net/" + n + "/ecn/" + pt.dir + "/enable/" + std::to_string(pol.ecn_priority);
    p.ops.push_back(write_op(
        n, std::string("enable ECN ") + pt.dir + " on priority " + std::to_string(pol.ecn_priority),
        std::string("the ECN ") + pt.role + " is off on priority " +
            std::to_string(pol.ecn_priority),
        "0", path, "1", file_int(path, 1)));
  }
  if (nd.ecn.cnp_dscp && *nd.ecn.cnp_dscp != pol.cnp_dscp) {
    const std::string path = "/sys/class/net/" + n + "/ecn/roce_np/cnp_dscp";
    p.ops.push_back(write_op(n, "set CNP DSCP " + std::to_string(pol.cnp_dscp),
                             "CNPs are sent with DSCP " + std::to_string(*nd.ecn.cnp_dscp),
                             std::to_string(*nd.ecn.cnp_dscp), path, std::to_string(pol.cnp_dscp),
                             file_int(path, pol.cnp_dscp)));
  }
  if (nd.ecn.cnp_802p_prio && *nd.ecn.cnp_802p_prio != pol.cnp_priority) {
    const std::string path = "/sys/class/net/" + n + "/ecn/roce_np/cnp_802p_prio";
    p.ops.push_back(write_op(n, "set CNP priority " + std::to_string(pol.cnp_priority),
                             "CNPs are sent on priority " + std::to_string(*nd.ecn.cnp_802p_prio),
                             std::to_string(*nd.ecn.cnp_802p_prio), path,
                             std::to_string(pol.cnp_priority), file_int(path, pol.cnp_priority)));
  }
}

void plan_rdma(plan& p, const rdma_device& dev, const policy& pol) {
  for (const auto& port : dev.ports) {
    const std::string subject = dev.name + " port " + std::to_string(port.port);
    if (pol.set_verbs_traffic_class && port.traffic_class &&
        *port.traffic_class != pol.traffic_class) {
      verify_spec v;
      v.k = verify_spec::kind::traffic_class;
      v.path = "/sys/class/infiniband/" + dev.name + "/tc/" + std::to_string(port.port) +
               "/traffic_class";
      v.expect = pol.traffic_class;
      p.ops.push_back(write_op(
          subject, "set verbs traffic class " + std::to_string(pol.traffic_class),
          "verbs QPs default to traffic class " + std::to_string(*port.traffic_class) +
              "; unmarked RoCE would miss the lossless priority",
          std::to_string(*port.traffic_class), v.path, std::to_string(pol.traffic_class), v));
    }
    if (pol.rdma_cm_tos >= 0 && port.default_roce_tos != pol.rdma_cm_tos) {
      const std::string path = "/sys/kernel/config/rdma_cm/" + dev.name + "/ports/" +
                               std::to_string(port.port) + "/default_roce_tos";
      std::vector<std::string> argv = {"cma_roce_tos", "-d", dev.name};
      if (port.port != 1) {
        argv.push_back("-p");
        argv.push_back(std::to_string(port.port));
      }
      argv.push_back("-t");
      argv.push_back(std::to_string(pol.rdma_cm_tos));
      const std::string before =
          port.default_roce_tos ? std::to_string(*port.default_roce_tos) : "unset";
      p.ops.push_back(command_op(subject,
                                 "set RDMA-CM default ToS " + std::to_string(pol.rdma_cm_tos),
                                 "RDMA-CM connections default to ToS " + before +
                                     "; applications that set none would miss the lossless "
                                     "priority",
                                 before, std::move(argv), file_int(path, pol.rdma_cm_tos)));
    }
  }
}

}  // namespace

std::vector<std::string> managed_netdevs(const node_inventory& inv, const policy& pol) {
  if (!pol.interfaces.empty()) return pol.interfaces;
  std::vector<std::string> out;
  for (const auto& n : inv.nics) {
    if (n.rdma_devices.empty() || n.netdevs.empty()) continue;
    const rdma_device* d = inv.find_rdma(n.rdma_devices.front());
    if (d != nullptr && !d->ports.empty() && !d->ports.front().link_layer.empty() &&
        d->ports.front().link_layer != "Ethernet") {
      continue;
    }
    out.push_back(n.netdevs.front());
  }
  return out;
}

plan make_plan(const node_inventory& inv, const policy& pol) {
  plan p;
  p.node = inv.node;
  for (const auto& name : managed_netdevs(inv, pol)) {
    const netdev_info* nd = inv.find_netdev(name);
    if (nd == nullptr) {
      p.problems.push_back(name + ": no such netdev on " + inv.node);
      continue;
    }
    const nic_info* nic = nd->pci.empty() ? nullptr : inv.find_nic(nd->pci);
    const bool vf = nic != nullptr && nic->is_vf;
    if (nic != nullptr && !vf && pol.vfs_per_pf > 0) plan_sriov(p, *nic, pol);
    if (nd->mtu != pol.mtu) {
      p.ops.push_back(command_op(name, "set MTU " + std::to_string(pol.mtu),
                                 "MTU is " + std::to_string(nd->mtu) +
                                     "; every RoCE endpoint "
                                     "needs " +
                                     std::to_string(pol.mtu) +
                                     " (NCCL drops to the "
                                     "smallest MTU of a pair)",
                                 std::to_string(nd->mtu),
                                 {"ip", "link", "set", "dev", name, "mtu", std::to_string(pol.mtu)},
                                 file_int("/sys/class/net/" + name + "/mtu", pol.mtu)));
    }
    if (!nd->admin_up) {
      verify_spec v;
      v.k = verify_spec::kind::link_up;
      v.netdev = name;
      p.ops.push_back(command_op(name, "bring link up", "the interface is administratively down",
                                 "down", {"ip", "link", "set", "dev", name, "up"}, v));
    }
    if (vf) {
      p.problems.push_back(name +
                           ": a VF; trust, DSCP map, PFC, pause and ECN belong to the "
                           "host's PF and are not set from here");
    } else {
      plan_qos(p, *nd, pol);
      plan_ecn(p, *nd, pol);
    }
    if (nic != nullptr) {
      for (const auto& dn : nic->rdma_devices) {
        if (const rdma_device* d = inv.find_rdma(dn)) plan_rdma(p, *d, pol);
      }
    }
  }
  return p;
}

std::string describe_op(const plan_op& op) {
  std::string s = op.subject + ": " + op.what;
  if (op.k == plan_op::kind::write) {
    s += " [write " + op.value + " > " + op.path + "]";
  } else {
    s += " [" + join_argv(op.argv) + "]";
  }
  if (op.disruptive) s += " (disruptive)";
  return s + " -- " + op.why;
}

nlohmann::json to_json(const plan& p) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : p.ops) {
    nlohmann::json j{{"subject", op.subject},
                     {"what", op.what},
                     {"why", op.why},
                     {"before", op.before},
                     {"disruptive", op.disruptive}};
    if (op.k == plan_op::kind::write) {
      j["write"] = {{"path", op.path}, {"value", op.value}};
    } else {
      j["command"] = op.argv;
    }
    ops.push_back(std::move(j));
  }
  nlohmann::json j{{"node", p.node}, {"ops", ops}, {"problems", p.problems}};
  detail::make_printable(j);
  return j;
}

}  // namespace shoal::netsetup
