#pragma once
// Private content is not served to strangers: an object fetched with a client's credentials from
// a repository the upstream does not serve anonymously is served from the cache to a later
// client only after the upstream confirmed, with that client's own credential (a HEAD of the
// same object in the same repository), that it may pull it. Positive answers are cached briefly,
// keyed by a salted hash of the credential; the credential itself is never kept. A credential
// upstream has not accepted lately passes the credential gate first (credential_gate.h): over
// its limits the answer is 429, without asking upstream.

#include <boost/asio/thread_pool.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "registry-proxy/lru.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

struct access_verdict {
  bool allowed = false;
  unsigned status = 0;  // when denied: 401, 403, 404, 429 (credential gate) or 502
  std::string message;
  std::string retry_after;  // with 429
};

class access_checker {
 public:
  access_checker(upstream_client& uc, state_db& st, std::chrono::milliseconds positive_ttl,
                 std::size_t max_entries = 10000)
      : uc_(uc),
        st_(st),
        ttl_(positive_ttl),
        positive_(max_entries),
        anonymous_refused_(max_entries) {}

  // Blocking (worker thread). `object_path` is the upstream path to HEAD, e.g.
  // "/v2/<repo>/blobs/<digest>". `is_public`: the object is known to be served anonymously.
  [[nodiscard]] access_verdict check(const selection& sel, const digest& d,
                                     const std::string& object_path, const credential& cred);

  struct counters {
    std::uint64_t cached_allow = 0, upstream_allow = 0, denied = 0;
  };
  [[nodiscard]] counters get_counters() const;

 private:
  // An anonymous client: refused, unless the object is private content of other repositories
  // only, which upstream may serve anonymously in this one (asked once per repository).
  [[nodiscard]] access_verdict check_anonymous(const selection& sel, const digest& d,
                                               const std::string& object_path,
                                               const credential& cred,
                                               const std::optional<visibility>& vis,
                                               const std::string& repo_key);

  upstream_client& uc_;
  state_db& st_;
  std::chrono::milliseconds ttl_;
  mutable std::mutex mu_;
  lru_map<std::chrono::steady_clock::time_point> positive_;           // key → expiry (bounded)
  lru_map<std::chrono::steady_clock::time_point> anonymous_refused_;  // "anon|repo|digest"
  counters counters_;
};

}  // namespace shoal::proxy
