#pragma once
// Blobs: served from the cache with sendfile, or fetched from upstream exactly once however many
// clients ask at the same time (single flight). Every waiting client is streamed the bytes as
// they arrive; a Range on an in-flight blob is answered as soon as its bytes exist. The bytes are
// hashed while they stream (sha256 for the object, sha1 per piece for its metainfo); a digest
// mismatch discards the object and aborts the clients' connections. A broken upstream transfer
// resumes with a Range request.

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "registry-proxy/access.h"
#include "cache/store.h"
#include "common/http_server.h"
#include "registry-proxy/chunks.h"
#include "registry-proxy/fetch_queue.h"
#include "swarm/metainfo.h"
#include "common/oci.h"
#include "common/metrics.h"
#include "common/origin_protocol.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

class blob_fetch;
class ring;

// What one upstream transfer is shared by (single flight): the object, the upstream and the
// repository it is fetched from. A client asking through another repository gets its own fetch
// and so its own answer (never another repository's 404). A client with a credential that
// joined a fetch refused for another credential (or none) gets a fetch of its own, keyed by its
// credential's hash too (`cred`). The bytes are written once all the same (a second write
// follows the first in the cache, verified before its last byte is served).
struct flight_key {
  digest d;
  std::string upstream, repo, cred;  // cred: a credential's hash for its own fetch, else empty
  bool operator<(const flight_key& o) const {
    return std::tie(d, upstream, repo, cred) < std::tie(o.d, o.upstream, o.repo, o.cred);
  }
};

// The answer to a metainfo request.
struct metainfo_answer {
  unsigned status = 200;  // 200 torrent; 202 not ready yet; 4xx/5xx error
  std::string torrent;    // status 200: the .torrent bytes without trackers (caller adds them)
  std::optional<object_metainfo> meta;
  std::uint64_t bytes_done = 0, size = 0;  // status 202: progress
  std::uint64_t chunk_size = 0;            // status 202: the object is cut into chunks of this size
  std::string message;
  std::string www_authenticate, retry_after;
  bool is_public = false;  // status 200: served to anyone (origin::headers::visibility)
};

struct blob_metrics {
  metrics::counter* upstream_gets = nullptr;
  metrics::counter* upstream_bytes = nullptr;
  metrics::counter* joins = nullptr;
  metrics::counter* digest_mismatch = nullptr;
  metrics::counter* served_cache_bytes = nullptr;
  metrics::counter* fetch_failures = nullptr;
  metrics::counter* chunks = nullptr;           // chunk objects committed
  metrics::counter* not_cut = nullptr;          // large blobs left whole: no room for their chunks
  metrics::counter* upstream_ranges = nullptr;  // ranges answered by upstream (ranges.*)
  metrics::counter* upstream_range_bytes = nullptr;      // their bytes
  metrics::counter* upstream_range_fallbacks = nullptr;  // asked, then served by the fetch
};

// Small ranges far ahead of a fetch in flight (config: ranges.*).
struct range_passthrough {
  std::uint64_t max_bytes = 0;  // 0: never
  std::uint64_t ahead = 0;
  int concurrency = 4;
};

class blob_service {
 public:
  blob_service(boost::asio::io_context& io, boost::asio::thread_pool& pool, cache::store& store,
               state_db& st, upstream_client& uc, access_checker& access, blob_metrics m);
  ~blob_service();

  // GET or HEAD of /v2/<name>/blobs/<digest>, the upstream already chosen. Answers via `resp`.
  // `ring_from`: the ring member asking (its ring::from_header), which this replica serves
  // itself, never from another member.
  void serve(const selection& sel, const digest& d, const credential& cred, bool head,
             http::responder resp, std::string ring_from = {});

  // The replica ring (ring.h): fetches of digests another member owns stream from that member.
  // Null (the default): every fetch goes upstream. Call before serving.
  void set_ring(ring* r) { ring_ = r; }
  [[nodiscard]] ring* replica_ring() const { return ring_; }

  // The metainfo of `d`, fetching the object if needed and waiting at most `wait` for it.
  // `accept_chunks`: the asker understands chunk objects (peerd sends chunks=1); a large object
  // is then cut into chunks and the answer is 202 with its chunk size as soon as it is.
  void metainfo(const selection& sel, const digest& d, const credential& cred,
                std::chrono::milliseconds wait, bool accept_chunks,
                std::function<void(metainfo_answer)> done);

  // Called (on a worker thread) after an object is committed and its metainfo stored.
  void on_committed(std::function<void(const digest&, const object_metainfo&)> cb) {
    committed_cb_ = std::move(cb);
  }

  // At most `n` upstream fetches started by metainfo requests (the swarm path) run at once per
  // upstream; more wait in that upstream's lane of the queue (fetch_queue.h: round robin among
  // clients) (0: no limit). Fetches for HTTP clients never wait: they start at once and count
  // toward the limit. Call before serving.
  void set_fetch_limit(int n) { fetch_limit_ = n; }
  // The queue's bounds: beyond them a metainfo request is answered 429. Call before serving.
  void set_queue_limits(std::size_t total, std::size_t per_client) {
    queue_ = fetch_queue<std::shared_ptr<blob_fetch>>(total, per_client);
  }
  // Objects at least twice this long that peerd waits for are cut into chunk objects of this
  // size (chunks.h); 0: never. Call before serving.
  void set_chunk_size(std::uint64_t n) { chunk_size_ = n; }
  // A bounded Range of at most p.max_bytes of a blob this replica fetches from upstream, starting
  // at least p.ahead beyond the bytes written so far, is asked of upstream on its own
  // (upstream_range.h) instead of waiting for the fetch to get there. Call before serving.
  void set_range_passthrough(range_passthrough p) { ranges_ = p; }
  [[nodiscard]] std::uint64_t chunk_size() const { return chunk_size_; }
  // Whether the cache can hold a blob of `size` bytes, whose own write is already reserved, a
  // second time as chunk objects: every chunk stays pinned while it is seeded, so without the
  // room the watermark pass would evict the rest of the cache and then fail the chunks. Else
  // `why` says what is short and the blob swarms whole once committed.
  [[nodiscard]] bool room_for_chunks(std::uint64_t size, std::string& why) const;
  // The chunks of a blob being fetched or fetched recently (null when it was not chunked).
  [[nodiscard]] std::shared_ptr<chunk_list> chunks_of(const digest& parent) const;
  // Shared by the fetch machinery (chunker's worker thread).
  void register_chunks(const std::shared_ptr<chunk_list>& c);
  [[nodiscard]] status commit_chunk(const chunk_entry& e, const std::string& bytes,
                                    const object_metainfo& m, bool is_public,
                                    const std::string& repo_key);
  // The chunk-list endpoint (origin::paths::chunks + <parent>): the chunks published so far,
  // once more than `have` are (or the list is complete or failed, or `wait` passed). Answers
  // status and a JSON body (origin::encode(chunk_list), or the plain error body).
  void chunks(const selection& sel, const digest& parent, const credential& cred, std::size_t have,
              std::chrono::milliseconds wait, std::function<void(unsigned, std::string)> done);
  // The metainfo of chunk object `chunk` of `parent`: access is that of the parent blob.
  void chunk_metainfo(const selection& sel, const digest& parent, const digest& chunk,
                      const credential& cred, std::function<void(metainfo_answer)> done);

  [[nodiscard]] std::size_t inflight_count() const;
  // Fetches waiting for their turn (set_fetch_limit).
  [[nodiscard]] std::size_t queued_count() const;
  // Stops accepting new fetches and cancels the ones in flight (shutdown).
  void shutdown();

  // Shared by the fetch machinery.
  void finish_fetch(const std::shared_ptr<blob_fetch>& f);
  // Gives a fetch's upstream slot to the next queued fetch (once its transfer is over).
  void release_slot(const std::shared_ptr<blob_fetch>& f);
  // Every blob byte received from any upstream (a monotonic clock of upstream progress).
  void note_upstream_bytes(std::uint64_t n) { upstream_progress_.fetch_add(n); }
  [[nodiscard]] std::uint64_t upstream_progress() const { return upstream_progress_.load(); }
  [[nodiscard]] boost::asio::thread_pool& pool() { return pool_; }
  [[nodiscard]] cache::store& store() { return store_; }
  [[nodiscard]] state_db& state() { return st_; }
  [[nodiscard]] upstream_client& upstreams() { return uc_; }
  [[nodiscard]] const blob_metrics& counters() const { return m_; }
  void notify_committed(const digest& d, const object_metainfo& m) {
    if (committed_cb_) committed_cb_(d, m);
  }

 private:
  void serve_cached(const selection& sel, const digest& d, const credential& cred, bool head,
                    http::responder resp);
  void serve_from_fetch(const std::shared_ptr<blob_fetch>& f, const selection& sel,
                        const credential& cred, bool head, http::responder resp);
  // Serves `d` from the fetch this request starts or joins (`personal`, `ring_from`: see
  // fetch_opts).
  void serve_fetched(const selection& sel, const digest& d, const credential& cred, bool head,
                     bool personal, http::responder resp, const std::string& ring_from = {});
  void metainfo_cached(const selection& sel, const digest& d, const credential& cred,
                       const std::function<void(metainfo_answer)>& done);
  void metainfo_fetch(const selection& sel, const digest& d, const credential& cred,
                      std::chrono::milliseconds wait, bool accept_chunks, bool personal,
                      std::function<void(metainfo_answer)> done);
  void head_upstream(const selection& sel, const digest& d, const credential& cred,
                     http::responder resp);
  // The body of [off, off + len) of fetch `f`'s object (written to `infl`): from upstream on its
  // own when the range is small and far ahead of the fetch (set_range_passthrough), else from the
  // fetch's bytes.
  std::unique_ptr<http::body_source> open_range(const std::shared_ptr<blob_fetch>& f,
                                                const std::shared_ptr<cache::inflight_object>& infl,
                                                const selection& sel, const credential& cred,
                                                std::uint64_t off, std::uint64_t len);
  struct fetch_opts {
    // The caller wants the metainfo (pieces are hashed as bytes arrive) and waits through
    // metainfo long-polls, so the fetch may wait its turn in the queue.
    bool for_metainfo = false;
    bool for_chunks = false;
    // A fetch keyed by the client's credential too (flight_key::cred), for a client whose
    // credential the shared fetch's refusal does not speak for.
    bool personal = false;
    // A ring member asks (ring::from_header): a new fetch goes upstream, and joining a fetch
    // that streams from that very member is refused (421, `misdirected`).
    std::string ring_from;
    bool* misdirected = nullptr;
    std::string* refused = nullptr;  // why, when null is returned
  };
  // Null when the queue is full (for everyone or for this client).
  std::shared_ptr<blob_fetch> join_or_start(const selection& sel, const digest& d,
                                            const credential& cred, bool& started,
                                            const fetch_opts& o);
  // A fetch of `d` (any upstream and repository) made as registry-proxy whose bytes matched the
  // digest, or fetches_.end(). Called with mu_ held.
  std::map<flight_key, std::shared_ptr<blob_fetch>>::iterator verified_public_locked(
      const digest& d);
  // Starts `upstream`'s queued fetches while fewer than fetch_limit_ of its fetches run. Called
  // with mu_ held; returns the fetches to start once it is released.
  std::vector<std::shared_ptr<blob_fetch>> admit_locked(const std::string& upstream);
  [[nodiscard]] bool room_locked(const std::string& upstream) const;
  [[nodiscard]] result<metainfo_answer> cached_metainfo(const digest& d);
  // May `cred` read blob `parent` (whose chunks it asks for)? Its fetch in flight answers for it.
  [[nodiscard]] access_verdict parent_access(const selection& sel, const digest& parent,
                                             const credential& cred);

  boost::asio::io_context& io_;
  boost::asio::thread_pool& pool_;
  cache::store& store_;
  state_db& st_;
  upstream_client& uc_;
  access_checker& access_;
  blob_metrics m_;
  std::function<void(const digest&, const object_metainfo&)> committed_cb_;
  mutable std::mutex mu_;
  std::map<flight_key, std::shared_ptr<blob_fetch>> fetches_;
  // Waiting for a slot (guarded by mu_).
  fetch_queue<std::shared_ptr<blob_fetch>> queue_{1024, 64};
  // Admitted and not finished, per upstream (guarded by mu_).
  std::map<std::string, std::size_t> running_;
  int fetch_limit_ = 0;
  std::uint64_t chunk_size_ = 0;
  range_passthrough ranges_;
  std::shared_ptr<std::atomic<int>> ranges_running_ = std::make_shared<std::atomic<int>>(0);
  std::map<digest, std::shared_ptr<chunk_list>> chunk_lists_;  // guarded by mu_
  std::deque<digest> chunk_order_;                             // oldest first (guarded by mu_)
  std::atomic<std::uint64_t> upstream_progress_{0};
  std::atomic<bool> stopping_{false};
  ring* ring_ = nullptr;
};

// What a 401 from registry-proxy asks for.
inline constexpr std::string_view basic_challenge = "Basic realm=\"shoal registry-proxy\"";
// The spec's JSON error answer, as registry-proxy sends it (origin::oci_error with its challenge).
[[nodiscard]] inline http::response oci_error(unsigned status, oci::error_code code,
                                              std::string_view message) {
  return origin::oci_error(status, code, message, basic_challenge);
}

}  // namespace shoal::proxy
