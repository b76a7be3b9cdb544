#pragma once
// registry-proxy's configuration: every key declared once, with its default and doc string.
// `shoal-registry-proxy --print-config-docs` renders the reference (docs/config/registry-proxy.md).

#include <map>
#include <string>
#include <vector>

#include "cache/config.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/tls.h"
#include "registry-proxy/ring.h"

namespace shoal::proxy {

using namespace std::chrono_literals;

struct upstream_config {
  std::string name;  // registry host as clients name it: "docker.io", "127.0.0.1:5000"
  std::string url;   // base URL: "https://registry-1.docker.io"
  std::vector<std::string> aliases;  // other ns= values that mean this upstream
  std::string prefix;                // path prefix for clients without ns= (empty: the name)
  bool docker_hub = false;           // single-component names become library/<name>
  std::string auth = "anonymous";    // anonymous | basic
  std::string credentials_file;      // basic: a file holding "user:password"
  bool insecure_tls = false;
  std::string ca_file;
  config::duration connect_timeout = 5s;
  config::duration stall_timeout = 30s;
  int max_retries = 3;
  // Pull-path hardening: hosts besides the upstream's own whose token realms are followed.
  std::vector<std::string> token_realm_hosts;
};
void describe(config::binder& b, upstream_config& c);

struct manifest_config {
  config::duration tag_ttl = 60s;             // a tag's answer is reused this long
  config::duration stale_if_error = 24h * 7;  // serve an expired tag this long when upstream fails
  config::byte_size max_size = config::byte_size::mib(4);
};
void describe(config::binder& b, manifest_config& c);

struct access_config {
  config::duration positive_ttl = 60s;  // an upstream "yes, this credential may pull" is reused
  // Pull-path hardening: what credentials upstream has not accepted lately may cost
  // (credential_gate.h), and the bound of the credential-keyed caches.
  int unseen_per_client_rate = 10;  // upstream checks per second per client address
  int unseen_per_client_burst = 50;
  int unseen_rate = 50;  // all clients together
  int unseen_burst = 100;
  int unseen_concurrency = 4;  // such checks running at once (of worker_threads)
  int cache_entries = 10000;   // positive answers, tokens, clients remembered (LRU)
};
void describe(config::binder& b, access_config& c);

struct torrent_config {
  bool enabled = true;
  std::string listen = "0.0.0.0:6881";       // BitTorrent listen address (data plane)
  std::string announce_ip;                   // ip= sent to the tracker (empty: its source address)
  std::vector<std::string> trackers;         // announce URLs put in every metainfo
  std::string node_name = "registry-proxy";  // identity sent to the tracker
  config::byte_size upload_rate_limit;       // bytes/s, 0: unlimited
  int max_loaded_torrents = 2000;        // objects seeded at once (least recently used unloaded)
  config::duration idle_unload = 10min;  // unload a torrent with no activity this long
  config::duration metainfo_wait = 20s;  // how long a metainfo request waits for a fetch
  int connections_limit = 4000;
  int fetch_concurrency = 1;  // upstream fetches for swarms at once, per upstream (0: no limit)
  // Pull-path hardening: bounds of the fetch queue (429 with Retry-After beyond them).
  int fetch_queue_max = 1024;
  int fetch_queue_per_client = 64;
  config::byte_size chunk_size =
      config::byte_size::mib(16);    // chunk objects of large blobs (0: off)
  bool super_seeding = true;         // offer each node a few pieces at a time (docs/p2p.md)
  int superseed_offers = 8;          // pieces on offer per node connection
  int superseed_max_in_flight = 64;  // offers outstanding on all connections together
  bool superseed_in_order = true;    // offer pieces front to back (streaming readers)
  // With tls.enabled: sign a grant with every metainfo answer to a node, and upload pieces only
  // to nodes presenting one (common/grant.h, swarm/grants.h).
  bool require_grants = true;
  config::duration grant_ttl = 6h;
  std::map<std::string, std::string>
      libtorrent;  // raw settings_pack overrides (tuning escape hatch)
};
void describe(config::binder& b, torrent_config& c);

// One origin datasets may use (datasets.allowed_origins): an HTTP origin or an S3 endpoint.
struct dataset_origin_config {
  std::string url;                   // scheme://host[:port]
  bool private_addresses = false;    // a host name may resolve to loopback/private addresses
  std::string credentials_file;      // S3: signs requests to this endpoint
  bool credentials_env = false;      // S3: sign with the AWS_* environment variables instead
  std::vector<std::string> buckets;  // S3: the buckets datasets may read here (empty: any)
};
void describe(config::binder& b, dataset_origin_config& c);

// Datasets (datasets.h): declarations resolved into manifests, origin fetches, group torrents.
struct dataset_config {
  bool enabled = true;
  std::string dir;          // records, manifests, pack torrents (empty: <state_dir>/../datasets)
  std::string staging_dir;  // origin fetches in progress, on the cache's filesystem (empty:
                            // <cache.dir>/../dataset-staging)
  std::string credentials_dir;  // relative credentials_file names are resolved here
  std::vector<dataset_origin_config> allowed_origins;  // where datasets may come from (empty: none)
  int parallel_fetches = 8;                            // origin objects fetched at once
  int max_resolving = 4;                               // datasets resolved at once
  std::uint64_t max_queued = 1000;  // declarations waiting to resolve (more: 429)
  config::byte_size small_file_max = config::byte_size::mib(4);  // files below are packed
  config::byte_size pack_target = config::byte_size::mib(64);    // a pack closes at this many bytes
  std::uint64_t max_files = 10'000'000;                          // files one dataset may select
  config::duration connect_timeout = 5s;
  config::duration stall_timeout = 30s;
  int max_retries = 5;                // whole-request retries of one origin object (each resumes)
  config::duration resolve_pin = 1h;  // objects fetched by a resolution are kept at least this long
};
void describe(config::binder& b, dataset_config& c);

// A small Range far ahead of an upstream fetch in flight (a lazy reader's first look at a cold
// blob) is asked of upstream on its own instead of waiting for the fetch to reach it
// (blobs.h, set_range_passthrough).
struct range_config {
  config::byte_size upstream_max = config::byte_size::mib(4);     // largest such range (0: never)
  config::byte_size upstream_ahead = config::byte_size::mib(64);  // how far ahead of the fetch
  int upstream_concurrency = 4;  // such upstream requests at once (more wait for the fetch)
};
void describe(config::binder& b, range_config& c);

struct proxy_config {
  daemon::http_config http{.listen = "0.0.0.0:5050"};
  daemon::log_config log;
  int io_threads = 2;
  int worker_threads = 8;  // blocking work: disk, index, upstream control calls
  cache::config_section cache{.dir = "/var/lib/shoal/registry-proxy/cache", .fs_share = 0.9};
  std::string state_dir = "/var/lib/shoal/registry-proxy/state";  // tag cache, visibility, metainfo
  std::vector<upstream_config> upstreams;
  std::string default_upstream;  // upstream for requests with neither ns= nor a known prefix
  manifest_config manifests;
  access_config access;
  torrent_config torrent;
  range_config ranges;
  dataset_config datasets;
  ring_config ring;  // replicas sharing the upstream work (ring.h)
  // Mutual TLS on the HTTP API (docs/registry-proxy.md "Who may call what"): each route admits
  // the roles of the caller's certificate that need it (nodes pull, the scheduler reads
  // manifests and dataset records, operators declare datasets). registry-proxy makes no HTTP
  // call to another Shoal daemon (its announces are the seeder's, over BitTorrent's own TLS);
  // its HTTP client talks to upstream registries and dataset origins, which never see this
  // certificate.
  tls::tls_config tls;
};
void describe(config::binder& b, proxy_config& c);

}  // namespace shoal::proxy
