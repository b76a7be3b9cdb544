#pragma once
// Grants between members (common/grant.h has the format): a peer uploads a piece of a swarm only
// to a connection whose node presented registry-proxy's grant for that swarm.
//
// The plugin does both sides on every connection of an SSL torrent:
//   - sends this party's grant for the torrent (from its grant_book) under "shoal_grant" in the
//     BitTorrent extension handshake;
//   - checks the grant the other side sent against the node named in the other side's
//     certificate (the one the TLS handshake verified) and the torrent's v1 info-hash. Until a
//     grant verified, the connection's piece requests are not served: the first one is refused
//     and the connection closed, with a log line naming the node, the swarm and the reason.
// A seed never requests, so it needs no grant; registry-proxy's seeder needs none either.
// Plain torrents (no TLS, no certificates) are left alone: plain mode gives the check up.
//
// libtorrent offers plugins no access to a connection's TLS session, so the peer's certificate
// is read through libtorrent 2.0's own peer_connection type (peer_connection_handle::
// native_handle(), its socket's ssl_stream, SSL_get0_peer_certificate). A connection whose
// certificate cannot be read is treated as having no grant (fail closed).
//
// Runs on libtorrent's network thread; the book is shared with the threads that add downloads.

#include <libtorrent/extensions.hpp>
#include <libtorrent/sha1_hash.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/grant.h"

namespace shoal::swarm {

// The grants this party holds for its downloads: info-hash → grant. Thread-safe. Bounded: expired
// grants are dropped as others are added, and beyond max_entries the one expiring first goes.
class grant_book {
 public:
  static constexpr std::size_t max_entries = 65536;
  void put(const lt::sha1_hash& swarm, std::string grant,
           std::chrono::system_clock::time_point expires);
  // The grant for `swarm`, empty when none is held or it expired.
  [[nodiscard]] std::string get(const lt::sha1_hash& swarm) const;
  [[nodiscard]] std::size_t size() const;

 private:
  struct entry {
    std::string grant;
    std::chrono::system_clock::time_point expires;
  };
  mutable std::mutex mu_;
  std::map<lt::sha1_hash, entry> by_swarm_;
};

struct grant_counters {
  std::atomic<std::uint64_t> accepted{0};  // connections whose grant verified
  std::atomic<std::uint64_t> refused{0};   // connections refused pieces (no or a bad grant)
};

// The plugin (see above). `book` holds what this party sends; `check` verifies what peers send.
[[nodiscard]] std::shared_ptr<lt::plugin> grants_plugin(std::shared_ptr<grant_book> book,
                                                        std::shared_ptr<grant::verifier> check,
                                                        std::shared_ptr<grant_counters> counters);

}  // namespace shoal::swarm
