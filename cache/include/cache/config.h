#pragma once
// The `cache:` section every daemon's configuration carries, and the Prometheus metrics every
// daemon exposes for its store. Defaults that differ per daemon (the directory, the share of
// the filesystem) are set by the daemon's own config struct through designated initializers.

#include <string>

#include "cache/options.h"
#include "cache/store.h"
#include "common/config.h"
#include "common/metrics.h"

namespace shoal::cache {

struct config_section {
  std::string dir = "/var/lib/shoal/cache";
  config::byte_size quota;  // 0: a share of the filesystem
  double fs_share = 0.9;
  double high_watermark = 0.85;
  double low_watermark = 0.70;
  config::duration idle_ttl = std::chrono::seconds(0);
  bool adopt_orphans = true;
  config::byte_size scrub_rate = config::byte_size::mib(64);
};
void describe(config::binder& b, config_section& c);

// The store options a section describes.
[[nodiscard]] options to_options(const config_section& c);

// shoal_cache_* gauges and counters read from the store's stats at scrape time.
void register_metrics(metrics::registry& reg, const store& s);

}  // namespace shoal::cache
