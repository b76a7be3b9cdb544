// Peer roles and the shoal:// identity URI (common/peer_identity.h).
#include "common/peer_identity.h"

#include <array>
#include <utility>

namespace shoal::tls {

namespace {

constexpr std::array<std::pair<std::string_view, peer_role>, 5> kRoles{{
    {"node", peer_role::node},
    {"registry-proxy", peer_role::registry_proxy},
    {"scheduler", peer_role::scheduler},
    {"operator", peer_role::operator_},
    {"kube-scheduler", peer_role::kube_scheduler},
}};

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

std::string_view to_string(peer_role r) noexcept {
  for (const auto& [text, role] : kRoles) {
    if (role == r) return text;
  }
  return "none";
}

std::optional<peer_role> parse_role(std::string_view s) noexcept {
  for (const auto& [text, role] : kRoles) {
    if (text == s) return role;
  }
  return std::nullopt;
}

std::string peer_identity::str() const {
  if (!verified) return tls ? "anonymous (tls)" : "anonymous";
  if (role == peer_role::none) return "verified (no role)";
  if (name.empty()) return std::string(to_string(role));
  return std::string(to_string(role)) + "/" + name;
}

std::optional<role_and_name> parse_identity_uri(std::string_view uri) {
  constexpr std::string_view scheme = "shoal://";
  if (!uri.starts_with(scheme)) return std::nullopt;
  uri.remove_prefix(scheme.size());
  const auto slash = uri.find('/');
  auto role = parse_role(uri.substr(0, slash));
  if (!role) return std::nullopt;
  if (slash == std::string_view::npos) {
    // A single-instance party (registry-proxy, kube-scheduler); a node must be named.
    if (*role == peer_role::node) return std::nullopt;
    return role_and_name{*role, {}};
  }
  const std::string_view name = uri.substr(slash + 1);
  if (name.empty() || name.size() > 253) return std::nullopt;
  for (char c : name) {
    if (!name_char(c)) return std::nullopt;
  }
  return role_and_name{*role, std::string(name)};
}

}  // namespace shoal::tls
