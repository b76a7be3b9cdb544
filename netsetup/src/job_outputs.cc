#include "netsetup/job_outputs.h"

#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "json_text.h"
#include "netsetup/affinity.h"
#include "netsetup/discover.h"
#include "netsetup/errc.h"
#include "common/json_text.h"

namespace shoal::netsetup {
namespace {

using json = nlohmann::json;

// The rails, one entry per distinct rail NIC, in rail order.
std::vector<rail> rail_nics(const node_inventory& inv) {
  std::map<int, rail> by_index;
  for (const auto& r : assign_rails(inv)) by_index.emplace(r.index, r);
  std::vector<rail> out;
  for (auto& [i, r] : by_index) out.push_back(r);
  return out;
}

}  // namespace

const std::string* nccl_env::get(std::string_view name) const {
  for (const auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

result<nccl_env> make_nccl_env(const node_inventory& inv, std::span<const std::string> gpus,
                               const policy& pol) {
  std::vector<std::string> wanted;
  if (gpus.empty()) {
    for (const auto& g : inv.gpus) wanted.push_back(g.bdf);
  }
  for (const auto& g : gpus) {
    if (inv.find_gpu(g) != nullptr) {
      wanted.push_back(g);
      continue;
    }
    std::size_t idx = 0;
    auto [p, ec] = std::from_chars(g.data(), g.data() + g.size(), idx);
    if (!g.empty() && ec == std::errc{} && p == g.data() + g.size() && idx < inv.gpus.size()) {
      wanted.push_back(inv.gpus[idx].bdf);
      continue;
    }
    return fail(make_error_code(errc::bad_request),
                "GPU \"" + g.substr(0, 64) + "\" is not on " + inv.node);
  }
  if (wanted.empty()) {
    return fail(make_error_code(errc::bad_request), inv.node + " has no GPUs");
  }
  const auto rails = assign_rails(inv);
  std::vector<const rail*> chosen;
  std::set<std::string> seen;
  for (const auto& g : wanted) {
    const rail* r = nullptr;
    for (const auto& x : rails) {
      if (x.gpu == g) r = &x;
    }
    if (r == nullptr) {
      return fail(make_error_code(errc::bad_request),
                  "GPU " + g + " on " + inv.node + " has no RDMA NIC");
    }
    if (seen.insert(r->rdma_device + ":" + std::to_string(r->port)).second) chosen.push_back(r);
  }
  nccl_env env;
  std::string hca = "=";
  std::string ifnames = "=";
  std::set<int> gid_indices;
  bool all_have_gid = true;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    const rail& r = *chosen[i];
    hca += (i ? "," : "") + r.rdma_device + ":" + std::to_string(r.port);
    if (!r.netdev.empty()) ifnames += (ifnames.size() > 1 ? "," : "") + r.netdev;
    const rdma_device* d = inv.find_rdma(r.rdma_device);
    const rdma_port* port = nullptr;
    if (d != nullptr) {
      for (const auto& p : d->ports) {
        if (p.port == r.port) port = &p;
      }
    }
    if (port != nullptr && port->roce_v2_ipv4_index) {
      gid_indices.insert(*port->roce_v2_ipv4_index);
    } else {
      all_have_gid = false;
    }
  }
  env.vars.emplace_back("NCCL_IB_HCA", hca);
  if (all_have_gid && gid_indices.size() == 1) {
    env.vars.emplace_back("NCCL_IB_GID_INDEX", std::to_string(*gid_indices.begin()));
  } else {
    // One index does not fit every HCA (or one is unknown): let NCCL >= 2.21 pick the RoCE v2
    // IPv4 entry per HCA, which is what the fixed index would have meant.
    env.vars.emplace_back("NCCL_IB_ROCE_VERSION_NUM", "2");
    env.vars.emplace_back("NCCL_IB_ADDR_FAMILY", "AF_INET");
    env.notes.push_back(all_have_gid
                            ? "RoCE v2 GID indices differ between HCAs; NCCL selects per HCA"
                            : "an HCA has no RoCE v2 IPv4 GID yet; NCCL selects at run time");
  }
  env.vars.emplace_back("NCCL_IB_TC", std::to_string(pol.traffic_class));
  if (!pol.nccl.socket_ifname.empty()) {
    env.vars.emplace_back("NCCL_SOCKET_IFNAME", pol.nccl.socket_ifname);
  } else if (ifnames.size() > 1) {
    env.vars.emplace_back("NCCL_SOCKET_IFNAME", ifnames);
  }
  env.vars.emplace_back("NCCL_NET_GDR_LEVEL", pol.nccl.gdr_level);
  return env;
}

std::string to_shell(const nccl_env& env) {
  std::string s;
  for (const auto& [k, v] : env.vars) {
    std::string q;
    for (char ch : v) {
      if (ch == '\'')
        q += "'\\''";
      else
        q += ch;
    }
    s += "export " + k + "='" + q + "'\n";
  }
  return s;
}

json sriov_device_plugin_config(const node_inventory& inv, const policy& pol) {
  json list = json::array();
  for (const auto& r : rail_nics(inv)) {
    const nic_info* nic = inv.find_nic(r.nic);
    if (nic == nullptr) continue;
    json sel = json::object();
    sel["vendors"] = json::array({hex4(nic->pci.vendor)});
    if (nic->is_vf) {
      // A machine given VFs has no PF to name: select the VF itself.
      sel["devices"] = json::array({hex4(nic->pci.device)});
      if (!nic->pci.driver.empty()) sel["drivers"] = json::array({nic->pci.driver});
      sel["pciAddresses"] = json::array({nic->pci.bdf});
    } else {
      std::uint32_t vf_dev = 0;
      std::string vf_driver;
      if (nic->sriov && !nic->sriov->vfs.empty()) {
        vf_dev = nic->sriov->vfs.front().device;
        vf_driver = nic->sriov->vfs.front().driver;
      }
      if (vf_dev == 0) vf_dev = vf_device_of(nic->pci.vendor, nic->pci.device);
      if (vf_dev != 0) sel["devices"] = json::array({hex4(vf_dev)});
      if (vf_driver.empty()) vf_driver = nic->pci.driver;
      if (!vf_driver.empty()) sel["drivers"] = json::array({vf_driver});
      sel["pfNames"] = json::array({r.netdev});
    }
    sel["isRdma"] = true;
    list.push_back(json{{"resourceName", pol.cluster.sriov_resource_base + std::to_string(r.index)},
                        {"resourcePrefix", pol.cluster.resource_prefix},
                        {"selectors", json::array({sel})}});
  }
  json out{{"resourceList", list}};
  detail::make_printable(out);
  return out;
}

result<json> network_attachment_definitions(const node_inventory& inv, const policy& pol) {
  if (pol.cluster.ipam.empty()) {
    return fail(make_error_code(errc::bad_request),
                "policy cluster.ipam is empty: set the CNI IPAM of the RDMA networks (RoCE v2 "
                "needs an IP address on the pod interface)");
  }
  json ipam = json::parse(pol.cluster.ipam, nullptr, false);
  if (ipam.is_discarded() || !ipam.is_object()) {
    return fail(make_error_code(errc::bad_request), "policy cluster.ipam is not a JSON object");
  }
  json out = json::array();
  for (const auto& r : rail_nics(inv)) {
    const std::string name = pol.cluster.network_name_base + std::to_string(r.index);
    const std::string resource = pol.cluster.resource_prefix + "/" +
                                 pol.cluster.sriov_resource_base + std::to_string(r.index);
    json cni{
        {"cniVersion", pol.cluster.cni_version}, {"name", name}, {"type", "sriov"}, {"ipam", ipam}};
    out.push_back(json{{"apiVersion", "k8s.cni.cncf.io/v1"},
                       {"kind", "NetworkAttachmentDefinition"},
                       {"metadata",
                        {{"name", name},
                         {"namespace", pol.cluster.network_namespace},
                         {"annotations", {{"k8s.v1.cni.cncf.io/resourceName", resource}}}}},
                       // spec.config is the CNI configuration as a JSON string, not an object.
                       {"spec", {{"config", json_text(cni)}}}});
  }
  detail::make_printable(out);
  return out;
}

json rdma_shared_device_plugin_config(const node_inventory& inv, const policy& pol) {
  json list = json::array();
  for (const auto& r : rail_nics(inv)) {
    const nic_info* nic = inv.find_nic(r.nic);
    if (nic == nullptr) continue;
    json sel{{"vendors", json::array({hex4(nic->pci.vendor)})},
             {"deviceIDs", json::array({hex4(nic->pci.device)})}};
    if (!r.netdev.empty()) sel["ifNames"] = json::array({r.netdev});
    list.push_back(
        json{{"resourceName", pol.cluster.shared_resource_base + std::to_string(r.index)},
             {"resourcePrefix", pol.cluster.resource_prefix},
             {"rdmaHcaMax", pol.cluster.rdma_hca_max},
             {"selectors", sel}});
  }
  json out{{"periodicUpdateInterval", pol.cluster.periodic_update_interval}, {"configList", list}};
  detail::make_printable(out);
  return out;
}

result<json> cluster_configs(const node_inventory& inv, const policy& pol) {
  auto nads = network_attachment_definitions(inv, pol);
  if (!nads) return fail(nads.error());
  return json{{"sriovDevicePlugin", sriov_device_plugin_config(inv, pol)},
              {"networkAttachmentDefinitions", *nads},
              {"rdmaSharedDevicePlugin", rdma_shared_device_plugin_config(inv, pol)}};
}

}  // namespace shoal::netsetup
