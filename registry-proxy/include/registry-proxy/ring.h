#pragma once
// The replica ring: several registry-proxy replicas share the upstream work by rendezvous
// hashing (highest random weight) over their base URLs. The owner of a blob digest is the live
// member whose hash of (member, digest) is highest; the owner fetches the blob upstream, the other
// replicas stream it from the owner (a GET of the pull API carrying ring::from_header, which the
// owner never forwards again). Any replica answers any client, and every replica caches and seeds
// what it streamed, so node swarms keep every replica as an origin seed.
//
// Membership is the configured list (ring.members; in Kubernetes the StatefulSet's stable pod
// names) and, with ring.schedulers, every replica that announced itself to the scheduler: each
// probe_interval this replica announces its own URL there (POST /v1/origins) and the answer's
// members join the ring; one that stops announcing leaves it once the scheduler forgets it
// (tracker.origin_members_ttl). Liveness is this replica's own view: every member is probed
// (GET /readyz) each probe_interval, and a member is down from a failed probe or a failed
// transfer from it until a probe succeeds again. Rendezvous hashing moves only a dead member's
// digests, to the member next in each digest's order, so the replicas that saw the same failure
// agree on the new owner.
//
// Threading: owner(), mark_down() and the snapshots are safe from any thread; probes run on the
// HTTP client's thread and the io_context given to start().

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/config.h"
#include "common/error.h"
#include "common/http_client.h"

namespace shoal::proxy {

using namespace std::chrono_literals;

struct ring_config {
  // Every replica's base URL as the others reach it, this one's included (empty: no ring, this
  // replica fetches everything itself).
  std::vector<std::string> members;
  std::string self;  // this replica's entry of members
  // Scheduler base URLs (replicas of one; tried in turn) this replica announces itself to, and
  // learns the other members from (empty: members alone).
  std::vector<std::string> schedulers;
  config::duration probe_interval = 1s;
  config::duration probe_timeout = 1s;
  config::duration connect_timeout = 1s;
  // A transfer from the owner with no bytes for this long is given up and taken over.
  config::duration stall_timeout = 10s;
};
void describe(config::binder& b, ring_config& c);

class ring {
 public:
  // The header a replica sends when it fetches from the owner: its own base URL. The owner
  // serves such a request itself (never forwards it), and refuses it with 421 when its own fetch
  // of the object streams from that very replica (two replicas that disagree on the owner).
  static constexpr std::string_view from_header = "Shoal-Ring-From";

  // Validates the config (self must be a member; URLs http:// or https://, no trailing path).
  // `client` carries the cluster certificate when TLS is on; it must outlive the ring.
  [[nodiscard]] static result<std::unique_ptr<ring>> create(const ring_config& c,
                                                            http::client& client);
  ~ring();
  ring(const ring&) = delete;
  ring& operator=(const ring&) = delete;

  // Starts probing on `io` (a first round at once). Call once.
  void start(boost::asio::io_context& io);
  void stop();

  // The live member owning `key` (a digest's string, a dataset ref); self when every other
  // member is down.
  [[nodiscard]] std::string owner(std::string_view key) const;
  [[nodiscard]] const std::string& self() const { return cfg_.self; }
  [[nodiscard]] bool is_member(std::string_view url) const;
  // The members a scheduler answered (announce()): with the configured ones, the ring's members
  // from now on (at most 64 beyond the configured). Exposed for tests.
  void set_announced(const std::vector<std::string>& urls);
  // A transfer from `member` failed: it is down until a probe answers again.
  void mark_down(const std::string& member, const std::string& why);

  struct member_state {
    std::string url;
    bool up = true;
    std::string last_error;
  };
  [[nodiscard]] std::vector<member_state> members() const;
  [[nodiscard]] std::size_t up_count() const;

  // A request to `member` for `path` (starting with '/'), with the ring's timeouts and this
  // replica's from_header.
  [[nodiscard]] http::client_request request(const std::string& member,
                                             const std::string& path) const;
  [[nodiscard]] http::client& client() { return client_; }

  struct counters {
    std::atomic<std::uint64_t> forwarded{0};  // fetches that streamed from another replica
    std::atomic<std::uint64_t> bytes{0};      // blob bytes received from other replicas
    std::atomic<std::uint64_t> takeovers{0};  // owner failed mid-fetch; the next member took over
    std::atomic<std::uint64_t> refused{0};    // 421 answers (disagreeing owners)
    std::atomic<std::uint64_t> probe_failures{0};
    std::atomic<std::uint64_t> announce_failures{0};  // announces to the scheduler that failed
  };
  counters& stats() { return stats_; }

  // The rendezvous score of (member, key): exposed for tests.
  [[nodiscard]] static std::uint64_t score(std::string_view member, std::string_view key);

 private:
  ring(ring_config c, http::client& client);
  void probe_round();
  void announce();
  void set_state(const std::string& url, bool up, const std::string& why);

  ring_config cfg_;
  http::client& client_;
  mutable std::mutex mu_;
  std::vector<member_state> members_;  // guarded by mu_; the configured first, in their order
  std::size_t next_scheduler_ = 0;     // guarded by mu_: the scheduler replica asked next
  bool announce_failing_ = false;      // guarded by mu_: the last announce failed (logged once)
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);
  counters stats_;
};

}  // namespace shoal::proxy
