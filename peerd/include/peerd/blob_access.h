#pragma once
// Who may read a blob from this node (security review finding 5): registry-proxy decides who may
// pull what, and peerd's cache must not be a way around it.
//
// A blob registry-proxy said is public (origin::headers::visibility on a metainfo or blob answer)
// is served to anyone. Any other blob (private, or not known since this peerd started) is served
// from the cache, or from a fetch in progress, only to a client whose credential registry-proxy
// confirmed for that repository: a HEAD of /v2/<repo>/blobs/<digest>?ns=.. carrying the client's
// Authorization, which runs registry-proxy's own access check. A refusal is passed on as it came
// (401 with its WWW-Authenticate, 403, 404, 429 with Retry-After); registry-proxy unreachable or
// answering anything else is a 502 (504 timed out) naming the cause, never a serve.
//
// A confirmation is remembered for access.positive_ttl, keyed by a salted sha256 of the
// Authorization value with ns, repository and digest (the salt is random per process, the
// credential itself is never kept). Both memories (confirmed keys, public digests) are bounded
// LRUs in memory only: after a restart every blob not yet seen public is confirmed again (fail
// closed).
//
// Metrics: shoal_peerd_access_checks_total{result="allowed|refused|failed"} (confirmations asked
// of registry-proxy) and shoal_peerd_access_known_total{reason="public|confirmed"} (clients
// served without asking).
// Thread-safe. confirm() blocks (an HTTP round trip): worker threads only, never the HTTP loop.

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/digest.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/origin_protocol.h"
#include "peerd/config.h"

namespace shoal::peerd {

class proxy_link;

class blob_access {
 public:
  struct deps {
    const peerd_config& cfg;
    http::client& http;
    metrics::registry& metrics;
    proxy_link* proxy = nullptr;  // registry-proxy with failover (src/proxy_link.h)
  };
  explicit blob_access(deps d);

  // What registry-proxy said while answering someone: `d` is served to anyone.
  void note_public(const digest& d);
  // registry-proxy served `d` in `where` to the holder of `authorization` (a metainfo 200).
  void note_confirmed(const origin::object_ref& where, const digest& d,
                      const std::string& authorization);

  // Non-blocking: may this client be served without asking registry-proxy?
  [[nodiscard]] bool known_allowed(const origin::object_ref& where, const digest& d,
                                   const std::string& authorization);
  // Blocking: asks registry-proxy. Nothing when the client may read `d` (remembered), else the
  // answer to send the client instead of the blob.
  [[nodiscard]] std::optional<http::response> confirm(const origin::object_ref& where,
                                                      const digest& d,
                                                      const std::string& authorization);
  // known_allowed(), else confirm().
  [[nodiscard]] std::optional<http::response> check(const origin::object_ref& where,
                                                    const digest& d,
                                                    const std::string& authorization);

 private:
  // A map of at most `capacity` keys; inserting beyond drops the least recently used.
  template <class V>
  class lru {
   public:
    explicit lru(std::size_t capacity) : capacity_(capacity ? capacity : 1) {}
    V* find(const std::string& key);
    void put(const std::string& key, V value);
    void erase(const std::string& key);

   private:
    std::size_t capacity_;
    std::list<std::pair<std::string, V>> order_;  // most recently used first
    std::unordered_map<std::string, typename decltype(order_)::iterator> index_;
  };

  [[nodiscard]] std::string key_of(const origin::object_ref& where, const digest& d,
                                   const std::string& authorization) const;

  deps d_;
  std::string salt_;
  std::chrono::steady_clock::duration ttl_;
  std::mutex mu_;
  lru<std::chrono::steady_clock::time_point> confirmed_;  // key → expiry
  lru<bool> public_;                                      // digest hex
  metrics::counter *allowed_, *refused_, *failed_, *known_public_, *known_confirmed_;
};

}  // namespace shoal::peerd
