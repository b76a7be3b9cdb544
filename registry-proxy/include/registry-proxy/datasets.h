#pragma once
// Datasets in registry-proxy: declarations resolved into content-addressed manifests, and the
// groups of a manifest (single objects and packs) served as torrents and seeded like blobs.
//
//   POST .../datasets                             declare (JSON declaration); resolution starts
//   GET  .../datasets                             every dataset and its state
//   GET  .../datasets/<name>@<version>            state, progress, manifest digest, error
//   GET  .../datasets/<name>@<version>/manifest             the canonical manifest
//   GET  .../datasets/<name>@<version>/objects/<digest>     one object (Range; HTTP fallback)
//   GET  .../dataset-metainfo/<name>@<version>/<group>      a group's torrent (Shoal-Seed)
// (the paths, parameters and answers are the origin protocol's: common/origin_protocol.h)
//
// Resolution lists the origin, fetches every selected object once (in parallel, resumable,
// streamed through a staging file into the cache), builds the manifest and the metainfo of every
// group. A version is pinned to its manifest digest for good: declaring the same name@version
// again with another origin or other globs is refused (409), and an object that must be fetched
// again (it was evicted) and whose origin bytes changed is refused with "origin changed under
// version ...: declare a new version".
//
// On disk, under `datasets.dir`: datasets/<name>@<version>.json (declaration, state, manifest
// digest; "standby" for a copy of another ring member's record), manifests/<hex>.json (canonical
// manifests), packs/<pack key>.torrent (pack metainfo; single objects keep theirs in the state_db
// like blobs).
//
// Lifecycle: construct, start() (loads the records and resumes resolutions that were running),
// serve, stop() (cancels and joins). Threading: handlers may be called on any io thread; every
// blocking step runs on the service's own threads (`max_resolving` resolver threads taking
// declarations in arrival order from a queue of at most `max_queued`, beyond which a declaration
// is refused with 429, and a pool of `parallel_fetches` threads for origin fetches and group
// preparation).

#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/dataset.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "swarm/metainfo.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "registry-proxy/dataset_origin.h"
#include "registry-proxy/state_db.h"

namespace shoal::proxy {

class seeder;

struct dataset_service_options {
  std::string dir;          // records, manifests, pack torrents
  std::string staging_dir;  // on the cache's filesystem
  int parallel_fetches = 8;
  int max_resolving = 4;          // resolver threads (datasets resolved at once)
  std::size_t max_queued = 1000;  // resolutions waiting for one; more declarations get 429
  dataset::grouping_policy policy;
  origin_options origin;
  std::chrono::seconds resolve_pin{
      3600};                          // objects fetched by a resolution stay at least this long
  std::vector<std::string> trackers;  // announce URLs written into group torrents
  std::string seed_endpoint;          // Shoal-Seed ("ip:port"), empty without a seeder
  // The grant for a metainfo answer to `caller` for the swarm named (hex info-hash): empty when
  // none is due (see common/grant.h). Unset: no grants.
  std::function<std::string(const tls::peer_identity& caller, const std::string& info_hash)>
      grant_for;
  // Called with a dataset's record (its JSON, as saved under dir) each time this replica saves a
  // record it resolves itself, and for each such record at start(): the replica ring copies it to
  // the other members (dataset_copies.h). Unset: no copies. Runs on the caller's thread; must
  // not block.
  std::function<void(const std::string& ref, const std::string& record_json)> on_record;
  // A ready version of `ref` another ring member holds: its manifest digest and the manifest's
  // text. Asked before a resolution interrupted by a stop is resumed: while this replica was
  // away the next member may have resolved the ref; resolving it again could pin another
  // manifest for the same version (the origin may have changed). A member still resolving it
  // is waited for (it took the ref over while this replica was away). Runs on a resolver thread;
  // may block (bounded by the ring's timeouts and the wait; `stop` ends it). Unset, or nothing
  // found: the resolution resumes.
  std::function<std::optional<std::pair<digest, std::string>>(const std::string& ref,
                                                              const std::atomic<bool>& stop)>
      ready_elsewhere;
};

struct dataset_metrics {
  metrics::counter* origin_gets = nullptr;
  metrics::counter* origin_bytes = nullptr;
  metrics::counter* origin_changed = nullptr;
  metrics::counter* resolved = nullptr;
  metrics::counter* resolve_failures = nullptr;
};

class dataset_service {
 public:
  dataset_service(dataset_service_options o, boost::asio::io_context& io, cache::store& store,
                  state_db& st, http::client& http, seeder* sd, dataset_metrics m);
  ~dataset_service();
  dataset_service(const dataset_service&) = delete;
  dataset_service& operator=(const dataset_service&) = delete;

  [[nodiscard]] status start();
  // Refuses new work and makes running fetches give up; stop() then joins.
  void request_stop() { stop_.store(true); }
  void stop();

  // Routes origin::paths::datasets and dataset_metainfo; false when the path is not ours.
  bool handle(http::request& req, const http::responder& resp);

  // A copy of another ring member's record of `ref` (`record_json` as that member saved it, and
  // the canonical manifest's text when the record is ready; empty otherwise). Kept as a standby
  // record: it answers once this replica owns the ref (its owner is away), and a standby record
  // still resolving is resolved here at the first request for it. A record this replica resolves
  // itself is never replaced, nor a ready one by one that is not. Returns what was done ("kept",
  // "unchanged", "own record kept"); invalid copies are refused (invalid_argument).
  [[nodiscard]] result<std::string> accept_copy(const std::string& ref,
                                                std::string_view record_json,
                                                std::string_view manifest_text);
  // Whether the canonical manifest `md` is on disk here.
  [[nodiscard]] bool has_manifest(const digest& md) const;

  [[nodiscard]] std::size_t resolving() const;
  // This replica's own records (not standby copies), as (ref, record JSON): what a ring member
  // that joined gets copied (dataset_copies.h).
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> own_records() const;
  // The dataset list's JSON array (GET origin::paths::datasets): this replica's datasets.
  [[nodiscard]] std::string list_json();

 private:
  struct record;
  struct group_job;

  void declare(const http::request& req, const http::responder& resp);
  void list(const http::responder& resp);
  void status_of(const std::string& ref, const http::responder& resp);
  void serve_manifest(const std::string& ref, const http::responder& resp);
  void serve_object(const std::string& ref, std::string_view dig, const http::responder& resp);
  void serve_metainfo(const std::string& ref, std::string_view group,
                      std::chrono::milliseconds wait, const tls::peer_identity& caller,
                      const http::responder& resp);

  // The pool tasks of serve_object and serve_metainfo.
  void answer_object(const std::shared_ptr<record>& r, const digest& id,
                     const http::responder& resp);
  void answer_metainfo(const std::shared_ptr<record>& r, std::uint32_t g,
                       std::chrono::milliseconds wait, const tls::peer_identity& caller,
                       const http::responder& resp);
  [[nodiscard]] std::shared_ptr<record> find(const std::string& ref) const;
  // A record from its saved JSON (record_json), or why it is not one.
  [[nodiscard]] static result<std::shared_ptr<record>> record_of(std::string_view text);
  // Queues the record for a resolver thread; false when the queue is full (or stopping).
  [[nodiscard]] bool start_resolution(const std::shared_ptr<record>& r);
  void start_resolvers();
  void resolver_loop();
  void resume_resolution(const std::shared_ptr<record>& r);
  void resolve(const std::shared_ptr<record>& r);
  // A resumed resolution: takes the version another member resolved (ready_elsewhere), checked
  // against this record's declaration. False: nothing to take; the resolution goes on.
  bool adopt_elsewhere(const std::shared_ptr<record>& r);
  // The record's fields once its manifest `m` (digest `md`) is this version's; the time the
  // resolution took, when it was resolved here.
  void mark_ready(record& r, const digest& md, const dataset::manifest& m,
                  std::optional<double> resolve_seconds);
  // Marks the record failed, counts and logs it, and saves it.
  void resolve_failed(const std::shared_ptr<record>& r, const error& e);
  // Fetches and hashes every listed file into the cache on the pool and pins it; fills `files`.
  // Returns the first error (the others are not started once one failed).
  [[nodiscard]] status fetch_listed(const std::shared_ptr<record>& r, const dataset_origin& origin,
                                    const std::vector<origin_object>& listing,
                                    std::vector<dataset::file_entry>& files);
  // One file of fetch_listed (a pool task): fetches it unless `abort`, fills `file`, pins it.
  [[nodiscard]] status fetch_one(const std::shared_ptr<record>& r, const dataset_origin& origin,
                                 const origin_object& o, dataset::file_entry& file,
                                 cache::time_point until, const std::string& owner,
                                 const std::atomic<bool>& abort);
  // Builds every pack group's metainfo now, so the first nodes do not wait for it.
  [[nodiscard]] status prepare_groups(const std::shared_ptr<record>& r, const dataset::manifest& m);
  // Saves the record under dir and, for a record of this replica's own, hands it to on_record.
  [[nodiscard]] status persist(const record& r) const;
  // Where the canonical manifest `md` is kept: <dir>/manifests/<hex>.json.
  [[nodiscard]] std::string manifest_path(const digest& md) const;
  [[nodiscard]] std::string record_json(const record& r) const;
  // A standby record still resolving, asked for here: this replica now owns the ref (its owner
  // is away) and resolves it.
  void take_over(const std::shared_ptr<record>& r);
  // Removes staging files left by earlier runs: all of them when no resolution resumes, else
  // those older than kStagingKeep.
  void sweep_staging(bool all);
  [[nodiscard]] result<std::shared_ptr<const dataset::manifest>> manifest_of(
      const std::shared_ptr<record>& r);
  // Makes sure every object of group `g` is in the cache (fetching again from the origin what was
  // evicted, verified against the manifest) and that its torrent exists; blocking.
  [[nodiscard]] result<std::string> prepare_group(const std::shared_ptr<record>& r,
                                                  const dataset::manifest& m, std::uint32_t g,
                                                  group_job& job);
  // Fetches one origin object (single flight per staging identity); blocking.
  [[nodiscard]] result<fetch_report> fetch_object(
      const dataset_origin& origin, const origin_object& o, const std::optional<digest>& expected,
      const std::function<void(std::uint64_t)>& progress);
  [[nodiscard]] result<std::shared_ptr<const dataset_origin>> origin_of(
      const std::shared_ptr<record>& r);

  dataset_service_options opts_;
  boost::asio::io_context& io_;
  cache::store& store_;
  state_db& st_;
  http::client& http_;
  // Origin requests' own client when origin.allowed is set: every request it sends runs under
  // dataset_connect_policy, so every connection it keeps alive was checked.
  std::unique_ptr<http::client> origin_http_;
  [[nodiscard]] http::client& origin_http() { return origin_http_ ? *origin_http_ : http_; }
  seeder* seeder_;
  dataset_metrics m_;
  staging_budget budget_;  // staging files against the cache's quota and the free space
  named_thread_pool pool_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stopped_{false};

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<record>> records_;        // by "name@version"
  std::map<std::string, std::shared_ptr<group_job>> group_jobs_;  // by "name@version/<group>"
  std::vector<std::thread> resolvers_;                            // max_resolving threads
  std::deque<std::shared_ptr<record>> queue_;  // waiting for a resolver (guarded by mu_)
  std::condition_variable queue_cv_;

  std::mutex flight_mu_;
  std::map<std::string, std::shared_future<result<fetch_report>>> flights_;  // by staging identity
};

}  // namespace shoal::proxy
