#pragma once
// peerd's configuration: every key declared once with its default and doc string.
// `shoal-peerd --print-config-docs` renders the reference (docs/config/peerd.md).

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/daemon.h"

namespace shoal::peerd {

using namespace std::chrono_literals;

struct node_config {
  std::string name;  // unique node name (default: the host name)
  std::string zone;
  std::string rack;
};
void describe(config::binder& b, node_config& c);

struct upstream_config {
  std::string registry_proxy = "http://127.0.0.1:5050";  // base URL of registry-proxy
  std::string scheduler;                                  // base URL of the scheduler (tracker, heartbeats); empty: none
  config::duration connect_timeout = 2s;
  config::duration request_timeout = 30s;  // manifests and other small requests
  config::duration metainfo_wait = 20s;    // long-poll per metainfo request
};
void describe(config::binder& b, upstream_config& c);

struct cache_config {
  std::string dir = "/var/lib/shoal/peerd/cache";
  config::byte_size quota;
  double fs_share = 0.8;
  double high_watermark = 0.85;
  double low_watermark = 0.70;
  config::duration idle_ttl = 0s;
  config::byte_size scrub_rate = config::byte_size::mib(32);
};
void describe(config::binder& b, cache_config& c);

struct swarm_config {
  std::string listen = "0.0.0.0:6881";  // BitTorrent listen address (the data-plane IP)
  std::string announce_ip;              // ip= sent to the tracker (empty: its source address)
  std::string partial_dir;              // downloads in progress (empty: <cache.dir>/../partial)
  config::byte_size upload_rate_limit;  // bytes/s (0: unlimited)
  config::byte_size download_rate_limit;
  int connections_limit = 2000;
  int max_loaded_torrents = 500;      // seeded at once; more are unloaded (LRU) and reloaded on demand
  config::duration seed_idle_unload = 5min;  // unload a seed nobody asked for in this long
  config::duration stall_timeout = 5s;       // no piece for this long: fetch missing ranges over HTTP
  config::duration fallback_deadline = 20s;  // give up (error to containerd) when no byte arrives this long
  int streaming_window = 8;                  // pieces ahead of a client's cursor given deadlines
  config::duration heartbeat_interval = 10s;
  bool count_sources = true;  // per-block alerts attribute bytes to origin or peers
  std::map<std::string, std::string> libtorrent;  // raw settings_pack overrides (tuning escape hatch)
};
void describe(config::binder& b, swarm_config& c);

struct peerd_config {
  daemon::http_config http{.listen = "127.0.0.1:65001"};
  daemon::log_config log;
  int io_threads = 2;
  int worker_threads = 16;
  node_config node;
  upstream_config upstream;
  cache_config cache;
  swarm_config swarm;
};
void describe(config::binder& b, peerd_config& c);

}  // namespace shoal::peerd
