#pragma once
// Configuration of one cache store. Defaults live here, in the member initializers; validate()
// refuses inconsistent values with the field name in the message.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "cache/types.h"
#include "common/error.h"

namespace shoal::cache {

struct options {
  // Directory that holds objects/, tmp/, quarantine/ and index/. Created if missing.
  std::string root;

  // Capacity: a fixed byte quota, or (when 0) `fs_share` of the filesystem holding `root`.
  std::uint64_t quota_bytes = 0;
  double fs_share = 0.9;  // (0, 1]

  // Eviction keeps usage (committed + in-flight bytes) between these shares of the capacity:
  // it starts above `high_watermark` and stops at `low_watermark`. 0 < low < high <= 1.
  double high_watermark = 0.85;
  double low_watermark = 0.70;

  // Objects not read for this long are evicted regardless of usage. 0 disables.
  std::chrono::seconds idle_ttl{0};

  // At start-up, an unindexed file in objects/ whose content hashes to its name is indexed again
  // (true) or removed (false). Files that do not verify are always removed.
  bool adopt_orphans = true;

  // Background scrub: rehash committed objects at most this fast (0 disables the thread) and
  // rescrub each object at most once per `scrub_interval`.
  std::uint64_t scrub_bytes_per_sec = 64ull << 20;
  std::chrono::seconds scrub_interval{std::chrono::hours(24 * 7)};

  // Last-access and hit-count updates are written to the index in one batch this often (and at
  // close); a crash loses at most this much access history, never an object.
  std::chrono::milliseconds access_flush_interval{5000};

  // How often the maintenance thread checks watermarks, idle TTL and pin expiry (commits that
  // cross the high watermark wake it early).
  std::chrono::milliseconds maintenance_interval{1000};

  // Pins and labels are written with a synced WAL (true) or left to the OS (false).
  bool sync_metadata = true;

  // Threads that copy a writer's bytes into its temp file while the writer's own thread hashes
  // them (large writes only). 0: the writer's thread does both, one after the other.
  unsigned write_threads = 2;

  // Threads used by start-up reconciliation to stat and (if needed) rehash files. >= 1.
  unsigned reconcile_threads = 2;

  // Clock for timestamps, pin expiry and idle TTL. Empty: system_clock::now. Tests inject one.
  std::function<time_point()> clock;

  [[nodiscard]] status validate() const;
};

}  // namespace shoal::cache
