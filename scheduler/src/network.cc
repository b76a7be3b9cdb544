#include "network.h"

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
  auto doc = nlohmann::json::parse(n.netsetup, nullptr, false);
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
    v.settings_key = s->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (auto e = it->find("error"); e != it->end() && e->is_string())
    v.detail = e->get<std::string>().substr(0, 512);
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

}  // namespace shoal::scheduler
