#include "cache/config.h"

namespace shoal::cache {

void describe(config::binder& b, config_section& c) {
  b.field("dir", c.dir, "Directory of the object store (objects/, tmp/, quarantine/, index/).");
  b.field("quota", c.quota, "Capacity in bytes; 0 means fs_share of the filesystem.");
  b.field("fs_share", c.fs_share, "Share of the filesystem used when quota is 0.",
          {.min = 0.01, .max = 1.0});
  b.field("high_watermark", c.high_watermark, "Start evicting above this share of capacity.",
          {.min = 0.05, .max = 1.0});
  b.field("low_watermark", c.low_watermark, "Evict down to this share of capacity.",
          {.min = 0.01, .max = 1.0});
  b.field("idle_ttl", c.idle_ttl, "Evict objects unread this long (0: never).");
  b.field("adopt_orphans", c.adopt_orphans,
          "At start-up, index again unindexed object files that verify (else remove them).");
  b.field("scrub_rate", c.scrub_rate, "Background re-verification rate in bytes/s (0: off).");
  b.check(c.low_watermark < c.high_watermark,
          "cache.low_watermark must be below cache.high_watermark");
}

options to_options(const config_section& c) {
  options o;
  o.root = c.dir;
  o.quota_bytes = c.quota.bytes();
  o.fs_share = c.fs_share;
  o.high_watermark = c.high_watermark;
  o.low_watermark = c.low_watermark;
  o.idle_ttl = std::chrono::duration_cast<std::chrono::seconds>(c.idle_ttl.get());
  o.adopt_orphans = c.adopt_orphans;
  o.scrub_bytes_per_sec = c.scrub_rate.bytes();
  return o;
}

void register_metrics(metrics::registry& reg, const store& s) {
  const store* p = &s;
  auto gauge = [&](const char* name, const char* help, auto field) {
    reg.gauge_fn(name, help, [p, field] { return static_cast<double>(field(p->get_stats())); });
  };
  auto counter = [&](const char* name, const char* help, auto field) {
    reg.counter_fn(name, help, [p, field] { return static_cast<double>(field(p->get_stats())); });
  };
  gauge("shoal_cache_bytes", "Bytes of committed objects in the cache.",
        [](const stats& x) { return x.bytes; });
  gauge("shoal_cache_objects", "Committed objects in the cache.",
        [](const stats& x) { return x.objects; });
  gauge("shoal_cache_capacity_bytes", "Cache capacity.",
        [](const stats& x) { return x.capacity_bytes; });
  gauge("shoal_cache_inflight_bytes", "Bytes reserved by writes in progress.",
        [](const stats& x) { return x.inflight_bytes; });
  gauge("shoal_cache_pinned_objects", "Objects protected by an unexpired pin.",
        [](const stats& x) { return x.pinned_objects; });
  gauge("shoal_cache_pinned_bytes", "Bytes of cached objects protected by an unexpired pin.",
        [](const stats& x) { return x.pinned_bytes; });
  counter("shoal_cache_hits_total", "Reads of cached objects.",
          [](const stats& x) { return x.hits; });
  counter("shoal_cache_misses_total", "Reads of absent objects.",
          [](const stats& x) { return x.misses; });
  counter("shoal_cache_commits_total", "Objects committed by writers.",
          [](const stats& x) { return x.commits; });
  counter("shoal_cache_commit_mismatches_total",
          "Writes refused because their bytes did not match.",
          [](const stats& x) { return x.commit_mismatches; });
  counter("shoal_cache_evictions_total", "Objects evicted.",
          [](const stats& x) { return x.evictions; });
  counter("shoal_cache_evicted_bytes_total", "Bytes evicted.",
          [](const stats& x) { return x.evicted_bytes; });
  counter("shoal_cache_no_space_errors_total",
          "Writes that failed for lack of space after eviction.",
          [](const stats& x) { return x.no_space_errors; });
  counter("shoal_cache_scrubbed_bytes_total", "Bytes re-verified by the scrubber.",
          [](const stats& x) { return x.scrubbed_bytes; });
  counter("shoal_cache_scrub_mismatches_total", "Objects quarantined by the scrubber.",
          [](const stats& x) { return x.scrub_mismatches; });
  // By kind: blob, dataset_file, manifest, metainfo.
  for (std::size_t k = 0; k < object_kind_count; ++k) {
    std::string kind(to_string(static_cast<object_kind>(k)));
    reg.gauge_fn("shoal_cache_" + kind + "_bytes", "Bytes of committed " + kind + " objects.",
                 [p, k] { return static_cast<double>(p->get_stats().by_kind[k].bytes); });
    reg.gauge_fn("shoal_cache_" + kind + "_objects", "Committed " + kind + " objects.",
                 [p, k] { return static_cast<double>(p->get_stats().by_kind[k].objects); });
  }
}

}  // namespace shoal::cache
