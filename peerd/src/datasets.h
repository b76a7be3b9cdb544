#pragma once
// Datasets on a node: prefetch through the swarm, a read-only view for training pods, pins.
//
//   POST   .../datasets/prefetch {"dataset": "name@version"}   start or join a prefetch
//   GET    .../datasets                                       every dataset here (ls)
//   GET    .../datasets/<name>@<version>                      state and progress
//   DELETE .../datasets/<name>@<version>                      remove the view, unpin (rm)
//   POST   .../datasets/<name>@<version>/renew {"ttl_seconds": N}  extend the view's expiry
// (the paths are origin::paths::datasets and dataset_prefetch, common/origin_protocol.h)
//
// A prefetch waits for registry-proxy to resolve the dataset, fetches its manifest (verified
// against its digest), pins every object (owner "view:<name>@<version>", and "prewarm:<id>" for
// the scheduler's orders), downloads the groups that are not complete here through the swarm
// (fetcher::fetch_group into the swarm engine; `parallel_groups` at a time), and materializes the
// view <views_dir>/<name>@<version>/<path>: clones (reflinks, FICLONE) of the cache's object files
// where the filesystem can, else hard links sealed immutable (cache::store::link_sealed), else
// copies (after a free-space check) - never a writable link, so a write through a view (root in a
// pod ignores 0444) cannot reach the cache or the swarm (security review F19); files 0444,
// directories 0555, empty files created; built aside and renamed into place, so a view is either
// whole or absent.
//
// Expiry (security review F8): a view and its pins ("view:<ref>", "prewarm:<id>") last
// `pin_ttl` after the last prefetch, prewarm order or renewal (a prewarm's own pin_seconds may
// extend it, up to `pin_ttl_max`). Every pin carries its expiry in the cache's index, so the store
// stops protecting the objects at that time even while peerd is down; the record keeps the
// view's expiry, and a timer thread removes expired views (the copies would otherwise keep the
// bytes on disk), unpins and forgets them (log, shoal_peerd_dataset_views_expired_total). Restarted
// after an interruption (a new request, or peerd's start for prefetches that were running), a
// prefetch skips complete groups and libtorrent resumes partial ones.
//
// Progress: bytes present (of the dataset's distinct objects), rate, ETA, and where the bytes
// came from (peers, registry-proxy over BitTorrent, registry-proxy over HTTP, already here).
//
// Records (<dir>/records/<ref>.json) and manifests (<dir>/manifests/<hex>.json) survive restarts.
//
// Lifecycle: start() → serve → request_stop() → destructor (joins the prefetch threads).
// Threading: public methods are thread-safe; each prefetch runs on its own thread; HTTP handlers
// post blocking work to the worker pool.

#include <boost/asio/thread_pool.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/checkpoint.h"
#include "common/dataset.h"
#include "common/heartbeat.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "peerd/config.h"
#include "peerd/fetcher.h"

namespace shoal::peerd {

class scheduler_link;
class proxy_link;

class dataset_manager {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    fetcher& fetch;  // pack groups (fetch_group)
    http::client& http;
    boost::asio::thread_pool& pool;
    // Checkpoints: the scheduler replicas (records, manifests, group metainfo), with failover.
    scheduler_link* scheduler = nullptr;
    proxy_link* proxy = nullptr;  // registry-proxy with failover (proxy_link.h)
  };
  struct options {
    std::string views_dir;
    std::string dir;
    int parallel_groups = 4;
    std::chrono::milliseconds resolve_wait{30 * 60'000};
    std::size_t max_manifest = 1u << 30;
    std::chrono::seconds pin_ttl{24 * 3600};
    std::chrono::seconds pin_ttl_max{7 * 24 * 3600};
    std::chrono::milliseconds expiry_interval{60'000};
    // Checkpoints (common/checkpoint.h, checkpoints.h): refs are "<job>@<step>", manifests and
    // group torrents (with the scheduler's grants) come from the scheduler's catalog
    // (upstream.scheduler) instead of registry-proxy, the API is checkpoint::paths::node (restore
    // instead of prefetch), a restore may take only some ranks' files, and once a restore is
    // ready only the `keep_last` newest steps of its job keep their views and pins here.
    bool checkpoints = false;
    std::size_t keep_last = 0;  // 0: no limit
  };
  // How a view's file was made (make_view_file in datasets_fetch.cc).
  enum class view_file { cloned = 0, sealed = 1, copied = 2 };

  dataset_manager(deps d, options o);
  ~dataset_manager();
  dataset_manager(const dataset_manager&) = delete;
  dataset_manager& operator=(const dataset_manager&) = delete;

  // Creates the directories, loads the records, restarts prefetches that were running, starts
  // the expiry timer.
  [[nodiscard]] status start();
  void request_stop();

  // Routes origin::paths::datasets; false when the path is not ours.
  bool handle(const http::request& req, const http::responder& resp);

  // Starts (or joins) a prefetch; `pin_owner` (besides the view's own) pins every object until
  // `until` (a prewarm order). Blocking variant for prewarm orders: returns when it ends.
  [[nodiscard]] status prefetch_and_wait(
      const std::string& ref, const std::string& pin_owner, std::optional<cache::time_point> until,
      std::function<void(std::uint64_t done, std::uint64_t total)> progress);
  // Checkpoints: "<job>@<step>" for "<job>@latest" (or "<job>"), from the scheduler. Blocking.
  [[nodiscard]] result<std::string> resolve_latest(const std::string& ref);

  // DELETE .../<ref>: removes the view and unpins it, answering `resp` (blocking: index writes).
  void remove(const std::string& ref, const http::responder& resp);
  // Whether `ref` has a record here.
  [[nodiscard]] bool has(const std::string& ref) const {
    std::lock_guard lk(mu_);
    return jobs_.count(ref) > 0;
  }
  // For the heartbeat: every dataset with a record here, bytes present and total, view ready.
  [[nodiscard]] std::vector<heartbeat::dataset_presence> presence();

  // Extends `ref`'s view and pins to now + ttl (pin_ttl when nullopt; never shortens them).
  // Blocking (index writes). errc::not_found when the dataset is not here.
  [[nodiscard]] result<cache::time_point> renew(const std::string& ref,
                                                std::optional<std::chrono::seconds> ttl);
  // Removes every view whose expiry passed (the timer calls it); returns how many.
  std::size_t expire_now();
  [[nodiscard]] std::uint64_t views_expired() const { return expired_.load(); }
  [[nodiscard]] std::uint64_t view_files(view_file how) const {
    return view_files_[static_cast<int>(how)].load();
  }
  // A pin expiry an order asked for, bounded: nullopt (forever) and beyond pin_ttl_max become
  // pin_ttl and pin_ttl_max from now.
  [[nodiscard]] cache::time_point bounded_expiry(std::optional<cache::time_point> until) const;

 private:
  struct job;
  // `ranks` (checkpoints): restore only those ranks' files (empty: all). errc::conflict when the
  // ref is here already with other ranks.
  result<std::shared_ptr<job>> start_prefetch(const std::string& ref, const std::string& pin_owner,
                                              std::optional<cache::time_point> until,
                                              const std::vector<std::uint32_t>& ranks = {});
  // The manifest `j` works on: `full` itself, or (a restore of some ranks) the files of those
  // ranks and their groups; j.group_ids maps its groups to `full`'s.
  void adopt_manifest(job& j, std::shared_ptr<const dataset::manifest> full);
  // Checkpoints: one GET of the scheduler's record of `ref` ("J@N" or "J@latest"). Errors:
  // not_found (404), unauthorized (400, 403), unavailable (the network, any other status),
  // protocol_error (an answer that does not decode).
  [[nodiscard]] result<checkpoint::record> scheduler_record(const std::string& ref, int retries);
  // Checkpoints: the record's manifest digest from the scheduler.
  [[nodiscard]] result<digest> checkpoint_digest(const std::shared_ptr<job>& j);
  // origin::call of `r` (its url a path) on the registry-proxy replicas, or (checkpoints) on
  // the scheduler replicas, in turn either way.
  [[nodiscard]] result<http::full_response> upstream_call(http::client_request r,
                                                          std::size_t max_body);
  // A GET of a small answer from registry-proxy or the scheduler (upstream.* timeouts, 1 retry).
  [[nodiscard]] http::client_request small_request(std::string url) const;
  // After a checkpoint restore of `ref` is ready: drops older steps of its job beyond keep_last.
  void keep_newest(const std::string& ref);
  void handle_start(const http::request& req, const http::responder& resp);
  void run(const std::shared_ptr<job>& j);
  [[nodiscard]] status run_steps(const std::shared_ptr<job>& j);
  [[nodiscard]] result<std::shared_ptr<const dataset::manifest>> fetch_manifest(
      const std::shared_ptr<job>& j);
  [[nodiscard]] status fetch_groups(const std::shared_ptr<job>& j, const dataset::manifest& m);
  [[nodiscard]] result<group_spec> group_metainfo(const std::shared_ptr<job>& j,
                                                  const dataset::manifest& m, std::uint32_t g);
  [[nodiscard]] status materialize(const std::shared_ptr<job>& j, const dataset::manifest& m);
  // Removes a view (or a view being built) at `path`: sealed links through the cache (so the
  // object keeps an inode no view can write), then the rest. `m` names the files' objects when
  // known; a sealed file it does not name is hashed to find its object.
  void remove_view(const std::string& path, const dataset::manifest* m);
  [[nodiscard]] status pin_all(const dataset::manifest& m, const std::string& owner,
                               std::optional<cache::time_point> until);
  void unpin_all(const dataset::manifest& m, const std::string& owner);
  // Moves `owner`'s pins to expire at `until` (cache renew_pin: each keeps its count and its
  // object stays protected; a missing or expired one comes back with one count). Renews every
  // object even when one fails, and returns the first failure.
  [[nodiscard]] status renew_pins(const dataset::manifest& m, const std::string& owner,
                                  cache::time_point until);
  // Removes the view, unpins it and forgets the record; returns the objects unpinned.
  [[nodiscard]] result<std::size_t> drop(const std::string& ref);
  // Extends j's expiry to `until`; the manifest whose view pins must follow, if any.
  std::shared_ptr<const dataset::manifest> extend_locked(job& j, cache::time_point until);
  void expiry_loop();
  // Runs fn on the app's worker pool (catching and logging); the destructor waits for it.
  void post(std::function<void()> fn);
  void persist(const job& j);
  [[nodiscard]] std::string status_json(const job& j) const;
  [[nodiscard]] result<std::shared_ptr<const dataset::manifest>> load_manifest(const digest& d);
  [[nodiscard]] std::string proxy(const std::string& path) const;
  void handle_renew(const std::string& ref, const http::request& req, const http::responder& resp);
  [[nodiscard]] std::string view_path(const std::string& ref) const {
    return opts_.views_dir + "/" + ref;
  }

  deps d_;
  options opts_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<job>> jobs_;  // every dataset with a record, by ref
  std::vector<std::thread> threads_;
  std::atomic<std::uint64_t> expired_{0};
  std::array<std::atomic<std::uint64_t>, 3> view_files_{};
  std::mutex expiry_mu_;
  std::condition_variable expiry_cv_;
  std::thread expiry_thread_;
  std::mutex posted_mu_;
  std::condition_variable posted_cv_;
  std::size_t posted_ = 0;
};

}  // namespace shoal::peerd
