#include "peerd/config.h"

#include <algorithm>

#include "common/endpoints.h"
#include "common/oci.h"

namespace shoal::peerd {

void describe(config::binder& b, gpu_config& c) {
  b.field("model", c.model, "GPU model, e.g. H100-SXM5-80GB.");
  b.field("count", c.count, "How many GPUs of this model the node has.", {.min = 0, .max = 4096});
}

void describe(config::binder& b, node_config& c) {
  b.field("name", c.name, "Unique name of this node (empty: the host name).");
  b.field("zone", c.zone, "Zone label: peers in the same zone are preferred.");
  b.field("rack", c.rack, "Rack label: peers in the same rack are preferred most.");
  b.field("fabric", c.fabric,
          "RoCE fabric segment label: the scheduler places a multi-node job inside one.");
  b.field("labels", c.labels,
          "More labels sent with heartbeats (the scheduler's selectors match them). `platform` "
          "(os/arch) "
          "defaults to this machine's.");
  b.list("gpus", c.gpus, "GPUs of this node, reported to the scheduler (GPU fit of placements).");
  b.field("netsetup_report", c.netsetup_report,
          "Path of netsetup's discovery document (JSON object, at most 1 MiB) attached to "
          "heartbeats, read again when the file changes; empty: none.");
  b.field("health_command", c.health_command,
          "The node's health check, e.g. a GPU check: an argv run every health_interval without a "
          "shell. Exit 0 is ok, exit 1 degraded, anything else (another exit, a signal, "
          "health_timeout passed) failing, with the first line of its output as the reason. The "
          "scheduler takes a failing node for failed. Empty: none.");
  b.field("health_interval", c.health_interval, "How often the health command and file are read.",
          {.min = 1s});
  b.field("health_timeout", c.health_timeout,
          "The health command is killed, and the node failing, past this.", {.min = 100ms});
  b.field("health_file", c.health_file,
          "A file another agent keeps current: its first line is ok, degraded[: why] or "
          "failing[: why]. Missing, unreadable, anything else or older than health_file_max_age "
          "is degraded. Empty: none.");
  b.field("health_file_max_age", c.health_file_max_age,
          "A health file not modified for this long is degraded (its writer may be dead); 0: no "
          "limit.",
          {.min = 0s});
  b.field("cri_socket", c.cri_socket,
          "containerd's socket (its CRI plugin, as the kubelet uses it; "
          "/run/containerd/containerd.sock on a Kubernetes node). peerd lists the node's pod "
          "sandboxes there every cri_interval and reports the ready pods that carry "
          "cri_job_label with its heartbeats, so the scheduler knows which nodes each job runs "
          "on and fails it over when one dies (docs/checkpoints.md). Empty: no watch.");
  b.field("cri_job_label", c.cri_job_label,
          "The pod label whose value names the pod's job (a valid job name; others are skipped "
          "and counted).");
  b.field("cri_interval", c.cri_interval, "How often the node's pods are listed.", {.min = 1s});
  b.field("cri_timeout", c.cri_timeout, "One listing fails past this.", {.min = 100ms});
}

void describe(config::binder& b, upstream_config& c) {
  b.field("registry_proxy", c.registry_proxy,
          "Base URL of registry-proxy (manifests, metainfo, HTTP fallback). A host name that "
          "resolves to several addresses (the replicas' headless Service) counts as one replica "
          "per address, each called under the name (TLS checks the name).");
  b.field("registry_proxies", c.registry_proxies,
          "More registry-proxy replicas (base URLs), tried in order after `registry_proxy` when "
          "it is refused, hung (no answer byte for request_timeout) or answers 503; a 502 or 504 "
          "is its verdict on the upstream and is passed on. Calls stay on the replica that last "
          "answered; streams (HTTP fallback, chunks, dataset objects) go to that replica.");
  b.field("registry_proxy_backoff", c.registry_proxy_backoff,
          "A registry-proxy replica that failed is tried last for this long.", {.min = 0s});
  b.field("scheduler", c.scheduler,
          "Base URL of the scheduler (tracker, heartbeats, checkpoints). Empty: none. A host name "
          "that resolves to several addresses (a headless Service) counts as one replica per "
          "address, each called under the name (TLS checks the name).");
  b.field(
      "schedulers", c.schedulers,
      "More scheduler replicas (base URLs), tried in order after `scheduler` when it is "
      "refused, hung or answers 502/503/504; either key alone is fine. Calls stay on the "
      "replica that last answered. Every replica is a tracker of one tier, so libtorrent "
      "announces to one and moves on when it fails (docs/scheduler.md, \"Clients fail over\").");
  b.field("scheduler_connect_timeout", c.scheduler_connect_timeout,
          "Connect timeout per scheduler replica; past it the next is tried.", {.min = 10ms});
  b.field("scheduler_timeout", c.scheduler_timeout,
          "Small scheduler calls (heartbeats, checkpoint records and registrations): a replica "
          "that sends no byte of its answer for this long is taken for hung and the call goes "
          "to the next (every such call is idempotent).",
          {.min = 100ms});
  b.field("scheduler_backoff", c.scheduler_backoff,
          "A replica that failed is tried last for this long.", {.min = 0s});
  b.field("scheduler_resolve_interval", c.scheduler_resolve_interval,
          "How often scheduler host names are looked up again (pods of a headless Service come "
          "and go); a lookup waits at most scheduler_connect_timeout.",
          {.min = 1s});
  b.field("connect_timeout", c.connect_timeout, "Connect timeout toward registry-proxy.",
          {.min = 10ms});
  b.field("request_timeout", c.request_timeout,
          "Stall timeout for manifests and other small requests.", {.min = 100ms});
  b.field(
      "metainfo_wait", c.metainfo_wait,
      "Long-poll for the metainfo of an object registry-proxy is still fetching; repeated while it "
      "makes progress.",
      {.min = 100ms});
}

namespace {
// `first` then `more`, trailing slashes dropped, empty ones and duplicates skipped.
std::vector<std::string> base_urls(const std::string& first, const std::vector<std::string>& more) {
  std::vector<std::string> out;
  auto add = [&](std::string u) {
    while (!u.empty() && u.back() == '/') u.pop_back();
    if (!u.empty() && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  };
  add(first);
  for (const auto& u : more) add(u);
  return out;
}
}  // namespace

std::vector<std::string> scheduler_urls(const upstream_config& c) {
  return base_urls(c.scheduler, c.schedulers);
}

std::vector<std::string> registry_proxy_urls(const upstream_config& c) {
  return base_urls(c.registry_proxy, endpoints::split_list(c.registry_proxies));
}

void describe(config::binder& b, swarm_config& c) {
  b.field("listen", c.listen,
          "BitTorrent listen address host:port (use the data-plane IP). A port another process "
          "holds fails the start (port 0: one the kernel picks).");
  b.field("announce_ip", c.announce_ip,
          "Address announced to the tracker (empty: the tracker sees the source).");
  b.field("partial_dir", c.partial_dir,
          "Directory of downloads in progress; must be on the cache's filesystem (empty: next to "
          "cache.dir).");
  b.field("upload_rate_limit", c.upload_rate_limit,
          "BitTorrent upload cap, bytes/s, for all peers together, on private and loopback "
          "addresses too (0: unlimited).");
  b.field("download_rate_limit", c.download_rate_limit,
          "BitTorrent download cap, bytes/s, for all peers together, on private and loopback "
          "addresses too (0: unlimited; the HTTP fallback is not capped).");
  b.field("connections_limit", c.connections_limit, "BitTorrent connections at most.", {.min = 10});
  b.field(
      "max_loaded_torrents", c.max_loaded_torrents,
      "Torrents loaded at once; idle ones beyond this are unloaded and reloaded when a peer asks.",
      {.min = 1});
  b.field("seed_idle_unload", c.seed_idle_unload,
          "Unload a seeded object no peer used for this long.", {.min = 1s});
  b.field("stall_timeout", c.stall_timeout,
          "When the swarm delivers no piece for this long, fetch missing ranges from "
          "registry-proxy over HTTP. Blocks still arriving hold it off (a piece can take longer "
          "on a shared link) until a piece fails its hash, for at most 3 times this long (or "
          "halfway to fallback_deadline).",
          {.min = 100ms});
  b.field("fallback_deadline", c.fallback_deadline,
          "When no byte arrives from any source for this long, fail the request so containerd "
          "falls back.",
          {.min = 1s});
  b.field(
      "streaming_window", c.streaming_window,
      "Pieces ahead of a client's read position that get deadlines (streaming priority); 0: none, "
      "the "
      "swarm's own order decides. Deadlines make libtorrent request the same blocks from several "
      "peers; in the 8-node fan-out bench 8 cost 10-20 % against 0 (docs/p2p.md).",
      {.min = 0, .max = 256});
  b.field("in_order_readers", c.in_order_readers,
          "A local client reading a whole object from byte 0 (containerd, a curl) switches that "
          "download, and each chunk of a blob fetched in chunks, to libtorrent's sequential piece "
          "order, so the client streams the bytes while they arrive instead of waiting for the "
          "rarest-first order to fill the front (docs/p2p.md).");
  b.field("range_deadline_bytes", c.range_deadline_bytes,
          "A Range request (a lazy or chunked reader: anything but the whole object from byte 0) "
          "gives piece deadlines to the pieces under its first this many bytes, so they come "
          "before the swarm's rarest-first order (chunks of a blob fetched in chunks as each "
          "arrives). 0: none.",
          {.max = config::byte_size::gib(1)});
  b.field("range_direct_bytes", c.range_direct_bytes,
          "A Range request of at most this many bytes (a lazy reader such as stargz: open-ended "
          "`bytes=N-` and longer ranges never qualify) of a blob fetched in chunks, whose chunk "
          "registry-proxy has not cut yet, is read from registry-proxy at once (it answers as "
          "soon as its own upstream fetch reaches the range) instead of waiting for the chunk's "
          "swarm. Every node asking costs registry-proxy those bytes once more. 0: off.",
          {.max = config::byte_size::mib(64)});
  b.field("heartbeat_interval", c.heartbeat_interval,
          "How often the node reports its holdings to the scheduler.", {.min = 1s});
  b.field(
      "count_sources", c.count_sources,
      "Attribute every received block to registry-proxy or a peer (status bytes.from_origin and "
      "from_peers). Only a piece that passes its hash counts as progress either way.");
  b.field("require_grants", c.require_grants,
          "With tls.enabled: upload pieces of a swarm only to connections whose node presents "
          "registry-proxy's grant for that swarm and that node, and present this node's own "
          "grants (from registry-proxy's metainfo answers) to peers. A member without a grant for "
          "an object gets no piece of it (docs/security.md). Off: any member may download what "
          "it can name. Ignored without TLS.");
  b.field("superseed_published", c.superseed_published,
          "Seed what this node publishes (checkpoints: it is their first and only holder) the way "
          "registry-proxy seeds images: each peer is offered a few pieces at a time, rarest first, "
          "so the node uploads about one copy however many nodes restore at once, and the peers "
          "spread the rest among themselves (docs/checkpoints.md). Off: a plain seed, which "
          "uploads 1.5-1.6 copies to 8 restorers.");
  b.field("superseed_offers", c.superseed_offers,
          "With superseed_published: pieces on offer at once, shared by the connected nodes: a "
          "lone node is offered this many, N nodes this many / N each, at least one.",
          {.min = 1, .max = 64});
  b.field("superseed_max_in_flight", c.superseed_max_in_flight,
          "With superseed_published: offers outstanding on all peer connections of an object "
          "together; the peers beyond get pieces from each other until an offer is taken up "
          "(registry-proxy's torrent.superseed_max_in_flight).",
          {.min = 1, .max = 4096});
  b.field("libtorrent", c.libtorrent,
          "Raw libtorrent settings_pack overrides by libtorrent's key name (e.g. "
          "predictive_piece_announce: "
          "\"20\"), applied over Shoal's LAN table (docs/p2p.md). For tuning experiments; unknown "
          "keys fail "
          "the start.");
  // The monitor fails a download after fallback_deadline without data; a deadline that is not
  // after the stall timeout would fail it before the HTTP fallback ever got a chance.
  b.check(c.stall_timeout.get() < c.fallback_deadline.get(),
          "swarm.fallback_deadline must be longer than swarm.stall_timeout");
}

void describe(config::binder& b, datasets_config& c) {
  b.field("enabled", c.enabled,
          "Serve the dataset API (prefetch, ls, status, rm) and dataset prewarm orders.");
  b.field("views_dir", c.views_dir,
          "Where read-only dataset views are made (<views_dir>/<name>@<version>/<path>: clones "
          "(reflinks) of the cache's objects where the filesystem can, else hard links sealed "
          "immutable (needs CAP_LINUX_IMMUTABLE), else copies; never a writable link to an "
          "object); must be on the cache's filesystem. Empty: next to cache.dir.");
  b.field(
      "partial_dir", c.partial_dir,
      "Dataset group downloads in progress; kept across restarts so a prefetch resumes; must be "
      "on the cache's filesystem. Empty: next to cache.dir.");
  b.field("dir", c.dir,
          "Dataset records, manifests and pack torrents of this node. Empty: next to cache.dir.");
  b.field("parallel_groups", c.parallel_groups,
          "Groups (torrents) one prefetch downloads at the same time.", {.min = 1, .max = 256});
  b.field("resolve_wait", c.resolve_wait,
          "How long a prefetch waits for registry-proxy to resolve the dataset.", {.min = 1s});
  b.field("max_manifest", c.max_manifest, "Largest dataset manifest accepted from registry-proxy.",
          {.min = config::byte_size::kib(64)});
  b.field("pin_ttl", c.pin_ttl,
          "How long a dataset view and the pins of its objects last after the last prefetch, "
          "prewarm or renewal (POST .../datasets/<ref>/renew, `shoalctl dataset renew`). Then "
          "the view is removed and its objects become evictable.",
          {.min = 1s});
  b.field("pin_ttl_max", c.pin_ttl_max,
          "Longest TTL a renewal may ask for; also caps the pin_seconds of the scheduler's "
          "prewarm orders.",
          {.min = 1s});
  b.field("expiry_check_interval", c.expiry_check_interval,
          "How often peerd looks for expired dataset views (off the event loop).", {.min = 100ms});
  b.check(c.pin_ttl.get() <= c.pin_ttl_max.get(),
          "datasets.pin_ttl must not be longer than datasets.pin_ttl_max");
}

void describe(config::binder& b, checkpoints_config& c) {
  b.field("enabled", c.enabled,
          "Serve the checkpoint API (publish, restore, ls, rm) and checkpoint prewarm orders. "
          "Needs datasets.enabled.");
  b.field("publish_root", c.publish_root,
          "Checkpoint directories a publish reads must lie under it (after resolving links): "
          "mount the pods' checkpoint hostPath here. Must be on the cache's filesystem for "
          "publishes to clone rather than copy. Empty: <cache.dir>/../checkpoints/incoming.");
  b.field("views_dir", c.views_dir,
          "Where restored checkpoints appear read-only (<views_dir>/<job>@<step>/<path>), made as "
          "dataset views are; must be on the cache's filesystem. Empty: "
          "<cache.dir>/../checkpoints/views.");
  b.field("dir", c.dir,
          "Checkpoint records, manifests and registrations of this node. Empty: "
          "<cache.dir>/../checkpoints.");
  b.field("token_file", c.token_file,
          "File holding the bearer token that publish, restore and rm must present "
          "(Authorization: Bearer <token>; shoalctl reads the same file). Empty: those calls are "
          "refused (403); listing and status stay open on the loopback listener.");
  b.field("keep_last", c.keep_last,
          "Newest steps of each job whose objects stay pinned here (published and restored); "
          "older ones become evictable and their restored views are removed.",
          {.min = 1, .max = 1000});
  b.field("hash_threads", c.hash_threads,
          "Files a publish reads and hashes at the same time (beside the training job).",
          {.min = 1, .max = 64});
  b.field("parallel_groups", c.parallel_groups,
          "Groups (torrents) one restore downloads at the same time.", {.min = 1, .max = 256});
  b.field("view_ttl", c.view_ttl,
          "How long a restored view and its pins last after the restore (renewed by another "
          "restore or prewarm).",
          {.min = 1s});
}

void describe(config::binder& b, access_config& c) {
  b.field("positive_ttl", c.positive_ttl,
          "How long registry-proxy's confirmation that a credential may pull a private blob from "
          "a repository is reused before asking again (keyed by a salted hash of the "
          "credential; never kept on disk).",
          {.min = 0ms, .max = 1h});
  b.field("cache_entries", c.cache_entries,
          "Confirmations remembered at most (least recently used dropped first).",
          {.min = 1, .max = 10000000});
  b.field("public_entries", c.public_entries,
          "Digests registry-proxy said are public remembered at most (least recently used "
          "dropped first; a forgotten one is confirmed once again).",
          {.min = 1, .max = 10000000});
}

void describe(config::binder& b, mirror_registry_config& c) {
  b.field("host", c.host,
          "Registry host as image references name it (docker.io, registry.example.com:5000): "
          "the directory certs.d/<host>/ and the registries.conf `location`.");
  b.field("server", c.server,
          "The registry's own endpoint, containerd's `server =` fallback when peerd does not "
          "answer. Empty: https://<host>.");
  b.field("prefix", c.prefix,
          "registry-proxy's path prefix for this registry (its upstreams[].prefix). CRI-O and "
          "podman send no ns=, so their mirror location is <peerd>/<prefix>. Empty: the host, "
          "when it is a valid path component (a host:port is not; such a registry is then left "
          "out of the drop-in).");
  b.check(oci::valid_registry_host(c.host),
          "host must be a registry host such as docker.io or r.example:5000");
  b.check(c.server.empty() || c.server.starts_with("http://") || c.server.starts_with("https://"),
          "server must be an http:// or https:// URL");
  b.check(c.prefix.empty() || oci::valid_name(c.prefix),
          "prefix must be a repository path such as docker.io or hub");
}

void describe(config::binder& b, mirror_config& c) {
  b.list("registries", c.registries,
         "Registries `shoal-peerd mirror install` points containerd (certs.d/<host>/hosts.toml, "
         "plus _default for every other registry) and CRI-O/podman (registries.conf.d/"
         "50-shoal.conf) at this peerd for. Default: docker.io with server "
         "https://registry-1.docker.io. A list given in a file replaces the default.");
  b.field("prefetch_layers", c.prefetch_layers,
          "When the mirror serves an image manifest (GET, 200), start fetching its config and "
          "every layer not held here yet (at most 128), with the client's credentials, so "
          "containerd's max_concurrent_downloads does not serialise them: its blob requests "
          "join the fetches in progress. Off: each blob is fetched when containerd asks.");
}

void describe(config::binder& b, peerd_config& c) {
  b.section("http", c.http, "The HTTP API: containerd's mirror endpoint, status, pull.");
  b.section("log", c.log, "Logging.");
  b.field("io_threads", c.io_threads, "Threads running the network event loop.",
          {.min = 1, .max = 64});
  b.field("worker_threads", c.worker_threads,
          "Threads for blocking work (disk, index, control calls).", {.min = 1, .max = 256});
  b.section("node", c.node, "This node's identity and topology.");
  b.section("upstream", c.upstream, "registry-proxy and the scheduler.");
  b.section("cache", c.cache, "The local object store.");
  b.section("swarm", c.swarm, "BitTorrent.");
  b.section("datasets", c.datasets,
            "Datasets: prefetch, read-only views, pins (docs/datasets.md).");
  b.section("checkpoints", c.checkpoints,
            "Checkpoints: publish from the writer, restore anywhere (docs/checkpoints.md).");
  b.section("access", c.access,
            "Private content: a blob not known public is served from this node only to a client "
            "registry-proxy confirmed.");
  b.section("mirror", c.mirror,
            "What `shoal-peerd mirror install` writes for containerd and CRI-O (docs/peerd.md "
            "\"Mirror set-up\").");
  b.field("metrics_listen", c.metrics_listen,
          "host:port of a second listener serving only /metrics and /healthz, for scrapers on "
          "other hosts (use the node address). Empty: off. With tls.enabled it serves TLS with "
          "this node's certificate and requires a client certificate of the cluster CA.");
  b.section("tls", c.tls,
            "TLS for calls to registry-proxy and the scheduler: this node's certificate (URI SAN "
            "shoal://node/<node.name>) as the client certificate, the servers verified against "
            "ca_file; also the metrics listener's certificate. The registry credentials peerd "
            "forwards to registry-proxy then travel encrypted. The `http` listener stays plain "
            "(loopback: containerd and local tools). Off: every call is plain HTTP, credentials "
            "included (a single-machine demo).");
}

}  // namespace shoal::peerd
