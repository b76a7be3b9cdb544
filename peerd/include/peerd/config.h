#pragma once
// peerd's configuration: every key declared once with its default and doc string.
// `shoal-peerd --print-config-docs` renders the reference (docs/config/peerd.md).

#include <map>
#include <string>
#include <vector>

#include "cache/config.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/tls.h"

namespace shoal::peerd {

using namespace std::chrono_literals;

// GPUs of one model on this node (reported to the scheduler as capacity).
struct gpu_config {
  std::string model;
  int count = 0;
};
void describe(config::binder& b, gpu_config& c);

struct node_config {
  std::string name;  // unique node name (default: the host name)
  std::string zone;
  std::string rack;
  std::string fabric;                         // RoCE fabric segment (gangs stay inside one)
  std::map<std::string, std::string> labels;  // more heartbeat labels (platform: os/arch)
  std::vector<gpu_config> gpus;
  std::string netsetup_report;  // netsetup's discovery document (JSON file) sent with heartbeats
  // The node's health hook (health.h): a command and/or a file, reported with heartbeats.
  std::vector<std::string> health_command;  // argv (no shell); empty: none
  config::duration health_interval = 30s;
  config::duration health_timeout = 10s;
  std::string health_file;  // first line ok | degraded[: why] | failing[: why]; empty: none
  config::duration health_file_max_age = 5min;
  // The node's pods from containerd's CRI (cri.h), matched to jobs by a pod label.
  std::string cri_socket;  // e.g. /run/containerd/containerd.sock; empty: no watch
  std::string cri_job_label = "shoal.io/job";
  config::duration cri_interval = 10s;
  config::duration cri_timeout = 5s;
};
void describe(config::binder& b, node_config& c);

struct upstream_config {
  std::string registry_proxy = "http://127.0.0.1:5050";  // base URL of registry-proxy
  // More registry-proxy replicas, tried after `registry_proxy` (src/proxy_link.h).
  std::vector<std::string> registry_proxies;
  config::duration registry_proxy_backoff = 5s;  // a failed replica is tried last for this long
  std::string scheduler;  // base URL of the scheduler (tracker, heartbeats); empty: none
  // More replicas of the scheduler, tried after `scheduler` (docs/scheduler.md "Clients fail
  // over").
  std::vector<std::string> schedulers;
  config::duration scheduler_connect_timeout = 1s;  // per replica, then the next
  config::duration scheduler_timeout = 2s;  // small calls: no answer byte for this long, next
  config::duration scheduler_backoff = 5s;  // a failed replica is tried last for this long
  config::duration scheduler_resolve_interval = 30s;  // a name's addresses are looked up again
  config::duration connect_timeout = 2s;
  config::duration request_timeout = 10s;  // manifests and other small requests
  config::duration metainfo_wait = 5s;     // long-poll per metainfo request
};
void describe(config::binder& b, upstream_config& c);
// `scheduler` then `schedulers`, without duplicates; empty: no scheduler.
[[nodiscard]] std::vector<std::string> scheduler_urls(const upstream_config& c);
// `registry_proxy` then `registry_proxies` (comma lists split), the same way.
[[nodiscard]] std::vector<std::string> registry_proxy_urls(const upstream_config& c);

struct swarm_config {
  std::string listen = "0.0.0.0:6881";  // BitTorrent listen address (the data-plane IP)
  std::string announce_ip;              // ip= sent to the tracker (empty: its source address)
  std::string partial_dir;              // downloads in progress (empty: <cache.dir>/../partial)
  config::byte_size upload_rate_limit;  // bytes/s (0: unlimited)
  config::byte_size download_rate_limit;
  int connections_limit = 2000;
  int max_loaded_torrents = 500;  // seeded at once; more are unloaded (LRU) and reloaded on demand
  config::duration seed_idle_unload = 5min;  // unload a seed nobody asked for in this long
  config::duration stall_timeout = 5s;  // no piece for this long: fetch missing ranges over HTTP
  config::duration fallback_deadline =
      20s;                   // give up (error to containerd) when no byte arrives this long
  int streaming_window = 0;  // pieces given deadlines ahead of a reader (docs/p2p.md)
  // A local reader of a whole object from byte 0 switches its download to piece order.
  bool in_order_readers = true;
  config::byte_size range_deadline_bytes =
      config::byte_size::mib(16);  // a Range request's first bytes get piece deadlines (0: off)
  config::byte_size range_direct_bytes =
      config::byte_size::mib(4);  // a small Range of a chunk not cut yet: from registry-proxy
  config::duration heartbeat_interval = 10s;
  bool count_sources = true;         // per-block alerts attribute bytes to origin or peers
  bool require_grants = true;        // with tls: pieces only to peers with registry-proxy's grant
  bool superseed_published = true;   // super-seed what this node publishes (checkpoints)
  int superseed_offers = 8;          // with it: pieces on offer per peer connection
  int superseed_max_in_flight = 64;  // with it: offers outstanding on all connections together
  std::map<std::string, std::string>
      libtorrent;  // raw settings_pack overrides (tuning escape hatch)
};
void describe(config::binder& b, swarm_config& c);

// Datasets on this node (datasets.h): prefetch, read-only views, pins.
struct datasets_config {
  bool enabled = true;
  std::string views_dir;    // <views_dir>/<name>@<version>/...: clones (reflinks) or copies of
                            // the cache's objects (empty: <cache.dir>/../views)
  std::string partial_dir;  // group downloads in progress, kept across restarts (empty:
                            // <cache.dir>/../dataset-partial)
  std::string dir;          // records, manifests, pack torrents (empty: <cache.dir>/../datasets)
  int parallel_groups = 4;  // groups (torrents) downloaded at once per prefetch
  config::duration resolve_wait = 30min;  // how long a prefetch waits for registry-proxy to resolve
  config::byte_size max_manifest = config::byte_size::mib(1024);
  // Expiry of views and pins (security review F8): a view and the pins of its objects last
  // pin_ttl after the last prefetch, prewarm or renewal; then the view is removed.
  config::duration pin_ttl = 24h;
  config::duration pin_ttl_max = 168h;            // longest TTL a renewal or a prewarm order gets
  config::duration expiry_check_interval = 1min;  // how often expired views are looked for
};
void describe(config::binder& b, datasets_config& c);

// Checkpoints on this node (checkpoints.h, docs/checkpoints.md): publish from the writer,
// restore anywhere. Needs datasets.enabled (they share the group engine).
struct checkpoints_config {
  bool enabled = true;
  std::string publish_root;  // publish dirs lie under it: the pods' hostPath (empty:
                             // <cache.dir>/../checkpoints/incoming)
  std::string views_dir;     // restored views (empty: <cache.dir>/../checkpoints/views)
  std::string dir;           // records and manifests (empty: <cache.dir>/../checkpoints)
  // A file holding the bearer token publish, restore and rm need (shoalctl reads the same file;
  // a pod gets it from a Secret). Empty: those calls are refused.
  std::string token_file;
  int keep_last = 2;                 // newest steps per job pinned here (published and restored)
  int hash_threads = 2;              // files a publish reads and hashes at once
  int parallel_groups = 4;           // groups a restore downloads at once
  config::duration view_ttl = 168h;  // a restored view lasts this long after its restore
};
void describe(config::binder& b, checkpoints_config& c);

// Private content held on this node (peerd/blob_access.h): who may read it from the cache.
struct access_config {
  config::duration positive_ttl = 60s;  // a registry-proxy "yes, this credential may" is reused
  int cache_entries = 10000;            // such answers remembered (LRU)
  int public_entries = 100000;          // digests known public remembered (LRU)
};
void describe(config::binder& b, access_config& c);

// One registry whose pulls `shoal-peerd mirror install` points at this peerd (mirror_setup.h):
// containerd's certs.d/<host>/hosts.toml and the CRI-O/podman registries.conf.d drop-in.
struct mirror_registry_config {
  std::string host;    // registry host as image references name it: "docker.io", "r.example:5000"
  std::string server;  // its own endpoint, containerd's fallback (empty: https://<host>)
  std::string prefix;  // registry-proxy's path prefix for it, for CRI-O/podman (empty: host)
};
void describe(config::binder& b, mirror_registry_config& c);

struct mirror_config {
  std::vector<mirror_registry_config> registries{
      {.host = "docker.io", .server = "https://registry-1.docker.io"}};
  bool prefetch_layers = true;  // fetch an image's config and layers as its manifest is served
};
void describe(config::binder& b, mirror_config& c);

struct peerd_config {
  daemon::http_config http{.listen = "127.0.0.1:65001"};
  daemon::log_config log;
  int io_threads = 2;
  int worker_threads = 16;
  node_config node;
  upstream_config upstream;
  cache::config_section cache{.dir = "/var/lib/shoal/peerd/cache", .fs_share = 0.8};
  swarm_config swarm;
  datasets_config datasets;
  checkpoints_config checkpoints;
  access_config access;
  mirror_config mirror;
  // The metrics listener on the node address (docs/peerd.md "What listens where"): /metrics
  // and /healthz only, for Prometheus on other hosts. Empty: off. With tls.enabled it serves
  // TLS with the node certificate and requires a client certificate of the cluster CA.
  std::string metrics_listen;
  // TLS for peerd's calls to registry-proxy and the scheduler (client certificate: this node's,
  // URI SAN shoal://node/<node.name>; servers verified against the cluster CA) and for the
  // metrics listener. The HTTP listener (`http`: containerd's mirror, the node API) stays plain
  // on loopback.
  tls::tls_config tls;
};
void describe(config::binder& b, peerd_config& c);

}  // namespace shoal::peerd
