#pragma once
// The registry-proxy replicas' ring membership (registry-proxy/include/registry-proxy/ring.h).
// Each replica announces its base URL here every ring.probe_interval (POST /v1/origins); the
// answer lists every replica that announced itself within `ttl`, which the replica adds to its
// ring. A replica that stops announcing (dead, or removed by scaling down) leaves every ring
// within `ttl` plus one announce interval; a new one joins as soon as the others' next announce.
//
// With shared state (shared_state.h) the list lives in Redis, so every scheduler replica answers
// the same; when Redis does not answer, this replica's own list answers, marked stale. Without
// shared state it is this scheduler's own.
//
// Threading: safe from any thread.

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

namespace shoal::scheduler {

class shared_state;

class origin_members {
 public:
  using clock = std::chrono::steady_clock;
  // At most this many members (a certificate holder announcing made-up URLs fills no memory).
  static constexpr std::size_t max_members = 64;

  explicit origin_members(std::chrono::milliseconds ttl, shared_state* shared = nullptr,
                          std::function<clock::time_point()> now = clock::now);

  struct listing {
    std::vector<std::string> members;  // sorted
    bool stale = false;                // Redis did not answer: this replica's own view
  };
  // Records `url` (a base URL, validated by valid_url) and lists the members. Errors:
  // too_large when `url` is new and max_members are listed.
  [[nodiscard]] result<listing> announce(const std::string& url);
  [[nodiscard]] listing list();
  [[nodiscard]] std::chrono::milliseconds ttl() const { return ttl_; }

  // http:// or https://, a host, an optional port, nothing after; at most 256 bytes.
  [[nodiscard]] static bool valid_url(const std::string& url);

 private:
  [[nodiscard]] result<listing> local(const std::string& url);

  std::chrono::milliseconds ttl_;
  shared_state* shared_;
  std::function<clock::time_point()> now_;
  std::mutex mu_;
  std::map<std::string, clock::time_point> seen_;  // guarded by mu_
};

}  // namespace shoal::scheduler
