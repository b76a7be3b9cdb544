#pragma once
// The scheduler's configuration: every key declared once with its default and doc string.
// `shoal-scheduler --print-config-docs` renders the reference (docs/config/scheduler.md).

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/daemon.h"
#include "common/heartbeat.h"
#include "common/tls.h"

namespace shoal::scheduler {

using namespace std::chrono_literals;

struct tracker_config {
  config::duration interval = 15s;       // re-announce interval for downloaders
  config::duration seed_interval = 60s;  // re-announce interval for complete holders
  config::duration min_interval = 5s;
  config::duration peer_timeout = 180s;  // drop peers (and heartbeat holders) silent this long
  int default_numwant = 50;
  int max_numwant = 200;
  // Plain mode only, and unsafe: take the address a heartbeat or announce claims instead of the
  // connection's (one-machine setups where nodes share 127.0.0.1). Ignored with TLS on.
  bool trust_announced_ip = false;
  std::uint32_t max_swarms = 1'000'000;        // distinct info-hashes tracked
  std::uint32_t max_peers_per_swarm = 20'000;  // peers (and heartbeat holders) in one swarm
  // A registry-proxy replica stays in the ring's membership this long after its last announce
  // (POST /v1/origins; scheduler/origins.h).
  config::duration origin_members_ttl = 5s;
};
void describe(config::binder& b, tracker_config& c);

// Liveness of nodes, from their heartbeats.
struct nodes_config {
  config::duration unhealthy_after = 30s;     // no heartbeat this long: unhealthy (not placed on)
  config::duration drop_after = 5min;         // no heartbeat this long: forgotten with its objects
  config::duration heartbeat_interval = 10s;  // what peerds are configured with (documentation
                                              // and the restart test: resync within one period)
  std::uint32_t max_nodes = 10'000;  // distinct node names; new ones beyond are refused (429)
  // Objects one node may hold; also bounds a heartbeat's lists and body (413 beyond).
  std::uint32_t max_objects_per_node = heartbeat::default_max_objects;
};
void describe(config::binder& b, nodes_config& c);

// Node failure detection (scheduler/failures.h): when a silent or failing node counts as failed.
struct failover_config {
  config::duration failed_after = 60s;    // no heartbeat this long: failed (a decision, an event)
  config::duration restart_grace = 2min;  // a node that said it was stopping may be gone this long
  double max_failed_fraction = 0.5;  // more nodes silent at once: the scheduler's view is stale
  std::uint32_t max_events = 1000;   // node events kept for /v1/events
};
void describe(config::binder& b, failover_config& c);

// Jobs known to the scheduler and their failover (scheduler/jobs.h).
struct jobs_config {
  std::uint32_t max_jobs = 10'000;                   // kept at once (least recently updated go)
  config::duration ttl = std::chrono::days(7);       // forgotten this long after the last update
  config::duration failover_preference_ttl = 30min;  // the extender prefers a replacement this long
  config::duration checkpoint_pin_for = std::chrono::days(7);  // standbys pin checkpoints this long
  std::string checkpoint_views_dir = "/var/lib/shoal/peerd/checkpoints/views";  // peerd's views_dir
};
void describe(config::binder& b, jobs_config& c);

// Image references → layers, through registry-proxy.
struct resolver_config {
  std::string registry_proxy = "http://127.0.0.1:5050";  // base URL of registry-proxy
  std::string default_platform = "linux/amd64";  // for nodes whose heartbeat has no platform label
  config::duration tag_ttl = 60s;                // a tag's resolution is reused this long
  std::uint32_t max_manifests = 4096;            // manifests cached by digest (LRU beyond)
  config::duration connect_timeout = 2s;
  config::duration request_timeout = 10s;
  int threads = 4;  // concurrent manifest fetches
};
void describe(config::binder& b, resolver_config& c);

// The time-to-ready estimate: bandwidth of each source class, in bytes per second.
struct cost_config {
  config::byte_size rack_bandwidth = config::byte_size::mib(1024);    // a holder in the same rack
  config::byte_size zone_bandwidth = config::byte_size::mib(512);     // a holder in the same zone
  config::byte_size cluster_bandwidth = config::byte_size::mib(256);  // any other holder
  config::byte_size origin_bandwidth = config::byte_size::mib(128);   // registry-proxy's cache
  config::byte_size upstream_bandwidth = config::byte_size::mib(32);  // the upstream registry
  config::byte_size node_ingress = config::byte_size::mib(1024);      // the node's own link
  std::string model = "serial";  // serial | parallel (how source classes combine)
};
void describe(config::binder& b, cost_config& c);

// Default of placement.packing_seconds_per_gpu: a node that would be left with one more GPU free
// must be ready this many seconds sooner to win (docs/scheduler.md, "Packing").
inline constexpr double default_packing_seconds_per_gpu = 30;

struct placement_config {
  cost_config cost;
  // Seconds of time-to-ready that one GPU left free on the chosen node is worth (GPU bin-packing,
  // so whole nodes stay free for gangs); 0 ranks by data alone.
  double packing_seconds_per_gpu = default_packing_seconds_per_gpu;
  bool require_network_validation = false;  // gangs: only nodes whose netsetup validation passed
  std::string netsetup_policy;  // netsetup policy YAML for validation and plans ("": defaults)
  config::duration reservation_ttl = 2min;  // GPUs reserved by /v1/place are held this long
  config::duration resolve_timeout = 3s;    // longest wait for image resolution in /v1/place
};
void describe(config::binder& b, placement_config& c);

// The kube-scheduler extender.
struct extender_config {
  std::string mode = "soft";              // soft (prioritize only) | hard (filter too)
  std::string max_missing = "10%";        // hard mode: filter nodes missing more ("10%" or "2GiB")
  config::duration resolve_timeout = 2s;  // answer with what is known after this long
  config::byte_size max_request_bytes = config::byte_size::mib(32);
};
void describe(config::binder& b, extender_config& c);

struct prewarm_config {
  config::duration timeout = 30min;   // a prewarm not complete by then fails
  config::duration retention = 1h;    // finished prewarms are reported this long
  std::uint32_t max_prewarms = 1000;  // kept at once (oldest finished dropped first)
  config::duration pin_for = 1h;      // nodes pin prewarmed objects this long
};
void describe(config::binder& b, prewarm_config& c);

// Who may call the API besides certificate holders (scheduler/authz.h).
struct auth_config {
  // A file holding the operator bearer token (Authorization: Bearer <token>), re-read when it
  // changes. Empty: no token is accepted. Set in plain mode too: operator verbs then need it.
  std::string operator_token_file;
};
void describe(config::binder& b, auth_config& c);

// The checkpoint catalog (scheduler/checkpoints.h, docs/scheduler.md "Checkpoints").
struct checkpoints_config {
  std::uint32_t max_per_job = 16;                           // records kept per job
  config::byte_size max_bytes = config::byte_size::gib(1);  // manifests + torrents held
  config::byte_size max_registration_bytes = config::byte_size::mib(64);  // one POST body
  config::duration grant_ttl = 1h;  // grants for checkpoint swarms (tls.enabled)
};
void describe(config::binder& b, checkpoints_config& c);

// Scheduler replicas sharing state through Redis (scheduler/shared_state.h, docs/ha.md). Off
// (neither address nor sentinels): one scheduler alone, its state in memory.
struct redis_config {
  std::string address;                 // host:port of a lone Redis primary
  std::vector<std::string> sentinels;  // host:port of each Sentinel (instead of address)
  std::string master_name = "shoal";   // the primary's name at the sentinels
  std::string user;                    // ACL user of the replicas ("": the default user)
  std::string password_file;           // its password, one line ("": no AUTH)
  std::string sentinel_user;
  std::string sentinel_password_file;
  // Redis with TLS: what the sentinels name (or address) → the local stunnel4 tunnel to it.
  std::map<std::string, std::string> tunnels;
  std::string key_prefix = "shoal:";
  config::duration connect_timeout = 500ms;
  config::duration command_timeout = 1s;
  int wait_replicas = 1;  // WAIT for this many Redis replicas before a heartbeat is answered
  config::duration wait_timeout = 500ms;
  config::duration lease_ttl = 5s;
  std::uint32_t log_max_entries = 100'000;
  config::duration read_batch = 20ms;  // collect the other replicas' log entries this long
};
void describe(config::binder& b, redis_config& c);

struct scheduler_config {
  // Bodies up to the extender's 32 MiB; heartbeats may be larger (nodes.max_objects_per_node).
  daemon::http_config http{.listen = "0.0.0.0:7070", .max_body_bytes = config::byte_size::mib(32)};
  daemon::log_config log;
  int io_threads = 2;
  int worker_threads = 4;
  tracker_config tracker;
  nodes_config nodes;
  failover_config failover;
  jobs_config jobs;
  resolver_config resolver;
  placement_config placement;
  extender_config extender;
  prewarm_config prewarm;
  checkpoints_config checkpoints;
  // Mutual TLS on the API. On: heartbeats are accepted only for the node named in the
  // caller's certificate, announces only from a node certificate for their node (origin
  // announces from registry-proxy's), every other route by role (scheduler/authz.h), and calls
  // to registry-proxy present the same certificate.
  tls::tls_config tls;
  auth_config auth;
  redis_config redis;
};
void describe(config::binder& b, scheduler_config& c);

}  // namespace shoal::scheduler
