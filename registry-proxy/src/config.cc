#include "registry-proxy/config.h"

#include "common/http_client.h"
#include "common/oci.h"

namespace shoal::proxy {

void describe(config::binder& b, upstream_config& c) {
  b.field("name", c.name,
          "Registry host as clients name it (containerd's ns= value), e.g. docker.io or "
          "127.0.0.1:5000.",
          {.required = true});
  b.field("url", c.url, "Base URL of the registry API, e.g. https://registry-1.docker.io.",
          {.required = true});
  b.field("aliases", c.aliases, "Other ns= values that select this upstream.");
  b.field("prefix", c.prefix,
          "Path prefix selecting this upstream for clients that send no ns= "
          "(/v2/<prefix>/<repo>/...). Empty: the name.");
  b.field("docker_hub", c.docker_hub,
          "Docker Hub naming: single-component names become library/<name>.");
  b.field("auth", c.auth,
          "Credentials registry-proxy itself uses upstream. Bearer tokens are obtained "
          "automatically whenever the upstream challenges.",
          {.one_of = {"anonymous", "basic"}});
  b.field("credentials_file", c.credentials_file,
          "For auth: basic, a file containing user:password.");
  b.field("insecure_tls", c.insecure_tls, "Skip TLS certificate verification (testing only).");
  b.field("ca_file", c.ca_file, "CA bundle for this upstream's TLS (empty: the system store).");
  b.field("connect_timeout", c.connect_timeout, "TCP/TLS connect timeout per attempt.",
          {.min = 10ms});
  b.field("stall_timeout", c.stall_timeout, "Give up on a transfer with no bytes for this long.",
          {.min = 100ms});
  b.field("max_retries", c.max_retries,
          "Retries of idempotent requests (and resumes of broken blob transfers).",
          {.min = 0, .max = 20});
  b.field("token_realm_hosts", c.token_realm_hosts,
          "Hosts besides the upstream's own whose Bearer token realms are followed (a token realm "
          "gets the client's credentials). auth.docker.io is implied for docker_hub upstreams. "
          "Realms must use https unless the upstream's url is http.");
  b.check(c.name.empty() || oci::valid_registry_host(c.name),
          "upstreams[].name is not a valid registry host");
  b.check(c.url.empty() || c.url.rfind("http://", 0) == 0 || c.url.rfind("https://", 0) == 0,
          "upstreams[].url must start with http:// or https://");
  b.check(c.auth != "basic" || !c.credentials_file.empty(),
          "upstreams[].auth basic needs credentials_file");
}

void describe(config::binder& b, range_config& c) {
  b.field("upstream_max", c.upstream_max,
          "A bounded Range of at most this many bytes (not `bytes=N-`) of a blob being fetched, "
          "starting at least upstream_ahead beyond the bytes the fetch has and ending before its "
          "last byte, is asked of upstream on its own (one extra GET with that Range) and answered "
          "from it; anything else, and "
          "such a range upstream does not answer with exactly its bytes (206), waits for the "
          "fetch as before. 0: never.",
          {.max = config::byte_size::mib(64)});
  b.field("upstream_ahead", c.upstream_ahead,
          "How far beyond the fetch's written bytes a range must start to be asked of upstream "
          "(nearer ones are answered by the fetch within moments).");
  b.field("upstream_concurrency", c.upstream_concurrency,
          "Such upstream range requests running at once, over all blobs; more ranges wait for "
          "their fetch.",
          {.min = 1, .max = 64});
}

void describe(config::binder& b, manifest_config& c) {
  b.field("tag_ttl", c.tag_ttl,
          "How long a tag's resolution is reused before asking upstream again.");
  b.field(
      "stale_if_error", c.stale_if_error,
      "When upstream fails, serve an expired tag answer up to this old (with a Warning header). "
      "Tag rows older than this (and tag_ttl) are deleted from the state index.");
  b.field("max_size", c.max_size, "Largest manifest accepted from upstream.",
          {.min = config::byte_size::kib(4), .max = config::byte_size::mib(64)});
}

void describe(config::binder& b, access_config& c) {
  b.field("positive_ttl", c.positive_ttl,
          "How long upstream's confirmation that a credential may pull a private repository is "
          "reused (keyed by a hash of the credential; the credential is never stored).",
          {.min = 1s});
  // Pull-path hardening: credentials upstream has not accepted lately.
  b.field("unseen_per_client_rate", c.unseen_per_client_rate,
          "Upstream checks per second one client address may cause with credentials upstream has "
          "not accepted lately (beyond: 429 with Retry-After).",
          {.min = 1, .max = 100000});
  b.field("unseen_per_client_burst", c.unseen_per_client_burst, "Burst of unseen_per_client_rate.",
          {.min = 1, .max = 100000});
  b.field("unseen_rate", c.unseen_rate,
          "Upstream checks per second of not-yet-accepted credentials, all clients together.",
          {.min = 1, .max = 100000});
  b.field("unseen_burst", c.unseen_burst, "Burst of unseen_rate.", {.min = 1, .max = 100000});
  b.field("unseen_concurrency", c.unseen_concurrency,
          "Upstream checks of not-yet-accepted credentials running at once; keep it below "
          "worker_threads so they cannot occupy every worker.",
          {.min = 1, .max = 256});
  b.field("cache_entries", c.cache_entries,
          "Entries of the credential-keyed caches (positive answers, tokens, clients, accepted "
          "credentials); the least recently used go first.",
          {.min = 100, .max = 10000000});
}

void describe(config::binder& b, torrent_config& c) {
  b.field("enabled", c.enabled, "Seed cached objects over BitTorrent and serve their metainfo.");
  b.field("listen", c.listen,
          "BitTorrent listen address host:port (use the data-plane IP). A port another process "
          "holds fails the start (port 0: one the kernel picks).");
  b.field("announce_ip", c.announce_ip,
          "Address announced to the tracker (empty: the tracker sees the source).");
  b.field("trackers", c.trackers,
          "Tracker announce URLs (one per scheduler replica) written into every metainfo and "
          "announced to by the seeder, all in one tier in this order: libtorrent announces to "
          "one and moves to the next when it is refused or hung for 3 s (docs/scheduler.md "
          "\"Clients fail over\").");
  b.field("node_name", c.node_name, "Name this origin announces to the tracker.");
  b.field("upload_rate_limit", c.upload_rate_limit,
          "BitTorrent upload cap, bytes/s, for all peers together, on private and loopback "
          "addresses too (0: unlimited; HTTP answers are not capped).");
  b.field("max_loaded_torrents", c.max_loaded_torrents,
          "Objects seeded at once; the least recently requested beyond this are unloaded.",
          {.min = 1, .max = 1000000});
  b.field("idle_unload", c.idle_unload, "Unload a seeded object nobody asked for in this long.",
          {.min = 1s});
  b.field("metainfo_wait", c.metainfo_wait,
          "How long a metainfo request for an object still being fetched waits before answering "
          "202 with progress.",
          {.min = 100ms, .max = 10min});
  b.field("connections_limit", c.connections_limit, "BitTorrent connections at most.", {.min = 10});
  b.field(
      "fetch_concurrency", c.fetch_concurrency,
      "Upstream blob fetches started for the swarm (metainfo requests) that run at once per "
      "upstream; more wait in that upstream's queue, served round robin among the clients that "
      "asked, and their metainfo long-polls report the queue's progress. Metainfo "
      "exists "
      "only for whole objects, so with 1 an image's layers complete one after another and each "
      "swarms while the next still downloads (docs/p2p.md). Fetches for HTTP clients never wait. "
      "0: no limit.",
      {.min = 0, .max = 1000});
  // Pull-path hardening: the fetch queue's bounds.
  b.field("fetch_queue_max", c.fetch_queue_max,
          "Fetches waiting in the queue at most, all upstreams; a metainfo request beyond it is "
          "answered 429 with Retry-After.",
          {.min = 1, .max = 1000000});
  b.field("fetch_queue_per_client", c.fetch_queue_per_client,
          "Fetches one client address may have waiting in the queue; beyond it, 429.",
          {.min = 1, .max = 1000000});
  b.field(
      "chunk_size", c.chunk_size,
      "A blob at least twice this long that a node waits for is also cut, as it streams in from "
      "upstream, into chunk objects of this size (raised so a blob has at most 256), each with its "
      "own metainfo and seeded as soon as its bytes are in: nodes swarm the first chunks while the "
      "rest still downloads, instead of waiting for the whole blob (docs/p2p.md). Chunks take "
      "cache "
      "space beside their blob until evicted. 0: off.",
      {.max = config::byte_size::gib(4)});
  b.field(
      "super_seeding", c.super_seeding,
      "Super-seed to peerd nodes (BEP 16 semantics, done by Shoal): each node is offered a few "
      "pieces at a time, those no node holds first, so the origin sends every piece once before it "
      "sends any twice and nodes trade the rest among themselves. Other BitTorrent clients see a "
      "plain seed.");
  b.field("superseed_offers", c.superseed_offers,
          "With super_seeding: pieces on offer at once, shared by the node connections: a lone "
          "node is offered this many, N nodes this many / N each, at least one. Offered pieces "
          "share the origin's link, so fewer per node make each first copy arrive sooner.",
          {.min = 1, .max = 64});
  b.field("superseed_max_in_flight", c.superseed_max_in_flight,
          "With super_seeding: offers outstanding on all node connections of an object together. "
          "Beyond this many nodes, the others get pieces from the nodes until an offer is taken "
          "up; without a bound every piece of a small blob is on offer at once past its piece "
          "count and none arrives before all of them. Keep it above the peers a node downloads "
          "from (about 50), or the offers cannot fill the origin's link (docs/p2p.md, \"Scale "
          "curve\").",
          {.min = 1, .max = 4096});
  b.field("superseed_in_order", c.superseed_in_order,
          "With super_seeding: among equally rare pieces offer the lowest index first (else at "
          "random), so "
          "the swarm holds a growing prefix and containerd's in-order reads are served as pieces "
          "arrive.");
  b.field("require_grants", c.require_grants,
          "With tls.enabled: sign, with every metainfo answer to a node (the node its client "
          "certificate names), a grant for that node and that swarm (Shoal-Grant), and upload "
          "pieces only to connections presenting a valid one. Nodes carry their grants to each "
          "other the same way, so a member without registry-proxy's word for an object gets no "
          "piece of it from anyone (docs/security.md). Off: any member may download any swarm it "
          "can name. Ignored without TLS.");
  b.field("grant_ttl", c.grant_ttl,
          "How long a grant lets its node open connections in its swarm. A download running "
          "longer opens no new peer connections once it expires (open ones stay) and finishes "
          "over registry-proxy's HTTP path.",
          {.min = 1min, .max = 168h});
  b.field(
      "libtorrent", c.libtorrent,
      "Raw libtorrent settings_pack overrides by libtorrent's key name, applied over Shoal's LAN "
      "table (docs/p2p.md). For tuning experiments; unknown keys fail the start.");
}

void describe(config::binder& b, dataset_origin_config& c) {
  b.field("url", c.url,
          "scheme://host[:port] of an HTTP origin or an S3 endpoint (no path). A dataset's origin "
          "(or S3 endpoint), and every redirect hop while fetching it, must match an entry's "
          "scheme, host and port exactly: http://127.0.0.1:8080 allows nothing on "
          "127.0.0.1:9000.",
          {.required = true});
  b.field("private_addresses", c.private_addresses,
          "Whether a host name in url may resolve to loopback, link-local or private addresses "
          "(checked on every connection, after DNS). An IP literal in url names its own address "
          "and needs no such permission.");
  b.field("credentials_file", c.credentials_file,
          "S3: the credentials file (ACCESS_KEY:SECRET, relative to credentials_dir) every "
          "request to this endpoint is signed with. A declaration cannot choose credentials: its "
          "origin.credentials_file, if given, must be this name.");
  b.field("credentials_env", c.credentials_env,
          "S3, without credentials_file: sign with the process's AWS_ACCESS_KEY_ID / "
          "AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN). Neither: requests are unsigned.");
  b.field("buckets", c.buckets,
          "S3: the buckets datasets may read at this endpoint (with its credentials). Empty: any.");
  b.check(c.url.empty() || http::parse_endpoint(c.url).has_value(),
          "datasets.allowed_origins[].url must be an http:// or https:// URL");
  b.check(c.url.find('/', c.url.find("://") == std::string::npos ? 0 : c.url.find("://") + 3) ==
              std::string::npos,
          "datasets.allowed_origins[].url is scheme://host[:port], without a path");
}

void describe(config::binder& b, dataset_config& c) {
  b.field("enabled", c.enabled,
          "Serve the dataset API (declare, resolve, manifests, group metainfo).");
  b.field("dir", c.dir,
          "Directory of dataset records, canonical manifests and pack torrents. Empty: "
          "<state_dir>/../datasets.");
  b.field("staging_dir", c.staging_dir,
          "Where origin objects are written while they are fetched and hashed; must be on the "
          "cache's filesystem (objects are renamed into the cache). Partial files stay here so an "
          "interrupted fetch resumes. Empty: <cache.dir>/../dataset-staging.");
  b.field("credentials_dir", c.credentials_dir,
          "Directory holding S3 credentials files (ACCESS_KEY:SECRET): relative "
          "allowed_origins[].credentials_file names are resolved here.");
  b.list("allowed_origins", c.allowed_origins,
         "Where datasets may come from: a declaration whose origin (HTTP base or S3 endpoint) "
         "is not listed is refused with 403, a redirect to an origin not listed fails the fetch, "
         "and connections to loopback, link-local or private addresses are refused unless the "
         "entry names them. Empty: no dataset can be declared.");
  b.field("parallel_fetches", c.parallel_fetches, "Origin objects fetched at the same time.",
          {.min = 1, .max = 256});
  b.field("max_resolving", c.max_resolving,
          "Datasets resolved at the same time (resolver threads); further declarations wait in "
          "arrival order (state resolving, queued).",
          {.min = 1, .max = 64});
  b.field("max_queued", c.max_queued,
          "Declarations waiting for a resolver at most; beyond, a declaration is refused with 429 "
          "and nothing of it is kept.",
          {.min = 1, .max = 1'000'000});
  b.field("small_file_max", c.small_file_max,
          "Files smaller than this are grouped into packs (one multi-file torrent each); larger "
          "files are each their own object and swarm.",
          {.min = config::byte_size::kib(1), .max = config::byte_size::gib(1)});
  b.field("pack_target", c.pack_target, "A pack closes once it holds this many bytes.",
          {.min = config::byte_size::kib(64), .max = config::byte_size::gib(4)});
  b.field("max_files", c.max_files, "Files one dataset may select at most.",
          {.min = 1, .max = 1'000'000'000});
  b.field("connect_timeout", c.connect_timeout, "Connect timeout toward dataset origins.",
          {.min = 10ms});
  b.field("stall_timeout", c.stall_timeout,
          "Give up on an origin transfer with no bytes for this long.", {.min = 100ms});
  b.field("max_retries", c.max_retries,
          "Whole-request retries of one origin object after failures (each resumes where the "
          "bytes stopped).",
          {.min = 0, .max = 100});
  b.field("resolve_pin", c.resolve_pin,
          "Objects fetched by a resolution (or fetched again for a group) are pinned this long, so "
          "the first nodes find them in the cache.");
}

void describe(config::binder& b, proxy_config& c) {
  b.section("http", c.http, "The HTTP API (OCI pull API, metainfo, metrics, health).");
  b.section("log", c.log, "Logging.");
  b.field("io_threads", c.io_threads, "Threads running the network event loop.",
          {.min = 1, .max = 64});
  b.field("worker_threads", c.worker_threads,
          "Threads for blocking work (disk, index, upstream control calls).",
          {.min = 1, .max = 256});
  b.section("cache", c.cache, "The local object store.");
  b.field("state_dir", c.state_dir,
          "Directory of registry-proxy's own index (tags, visibility, metainfo).");
  b.list("upstreams", c.upstreams, "Upstream registries.");
  b.field("default_upstream", c.default_upstream,
          "Upstream (by name) for requests with neither ns= nor a known prefix; empty: the first.");
  b.section("manifests", c.manifests, "Manifest caching.");
  b.section("access", c.access, "Private content checks.");
  b.section("torrent", c.torrent, "The P2P origin.");
  b.section("ranges", c.ranges, "Small ranges of blobs still being fetched.");
  b.section("datasets", c.datasets,
            "Datasets: declarations, origin fetches, manifests (docs/datasets.md).");
  b.section("ring", c.ring,
            "Replicas on a rendezvous-hash ring (docs/ha.md): the owner of a digest fetches it "
            "upstream, the other replicas stream it from the owner, and when the owner dies "
            "mid-fetch the next member resumes from upstream with a Range request. With TLS on, "
            "members call each other with this replica's certificate (role registry-proxy).");
  b.section("tls", c.tls,
            "Mutual TLS on the HTTP API: every caller presents a certificate of the cluster CA "
            "and each route admits the roles that need it (URI SAN shoal://<role>/<name>: node "
            "for pulls, metainfo and dataset objects; scheduler for manifests and dataset "
            "records; operator for everything, and alone may declare datasets); others get 403 "
            "(docs/registry-proxy.md). Off: plain HTTP, anyone who reaches the port may pull "
            "through the proxy and read the credentials nodes forward (a single-machine demo).");
}

}  // namespace shoal::proxy
