#include "scheduler/config.h"

#include "common/checkpoint.h"
#include "scheduler/cost.h"

namespace shoal::scheduler {

void describe(config::binder& b, tracker_config& c) {
  b.field("interval", c.interval, "Re-announce interval answered to downloading peers.",
          {.min = 1s});
  b.field("seed_interval", c.seed_interval, "Re-announce interval answered to complete holders.",
          {.min = 1s});
  b.field("min_interval", c.min_interval,
          "Minimum re-announce interval (peerd sets libtorrent's to match).", {.min = 1s});
  b.field("peer_timeout", c.peer_timeout,
          "Forget peers that stopped announcing, and heartbeat holders of nodes silent, this long.",
          {.min = 5s});
  b.field("default_numwant", c.default_numwant, "Peers handed out when the announce does not say.",
          {.min = 1, .max = 1000});
  b.field("max_numwant", c.max_numwant, "Most peers handed out per announce.",
          {.min = 1, .max = 5000});
  b.field(
      "origin_members_ttl", c.origin_members_ttl,
      "registry-proxy replicas announce themselves (POST /v1/origins) every ring.probe_interval "
      "to form their ring; one that has not announced for this long leaves the membership "
      "every replica is told (docs/ha.md).",
      {.min = 1s});
  b.field("trust_announced_ip", c.trust_announced_ip,
          "Unsafe, plain mode only: use the address a node claims (the ip= parameter of "
          "announces, the ip of heartbeats) instead of the connection's source address. Anyone "
          "who can reach the scheduler can then point every node at an address of its choosing; "
          "meant for one-machine setups where nodes listen on addresses they do not connect "
          "from. With tls.enabled the claim is always ignored (a debug log line says so when it "
          "differs).");
  b.field("max_swarms", c.max_swarms,
          "Most swarms (distinct info-hashes) tracked. An announce that would start another is "
          "refused (429, failure reason \"tracker full\"); heartbeat holdings beyond it are not "
          "recorded (the index still has them). About 300 bytes per swarm and per peer entry.",
          {.min = 1u, .max = 100'000'000u});
  b.field("max_peers_per_swarm", c.max_peers_per_swarm,
          "Most peers (announcing peers and heartbeat holders) in one swarm; a new peer beyond it "
          "is refused (429, \"swarm full\"), known ones are still heard. Keep it above "
          "nodes.max_nodes plus the origins, so a layer every node holds fits.",
          {.min = 1u, .max = 10'000'000u});
}

void describe(config::binder& b, nodes_config& c) {
  b.field("unhealthy_after", c.unhealthy_after,
          "A node without a heartbeat this long is unhealthy: never placed on, not counted as a "
          "source, "
          "and its prewarms fail.",
          {.min = 1s});
  b.field("drop_after", c.drop_after,
          "A node without a heartbeat this long is forgotten, with everything it held.",
          {.min = 1s});
  b.field(
      "heartbeat_interval", c.heartbeat_interval,
      "The heartbeat interval peerds use (swarm.heartbeat_interval there); reported by /v1/nodes.",
      {.min = 1s});
  b.field("max_nodes", c.max_nodes,
          "Most nodes known at once (heartbeating, or not yet dropped). A heartbeat naming a new "
          "node beyond it is refused (429); known nodes are always heard.",
          {.min = 1u, .max = 10'000'000u});
  b.field(
      "max_objects_per_node", c.max_objects_per_node,
      "Most objects one node may hold in the index. A heartbeat that would leave its node with "
      "more, or that lists more entries (objects and removed together), is refused (413). It "
      "also sizes the heartbeat body limit: this × 206 bytes (the longest encoded object) + "
      "8.75 MiB (labels, documents, orders, datasets and checkpoints at their bounds): 28.4 MiB "
      "for 100,000. "
      "The index needs about 1 KiB per (node, object) in the worst case (index and tracker).",
      {.min = 1u, .max = static_cast<std::uint32_t>(heartbeat::max_objects)});
  b.check(c.unhealthy_after < c.drop_after, "nodes.unhealthy_after must be below nodes.drop_after");
}

void describe(config::binder& b, failover_config& c) {
  b.field("failed_after", c.failed_after,
          "A node without a heartbeat this long has failed: an event (GET /v1/events), the metric "
          "shoal_scheduler_node_failures_total{cause=\"heartbeat\"} and state `failed` in "
          "/v1/nodes. Not decided during the scheduler's first failed_after (nodes have not all "
          "reported yet).",
          {.min = 1s});
  b.field("restart_grace", c.restart_grace,
          "A node whose last heartbeat said it was stopping cleanly (peerd on SIGTERM: a restart, "
          "a rolling update) is `restarting`, not failed, for this long; after it, failed with "
          "cause restart_grace.",
          {.min = 1s});
  b.field("max_failed_fraction", c.max_failed_fraction,
          "When more than this share of the known nodes would fail for silence at once, the "
          "scheduler takes its own view as stale (it is more likely cut off than they all died) "
          "and decides nothing on silence until heartbeats arrive again. A node's own report "
          "(failing, netsetup validation) still counts.",
          {.min = 0.0, .max = 1.0});
  b.field("max_events", c.max_events, "Node events kept in memory for GET /v1/events (oldest go).",
          {.min = 1u, .max = 1'000'000u});
}

void describe(config::binder& b, jobs_config& c) {
  b.field("max_jobs", c.max_jobs,
          "Jobs kept at once (a job is known once placed or prewarmed with an `id`); beyond it the "
          "least recently updated is forgotten.",
          {.min = 1u, .max = 1'000'000u});
  b.field("ttl", c.ttl, "A job not placed, prewarmed or failed over for this long is forgotten.",
          {.min = 1min});
  b.field("failover_preference_ttl", c.failover_preference_ttl,
          "After a failover decision, the extender keeps the job's replacement node first for a "
          "pod labelled shoal.io/job: <id> this long (or until the job's next decision).",
          {.min = 1s});
  b.field("checkpoint_pin_for", c.checkpoint_pin_for,
          "Standby nodes pin the checkpoints prewarmed onto them this long (the order's "
          "pin_seconds; 0: no pin).",
          {.max = std::chrono::days(365)});
  b.field("checkpoint_views_dir", c.checkpoint_views_dir,
          "Where peerd materializes restored checkpoints (peerd's checkpoints.views_dir): a "
          "failover answer's resume.path is <this>/<job>@<step>.");
}

void describe(config::binder& b, resolver_config& c) {
  b.field("registry_proxy", c.registry_proxy, "Base URL of registry-proxy (image manifests).");
  b.field("default_platform", c.default_platform,
          "Platform (os/arch[/variant]) of nodes whose heartbeat has no `platform` label.");
  b.field(
      "tag_ttl", c.tag_ttl,
      "How long a tag's resolution is reused; digests are cached until evicted by max_manifests.");
  b.field("max_manifests", c.max_manifests,
          "Manifests and indexes kept in memory, least recently used evicted.",
          {.min = 16u, .max = 1'000'000u});
  b.field("connect_timeout", c.connect_timeout, "Connect timeout toward registry-proxy.",
          {.min = 10ms});
  b.field("request_timeout", c.request_timeout, "Stall timeout of a manifest request.",
          {.min = 100ms});
  b.field("threads", c.threads, "Manifest fetches run at once.", {.min = 1, .max = 64});
}

void describe(config::binder& b, cost_config& c) {
  b.field("rack_bandwidth", c.rack_bandwidth, "Bytes/s a node gets from holders in its own rack.",
          {.min = config::byte_size(1)});
  b.field("zone_bandwidth", c.zone_bandwidth, "Bytes/s from holders in its zone (other racks).",
          {.min = config::byte_size(1)});
  b.field("cluster_bandwidth", c.cluster_bandwidth,
          "Bytes/s from holders elsewhere in the cluster.", {.min = config::byte_size(1)});
  b.field("origin_bandwidth", c.origin_bandwidth,
          "Bytes/s from registry-proxy for objects it already holds (no node does).",
          {.min = config::byte_size(1)});
  b.field("upstream_bandwidth", c.upstream_bandwidth,
          "Bytes/s from the upstream registry for objects nobody in the cluster has seen.",
          {.min = config::byte_size(1)});
  b.field("node_ingress", c.node_ingress, "Bytes/s a node can receive in total (its link).",
          {.min = config::byte_size(1)});
  b.field("model", c.model,
          "How source classes combine: serial (the sum of each class's bytes/bandwidth: every byte "
          "counts) "
          "or parallel (the slowest class, at least missing/node_ingress).",
          {.one_of = {"serial", "parallel"}});
}

void describe(config::binder& b, placement_config& c) {
  b.section("cost", c.cost, "The time-to-ready estimate.");
  b.field("packing_seconds_per_gpu", c.packing_seconds_per_gpu,
          "GPU bin-packing: nodes are ranked by estimated seconds + this × the GPUs the node would "
          "have left free after the job, so a job goes to the partly used node that it fills best "
          "unless another node saves more than this many seconds of fetching per GPU left idle; "
          "whole nodes then stay free for gangs. 0: rank by time-to-ready alone.",
          {.min = 0.0, .max = 3600.0});
  b.field(
      "require_network_validation", c.require_network_validation,
      "Gangs go only to nodes whose netsetup validation passed (false: nodes without a result are "
      "\"unknown\" and allowed; failed ones never are).");
  b.field("netsetup_policy", c.netsetup_policy,
          "netsetup policy file (YAML, see docs/config/netsetup-policy.md) used to validate nodes' "
          "network "
          "documents and to build each node's network plan (GPU to NIC rails, NCCL environment). "
          "Empty: "
          "netsetup's defaults.");
  b.field("reservation_ttl", c.reservation_ttl,
          "GPUs of the nodes /v1/place chooses are reserved this long (dry_run reserves nothing).");
  b.field("resolve_timeout", c.resolve_timeout,
          "Longest wait for image and dataset resolution in /v1/place and /v1/prewarm.",
          {.min = 10ms});
}

void describe(config::binder& b, extender_config& c) {
  b.field("mode", c.mode,
          "soft: filter passes every node, prioritize scores them; hard: filter also removes nodes "
          "missing "
          "more than max_missing. A pod overrides it with the annotation shoal.io/placement.",
          {.one_of = {"soft", "hard"}});
  b.field("max_missing", c.max_missing,
          "Hard mode: most data a node may lack, as a share (\"10%\") or a size (\"2GiB\"). A pod "
          "overrides "
          "it with shoal.io/max-missing.");
  b.field("resolve_timeout", c.resolve_timeout,
          "Answer with what is known after this long (kube-scheduler's default timeout is 5s).",
          {.min = 10ms});
  b.field("max_request_bytes", c.max_request_bytes,
          "Largest filter/prioritize request body accepted.", {.min = config::byte_size::kib(16)});
  b.check(parse_threshold(c.max_missing).has_value(),
          "extender.max_missing must be a share (\"10%\") or a size");
}

void describe(config::binder& b, prewarm_config& c) {
  b.field("timeout", c.timeout, "A prewarm not complete this long after it started fails.",
          {.min = 1s});
  b.field("retention", c.retention, "Finished prewarms stay visible this long.", {.min = 1s});
  b.field("max_prewarms", c.max_prewarms,
          "Prewarms kept at once; the oldest finished ones go first.",
          {.min = 1u, .max = 1'000'000u});
  b.field("pin_for", c.pin_for,
          "Nodes pin prewarmed objects against eviction this long (0: no pin).");
}

void describe(config::binder& b, checkpoints_config& c) {
  b.field("max_per_job", c.max_per_job,
          "Checkpoint records kept per job; registering one more drops the job's earliest "
          "registered record (logged).",
          {.min = 1u, .max = 100'000u});
  b.field("max_bytes", c.max_bytes,
          "Bytes of checkpoint manifests and torrents held in all; beyond it the earliest "
          "registered records of any job are dropped. A registration larger than this alone is "
          "refused (413).",
          {.min = config::byte_size::mib(1)});
  b.field("max_registration_bytes", c.max_registration_bytes,
          "Largest POST /v1/checkpoints body (413 beyond). The server's body limit is raised to "
          "it for every route, as for heartbeats.",
          {.min = config::byte_size::mib(1),
           .max = config::byte_size(checkpoint::max_registration_bytes)});
  b.field("grant_ttl", c.grant_ttl,
          "With tls.enabled, GET /v1/checkpoints/<job>@<step>/groups/<g> answers a node with a "
          "grant for that group's swarm, signed with the scheduler's certificate, valid this long.",
          {.min = 1min, .max = 168h});
}

void describe(config::binder& b, auth_config& c) {
  b.field("operator_token_file", c.operator_token_file,
          "File holding the operator bearer token (16 to 1024 visible ASCII characters, one "
          "line). A request with `Authorization: Bearer <token>` may then do what an operator "
          "certificate may (place, prewarm, every read); a wrong token is refused (401). The "
          "file is re-read within a second of a change; an unreadable or invalid file accepts no "
          "token until fixed. With tls.enabled false, placements and prewarms need the token once "
          "this is set. Empty: no token is accepted.");
}

void describe(config::binder& b, redis_config& c) {
  b.field("address", c.address,
          "host:port of a lone Redis primary holding the shared state (no Sentinel failover of "
          "Redis itself). Empty, with no sentinels: this scheduler runs alone, its state in "
          "memory.");
  b.field("sentinels", c.sentinels,
          "host:port of each Redis Sentinel; the primary is asked of them (and again after a "
          "failover). Takes precedence over address.");
  b.field("master_name", c.master_name, "The name the sentinels monitor the primary under.");
  b.field("user", c.user, "Redis ACL user of the scheduler replicas. Empty: the default user.");
  b.field("password_file", c.password_file,
          "File holding that user's password (one line). Empty: no AUTH.");
  b.field("sentinel_user", c.sentinel_user, "ACL user on the sentinels. Empty: the default user.");
  b.field("sentinel_password_file", c.sentinel_password_file,
          "File holding the sentinels' password (one line). Empty: no AUTH.");
  b.field("tunnels", c.tunnels,
          "Redis with TLS (Debian's hiredis has none): the host:port of each Redis data node as "
          "the sentinels name it (or as address gives it) → the local host:port of a stunnel4 "
          "client tunnel to it, which presents this scheduler's certificate. The sentinels "
          "entries are their tunnels' local ends. Non-empty: a primary with no entry here is "
          "not connected to (nothing reaches Redis in plain text); the scheduler reports the "
          "shared state stale until it has one. Empty: Redis is reached directly (loopback or a "
          "pod-local port). See docs/ha.md, \"TLS to Redis\".");
  b.field("key_prefix", c.key_prefix,
          "Every key starts with this (the replicas' ACL grants ~shoal:*); one per cluster when "
          "clusters share a Redis.");
  b.field("connect_timeout", c.connect_timeout, "Connect timeout toward Redis and the sentinels.",
          {.min = 10ms});
  b.field("command_timeout", c.command_timeout, "Longest wait for one Redis reply.", {.min = 10ms});
  b.field("wait_replicas", c.wait_replicas,
          "A heartbeat is answered once this many Redis replicas have it (WAIT); 0 with a lone "
          "Redis. What a failover loses anyway is rebuilt: the node's next delta is a gap and it "
          "resends its full list.",
          {.min = 0, .max = 16});
  b.field("wait_timeout", c.wait_timeout,
          "Longest WAIT; past it the heartbeat is answered and counted "
          "(shoal_scheduler_redis_unreplicated_writes_total).",
          {.min = 1ms});
  b.field("lease_ttl", c.lease_ttl,
          "The lease for loops that must run once (record expiry): renewed every fifth of this; "
          "another replica takes it this long after its holder died.",
          {.min = 1s});
  b.field("log_max_entries", c.log_max_entries,
          "Entries kept in the shared log (a replica that falls further behind reloads).",
          {.min = 1000});
  b.field("read_batch", c.read_batch,
          "How long a replica collects the other replicas' log entries before it reads them "
          "(one Redis read and one wake-up per batch, not per heartbeat). Placement sees another "
          "replica's heartbeats this much later; a heartbeat sent to this replica is applied "
          "before it is answered, and a request waiting for an entry cuts the wait short. 0: "
          "read each entry as it comes.",
          {.max = 1000ms});
}

void describe(config::binder& b, scheduler_config& c) {
  b.section("http", c.http, "The HTTP API (tracker /announce, heartbeats, REST, extender).");
  b.section("log", c.log, "Logging.");
  b.field("io_threads", c.io_threads, "Threads running the network event loop.",
          {.min = 1, .max = 64});
  b.field("worker_threads", c.worker_threads,
          "Threads answering placement, prewarm and extender requests.", {.min = 1, .max = 256});
  b.section("tracker", c.tracker, "The BitTorrent tracker.");
  b.section("nodes", c.nodes, "Node liveness from heartbeats.");
  b.section("failover", c.failover,
            "Node failure detection: when a silent or failing node has failed.");
  b.section("jobs", c.jobs,
            "Jobs known from placements and prewarms with an id: failover decisions, standbys.");
  b.section("resolver", c.resolver, "Image references to layers, through registry-proxy.");
  b.section("placement", c.placement, "Placement: cost model, gangs, GPU reservations.");
  b.section("extender", c.extender, "The kube-scheduler extender (filter and prioritize verbs).");
  b.section("prewarm", c.prewarm, "Prewarm orders.");
  b.section("checkpoints", c.checkpoints, "The checkpoint catalog: bounds and grants.");
  b.section("tls", c.tls,
            "Mutual TLS on the API: a heartbeat is accepted only for the node named in the "
            "caller's certificate (URI SAN shoal://node/<name>), an announce only from the node "
            "it names (role=origin: registry-proxy's certificate); registry-proxy is called with "
            "the same certificate; reads need any cluster certificate, placements and prewarms an "
            "operator's, the extender kube-scheduler's (docs/security.md, \"Who may call what "
            "(scheduler)\"). Off: plain HTTP, anyone may speak for any node (a demo).");
  b.section("auth", c.auth, "Bearer-token access for operator scripts.");
  b.section("redis", c.redis,
            "Shared state for scheduler replicas (docs/ha.md): node records, holdings and "
            "tracker peers in Redis, every replica answering every request. Off by default.");
  b.check(c.failover.failed_after.get() >= c.nodes.unhealthy_after.get(),
          "failover.failed_after must be at least nodes.unhealthy_after (a failed node is first "
          "unhealthy)");
}

}  // namespace shoal::scheduler
