#pragma once
// Grants: registry-proxy's signed word that one node may download one swarm until a time (and
// the scheduler's, for checkpoint swarms: it holds the checkpoint catalog, common/checkpoint.h).
//
// Nodes have no repository access of their own; clients' credentials do. registry-proxy answers
// a node's metainfo request only after the client's credential passed its access check
// (upstream, for a private repository), so it signs, with that answer, a grant for the node that
// asked (the node named in its client certificate) and the swarm it answered with. A peer
// (registry-proxy's seeder included) uploads a piece of a swarm only to a connection whose node
// presented a valid grant for that swarm (swarm/grants.h). A member without a grant gets no piece,
// whatever it can name.
//
// Wire format (declared once here: registry-proxy signs, peerd carries, every uploader checks).
// A grant is the bencoded dict
//   {e: <expiry, Unix seconds>, h: <info-hash, 20 raw bytes>, n: "<node name>",
//    s: "<signature>", v: 1, x: "<signer certificate, DER>"}
// where s is the signer's signature (SHA-256 with its key's algorithm: ECDSA P-256 for the keys
// `shoalctl certs` makes) over the bencoding of the same dict without s. It travels
//   registry-proxy → peerd: the Shoal-Grant header of a metainfo answer, base64 (to_header);
//   peer → peer: the value of "shoal_grant" in the BitTorrent extension handshake (BEP 10), raw.
// The swarm is named by its v1 info-hash, not the object's digest: it covers exactly the
// metainfo registry-proxy handed out (a pack of dataset objects, or one root of a CA rotation).
//
// verifier::verify accepts a grant when all of these hold, and otherwise says which failed: it is
// at most max_bytes and parses strictly; v is 1; the signer certificate chains to a CA of the
// verifier's bundle, is within its validity, and is registry-proxy's (URI SAN
// shoal://registry-proxy) or the scheduler's (shoal://scheduler); the signature verifies with that
// certificate's key; the info-hash is the swarm's; the node is the one the connection's certificate
// names; it has not expired (clock_skew allowed).
//
// Thread-safety: signer and verifier are safe to share; both re-read their files when they change
// (checked at most once per `recheck`), so a rotated certificate or CA bundle is picked up
// without a restart. Both do blocking file I/O on a change: worker threads, or libtorrent's
// network thread for the verifier (a stat per connection at most).

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/error.h"

namespace shoal::grant {

inline constexpr std::size_t max_bytes = 8192;
inline constexpr std::string_view extension_key = "shoal_grant";
inline constexpr std::chrono::seconds clock_skew{60};

using info_hash = std::array<std::uint8_t, 20>;

struct claims {
  info_hash swarm{};
  std::string node;  // a node name (peer_identity's rules)
  std::chrono::system_clock::time_point expires;
};

// A grant as a header value (base64, no line breaks) and back. from_header refuses anything
// that is not base64 of at most max_bytes.
[[nodiscard]] std::string to_header(std::string_view grant);
[[nodiscard]] result<std::string> from_header(std::string_view value);

// "40 hex digits" (an info-hash as the origin protocol carries it) → 20 bytes.
[[nodiscard]] result<info_hash> parse_info_hash(std::string_view hex);

// Reads a grant's claims without checking anything (for logs and tests).
[[nodiscard]] result<claims> peek(std::string_view grant);

class signer {
 public:
  // registry-proxy's certificate and key (its tls section's files).
  [[nodiscard]] static result<std::shared_ptr<signer>> load(
      std::string cert_file, std::string key_file,
      std::chrono::milliseconds recheck = std::chrono::seconds(5));
  ~signer();
  signer(const signer&) = delete;
  signer& operator=(const signer&) = delete;

  // A signed grant for `c`. Fails only when the key cannot sign (a cause says why).
  [[nodiscard]] result<std::string> sign(const claims& c);

  struct impl;

 private:
  signer();
  std::unique_ptr<impl> impl_;
};

class verifier {
 public:
  // The CA bundle grants' signers must chain to (the daemon's tls.ca_file).
  [[nodiscard]] static result<std::shared_ptr<verifier>> load(
      std::string ca_file, std::chrono::milliseconds recheck = std::chrono::seconds(5));
  ~verifier();
  verifier(const verifier&) = delete;
  verifier& operator=(const verifier&) = delete;

  // Checks `grant` for a connection from `node` to swarm `swarm` at `now` (see above). The error
  // is protocol_error or permission_denied with a message naming the failed check.
  [[nodiscard]] result<claims> verify(
      std::string_view grant, const info_hash& swarm, std::string_view node,
      std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

  struct impl;

 private:
  verifier();
  std::unique_ptr<impl> impl_;
};

}  // namespace shoal::grant
