#pragma once
// Gets objects into the node's cache: the one place that asks registry-proxy for an object's
// metainfo (the origin protocol, common/origin_protocol.h: long-polled while registry-proxy
// answers 202 with its progress, one request per object however many ask) and starts the
// download. A 200 joins the object's swarm (swarm_manager::fetch; a stalled swarm falls back to
// registry-proxy over HTTP, swarm_fallback.cc); a 202 announcing chunks starts the chunked fetch
// (chunked.h), which the fetcher keeps in its table until it ends. The cache commits the object
// once its sha256 matches.
//
// Users: the mirror (mirror.h) joins a fetch and streams the running download to containerd
// (join(), find()); the pull API and prewarm (prewarm.h) block until the object is committed
// (ensure()); datasets (datasets.h) fetch pack groups (fetch_group()). /status shows the chunked
// fetches in progress (status_snapshot()).
//
// Metrics: shoal_peerd_swarm_fetches_total (fetches started for containerd's GETs),
// shoal_peerd_chunked_fetches_total, shoal_peerd_metainfo_retries_total (a metainfo call that
// stalled, asked again) and shoal_peerd_forward_errors_total (shared with the mirror: a metainfo
// request registry-proxy could not answer counts there too).
//
// registry-proxy shedding load (429 with Retry-After, its fetch queue full) is waited out: the
// metainfo request is asked again after Retry-After (at most 5 s a time) until
// swarm.fallback_deadline has passed since the first request, then the fetch fails 503 with
// Retry-After and the cause.
//
// Threading: public methods are thread-safe. join() never blocks (the metainfo long-poll runs
// on the worker pool); ensure() blocks and must run on a worker thread, never the HTTP loop.
// Lifetime: outlives the mirror, prewarm and datasets, dies before the swarm.

#include <boost/asio/thread_pool.hpp>

#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/http_client.h"
#include "common/http_range.h"
#include "common/metrics.h"
#include "common/origin_protocol.h"
#include "peerd/chunked.h"
#include "peerd/config.h"
#include "peerd/state_db.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

class proxy_link;

class blob_access;

// A fetch in progress, what a reader streams from: one download of the whole object, or the
// object's chunks. Empty (false) when there is none.
struct fetch_handle {
  std::shared_ptr<download> dl;
  std::shared_ptr<chunked_blob> chunked;
  explicit operator bool() const { return dl || chunked; }
};

// A fetch that could not start: why, and the HTTP status containerd gets for it (registry-proxy's
// own refusal, 502 unreachable or garbled, 504 timed out, 503 retry, 500 local failure).
struct fetch_failure {
  unsigned status = 502;
  error why;
  std::string retry_after;  // with 429 and 503: when to ask again (seconds), passed on
};
using fetch_start = std::expected<fetch_handle, fetch_failure>;

// shoal_peerd_forward_errors_total, which the mirror's forwards and the fetcher's metainfo
// requests share: requests registry-proxy could not answer (unreachable or timed out).
metrics::counter& forward_errors_counter(metrics::registry& r);

class fetcher {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    swarm_manager& swarm;
    http::client& http;
    boost::asio::thread_pool& pool;
    metrics::registry& metrics;
    // Where a chunked blob records its metainfo once joined (null: no chunked fetches; a 202 is
    // long-polled until the metainfo is ready).
    state_db* state = nullptr;
    // Told what registry-proxy's metainfo answers say about access (public, or this credential
    // confirmed for the repository); null: nobody listens.
    blob_access* access = nullptr;
    // The registry-proxy replicas, with failover (src/proxy_link.h); null: the one configured URL.
    proxy_link* proxy = nullptr;
  };
  // A chunked fetch in progress, for status.
  struct chunked_progress {
    digest id;
    std::uint64_t size = 0;
    std::uint32_t chunks_done = 0, chunks = 0;
  };
  struct snapshot {
    std::vector<chunked_progress> chunked;
    std::uint64_t chunked_fetches = 0;  // started since peerd started
  };

  explicit fetcher(deps d);
  ~fetcher();
  fetcher(const fetcher&) = delete;
  fetcher& operator=(const fetcher&) = delete;

  // The fetch of `d` in progress here (a download, else a running chunked fetch), or empty.
  [[nodiscard]] fetch_handle find(const digest& d);

  // Non-blocking: joins the fetch of `d`, starting it when nobody asked yet (one metainfo
  // request per object; the first caller's `where` and `authorization` are used). `done` gets
  // the running fetch or why it could not start, on a worker thread (or at once, on the caller's
  // thread, when the answer is already known). Does not look at the cache or at downloads
  // already running: find() first.
  // `range`: the starting client's single bounded Range when it has one: a blob
  // fetched in chunks asks for it at once (chunked_blob::want_range), before its first chunk
  // list, so a lazy reader's first bytes do not wait for the first chunk to be cut.
  void join(const origin::object_ref& where, const digest& d, const std::string& authorization,
            std::function<void(fetch_start)> done,
            std::optional<http::byte_range> range = std::nullopt);

  // Blocking: makes sure `d` is committed in the local cache (waiting for the fetch in progress,
  // or starting one). Returns once it is, or the error. A fetch it starts runs its metainfo
  // request on the caller's thread, not through join(): a blocked worker never waits for work
  // queued behind it on the same pool.
  [[nodiscard]] status ensure(const origin::object_ref& where, const digest& d,
                              const std::string& authorization);

  // Starts (or joins) the download of a dataset pack group.
  [[nodiscard]] result<std::shared_ptr<group_download>> fetch_group(group_spec spec);

  [[nodiscard]] snapshot status_snapshot();

 private:
  struct job;
  void lead(const std::shared_ptr<job>& j, const origin::object_ref& where, const digest& d,
            const std::string& auth, std::optional<http::byte_range> range);
  // Gets the metainfo (long-polling while registry-proxy fetches) and starts the download, or
  // the chunked fetch when registry-proxy cuts the object into chunks (`range`: join()).
  [[nodiscard]] fetch_start start(const origin::object_ref& where, const digest& d,
                                  const std::string& auth,
                                  std::optional<http::byte_range> range = std::nullopt);
  // The two ways start goes on: a 200 (metainfo) joins the swarm, a 202 announcing chunks starts
  // the chunked fetch.
  [[nodiscard]] fetch_start start_swarm(const origin::object_ref& where, const digest& d,
                                        const http::full_response& answer, const std::string& auth);
  [[nodiscard]] fetch_handle start_chunked(const origin::object_ref& where, const digest& d,
                                           const origin::progress& p, const std::string& auth);
  [[nodiscard]] std::shared_ptr<chunked_blob> find_chunked(const digest& d);
  [[nodiscard]] status wait_committed(const std::shared_ptr<download>& dl);
  [[nodiscard]] std::string proxy_url(const std::string& path_and_query) const;

  deps d_;
  std::mutex mu_;
  std::map<digest, std::shared_ptr<job>> jobs_;              // metainfo request in progress
  std::map<digest, std::shared_ptr<chunked_blob>> chunked_;  // chunked fetches (guarded by mu_)
  // Every chunked fetch whose threads may still run (a finished one still seeds its blob), for
  // the destructor to stop and join them before the swarm and cache go (guarded by mu_).
  std::vector<std::weak_ptr<chunked_blob>> chunked_started_;
  metrics::counter* swarm_fetches_;
  metrics::counter* chunked_fetches_;
  metrics::counter* metainfo_retries_;
  metrics::counter* forward_errors_;
};

}  // namespace shoal::peerd
