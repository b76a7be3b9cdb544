// The discovery document: writing (to_json) and strict reading (inventory_from_json).

#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "json_text.h"
#include "netsetup/affinity.h"
#include "netsetup/errc.h"
#include "netsetup/inventory.h"
#include "netsetup/sysfs.h"

namespace shoal::netsetup {
namespace {

using json = nlohmann::json;

constexpr std::size_t max_document_bytes = 16 << 20;
constexpr std::size_t max_list = 4096;

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

std::string hex_digits(std::uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*x", width, v);
  return buf;
}

json link_json(const pcie_link& l) {
  return json{{"current_speed_gts", opt(l.current_speed_gts)},
              {"current_width", opt(l.current_width)},
              {"max_speed_gts", opt(l.max_speed_gts)},
              {"max_width", opt(l.max_width)}};
}

json pci_json(const pci_function& p) {
  return json{{"bdf", p.bdf},
              {"vendor", hex_digits(p.vendor, 4)},
              {"device", hex_digits(p.device, 4)},
              {"class", hex_digits(p.class_code, 6)},
              {"driver", p.driver},
              {"numa_node", p.numa_node},
              {"root_complex", p.root_complex},
              {"bridges", p.bridges},
              {"link", link_json(p.link)}};
}

json qos_json(const netdev_qos& q) {
  json j;
  j["trust"] = opt(q.trust);
  j["trust_source"] = q.trust_source;
  j["pfc"] = opt(q.pfc);
  if (q.dscp_prio) {
    json a = json::array();
    for (auto [d, p] : *q.dscp_prio) a.push_back(json::array({d, p}));
    j["dscp_prio"] = a;
  } else {
    j["dscp_prio"] = nullptr;
  }
  j["prio_tc"] = opt(q.prio_tc);
  if (q.pause) {
    j["global_pause"] =
        json{{"autoneg", q.pause->autoneg}, {"rx", q.pause->rx}, {"tx", q.pause->tx}};
  } else {
    j["global_pause"] = nullptr;
  }
  return j;
}

// ---- reading ----------------------------------------------------------------------------------

// Collects the first problem found, with the JSON path of the offending field.
struct ctx {
  std::string err;
  bool ok() const { return err.empty(); }
  void bad(const std::string& path, std::string_view why) {
    if (err.empty()) err = path + ": " + std::string(why);
  }
};

const json* member(ctx& c, const json& obj, const char* key, const std::string& path,
                   bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    if (required) c.bad(path + "." + key, "missing");
    return nullptr;
  }
  return &*it;
}

void get(ctx& c, const json& obj, const char* key, const std::string& path, std::string& out,
         bool required = true) {
  const json* v = member(c, obj, key, path, required);
  if (v == nullptr) return;
  if (!v->is_string()) return c.bad(path + "." + key, "expected a string");
  if (v->get_ref<const std::string&>().size() > 4096) {
    return c.bad(path + "." + key, "string longer than 4096");
  }
  out = v->get<std::string>();
}

bool as_int(const json& v, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) return false;
    out = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
  } else {
    return false;
  }
  return out >= lo && out <= hi;
}

void get(ctx& c, const json& obj, const char* key, const std::string& path, int& out,
         std::int64_t lo, std::int64_t hi, bool required = true) {
  const json* v = member(c, obj, key, path, required);
  if (v == nullptr) return;
  std::int64_t x = 0;
  if (!as_int(*v, lo, hi, x)) {
    return c.bad(path + "." + key,
                 "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  out = static_cast<int>(x);
}

void get_opt(ctx& c, const json& obj, const char* key, const std::string& path,
             std::optional<int>& out, std::int64_t lo, std::int64_t hi) {
  const json* v = member(c, obj, key, path, false);
  if (v == nullptr) return;
  int x = 0;
  get(c, obj, key, path, x, lo, hi);
  if (c.ok()) out = x;
}

void get_opt(ctx& c, const json& obj, const char* key, const std::string& path,
             std::optional<double>& out) {
  const json* v = member(c, obj, key, path, false);
  if (v == nullptr) return;
  if (!v->is_number() || !(v->get<double>() >= 0) || v->get<double>() > 1e6) {
    return c.bad(path + "." + key, "expected a non-negative number");
  }
  out = v->get<double>();
}

void get(ctx& c, const json& obj, const char* key, const std::string& path, bool& out,
         bool required = true) {
  const json* v = member(c, obj, key, path, required);
  if (v == nullptr) return;
  if (!v->is_boolean()) return c.bad(path + "." + key, "expected a boolean");
  out = v->get<bool>();
}

void get_hex(ctx& c, const json& obj, const char* key, const std::string& path, std::uint32_t& out,
             std::size_t digits) {
  std::string s;
  get(c, obj, key, path, s);
  if (!c.ok()) return;
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.size() != digits || ec != std::errc{} || p != s.data() + s.size()) {
    return c.bad(path + "." + key, "expected " + std::to_string(digits) + " hex digits");
  }
  out = v;
}

void get(ctx& c, const json& obj, const char* key, const std::string& path,
         std::vector<std::string>& out, bool required = true) {
  const json* v = member(c, obj, key, path, required);
  if (v == nullptr) return;
  if (!v->is_array() || v->size() > max_list) {
    return c.bad(path + "." + key, "expected a list of strings");
  }
  out.clear();
  for (const auto& e : *v) {
    if (!e.is_string() || e.get_ref<const std::string&>().size() > 256) {
      return c.bad(path + "." + key, "expected a list of strings");
    }
    out.push_back(e.get<std::string>());
  }
}

template <class T, class F>
void get_array8(ctx& c, const json& obj, const char* key, const std::string& path,
                std::optional<std::array<T, 8>>& out, F&& conv) {
  const json* v = member(c, obj, key, path, false);
  if (v == nullptr) return;
  if (!v->is_array() || v->size() != 8) return c.bad(path + "." + key, "expected 8 values");
  std::array<T, 8> a{};
  for (std::size_t i = 0; i < 8; ++i) {
    if (!conv((*v)[i], a[i])) {
      return c.bad(path + "." + key + "[" + std::to_string(i) + "]", "wrong type or range");
    }
  }
  out = a;
}

bool conv_bool(const json& v, bool& out) {
  if (!v.is_boolean()) return false;
  out = v.get<bool>();
  return true;
}

bool conv_prio(const json& v, int& out) {
  std::int64_t x = 0;
  if (!as_int(v, 0, 7, x)) return false;
  out = static_cast<int>(x);
  return true;
}

const json* object_member(ctx& c, const json& obj, const char* key, const std::string& path,
                          bool required) {
  const json* v = member(c, obj, key, path, required);
  if (v != nullptr && !v->is_object()) {
    c.bad(path + "." + key, "expected an object");
    return nullptr;
  }
  return v;
}

template <class T, class F>
void get_list(ctx& c, const json& obj, const char* key, const std::string& path,
              std::vector<T>& out, F&& read_one) {
  const json* v = member(c, obj, key, path, true);
  if (v == nullptr) return;
  if (!v->is_array() || v->size() > max_list) return c.bad(path + "." + key, "expected a list");
  for (std::size_t i = 0; i < v->size() && c.ok(); ++i) {
    const std::string p = path + "." + key + "[" + std::to_string(i) + "]";
    if (!(*v)[i].is_object()) return c.bad(p, "expected an object");
    T x{};
    read_one((*v)[i], p, x);
    out.push_back(std::move(x));
  }
}

void read_pci(ctx& c, const json& j, const std::string& path, pci_function& p) {
  get(c, j, "bdf", path, p.bdf);
  get_hex(c, j, "vendor", path, p.vendor, 4);
  get_hex(c, j, "device", path, p.device, 4);
  get_hex(c, j, "class", path, p.class_code, 6);
  get(c, j, "driver", path, p.driver, false);
  get(c, j, "numa_node", path, p.numa_node, -1, 4095);
  get(c, j, "root_complex", path, p.root_complex);
  get(c, j, "bridges", path, p.bridges);
  if (const json* l = object_member(c, j, "link", path, false)) {
    const std::string lp = path + ".link";
    get_opt(c, *l, "current_speed_gts", lp, p.link.current_speed_gts);
    get_opt(c, *l, "current_width", lp, p.link.current_width, 0, 64);
    get_opt(c, *l, "max_speed_gts", lp, p.link.max_speed_gts);
    get_opt(c, *l, "max_width", lp, p.link.max_width, 0, 64);
  }
}

void read_nic(ctx& c, const json& j, const std::string& path, nic_info& n) {
  if (const json* p = object_member(c, j, "pci", path, true)) read_pci(c, *p, path + ".pci", n.pci);
  get(c, j, "is_vf", path, n.is_vf);
  get(c, j, "physfn", path, n.physfn, false);
  get(c, j, "netdevs", path, n.netdevs);
  get(c, j, "rdma_devices", path, n.rdma_devices);
  if (const json* s = object_member(c, j, "sriov", path, false)) {
    const std::string sp = path + ".sriov";
    sriov_info si;
    get(c, *s, "total_vfs", sp, si.total_vfs, 0, 65535);
    get(c, *s, "num_vfs", sp, si.num_vfs, 0, 65535);
    get_list(c, *s, "vfs", sp, si.vfs, [&](const json& v, const std::string& vp, vf_info& vf) {
      get(c, v, "index", vp, vf.index, 0, 65535);
      get(c, v, "bdf", vp, vf.bdf);
      get_hex(c, v, "device", vp, vf.device, 4);
      get(c, v, "driver", vp, vf.driver, false);
      get(c, v, "netdevs", vp, vf.netdevs);
      get(c, v, "rdma_devices", vp, vf.rdma_devices);
    });
    n.sriov = std::move(si);
  }
}

void read_netdev(ctx& c, const json& j, const std::string& path, netdev_info& n) {
  get(c, j, "name", path, n.name);
  get(c, j, "pci", path, n.pci, false);
  get(c, j, "operstate", path, n.operstate);
  get(c, j, "admin_up", path, n.admin_up);
  get(c, j, "mtu", path, n.mtu, 0, 1 << 20);
  get_opt(c, j, "speed_mbps", path, n.speed_mbps, 0, 10'000'000);
  get(c, j, "address", path, n.address, false);
  if (const json* q = object_member(c, j, "qos", path, false)) {
    const std::string qp = path + ".qos";
    if (member(c, *q, "trust", qp, false) != nullptr) {
      std::string t;
      get(c, *q, "trust", qp, t);
      n.qos.trust = t;
    }
    get(c, *q, "trust_source", qp, n.qos.trust_source, false);
    get_array8(c, *q, "pfc", qp, n.qos.pfc, conv_bool);
    if (const json* d = member(c, *q, "dscp_prio", qp, false)) {
      std::vector<std::pair<int, int>> m;
      if (!d->is_array() || d->size() > 512) c.bad(qp + ".dscp_prio", "expected a list");
      for (std::size_t i = 0; c.ok() && i < d->size(); ++i) {
        const json& e = (*d)[i];
        std::int64_t ds = 0, pr = 0;
        if (!e.is_array() || e.size() != 2 || !as_int(e[0], 0, 63, ds) || !as_int(e[1], 0, 7, pr)) {
          c.bad(qp + ".dscp_prio[" + std::to_string(i) + "]", "expected [dscp 0..63, prio 0..7]");
        } else {
          m.emplace_back(static_cast<int>(ds), static_cast<int>(pr));
        }
      }
      if (c.ok()) n.qos.dscp_prio = std::move(m);
    }
    get_array8(c, *q, "prio_tc", qp, n.qos.prio_tc, conv_prio);
    if (const json* p = object_member(c, *q, "global_pause", qp, false)) {
      pause_state ps;
      get(c, *p, "autoneg", qp + ".global_pause", ps.autoneg, false);
      get(c, *p, "rx", qp + ".global_pause", ps.rx);
      get(c, *p, "tx", qp + ".global_pause", ps.tx);
      n.qos.pause = ps;
    }
  }
  if (const json* e = object_member(c, j, "ecn", path, false)) {
    const std::string ep = path + ".ecn";
    get_array8(c, *e, "roce_np", ep, n.ecn.np, conv_bool);
    get_array8(c, *e, "roce_rp", ep, n.ecn.rp, conv_bool);
    get_opt(c, *e, "cnp_dscp", ep, n.ecn.cnp_dscp, 0, 63);
    get_opt(c, *e, "cnp_802p_prio", ep, n.ecn.cnp_802p_prio, 0, 7);
  }
}

void read_rdma(ctx& c, const json& j, const std::string& path, rdma_device& d) {
  get(c, j, "name", path, d.name);
  get(c, j, "pci", path, d.pci, false);
  get_list(c, j, "ports", path, d.ports, [&](const json& pj, const std::string& pp, rdma_port& p) {
    get(c, pj, "port", pp, p.port, 1, 255);
    get(c, pj, "state", pp, p.state, false);
    get(c, pj, "phys_state", pp, p.phys_state, false);
    get(c, pj, "link_layer", pp, p.link_layer, false);
    get(c, pj, "netdev", pp, p.netdev, false);
    get_list(c, pj, "gids", pp, p.gids, [&](const json& gj, const std::string& gp, gid_entry& g) {
      get(c, gj, "index", gp, g.index, 0, 65535);
      get(c, gj, "gid", gp, g.gid);
      get(c, gj, "type", gp, g.type, false);
      get(c, gj, "netdev", gp, g.netdev, false);
    });
    get_opt(c, pj, "roce_v2_ipv4_index", pp, p.roce_v2_ipv4_index, 0, 65535);
    get(c, pj, "roce_v2_ipv4", pp, p.roce_v2_ipv4, false);
    get_opt(c, pj, "default_roce_tos", pp, p.default_roce_tos, 0, 255);
    get_opt(c, pj, "traffic_class", pp, p.traffic_class, 0, 255);
  });
}

}  // namespace

namespace detail {

void make_printable(nlohmann::json& j) {
  auto clean = [](std::string& s) {
    for (auto& c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (u < 0x20 || u > 0x7e) c = '?';
    }
  };
  if (j.is_string()) {
    clean(j.get_ref<std::string&>());
  } else if (j.is_array()) {
    for (auto& e : j) make_printable(e);
  } else if (j.is_object()) {
    // Keys cannot be edited in place: rebuild the object when one needs cleaning.
    bool dirty_keys = false;
    for (auto it = j.begin(); it != j.end(); ++it) {
      for (unsigned char c : it.key()) dirty_keys = dirty_keys || c < 0x20 || c > 0x7e;
      make_printable(it.value());
    }
    if (dirty_keys) {
      nlohmann::json out = nlohmann::json::object();
      for (auto it = j.begin(); it != j.end(); ++it) {
        std::string k = it.key();
        clean(k);
        out[k] = std::move(it.value());
      }
      j = std::move(out);
    }
  }
}

}  // namespace detail

std::string hex4(std::uint32_t id) { return hex_digits(id, 4); }

const pci_function* node_inventory::find_gpu(std::string_view bdf) const {
  for (const auto& g : gpus) {
    if (g.bdf == bdf) return &g;
  }
  return nullptr;
}

const nic_info* node_inventory::find_nic(std::string_view bdf) const {
  for (const auto& n : nics) {
    if (n.pci.bdf == bdf) return &n;
  }
  return nullptr;
}

const netdev_info* node_inventory::find_netdev(std::string_view name) const {
  for (const auto& n : netdevs) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

const rdma_device* node_inventory::find_rdma(std::string_view name) const {
  for (const auto& d : rdma) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

nlohmann::json to_json(const node_inventory& inv) {
  json doc;
  doc["schema"] = inv.schema;
  doc["node"] = inv.node;
  doc["gpus"] = json::array();
  for (const auto& g : inv.gpus) doc["gpus"].push_back(pci_json(g));
  doc["nics"] = json::array();
  for (const auto& n : inv.nics) {
    json j{{"pci", pci_json(n.pci)},
           {"is_vf", n.is_vf},
           {"physfn", n.physfn},
           {"netdevs", n.netdevs},
           {"rdma_devices", n.rdma_devices}};
    if (n.sriov) {
      json vfs = json::array();
      for (const auto& vf : n.sriov->vfs) {
        vfs.push_back(json{{"index", vf.index},
                           {"bdf", vf.bdf},
                           {"device", hex_digits(vf.device, 4)},
                           {"driver", vf.driver},
                           {"netdevs", vf.netdevs},
                           {"rdma_devices", vf.rdma_devices}});
      }
      j["sriov"] =
          json{{"total_vfs", n.sriov->total_vfs}, {"num_vfs", n.sriov->num_vfs}, {"vfs", vfs}};
    } else {
      j["sriov"] = nullptr;
    }
    doc["nics"].push_back(std::move(j));
  }
  doc["netdevs"] = json::array();
  for (const auto& n : inv.netdevs) {
    doc["netdevs"].push_back(json{{"name", n.name},
                                  {"pci", n.pci},
                                  {"operstate", n.operstate},
                                  {"admin_up", n.admin_up},
                                  {"mtu", n.mtu},
                                  {"speed_mbps", opt(n.speed_mbps)},
                                  {"address", n.address},
                                  {"qos", qos_json(n.qos)},
                                  {"ecn", json{{"roce_np", opt(n.ecn.np)},
                                               {"roce_rp", opt(n.ecn.rp)},
                                               {"cnp_dscp", opt(n.ecn.cnp_dscp)},
                                               {"cnp_802p_prio", opt(n.ecn.cnp_802p_prio)}}}});
  }
  doc["rdma"] = json::array();
  for (const auto& d : inv.rdma) {
    json ports = json::array();
    for (const auto& p : d.ports) {
      json gids = json::array();
      for (const auto& g : p.gids) {
        gids.push_back(
            json{{"index", g.index}, {"gid", g.gid}, {"type", g.type}, {"netdev", g.netdev}});
      }
      ports.push_back(json{{"port", p.port},
                           {"state", p.state},
                           {"phys_state", p.phys_state},
                           {"link_layer", p.link_layer},
                           {"netdev", p.netdev},
                           {"gids", gids},
                           {"roce_v2_ipv4_index", opt(p.roce_v2_ipv4_index)},
                           {"roce_v2_ipv4", p.roce_v2_ipv4},
                           {"default_roce_tos", opt(p.default_roce_tos)},
                           {"traffic_class", opt(p.traffic_class)}});
    }
    doc["rdma"].push_back(json{{"name", d.name}, {"pci", d.pci}, {"ports", ports}});
  }
  doc["rails"] = json::array();
  for (const auto& r : assign_rails(inv)) {
    doc["rails"].push_back(json{{"index", r.index},
                                {"gpu", r.gpu},
                                {"nic", r.nic},
                                {"rdma_device", r.rdma_device},
                                {"port", r.port},
                                {"netdev", r.netdev},
                                {"path", std::string(to_string(r.path))}});
  }
  doc["warnings"] = inv.warnings;
  detail::make_printable(doc);
  return doc;
}

result<node_inventory> inventory_from_json(const nlohmann::json& doc) {
  if (!doc.is_object()) {
    return fail(make_error_code(errc::bad_document), "discovery document: expected an object");
  }
  ctx c;
  node_inventory inv;
  get(c, doc, "schema", "$", inv.schema, 0, 1 << 30);
  if (c.ok() && inv.schema != inventory_schema) {
    return fail(make_error_code(errc::bad_document),
                "discovery document: schema " + std::to_string(inv.schema) +
                    " is not supported (this build reads schema " +
                    std::to_string(inventory_schema) + ")");
  }
  get(c, doc, "node", "$", inv.node);
  get_list(c, doc, "gpus", "$", inv.gpus,
           [&](const json& j, const std::string& p, pci_function& g) { read_pci(c, j, p, g); });
  get_list(c, doc, "nics", "$", inv.nics,
           [&](const json& j, const std::string& p, nic_info& n) { read_nic(c, j, p, n); });
  get_list(c, doc, "netdevs", "$", inv.netdevs,
           [&](const json& j, const std::string& p, netdev_info& n) { read_netdev(c, j, p, n); });
  get_list(c, doc, "rdma", "$", inv.rdma,
           [&](const json& j, const std::string& p, rdma_device& d) { read_rdma(c, j, p, d); });
  get(c, doc, "warnings", "$", inv.warnings, false);
  if (!c.ok()) {
    return fail(make_error_code(errc::bad_document), "discovery document: " + c.err);
  }
  return inv;
}

result<node_inventory> parse_inventory(std::string_view text) {
  if (text.size() > max_document_bytes) {
    return fail(make_error_code(errc::bad_document), "discovery document larger than 16 MiB");
  }
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) {
    return fail(make_error_code(errc::bad_document),
                "discovery document is not JSON: " + quote_excerpt(text));
  }
  return inventory_from_json(j);
}

}  // namespace shoal::netsetup
