#pragma once
// store: the content-addressed object store on local disk (see docs/cache.md).
//
//   <root>/objects/sha256/<hh>/<64hex>   committed objects, read-only (0444)
//   <root>/tmp/<64hex>.<random>.part     writes in progress
//   <root>/tmp/<64hex>                   downloads finished there (staging_dir), then adopted
//   <root>/quarantine/                   objects that failed a scrub
//   <root>/index/                        RocksDB: one row per object, pins, labels
//
// Lifecycle: open() reconciles the directory with the index (crash debris is removed or
// adopted) and loads the index into memory; start_background() starts the maintenance thread
// (access flush, eviction, pin expiry) and the scrub thread; stop() (or destruction) ends them
// and flushes. After stop() new writes fail with errc::cancelled; reads still work.
//
// Threading: every method is thread-safe and may block on disk or RocksDB, so call it from
// worker threads, never from an event loop. contains() and stat() only consult memory.
// Event callbacks run on the thread that caused the event, with no store lock held.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/inflight.h"
#include "cache/options.h"
#include "cache/reader.h"
#include "cache/types.h"
#include "cache/writer.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache {

namespace detail {
class core;
}

// Keeps an event callback registered; unregisters on destruction or reset(). After reset()
// returns the callback is not running and will not run again (it may reset itself from inside).
class subscription {
 public:
  subscription() = default;
  subscription(subscription&&) noexcept = default;
  subscription& operator=(subscription&& o) noexcept;
  subscription(const subscription&) = delete;
  subscription& operator=(const subscription&) = delete;
  ~subscription() { reset(); }
  void reset();

 private:
  friend class detail::core;
  std::function<void()> cancel_;
};

class store {
 public:
  // Creates the layout if needed, opens the index, reconciles, loads. Fails with the reason
  // (invalid options, permissions, the root already opened by another process, ...).
  [[nodiscard]] static result<std::unique_ptr<store>> open(const options& opts);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  void start_background();
  void stop();

  // ---- write path
  // Starts a write of `id` or joins one in progress (see write_ticket). `expected_size`, when
  // known, is reserved against capacity up front (evicting if needed) and checked at commit.
  [[nodiscard]] result<write_ticket> begin_write(const digest& id,
                                                 std::optional<std::uint64_t> expected_size,
                                                 object_kind kind);
  // The same with the digest as text (as it arrives in a URL); malformed digests fail with their
  // digest_errc code.
  [[nodiscard]] result<write_ticket> begin_write(std::string_view id,
                                                 std::optional<std::uint64_t> expected_size,
                                                 object_kind kind);
  // Takes a complete file written by someone else (libtorrent) into the store: verifies size and
  // hash, makes it read-only and renames it to its object path (it may already be there). The
  // file must be on the cache's filesystem. It never replaces a committed object (errc::
  // already_exists; errc::busy while another write of `id` runs) nor any file at the object path
  // (one without an index row is set aside in quarantine/). On failure the file is left where it
  // was, except a file already at the object path that does not verify, which is removed.
  // With `proof` (types.h) matching the file, the caller's hash stands for the cache's.
  [[nodiscard]] status adopt_file(const std::string& path, const digest& id, object_kind kind,
                                  const content_proof* proof = nullptr);
  // Adopts a file a downloader finished at staging_dir() + "/" + id.hex() (or any path on the
  // cache's filesystem) and consumes it in every outcome: committed (adopted), or removed. When
  // another path committed `id` first (or was committing it: adopt waits for that write), the
  // staged file is still verified, then removed, and the committed object is left untouched
  // (already_present). A staged file that does not hash to `id` fails with errc::digest_mismatch.
  // With `proof` (types.h) matching the file, the caller's hash stands for the cache's.
  [[nodiscard]] result<adopt_outcome> adopt_staged(const std::string& path, const digest& id,
                                                   object_kind kind,
                                                   const content_proof* proof = nullptr);
  // The write in progress for `id`, if any (to stream an arriving object without joining it).
  [[nodiscard]] std::shared_ptr<inflight_object> find_inflight(const digest& id) const;

  // ---- read path
  // Opens a committed object and counts a hit (or a miss: errc::not_found).
  [[nodiscard]] result<object_reader> open_read(const digest& id);
  [[nodiscard]] result<object_reader> open_read(std::string_view id);
  [[nodiscard]] std::optional<object_info> stat(const digest& id) const;
  [[nodiscard]] result<object_info> stat(std::string_view id) const;
  [[nodiscard]] bool contains(const digest& id) const;
  // Every committed object (for resyncs and tools; copies the table).
  [[nodiscard]] std::vector<object_info> list() const;
  // Every committed object's digest, size and kind: what list() gives without pins, labels and
  // times, so the table's lock is held a fraction as long (heartbeats list it every interval:
  // 200,000 objects took list() 11-22 ms, blocking every cache call meanwhile).
  [[nodiscard]] std::vector<held_info> list_held() const;
  // A number that changes whenever an object is committed or removed, i.e. whenever list_held()
  // would give something else. Read it before list_held(): while it has not moved since, the
  // list has not either (a steady node's heartbeat skips the walk).
  [[nodiscard]] std::uint64_t held_generation() const noexcept;

  // ---- paths: the only place that knows the layout. Callers may read, hard-link and hand these
  // paths to libtorrent; they never build a path under the root themselves.
  // Where the object lives once committed (or would live). Read-only; open_read() is the way to
  // serve it.
  [[nodiscard]] std::string object_path(const digest& id) const;
  // The directory of object_path(id): a single-object torrent (file named <64hex>) saved here
  // seeds from the object itself (nothing may write into it: a download finishes in
  // staging_dir()).
  [[nodiscard]] std::string shard_dir(const digest& id) const;
  // Where a downloader (libtorrent) finishes an object before adopt_staged: a directory on the
  // cache's filesystem, emptied when the store opens, never holding committed objects.
  [[nodiscard]] std::string staging_dir() const;
  // A pack's place: a multi-file torrent whose files are pack_member_path(d) (the pack metainfo
  // layout) saved here seeds every member from its object path, with nothing copied.
  [[nodiscard]] std::string pack_dir() const;
  // The path of object `id` relative to pack_dir() ("sha256/<hh>/<64hex>"), and so also where a
  // pack being downloaded into any directory D puts it: D + "/" + pack_member_path(id).
  [[nodiscard]] static std::string pack_member_path(const digest& id);
  // Success when `path` is on the cache's filesystem (or either cannot be examined: then the
  // rename or link that needs it reports the problem); errc::config_error naming both otherwise.
  // Directories whose files are renamed or hard-linked into or out of the cache must pass.
  [[nodiscard]] status check_same_filesystem(const std::string& path) const;

  // ---- pins and labels
  // A pin protects `id` (present, in flight or not yet fetched) from eviction and removal.
  // Pins are counted per owner: pin twice, unpin twice. A new expiry extends the pin (the later
  // one wins; nullopt = never). Expired pins stop protecting and are pruned.
  [[nodiscard]] status pin(const digest& id, std::string_view owner,
                           std::optional<time_point> expiry = std::nullopt);
  // Drops one count of `owner`'s pin; errc::not_found if it has none.
  [[nodiscard]] status unpin(const digest& id, std::string_view owner);
  // Makes `owner`'s pin on `id` expire at `expiry` (nullopt: never), earlier or later than
  // before, keeping its count; without a live pin it makes one with a count of one. Unlike
  // unpin then pin, the object stays protected throughout, and it is one index write.
  [[nodiscard]] status renew_pin(const digest& id, std::string_view owner,
                                 std::optional<time_point> expiry);
  // Labels name what references an object (an image, a dataset); the object must be present.
  [[nodiscard]] status add_label(const digest& id, std::string_view label);
  [[nodiscard]] status remove_label(const digest& id, std::string_view label);

  // ---- dataset views: read-only hard links to objects (docs/cache.md "Sealed views")
  // Makes `dst` (a new path on the cache's filesystem) a hard link to committed object `id` and
  // seals the inode (FS_IMMUTABLE_FL): nobody without CAP_LINUX_IMMUTABLE, root in a pod
  // included, can write, truncate, chmod, rename or unlink it, or write through a descriptor
  // opened earlier. An inode is linked into one view at most: errc::busy when the object already
  // has another link (a view) or a seal; errno's error when the filesystem or the process cannot
  // seal (EPERM without CAP_LINUX_IMMUTABLE, ENOTTY/EOPNOTSUPP); `dst` is then not created. The
  // caller makes a copy in every failure case.
  [[nodiscard]] status link_sealed(const digest& id, const std::string& dst);
  // Removes `path` (a view's file; not there: success). When it is a sealed link to `id`'s
  // object, the object first gets an inode of its own, copied while still sealed, so a write that
  // lands through the view in the moment the seal is lifted for the unlink never reaches the
  // cache. Any other file is just unlinked (its seal lifted). Not durable until the caller syncs
  // the filesystem (a crash may leave the view's link; removing it again is safe).
  [[nodiscard]] status unlink_sealed(const std::string& path, const digest& id);

  // ---- lifecycle of objects
  // Deletes a committed object: errc::busy if pinned or in flight, errc::not_found if absent.
  [[nodiscard]] status remove(const digest& id);
  // Evicts least recently used unpinned objects until usage <= target_bytes; returns bytes freed.
  std::uint64_t evict_to(std::uint64_t target_bytes);
  // One maintenance pass now: flush access times, prune expired pins, idle TTL, watermarks.
  void run_maintenance();
  // Writes batched last-access/hit updates to the index now.
  void flush_access();
  // Rehashes up to `max_bytes` of committed objects, least recently scrubbed first; quarantines
  // mismatches. `throttle` applies scrub_bytes_per_sec.
  scrub_report scrub_once(std::uint64_t max_bytes = UINT64_MAX, bool throttle = false);
  // Rehashes one committed object now (a caller saw it misbehave, e.g. a piece failed its hash
  // while being uploaded). A mismatch quarantines it (event `quarantined`) and returns
  // errc::digest_mismatch; an intact object returns success and stays.
  [[nodiscard]] status verify(const digest& id);

  [[nodiscard]] subscription on_event(std::function<void(const event&)> cb);
  [[nodiscard]] stats get_stats() const;
  [[nodiscard]] const reconcile_report& last_reconcile() const noexcept;
  [[nodiscard]] std::uint64_t capacity_bytes() const noexcept;
  [[nodiscard]] std::uint64_t usage_bytes() const noexcept;
  // capacity × high_watermark: above it the maintenance pass evicts.
  [[nodiscard]] std::uint64_t high_watermark_bytes() const noexcept;

 private:
  explicit store(std::shared_ptr<detail::core> c) : core_(std::move(c)) {}
  std::shared_ptr<detail::core> core_;
};

}  // namespace shoal::cache
