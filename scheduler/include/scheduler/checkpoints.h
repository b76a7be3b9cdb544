#pragma once
// The scheduler's checkpoint catalog: "<job>@<step>" → what its writer registered
// (common/checkpoint.h): the canonical manifest, its digest, one torrent per manifest group, the
// writer and when the scheduler took it. Members read it to restore a checkpoint (its record, its
// manifest, a group's torrent with a grant); the failover side reads the newest step of a job to
// keep standbys warm (objects(), on_registered()).
//
// Rules (docs/scheduler.md, "Checkpoints"):
//  - only the writer registers: the caller (the node its certificate names; in plain mode the
//    writer the manifest names) must be the manifest's writer (checkpoint::writer_of);
//  - a step is published once: registering J@N again with the same manifest digest is a repeat
//    (the same record back), with another digest a conflict (errc::already_exists);
//  - any step may be registered, lower ones too (a job that rolled back); "latest" is the highest;
//  - bounds: at most `max_per_job` records per job (beyond, the job's earliest registered record
//    goes) and `max_bytes` of manifests and torrents in all (beyond, the earliest registered
//    records of any job go); never the record just registered. One registration larger than
//    `max_bytes` is refused (errc::too_large).
//
// In memory, for one scheduler: a restarted lone scheduler has an empty catalog until writers
// register again. Replicas sharing state (shared_state.h) log each registration and removal and
// keep the registrations in Redis: every replica holds the same catalog, a new one loads it.
//
// Lifecycle: built by the app, lives until exit. Threading: thread-safe (one mutex, held for map
// work only: records are shared immutable entries copied outside it); listeners run on the
// registering thread, outside the lock.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/checkpoint.h"
#include "common/grant.h"
#include "common/metrics.h"
#include "common/peer_identity.h"

namespace shoal::scheduler {

class cluster_index;

struct checkpoint_catalog_options {
  std::size_t max_per_job = 16;
  std::uint64_t max_bytes = std::uint64_t{1} << 30;  // manifests + torrents
};

// One group of a registered checkpoint: what GET /v1/checkpoints/<J@N>/groups/<g> answers.
struct checkpoint_group {
  std::string info_hash;  // 40 lower-case hex
  std::string torrent;    // as the writer seeds it
  std::string kind;       // "pack" or "object" (origin::headers::group_kind)
  std::uint64_t bytes = 0;
};

using object_sizes = std::vector<std::pair<digest, std::uint64_t>>;

class checkpoint_catalog {
 public:
  using clock_ms = std::function<std::int64_t()>;  // Unix milliseconds
  explicit checkpoint_catalog(checkpoint_catalog_options o, clock_ms now = {});
  checkpoint_catalog(const checkpoint_catalog&) = delete;
  checkpoint_catalog& operator=(const checkpoint_catalog&) = delete;

  enum class outcome { created, repeat };
  struct registered {
    checkpoint::record rec;  // holders empty (holders_of fills them)
    outcome what = outcome::created;
  };
  // Registers `reg` for `caller` (the rules above). Errors: unauthorized (the caller is not the
  // writer), already_exists (the step is published with another manifest), too_large (larger than
  // max_bytes alone). The message says which and names the checkpoint.
  // `notify` false: the listeners are not called (a registration another scheduler replica took,
  // applied from the shared log: that replica told its own).
  [[nodiscard]] result<registered> register_checkpoint(checkpoint::decoded_registration reg,
                                                       std::string_view caller, bool notify = true);

  // The record `r` names (its highest step for "latest"); not_found with a message otherwise.
  [[nodiscard]] result<checkpoint::record> record(const checkpoint::ref& r) const;
  [[nodiscard]] std::optional<checkpoint::record> latest(std::string_view job) const;
  // Every record of `job` (every job when empty), by job name, newest step first.
  [[nodiscard]] std::vector<checkpoint::record> list(std::string_view job = {}) const;
  // The canonical manifest text of "J@N" (shared, immutable), or not_found.
  [[nodiscard]] result<std::shared_ptr<const std::string>> manifest(std::string_view key) const;
  // Group g of "J@N", or not_found (an unknown checkpoint, or g past its last group).
  [[nodiscard]] result<checkpoint_group> group(std::string_view key, std::uint32_t g) const;
  // The distinct objects of "J@N" (digest, size), sorted by digest; not_found when unknown.
  [[nodiscard]] result<object_sizes> objects(std::string_view key) const;
  // Forgets "J@N"; false when unknown.
  bool remove(std::string_view key);

  // Called after each registration that created a record (not for repeats), outside the lock,
  // with the job and "J@N". Add listeners before the API serves.
  using listener = std::function<void(const std::string& job, const std::string& key)>;
  void on_registered(listener l);

  struct stats_t {
    std::size_t records = 0;
    std::uint64_t bytes = 0;  // manifests + torrents held
  };
  [[nodiscard]] stats_t stats() const;

 private:
  struct entry {
    checkpoint::record rec;
    std::shared_ptr<const std::string> manifest;
    std::vector<checkpoint_group> groups;
    object_sizes objects;
    std::uint64_t cost = 0;  // manifest + torrents
    std::uint64_t seq = 0;   // registration order
  };
  using entry_ptr = std::shared_ptr<const entry>;
  [[nodiscard]] entry_ptr find_locked(std::string_view key) const;
  // Removes the entry of (job, step) from every structure.
  void erase_locked(const std::string& job, std::uint64_t step);
  // Drops the earliest registered records beyond the bounds, never `keep`; returns their keys.
  std::vector<std::string> evict_locked(const std::string& job, std::uint64_t keep_seq);

  const checkpoint_catalog_options opts_;
  const clock_ms now_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::uint64_t, entry_ptr>, std::less<>> jobs_;  // under mu_
  std::map<std::uint64_t, std::pair<std::string, std::uint64_t>> order_;  // seq → (job, step)
  std::uint64_t next_seq_ = 1;                                            // under mu_
  stats_t stats_;                                                         // under mu_
  std::vector<listener> listeners_;                                       // under mu_
};

// The nodes holding part of a checkpoint's objects, from the cluster index: for each node, the
// bytes of `objects` it holds, most bytes first (then by name). One index view: O(objects +
// their holdings).
[[nodiscard]] std::vector<checkpoint::holder> holders_of(
    const cluster_index& index, std::span<const std::pair<digest, std::uint64_t>> objects);

// A node's grant for a checkpoint swarm (common/grant.h), as GET .../groups/<g> attaches it:
// (caller, info-hash hex) → the signed grant, or "" when the caller is not a verified node or
// signing failed (logged). The app builds it from the scheduler's own certificate and key.
using checkpoint_grant_fn =
    std::function<std::string(const tls::peer_identity& caller, const std::string& info_hash)>;
// Grants for {swarm, the caller's node name, now + ttl}, signed by `signer`.
[[nodiscard]] checkpoint_grant_fn checkpoint_grants(std::shared_ptr<grant::signer> signer,
                                                    std::chrono::seconds ttl);

// The catalog's metrics: shoal_scheduler_checkpoints, shoal_scheduler_checkpoint_bytes (read at
// scrape time) and shoal_scheduler_checkpoint_registrations_total{result}, every result at zero.
void register_checkpoint_metrics(metrics::registry& reg, const checkpoint_catalog& c);
// One registration answered: result is created, repeat, conflict or refused (any other error).
void count_checkpoint_registration(metrics::registry& reg, std::string_view result);

}  // namespace shoal::scheduler
