#pragma once
// Publishing checkpoints from the node that wrote them (docs/checkpoints.md; the wire is
// common/checkpoint.h).
//
//   POST .../checkpoints/publish {"job": J, "step": N, "dir": D[, "ranks": {"path": [r..]}]}
//   GET  .../checkpoints/published[/<J@N>]      state and progress of publishes on this node
//
// A publish takes the files under D (a directory under checkpoints.publish_root: the hostPath a
// training pod writes its checkpoints to) into the cache, content addressed: each file is read
// once, on `hash_threads` threads beside the job, and cloned (FICLONE) or copied into the
// cache's staging directory while its sha256 and, for a file large enough to be a group of its
// own, its BitTorrent piece hashes are computed; the cache then adopts it (an object already
// there is not stored again). A file that changes while it is read (size, mtime or ctime differ
// before and after) fails the publish with the file's name. Symbolic links and special files
// are refused. Each file's rank comes from the request's "ranks" map, else from its path
// (checkpoint::rank_of).
//
// The manifest (checkpoint::build_manifest) groups files per rank set; each group's torrent is
// made here, the group is added to the swarm as a complete seed (this node is the first seed:
// nothing goes through an origin), every object is pinned ("checkpoint:<J@N>", no expiry), and
// the checkpoint is registered with the scheduler (POST /v1/checkpoints). The scheduler refuses
// a step published before with other contents (409): the publish fails with its words.
// Registered, only the `keep_last` newest published steps of the job keep their pins here.
//
// Records (<dir>/published/<J@N>.json) and registrations (<dir>/published/<J@N>.reg) survive
// restarts; at start the registered ones are seeded again.
//
// Threading: public methods are thread-safe; each publish runs on its own thread (joined by the
// destructor); HTTP handlers never block.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include <nlohmann/json.hpp>

#include "common/checkpoint.h"
#include "common/heartbeat.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "peerd/config.h"
#include "peerd/fetcher.h"

namespace shoal::peerd {

class scheduler_link;

class checkpoint_publisher {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    fetcher& fetch;  // groups are added as complete seeds through fetch_group
    http::client& http;
    metrics::registry& metrics;
    scheduler_link* scheduler = nullptr;  // the replicas registrations go to; null: none
  };
  struct options {
    std::string dir;           // records and registrations
    std::string publish_root;  // publish dirs must lie under it
    std::size_t keep_last = 2;
    int hash_threads = 2;
    std::size_t max_files = 1'000'000;
  };
  checkpoint_publisher(deps d, options o);
  ~checkpoint_publisher();
  checkpoint_publisher(const checkpoint_publisher&) = delete;
  checkpoint_publisher& operator=(const checkpoint_publisher&) = delete;

  [[nodiscard]] status start();
  void request_stop();
  // Routes checkpoint::paths::node_publish and node_published; false for other paths.
  bool handle(const http::request& req, const http::responder& resp);
  // Registered checkpoints published here (for the heartbeat's checkpoints list).
  [[nodiscard]] std::vector<heartbeat::dataset_presence> presence();

  // The publish of one checkpoint, as the API shows it.
  struct publish_request {
    std::string job;
    std::uint64_t step = 0;
    std::string dir;
    std::map<std::string, std::vector<std::uint32_t>> ranks;  // path → ranks (optional)
  };
  // Starts a publish (or returns the one of the same J@N in progress). Errors: a bad request
  // (invalid_argument), a dir outside publish_root (unauthorized), stopping (cancelled).
  [[nodiscard]] result<std::string> publish(publish_request r);
  // Registers every step held here with the scheduler again (it restarted: its catalog is in
  // memory), on a thread of its own; repeats are idempotent there. Never blocks.
  void register_again();
  // `shoalctl checkpoint rm` on the writer: its pins go (the objects become evictable; peers keep
  // their copies), the record says "unpinned". errc::not_found when not published here, busy
  // while a publish of it runs. Blocking (index writes).
  [[nodiscard]] status unpin(const std::string& key);
  // The record's JSON, or nullopt when `key` was never published here.
  [[nodiscard]] std::optional<std::string> status_json(const std::string& key) const;

 private:
  struct pub;
  void run(const std::shared_ptr<pub>& p);
  [[nodiscard]] status run_steps(const std::shared_ptr<pub>& p);
  [[nodiscard]] result<std::vector<dataset::file_entry>> list_files(pub& p);
  [[nodiscard]] status ingest(pub& p, std::vector<dataset::file_entry>& files,
                              std::map<digest, std::string>& torrents);
  [[nodiscard]] result<checkpoint::registration> seed(pub& p, const dataset::manifest& m,
                                                      std::map<digest, std::string>& torrents);
  [[nodiscard]] status register_with_scheduler(pub& p, const checkpoint::registration& reg);
  void keep_newest(const std::string& job);
  void register_pass();
  void persist(const pub& p) const;
  // The record as the API shows it, and as persisted (with the pinned objects).
  [[nodiscard]] nlohmann::json record_json(const pub& p, bool with_objects) const;

  deps d_;
  options opts_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<pub>> pubs_;
  std::vector<std::thread> threads_;
  std::mutex register_mu_;
  bool registering_ = false;       // a thread runs register_pass()
  bool register_pending_ = false;  // asked (again) since that thread's last pass began
  metrics::counter* published_;
  metrics::counter* failed_;
  metrics::counter* bytes_read_;
  metrics::counter* bytes_stored_;
};

}  // namespace shoal::peerd
