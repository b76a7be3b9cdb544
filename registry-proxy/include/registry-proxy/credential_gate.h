#pragma once
// credential_gate: what a credential registry-proxy has not seen accepted yet may cost upstream.
// Every such credential makes a blocking upstream call (an access HEAD, a token request) on the
// worker pool, so a client sending random Authorization values could starve the pool and spend
// the upstream's patience. The gate lets such a call through only while (a) fewer than
// `max_concurrent` run, (b) the client's address has a token in its bucket and (c) the global
// bucket has one; otherwise the caller answers 429 at once. Credentials upstream accepted
// recently (note_accepted) pass freely. Thread-safe; every table is a bounded LRU.

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "registry-proxy/lru.h"

namespace shoal::proxy {

struct credential_gate_limits {
  double per_client_rate = 5;  // tokens per second per client address
  double per_client_burst = 20;
  double global_rate = 50;  // tokens per second, all clients
  double global_burst = 100;
  std::size_t max_concurrent = 4;     // unseen-credential calls running at once
  std::size_t table_entries = 10000;  // clients and accepted credentials remembered
  std::chrono::seconds accepted_ttl{600};
};

class credential_gate {
 public:
  using clock = std::chrono::steady_clock;
  explicit credential_gate(credential_gate_limits l = {});

  // Held while the upstream call runs; releases the concurrency slot when dropped.
  class pass {
   public:
    pass() = default;
    explicit pass(credential_gate* g) : g_(g, [](credential_gate* x) { x->release(); }) {}

   private:
    std::shared_ptr<credential_gate> g_;
  };

  // May a call for credential `cred_hash` from `client` go upstream now? An error (errc::busy)
  // says why not.
  [[nodiscard]] result<pass> admit(const std::string& client, const std::string& cred_hash,
                                   clock::time_point now = clock::now());
  // Upstream accepted this credential: it passes freely for accepted_ttl.
  void note_accepted(const std::string& cred_hash, clock::time_point now = clock::now());
  [[nodiscard]] std::uint64_t refused() const;

 private:
  struct bucket {
    double tokens = 0;
    clock::time_point at;
  };
  void release();
  static bool take(bucket& b, double rate, double burst, clock::time_point now);

  credential_gate_limits lim_;
  mutable std::mutex mu_;
  std::size_t running_ = 0;
  bucket global_;
  lru_map<bucket> clients_;
  lru_map<clock::time_point> accepted_;  // hash → until
  std::uint64_t refused_ = 0;
};

}  // namespace shoal::proxy
