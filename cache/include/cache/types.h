#pragma once
// Value types of the cache's public API: object kinds, what stat() reports, events, and the
// counters snapshot. Plain data; safe to copy between threads.

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache {

using clock = std::chrono::system_clock;
using time_point = clock::time_point;

// What an object is. Stored in the index; only used for accounting (stats by kind) and by callers.
enum class object_kind : std::uint8_t { blob = 0, dataset_file = 1, manifest = 2, metainfo = 3 };
inline constexpr std::size_t object_kind_count = 4;

[[nodiscard]] std::string_view to_string(object_kind k) noexcept;
// Accepts exactly the names to_string() prints ("blob", "dataset_file", "manifest", "metainfo").
[[nodiscard]] std::optional<object_kind> parse_object_kind(std::string_view s) noexcept;

// One pin on an object: reference-counted per owner; the pin protects the object from eviction
// and removal until its count drops to zero or its expiry passes.
struct pin_info {
  std::string owner;
  std::uint32_t count = 0;
  std::optional<time_point> expiry;  // nullopt: never expires
};

// What a node reports that it holds (peerd's heartbeat): a committed object without its history,
// pins or labels.
struct held_info {
  digest id;
  std::uint64_t size = 0;
  object_kind kind = object_kind::blob;
};

// A committed object as the index knows it.
struct object_info {
  digest id;
  std::uint64_t size = 0;
  object_kind kind = object_kind::blob;
  time_point created;
  time_point last_access;
  time_point last_scrub;  // last time its bytes were verified (commit, adoption or scrub)
  std::uint64_t hit_count = 0;
  bool pinned = false;  // an unexpired pin exists now
  std::vector<pin_info> pins;
  std::vector<std::string> labels;  // which images or datasets reference it
};

// A caller's proof that a file it hands to adopt_file or adopt_staged hashes to the object's
// digest: it hashed `size` bytes of that very file (device `dev`, inode `ino`) itself, as the
// bytes landed. The cache skips its own pass over the file when the file it opens is that inode
// with that size, and hashes it as usual otherwise (a copy made meanwhile, a file replaced).
struct content_proof {
  std::uint64_t size = 0;
  std::uint64_t dev = 0, ino = 0;
};

// What store::adopt_staged did with a staged file it verified.
enum class adopt_outcome {
  adopted,          // it is now the committed object
  already_present,  // another path had committed the object: it stays, the staged copy is gone
};

enum class event_type { committed, evicted, quarantined, removed };
enum class evict_reason { none, watermark, idle_ttl, no_space, requested };
[[nodiscard]] std::string_view to_string(event_type t) noexcept;
[[nodiscard]] std::string_view to_string(evict_reason r) noexcept;

// Published to subscribers (store::on_event) after the change is durable in the index.
struct event {
  event_type type = event_type::committed;
  digest id;
  std::uint64_t size = 0;
  object_kind kind = object_kind::blob;
  evict_reason reason = evict_reason::none;  // set for event_type::evicted
};

struct kind_stats {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;
};

// A consistent-enough snapshot of the store's gauges and monotonic counters (the daemons map
// them to Prometheus). Gauges are exact at the time of the call; counters are relaxed atomics.
struct stats {
  // Gauges.
  std::array<kind_stats, object_kind_count> by_kind{};
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;  // committed object bytes
  std::uint64_t inflight_objects = 0;
  std::uint64_t inflight_bytes = 0;  // bytes reserved by writes in progress
  std::uint64_t capacity_bytes = 0;
  std::uint64_t pinned_objects = 0;  // digests with an unexpired pin (present or not)
  std::uint64_t pinned_bytes = 0;    // committed bytes of those present (eviction cannot free)
  // Counters since open.
  std::uint64_t hits = 0;               // open_read of a committed object
  std::uint64_t misses = 0;             // open_read of an absent object
  std::uint64_t commits = 0;            // objects committed by a writer
  std::uint64_t adoptions = 0;          // files adopted through adopt_file
  std::uint64_t adoptions_proven = 0;   // of them, hashed by the caller (content_proof)
  std::uint64_t commit_mismatches = 0;  // writes refused because hash or size was wrong
  std::uint64_t aborted_writes = 0;     // writes abandoned by their owner or failed on I/O
  std::uint64_t coalesced_writes = 0;   // begin_write calls that followed an in-flight write
  std::uint64_t no_space_errors = 0;    // writes that failed with no_space after eviction
  std::uint64_t evictions = 0;
  std::uint64_t evicted_bytes = 0;
  std::uint64_t ttl_evictions = 0;   // subset of evictions caused by idle_ttl
  std::uint64_t removals = 0;        // explicit remove()
  std::uint64_t access_flushes = 0;  // batched last-access writes to the index
  std::uint64_t scrubbed_objects = 0;
  std::uint64_t scrubbed_bytes = 0;
  std::uint64_t scrub_mismatches = 0;  // objects quarantined by scrub
  std::uint64_t scrub_missing = 0;     // indexed objects whose file vanished
};

// What one scrub_once() call did.
struct scrub_report {
  std::uint64_t objects = 0;
  std::uint64_t bytes = 0;
  std::uint64_t mismatches = 0;  // quarantined
  std::uint64_t missing = 0;     // file gone or wrong size: row dropped
  std::uint64_t errors = 0;      // read errors (object left in place)
};

// What start-up reconciliation found and did.
struct reconcile_report {
  std::uint64_t rows_loaded = 0;
  std::uint64_t temp_files_removed = 0;
  std::uint64_t rows_dropped = 0;       // file missing or of the wrong size
  std::uint64_t bad_rows_dropped = 0;   // undecodable keys or values
  std::uint64_t orphans_adopted = 0;    // unindexed files whose content matched their name
  std::uint64_t orphans_removed = 0;    // unindexed files that did not verify (or adoption off)
  std::uint64_t malformed_removed = 0;  // files whose name is not a digest of their shard
  std::uint64_t labels_dropped = 0;     // labels of objects that are gone
  double seconds = 0;
};

}  // namespace shoal::cache
