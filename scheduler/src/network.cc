#include "scheduler/network.h"

#include <algorithm>

#include "netsetup/affinity.h"
#include "netsetup/inventory.h"
#include "netsetup/job_outputs.h"
#include "netsetup/validate.h"
#include "common/json_text.h"
#include "common/utf8.h"

namespace shoal::scheduler {

std::string_view to_string(validation v) noexcept {
  switch (v) {
    case validation::unknown:
      return "unknown";
    case validation::passed:
      return "passed";
    case validation::failed:
      return "failed";
  }
  return "unknown";
}

network_verdict document_network_model::verdict(const node_view& n) const {
  network_verdict v;
  if (n.netsetup.empty()) {
    v.detail = "no netsetup document in the node's heartbeat";
    return v;
  }
  auto doc = nlohmann::json::parse(n.netsetup.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    v.detail = "netsetup document is not a JSON object";
    return v;
  }
  auto it = doc.find("validation");
  if (it == doc.end() || !it->is_object()) {
    v.detail = "netsetup document has no validation result";
    return v;
  }
  auto passed = it->find("passed");
  if (passed == it->end() || !passed->is_boolean()) {
    v.detail = "netsetup validation has no boolean \"passed\"";
    return v;
  }
  v.state = passed->get<bool>() ? validation::passed : validation::failed;
  if (auto s = it->find("settings"); s != it->end() && !s->is_null()) {
    v.settings_key = json_text(*s);
  }
  if (auto e = it->find("error"); e != it->end() && e->is_string())
    v.detail = utf8_safe(e->get<std::string>(), 512);
  return v;
}

status document_network_model::gang_consistent(std::span<const node_view* const> nodes) const {
  std::string key;
  std::string first;
  for (const auto* n : nodes) {
    auto v = verdict(*n);
    if (v.settings_key.empty()) continue;
    if (key.empty()) {
      key = v.settings_key;
      first = n->name;
    } else if (v.settings_key != key) {
      return fail(errc::invalid_argument,
                  "network settings of " + n->name + " differ from " + first);
    }
  }
  return {};
}

nlohmann::json document_network_model::plan(const node_view&, std::uint32_t) const {
  // netsetup's make_nccl_env and the VF assignment come here once the library is linked.
  return nullptr;
}

namespace {

// A netsetup inventory when the document is one (it has a "schema" and GPUs/NICs); nullopt for
// anything else, so the caller can fall back to the simple validation member.
std::optional<result<netsetup::node_inventory>> inventory_of(const node_view& n) {
  if (n.netsetup.empty()) return std::nullopt;
  auto doc = nlohmann::json::parse(n.netsetup.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("schema") || !doc.contains("nics"))
    return std::nullopt;
  return netsetup::inventory_from_json(doc);
}

std::string failures(const std::vector<netsetup::check_result>& rs, std::size_t max = 4) {
  std::string out;
  std::size_t n = 0;
  for (const auto& r : rs) {
    if (r.sev != netsetup::severity::error || r.status == netsetup::check_status::pass) continue;
    if (++n > max) {
      out += "; ...";
      break;
    }
    if (!out.empty()) out += "; ";
    out += r.name + " (" + r.subject + "): " + r.message;
  }
  return out;
}

}  // namespace

network_verdict netsetup_network_model::verdict(const node_view& n) const {
  auto inv = inventory_of(n);
  if (!inv) return fallback_.verdict(n);
  network_verdict v;
  if (!*inv) {
    v.state = validation::failed;
    v.detail = "netsetup document does not parse: " + utf8_safe(inv->error().message, 400);
    return v;
  }
  auto rs = netsetup::validate_node(**inv, pol_);
  v.state = netsetup::passed(rs) ? validation::passed : validation::failed;
  v.detail =
      v.state == validation::passed ? "all netsetup checks passed" : utf8_safe(failures(rs), 1000);
  // Consistency across nodes is netsetup's cluster validation (gang_consistent); the key only
  // separates nodes whose MTU or priority differ so mismatched nodes never share a gang.
  v.settings_key =
      "policy-mtu=" + std::to_string(pol_.mtu) + ";prio=" + std::to_string(pol_.pfc_priority);
  return v;
}

status netsetup_network_model::gang_consistent(std::span<const node_view* const> nodes) const {
  std::vector<netsetup::node_inventory> invs;
  std::vector<const node_view*> rest;
  for (const auto* n : nodes) {
    auto inv = inventory_of(*n);
    if (!inv) {
      rest.push_back(n);
      continue;
    }
    if (!*inv) return fail(errc::invalid_argument, n->name + ": netsetup document does not parse");
    invs.push_back(std::move(**inv));
  }
  if (invs.size() > 1) {
    auto rs = netsetup::validate_cluster(invs, pol_);
    if (!netsetup::passed(rs))
      return fail(errc::invalid_argument, "network settings differ: " + failures(rs));
  }
  return fallback_.gang_consistent(rest);
}

nlohmann::json netsetup_network_model::plan(const node_view& n, std::uint32_t gpus) const {
  auto inv = inventory_of(n);
  if (!inv || !*inv) return nullptr;
  auto rails = netsetup::assign_rails(**inv);
  std::vector<std::string> chosen;
  nlohmann::json per_gpu = nlohmann::json::array();
  for (std::uint32_t i = 0; i < gpus && i < rails.size(); ++i) {
    const auto& r = rails[i];
    chosen.push_back(r.gpu);
    per_gpu.push_back({{"gpu", r.gpu},
                       {"nic", r.nic},
                       {"rdma_device", r.rdma_device},
                       {"port", r.port},
                       {"netdev", r.netdev},
                       {"path", std::string(netsetup::to_string(r.path))},
                       {"rail", r.index}});
  }
  nlohmann::json out = {{"gpus", per_gpu}};
  if (chosen.size() < gpus) {
    out["error"] = "node has " + std::to_string(rails.size()) + " GPU rails, the job wants " +
                   std::to_string(gpus);
    return out;
  }
  auto env = netsetup::make_nccl_env(**inv, chosen, pol_);
  if (!env) {
    out["error"] = env.error().message;
    return out;
  }
  nlohmann::json vars = nlohmann::json::object();
  for (const auto& [k, v] : env->vars) vars[k] = v;
  out["nccl_env"] = vars;
  out["notes"] = env->notes;
  return out;
}

cached_network_model::cached_network_model(std::unique_ptr<network_model> inner,
                                           std::size_t max_entries)
    : inner_(std::move(inner)), max_entries_(std::max<std::size_t>(1, max_entries)) {}

std::optional<network_verdict> cached_network_model::known(std::string_view node,
                                                           std::uint64_t rev) const {
  if (rev == 0) return std::nullopt;
  std::shared_lock lk(mu_);
  auto it = by_node_.find(node);
  if (it == by_node_.end() || it->second.rev != rev) return std::nullopt;
  return it->second.v;
}

network_verdict cached_network_model::verdict(const node_view& n) const {
  if (n.netsetup_rev == 0) return inner_->verdict(n);
  if (auto v = known(n.name, n.netsetup_rev)) return std::move(*v);
  // Judged outside the lock: two callers may judge the same version at once, and keep the same.
  auto v = inner_->verdict(n);
  std::unique_lock lk(mu_);
  ++judged_;
  auto it = by_node_.find(n.name);
  if (it == by_node_.end()) {
    // Nodes the index dropped leave entries behind; past the bound all go and are judged again.
    if (by_node_.size() >= max_entries_) by_node_.clear();
    it = by_node_.emplace(n.name, entry{}).first;
  }
  // A newer version judged meanwhile stays (versions only grow).
  if (it->second.rev <= n.netsetup_rev) it->second = entry{n.netsetup_rev, v};
  return v;
}

std::uint64_t cached_network_model::judged() const {
  std::shared_lock lk(mu_);
  return judged_;
}

}  // namespace shoal::scheduler
