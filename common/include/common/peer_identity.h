#pragma once
// Who is on the other end of a connection, from its verified client certificate.
//
// The identity is the certificate's one URI subject alternative name of the form
// `shoal://<role>/<name>` or `shoal://<role>`: role is one of node, registry-proxy, scheduler,
// operator, kube-scheduler; name is the node name for a node (its Kubernetes node name, and
// required), or the party's own name where there are several (a scheduler replica, an
// operator's user name). registry-proxy and kube-scheduler are one party each and have none
// (docs/security.md's profile: shoal://registry-proxy, shoal://kube-scheduler). Other SANs (DNS,
// IP: the server's address; DNS `*` for libtorrent's SSL torrents) are ignored here. A certificate
// with no such URI, a malformed one, or more than one is verified but anonymous (role none): the CA
// vouches for the key, not for a role. docs/security.md holds the certificate profile.
//
// Plain value type; no OpenSSL here (common/tls.h extracts it from a certificate).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shoal::tls {

enum class peer_role : std::uint8_t {
  none,  // no verified certificate, or one without a valid shoal:// URI SAN
  node,
  registry_proxy,
  scheduler,
  operator_,  // "operator" (a keyword in C++)
  kube_scheduler,
};

// "node", "registry-proxy", "scheduler", "operator", "kube-scheduler"; "none".
[[nodiscard]] std::string_view to_string(peer_role r) noexcept;
// The role a URI spells ("registry-proxy" → registry_proxy); nullopt for anything else,
// including "none".
[[nodiscard]] std::optional<peer_role> parse_role(std::string_view s) noexcept;

struct peer_identity {
  bool tls = false;       // the connection is TLS
  bool verified = false;  // a client certificate was presented and verified against the CA
  peer_role role = peer_role::none;
  std::string name;  // the URI's name; empty for role none and for a role given without one
  // The CA the verified client certificate chained to (tls::certificate_fingerprint of the top
  // of the verified chain); empty without one. During a CA rotation it says which root the
  // caller's swarm certificate is from.
  std::string ca_fingerprint;

  // A verified certificate with this role (what a handler authorizes on).
  [[nodiscard]] bool is(peer_role r) const noexcept { return verified && role == r; }
  // A verified node certificate for exactly this node name.
  [[nodiscard]] bool is_node(std::string_view node_name) const noexcept {
    return is(peer_role::node) && name == node_name;
  }
  // "node/gpu-1", "verified (no role)", "anonymous": for logs and error messages.
  [[nodiscard]] std::string str() const;
};

// Parses `shoal://<role>/<name>` or `shoal://<role>` (not for node: a node certificate must
// name its node). The name is 1..253 characters of [A-Za-z0-9._-] (a Kubernetes node name
// fits); no query, fragment, user info, port or further path. nullopt otherwise.
struct role_and_name {
  peer_role role = peer_role::none;
  std::string name;
};
[[nodiscard]] std::optional<role_and_name> parse_identity_uri(std::string_view uri);

}  // namespace shoal::tls
