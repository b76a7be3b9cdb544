#pragma once
// Manifests: by digest, fetched once, verified (the bytes hash to the digest) and kept for good;
// by tag, resolved upstream with the known manifest types the client accepts and reused for a TTL
// (rows older than stale_if_error are swept from the state index), and served
// stale (with a Warning header) when the upstream is unreachable. The bytes are never
// re-serialized; the Content-Type is the one upstream gave for these bytes.
//
// One fetch however many ask: concurrent requests for the same manifest (repository, tag or
// digest, accepted types) on this replica wait for one fetch, the flight's; a waiter whose
// credential differs from the leader's takes the answer only when it is public, else it fetches
// for itself. On the replica ring (ring.h) a manifest is owned like a blob: by its digest, or by
// "manifest:<upstream>/<repo>:<tag>" for a tag. The owner fetches it upstream; another member
// asks the owner (the pull API with ring::from_header, anonymously first, again with the client's
// credential when the owner refuses it), verifies the bytes against Docker-Content-Digest and
// keeps them. The owner's `Age` header carries how old its tag row is, so a tag is never reused
// longer than tag_ttl after upstream named it, whichever replica asked upstream. When the owner
// does not answer, it is marked down and the next member in the key's order is asked (or
// upstream, when that is this replica).

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "registry-proxy/access.h"
#include "cache/store.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/oci.h"
#include "registry-proxy/config.h"
#include "registry-proxy/ring.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

struct manifest_metrics {
  metrics::counter* upstream_requests = nullptr;
  metrics::counter* stale_served = nullptr;
  metrics::counter* tag_hits = nullptr;
  metrics::counter* digest_mismatch = nullptr;
  metrics::counter* flights_joined = nullptr;  // requests that waited for another's fetch
  metrics::counter* ring_forwarded = nullptr;  // fetches asked of the owning ring member
};

class manifest_service {
 public:
  manifest_service(boost::asio::thread_pool& pool, cache::store& store, state_db& st,
                   upstream_client& uc, access_checker& access, manifest_config cfg,
                   manifest_metrics m)
      : pool_(pool),
        store_(store),
        st_(st),
        uc_(uc),
        access_(access),
        cfg_(std::move(cfg)),
        m_(m) {}

  // Before serving: fetches of manifests another ring member owns go to that member.
  void set_ring(ring* r) { ring_ = r; }
  // At shutdown, once the HTTP clients are stopped: waits for the members' requests.
  void join() { ring_pool_.join(); }

  // `ring_from`: the ring member asking (ring::from_header, checked by the handler); such a
  // request is answered from here, never forwarded again.
  void serve(const selection& sel, const oci::manifest_ref& ref, const credential& cred,
             std::string accept, bool head, http::responder resp, std::string ring_from = {});

  // Blocking: the manifest answer (worker thread). Exposed for tests.
  [[nodiscard]] http::response answer(const selection& sel, const oci::manifest_ref& ref,
                                      const credential& cred, const std::string& accept, bool head,
                                      const std::string& ring_from = {});

  // The known manifest media types the header names, in a fixed order and without parameters
  // ("" when it names none: the client accepts whatever upstream has). The tag cache key part and
  // the Accept sent upstream: types registry-proxy does not know are ignored, so varying them
  // cannot multiply cache keys or upstream requests.
  [[nodiscard]] static std::string normalize_accept(std::string_view accept);

 private:
  struct fetched {
    unsigned status = 0;
    std::string body, media_type, retry_after, message;
    digest dig;
    bool is_public = false;
    bool transport_error = false;
    bool stale = false;       // the owner answered from a stale tag row (its Warning header)
    std::int64_t age_ms = 0;  // how old the owner's tag row was (its Age header)
  };
  // What one flight computes: the fetch (from the owner or upstream), stored by the leader.
  struct want {
    const selection& sel;
    std::string ref;  // the tag, or the digest's string
    bool is_tag;
    std::string accept;   // normalized
    std::string tag_key;  // the tag row's key (tags)
    std::string ring_from;
  };
  struct flight;
  // A request that waits for another's fetch does not hold a thread: it is parked on the flight
  // (park() registers its continuation and the answer is nullopt), and the flight's end runs it
  // again with `resume` (the flight and which of its two keys), which then takes the flight's
  // result without waiting. Null park (answer() for tests): the thread waits.
  struct resume {
    std::shared_ptr<flight> f;
    int key = 0;
  };
  using park_fn = std::function<void(const resume&)>;
  // One request being answered (its continuation when parked).
  struct job {
    selection sel;
    oci::manifest_ref ref;
    credential cred;
    std::string accept;
    bool head;
    http::responder resp;
    std::string ring_from;
  };
  void run(const std::shared_ptr<job>& j, boost::asio::thread_pool& pool, const resume* resumed);
  [[nodiscard]] std::optional<http::response> respond(const selection& sel,
                                                      const oci::manifest_ref& ref,
                                                      const credential& cred,
                                                      const std::string& accept, bool head,
                                                      const std::string& ring_from,
                                                      const park_fn& park, const resume* resumed);
  // The ring key of a manifest: its digest, or "manifest:<upstream>/<repo>:<tag>".
  [[nodiscard]] static std::string ring_key(const want& w);
  // nullopt: parked (see resume).
  [[nodiscard]] std::optional<fetched> obtain(const want& w, const credential& cred,
                                              const park_fn& park = {},
                                              const resume* resumed = nullptr);
  // From `owner` (a ring member) or, when empty, upstream; the leader of a flight stores it.
  [[nodiscard]] fetched fetch_and_store(const want& w, const credential& cred,
                                        const std::string& owner);
  [[nodiscard]] fetched fetch_from_ring(const want& w, const credential& cred, std::string member);
  [[nodiscard]] result<fetched> ask_member(const want& w, const credential& cred,
                                           const std::string& member, bool with_credential);
  [[nodiscard]] fetched fetch_upstream(const selection& sel, const std::string& ref,
                                       const credential& cred, const std::string& accept);
  [[nodiscard]] status store_manifest(const digest& d, const std::string& body,
                                      const std::string& mt, bool is_public,
                                      const std::string& repo_key);
  // A fetched manifest answered from memory (its body moved out).
  [[nodiscard]] static http::response memory_answer(fetched& f, bool head);
  [[nodiscard]] http::response from_store(const digest& d, const std::string& media_type_hint,
                                          bool head, bool stale);
  // At most every 10 minutes: deletes tag rows older than max(tag_ttl, stale_if_error).
  void sweep_tags(std::int64_t now_ms);

  boost::asio::thread_pool& pool_;
  boost::asio::thread_pool ring_pool_{2};  // requests of other ring members
  cache::store& store_;
  state_db& st_;
  upstream_client& uc_;
  access_checker& access_;
  manifest_config cfg_;
  manifest_metrics m_;
  std::atomic<std::int64_t> last_sweep_ms_{0};
  ring* ring_ = nullptr;

  struct flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    fetched out;
    std::string cred_hash;                      // the leader's credential
    std::vector<std::function<void()>> parked;  // continuations of parked waiters (under mu)
  };
  std::mutex flights_mu_;
  std::map<std::string, std::shared_ptr<flight>> flights_;  // guarded by flights_mu_
};

}  // namespace shoal::proxy
