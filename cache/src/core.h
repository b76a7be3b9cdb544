#pragma once
// core: the state and logic behind cache::store (which only forwards). It is shared with every
// object_writer (shared_ptr), so a writer that outlives the store fails cleanly instead of
// touching freed memory.
//
// Locking (acquire in this order; never hold mu_ across disk or RocksDB work):
//   evict_mu_  serialises eviction passes (background, make_room, evict_to).
//   db_mu_     orders index writes that could race on one key: the access flush, metadata
//              updates (pins, labels) and the row deletes of evictions/removals.
//   mu_        the in-memory table, in-flight map, pins, removing_ set, dirty list.
//   listeners_mu_ / bg_mu_ are leaves.
// Digests in `removing_` are being deleted from disk and index; writers for them wait until the
// deletion is done so a fresh commit is never undone by a late unlink.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/inflight.h"
#include "cache/options.h"
#include "cache/reader.h"
#include "cache/store.h"
#include "cache/types.h"
#include "cache/writer.h"
#include "common/siphash.h"
#include "codec.h"
#include "index.h"
#include "io_pool.h"
#include "layout.h"

namespace shoal::cache::detail {

[[nodiscard]] std::int64_t to_ms(time_point t) noexcept;
[[nodiscard]] time_point from_ms(std::int64_t ms) noexcept;

// One committed object in memory (mirrors its index row).
struct entry {
  std::uint64_t size = 0;
  std::int64_t created_ms = 0;
  std::int64_t last_access_ms = 0;
  std::int64_t last_scrub_ms = 0;
  std::uint64_t hits = 0;
  object_kind kind = object_kind::blob;
  bool dirty = false;  // queued in dirty_ for the next access flush
  bool seen = false;   // reconciliation: its file exists with the right size
  std::unique_ptr<std::vector<std::string>> labels;  // null when none (the common case)
};

struct pin_rec {
  std::string owner;
  std::uint32_t count = 0;
  std::int64_t expiry_ms = 0;  // 0: never
};

// Where install() finds the verified file it moves into objects/.
struct install_source {
  int dirfd = -1;         // directory of `name` (tmp fd, or AT_FDCWD for adopted paths)
  std::string name;       // path relative to dirfd
  bool in_place = false;  // already at the object path (libtorrent wrote it there)
  // Never replace a file at the object path (adoptions): one found there is set aside.
  bool no_replace = false;
};

class core : public std::enable_shared_from_this<core> {
 public:
  [[nodiscard]] static result<std::shared_ptr<core>> open(const options& opts);
  ~core();
  core(const core&) = delete;
  core& operator=(const core&) = delete;

  void start_background();
  void stop();

  [[nodiscard]] result<write_ticket> begin_write(const digest& id,
                                                 std::optional<std::uint64_t> expected,
                                                 object_kind kind);
  [[nodiscard]] status adopt_file(const std::string& path, const digest& id, object_kind kind,
                                  const content_proof* proof = nullptr);
  [[nodiscard]] result<adopt_outcome> adopt_staged(const std::string& path, const digest& id,
                                                   object_kind kind,
                                                   const content_proof* proof = nullptr);
  [[nodiscard]] std::shared_ptr<inflight_object> find_inflight(const digest& id) const;

  [[nodiscard]] result<object_reader> open_read(const digest& id);
  [[nodiscard]] std::optional<object_info> stat(const digest& id) const;
  [[nodiscard]] bool contains(const digest& id) const;
  [[nodiscard]] std::vector<object_info> list() const;
  [[nodiscard]] std::vector<held_info> list_held() const;
  [[nodiscard]] std::uint64_t held_generation() const noexcept {
    return held_generation_.load(std::memory_order_acquire);
  }
  [[nodiscard]] const layout& dirs() const noexcept { return layout_; }

  [[nodiscard]] status pin(const digest& id, std::string_view owner,
                           std::optional<time_point> expiry);
  [[nodiscard]] status unpin(const digest& id, std::string_view owner);
  [[nodiscard]] status renew_pin(const digest& id, std::string_view owner,
                                 std::optional<time_point> expiry);
  [[nodiscard]] status add_label(const digest& id, std::string_view label);
  [[nodiscard]] status remove_label(const digest& id, std::string_view label);

  [[nodiscard]] status remove(const digest& id);
  // Dataset views (seal.cc; store.h says what they do).
  [[nodiscard]] status link_sealed(const digest& id, const std::string& dst);
  [[nodiscard]] status unlink_sealed(const std::string& path, const digest& id);
  std::uint64_t evict_to(std::uint64_t target, evict_reason reason);
  void run_maintenance(bool force_flush);
  void flush_access();
  scrub_report scrub(std::uint64_t max_bytes, bool throttle, std::int64_t older_than_ms);

  [[nodiscard]] subscription on_event(std::function<void(const event&)> cb);
  [[nodiscard]] stats get_stats() const;
  [[nodiscard]] const reconcile_report& last_reconcile() const noexcept { return reconcile_; }
  [[nodiscard]] std::uint64_t capacity() const noexcept {
    return capacity_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t high_bytes() const noexcept;
  [[nodiscard]] std::uint64_t usage() const noexcept {
    return committed_bytes_.load(std::memory_order_relaxed) +
           reserved_bytes_.load(std::memory_order_relaxed);
  }

  // ---- used by object_writer
  [[nodiscard]] time_point now() const { return opts_.clock ? opts_.clock() : clock::now(); }
  [[nodiscard]] bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  // Accounts `bytes` more for an in-flight write. If the store would overflow it evicts first
  // (when `may_evict`) or fails with errc::no_space.
  [[nodiscard]] status reserve(std::uint64_t bytes, bool may_evict = true);
  void unreserve(std::uint64_t bytes) noexcept;
  // After ENOSPC from the filesystem: evicts enough for `need` bytes (or down to the low
  // watermark). Returns true if anything was freed.
  bool make_room(std::uint64_t need);
  // Moves a verified, synced, read-only file into objects/, writes its row, makes it visible,
  // ends the in-flight state and publishes `committed`. On failure nothing is visible.
  [[nodiscard]] result<object_info> install(const std::shared_ptr<inflight_object>& in,
                                            const install_source& src, std::uint64_t size,
                                            std::uint64_t reserved, bool adopted);
  // Ends a failed write: removes the temp file (if named), releases its reservation, fails the
  // in-flight state for followers. `mismatch` counts it as a verification failure.
  void abandon(const std::shared_ptr<inflight_object>& in, const std::string& tmp_name,
               std::uint64_t reserved, const error& e, bool mismatch);
  // Pool for overlapping writes with hashing; null when options.write_threads == 0.
  [[nodiscard]] io_pool* pool() noexcept { return pool_.get(); }
  void count_no_space() noexcept { ctr_.no_space.fetch_add(1, std::memory_order_relaxed); }

  // Moves a file found at id's object path without an index row to quarantine/ (adopt.cc).
  void set_aside_stray(const digest& id);
  // Success when the file at `path` hashes to `id` (or `proof` matches it: adopt.cc);
  // errc::digest_mismatch (counted) otherwise.
  [[nodiscard]] status verify_file(const std::string& path, const digest& id,
                                   const content_proof* proof = nullptr);

  // Moves the object's file (if it is still the inode `fd` refers to) to quarantine/ and forgets
  // it.
  void quarantine(const digest& id, int fd);

 private:
  // Changes `owner`'s pin on `id` under mu_ with `change(rec, live)` (rec is a new record with a
  // count of 0 when the owner has none; live: it has one that has not expired), writes the result
  // and puts the record back as it was when the write fails. `what` names the operation in errors.
  [[nodiscard]] status change_pin(const digest& id, std::string_view owner, const char* what,
                                  const std::function<status(pin_rec& rec, bool live)>& change);
  explicit core(const options& opts) : opts_(opts) {}

  struct victim {
    digest id;
    std::uint64_t size = 0;
    object_kind kind = object_kind::blob;
    std::vector<std::string> labels;
  };
  struct listener {
    std::function<void(const event&)> fn;
    std::recursive_mutex mu;
    bool active = true;
  };
  struct counters {
    std::atomic<std::uint64_t> hits{0}, misses{0}, commits{0}, adoptions{0}, adoptions_proven{0},
        mismatches{0}, aborted{0}, coalesced{0}, no_space{0}, evictions{0}, evicted_bytes{0},
        ttl_evictions{0}, removals{0}, access_flushes{0}, scrubbed_objects{0}, scrubbed_bytes{0},
        scrub_mismatches{0}, scrub_missing{0};
  };

  [[nodiscard]] status reconcile();
  [[nodiscard]] status load_index(reconcile_report& rep, index::batch& fixes);
  void refresh_capacity();
  [[nodiscard]] std::uint64_t low_bytes() const noexcept;

  // mu_ held.
  [[nodiscard]] bool pinned_locked(const digest& id, std::int64_t now_ms) const;
  [[nodiscard]] object_info info_locked(const digest& id, const entry& e,
                                        std::int64_t now_ms) const;
  void insert_locked(const digest& id, entry e);
  victim take_locked(const digest& id);  // removes from table, adds to removing_
  void wait_not_removing(std::unique_lock<std::mutex>& lk, const digest& id);

  // Deletes files and rows of taken victims, clears removing_, publishes events.
  void finish_removal(std::vector<victim>& victims, event_type type, evict_reason reason);
  std::uint64_t evict_pass(std::uint64_t target, std::int64_t idle_cutoff_ms, evict_reason reason);
  void prune_expired_pins();
  void publish(const event& ev);
  void wake_maintenance();
  void maintenance_loop();
  void scrub_loop();
  // Scrub steps. An object not verified since `older_than_ms`, in the order a pass visits them.
  struct scrub_candidate {
    std::int64_t last_scrub;
    digest id;
    std::uint64_t size;
  };
  // The objects last verified before `older_than_ms`, least recently verified first.
  [[nodiscard]] std::vector<scrub_candidate> scrub_candidates(std::int64_t older_than_ms) const;
  // Forgets an object whose file is gone; false if it is already gone or being removed.
  bool forget_vanished(const digest& id);
  // Records a successful verification (the access flush writes it to the index).
  void mark_scrubbed(const digest& id);
  // Sleeps up to `d` unless stop() is called; returns false when stopping.
  bool sleep_unless_stopped(std::chrono::nanoseconds d);

  const options opts_;
  layout layout_;
  std::unique_ptr<index> index_;
  std::unique_ptr<io_pool> pool_;
  reconcile_report reconcile_;
  std::atomic<std::uint64_t> capacity_{0};
  std::atomic<std::uint64_t> committed_bytes_{0};
  // Bumped under mu_ with every change to table_'s members (insert_locked, take_locked).
  std::atomic<std::uint64_t> held_generation_{1};
  std::atomic<std::uint64_t> reserved_bytes_{0};
  std::atomic<bool> closed_{false};
  counters ctr_;

  std::mutex evict_mu_;
  std::mutex db_mu_;
  mutable std::mutex mu_;
  std::condition_variable removing_cv_;
  std::unordered_map<digest, entry, keyed_hash> table_;                                // mu_
  std::unordered_map<digest, std::shared_ptr<inflight_object>, keyed_hash> inflight_;  // mu_
  std::unordered_map<digest, std::vector<pin_rec>, keyed_hash> pins_;                  // mu_
  std::unordered_set<digest, keyed_hash> removing_;                                    // mu_
  std::vector<digest> dirty_;                                                          // mu_
  std::array<kind_stats, object_kind_count> by_kind_{};                                // mu_

  mutable std::mutex listeners_mu_;
  std::vector<std::shared_ptr<listener>> listeners_;

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool bg_stop_ = false;  // bg_mu_
  bool bg_wake_ = false;  // bg_mu_
  std::thread maintenance_thread_;
  std::thread scrub_thread_;
  std::atomic<std::int64_t> last_flush_ns_{0};  // steady clock of the last access flush
  std::mutex seal_mu_;                          // link_sealed and unlink_sealed, one at a time
  std::mutex scrub_mu_;                         // one scrub pass at a time
};

}  // namespace shoal::cache::detail
