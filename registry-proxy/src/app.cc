#include "registry-proxy/app.h"

#include "dataset_copies.h"

#include <boost/asio/post.hpp>

#include <filesystem>

#include "common/credential_hash.h"
#include "cache/version.h"
#include "common/log.h"
#include "swarm/version.h"

namespace shoal::proxy {

app::app(const proxy_config& cfg)
    : cfg_(cfg),
      rt_(static_cast<unsigned>(cfg.io_threads)),
      pool_(static_cast<std::size_t>(cfg.worker_threads), "worker") {}

app::~app() {
  stop();
  if (server_) server_->stop(std::chrono::milliseconds(0));
  if (blobs_) blobs_->shutdown();
  // Datasets first stop starting work, then the HTTP client cancels their origin transfers, then
  // their threads are joined.
  if (datasets_) datasets_->request_stop();
  if (http_client_) http_client_->stop();
  if (copies_) copies_->stop();
  if (ring_) ring_->stop();
  if (ring_client_) ring_client_->stop();
  if (datasets_) datasets_->stop();
  pool_.join();
  if (manifests_) manifests_->join();
  if (seeder_) seeder_->stop();
  cache_events_.reset();
  if (store_) store_->stop();
}

result<std::unique_ptr<app>> app::build(const proxy_config& cfg) {
  std::unique_ptr<app> a(new app(cfg));
  if (auto s = a->init(); !s) return fail(s.error());
  return a;
}

status app::init() {
  salt_ = random_salt();
  if (auto s = init_tls(); !s) return s;
  // BitTorrent between members: every torrent rooted at tls.ca_file (swarm/swarm.h).
  if (auto s = swarm::enable_members_only(cfg_.tls); !s) return fail(s.error());
  // Upstream registries and dataset origins only: they never see the cluster certificate.
  http_client_ = std::make_unique<http::client>();
  if (auto s = open_storage(); !s) return s;
  if (auto s = init_upstreams(); !s) return s;
  init_services();
  if (auto s = init_ring(); !s) return s;
  if (auto s = init_seeder(); !s) return s;
  if (auto s = init_datasets(); !s) return s;
  register_metrics();
  handler_ = std::make_unique<proxy_handler>(make_handler_deps());
  return start_server();
}

// The HTTP API's TLS context (tls.enabled), or the warning that plain mode authenticates nobody.
status app::init_tls() {
  if (!cfg_.tls.enabled) {
    log::warn(
        "tls.enabled is false: plain HTTP, no caller is authenticated; any host that can reach "
        "this port may pull through the proxy, declare datasets, and read the registry "
        "credentials nodes forward (single-machine demo only)");
    return {};
  }
  auto t = tls::tls_context::create(cfg_.tls, tls::side::server, "registry-proxy");
  if (!t) return fail(t.error());
  tls_ = std::move(*t);
  return {};
}

// The cache (reconciled and running its background work) and the state database.
status app::open_storage() {
  cache::options co = cache::to_options(cfg_.cache);
  auto st = cache::store::open(co);
  if (!st) return fail(st.error().wrap("cache " + co.root));
  store_ = std::move(*st);
  store_->start_background();
  const auto& rec = store_->last_reconcile();
  log::info("cache opened", log::kv("dir", co.root), log::kv("objects", rec.rows_loaded),
            log::kv("temp_removed", rec.temp_files_removed),
            log::kv("rows_dropped", rec.rows_dropped),
            log::kv("orphans_adopted", rec.orphans_adopted), log::kv("seconds", rec.seconds));

  auto sdb = state_db::open(cfg_.state_dir);
  if (!sdb) return fail(sdb.error());
  state_ = std::move(*sdb);
  return {};
}

// The configured upstream registries, the client that talks to them, and the access checker.
status app::init_upstreams() {
  auto ups = upstream_set::build(cfg_.upstreams, cfg_.default_upstream);
  if (!ups) return fail(ups.error());
  ups_ = std::make_unique<upstream_set>(std::move(*ups));
  const auto& ac = cfg_.access;
  credential_gate_limits gl;
  gl.per_client_rate = ac.unseen_per_client_rate;
  gl.per_client_burst = ac.unseen_per_client_burst;
  gl.global_rate = ac.unseen_rate;
  gl.global_burst = ac.unseen_burst;
  gl.max_concurrent = static_cast<std::size_t>(ac.unseen_concurrency);
  gl.table_entries = static_cast<std::size_t>(ac.cache_entries);
  uc_ = std::make_unique<upstream_client>(*http_client_, gl,
                                          static_cast<std::size_t>(ac.cache_entries));
  access_ = std::make_unique<access_checker>(
      *uc_, *state_, std::chrono::duration_cast<std::chrono::milliseconds>(ac.positive_ttl.get()),
      static_cast<std::size_t>(ac.cache_entries));
  return {};
}

// The blob and manifest services with their metrics.
void app::init_services() {
  blob_metrics bm;
  bm.upstream_gets =
      &reg_.counter("shoal_proxy_upstream_blob_gets_total", "Blob GETs sent upstream.").with({});
  bm.upstream_bytes =
      &reg_.counter("shoal_proxy_upstream_bytes_total", "Blob bytes received from upstreams.")
           .with({});
  bm.joins = &reg_.counter("shoal_proxy_singleflight_joins_total",
                           "Blob requests that joined a fetch already in flight.")
                  .with({});
  bm.digest_mismatch =
      &reg_.counter("shoal_proxy_digest_mismatch_total",
                    "Objects discarded because upstream bytes did not match the digest.")
           .with({});
  bm.served_cache_bytes =
      &reg_.counter("shoal_proxy_cache_served_bytes_total",
                    "Blob bytes served from the cache (whole-object responses).")
           .with({});
  bm.fetch_failures = &reg_.counter("shoal_proxy_upstream_failures_total",
                                    "Blob fetches that failed on the network or timed out.")
                           .with({});
  bm.chunks =
      &reg_.counter(
               "shoal_proxy_chunks_total",
               "Chunk objects cut from large blobs while they streamed in (torrent.chunk_size).")
           .with({});
  bm.not_cut = &reg_.counter("shoal_proxy_chunking_skipped_total",
                             "Large blobs not cut into chunk objects because the cache could not "
                             "hold them twice (they swarm whole once cached).")
                    .with({});
  bm.upstream_ranges =
      &reg_.counter("shoal_proxy_upstream_ranges_total",
                    "Small ranges far ahead of a blob's fetch answered by upstream on their own "
                    "(ranges.upstream_max).")
           .with({});
  bm.upstream_range_bytes = &reg_.counter("shoal_proxy_upstream_range_bytes_total",
                                          "Bytes of the ranges answered by upstream on their own.")
                                 .with({});
  bm.upstream_range_fallbacks =
      &reg_.counter("shoal_proxy_upstream_range_fallbacks_total",
                    "Ranges asked of upstream on their own that it did not answer with exactly "
                    "their bytes (served from the fetch instead).")
           .with({});
  blobs_ = std::make_unique<blob_service>(rt_.io(), pool_, *store_, *state_, *uc_, *access_, bm);
  blobs_->set_fetch_limit(cfg_.torrent.enabled ? cfg_.torrent.fetch_concurrency : 0);
  blobs_->set_queue_limits(static_cast<std::size_t>(cfg_.torrent.fetch_queue_max),
                           static_cast<std::size_t>(cfg_.torrent.fetch_queue_per_client));
  blobs_->set_range_passthrough({.max_bytes = cfg_.ranges.upstream_max.bytes(),
                                 .ahead = cfg_.ranges.upstream_ahead.bytes(),
                                 .concurrency = cfg_.ranges.upstream_concurrency});
  blobs_->set_chunk_size(cfg_.torrent.enabled ? cfg_.torrent.chunk_size.bytes() : 0);

  manifest_metrics mm;
  mm.upstream_requests = &reg_.counter("shoal_proxy_upstream_manifest_requests_total",
                                       "Manifest requests sent upstream.")
                              .with({});
  mm.stale_served = &reg_.counter("shoal_proxy_stale_manifests_total",
                                  "Tag answers served stale because upstream failed.")
                         .with({});
  mm.tag_hits =
      &reg_.counter("shoal_proxy_tag_cache_hits_total", "Tag answers served from the tag cache.")
           .with({});
  mm.digest_mismatch = &reg_.counter("shoal_proxy_manifest_digest_mismatch_total",
                                     "Manifests refused because their bytes did not match.")
                            .with({});
  mm.flights_joined =
      &reg_.counter("shoal_proxy_manifest_flights_joined_total",
                    "Manifest requests that waited for a fetch another request had started.")
           .with({});
  mm.ring_forwarded =
      &reg_.counter("shoal_proxy_ring_manifests_forwarded_total",
                    "Manifest fetches asked of the ring member that owns the manifest.")
           .with({});
  manifests_ = std::make_unique<manifest_service>(pool_, *store_, *state_, *uc_, *access_,
                                                  cfg_.manifests, mm);
}

// The replica ring (ring.members set): blob fetches of digests another member owns stream from
// it, through a client of their own that presents this replica's certificate.
status app::init_ring() {
  if (cfg_.ring.members.empty() && cfg_.ring.schedulers.empty()) return {};
  if (cfg_.tls.enabled) {
    for (const auto* key : {"members", "schedulers"}) {
      const auto& list =
          std::string_view(key) == "members" ? cfg_.ring.members : cfg_.ring.schedulers;
      for (const auto& m : list) {
        if (m.rfind("https://", 0) != 0)
          return fail(errc::invalid_argument, std::string("ring.") + key + ": " + m +
                                                  " must be an https:// URL with tls.enabled");
      }
    }
    if (!cfg_.ring.self.starts_with("https://"))
      return fail(errc::invalid_argument,
                  "ring.self: " + cfg_.ring.self + " must be an https:// URL with tls.enabled");
  }
  ring_client_ = std::make_unique<http::client>(http::client_options_with_tls({}, cfg_.tls));
  auto r = ring::create(cfg_.ring, *ring_client_);
  if (!r) return fail(r.error().wrap("ring"));
  ring_ = std::move(*r);
  blobs_->set_ring(ring_.get());
  manifests_->set_ring(ring_.get());
  ring_->start(rt_.io());
  auto* rg = ring_.get();
  reg_.gauge_fn("shoal_proxy_ring_members_up",
                "Ring members this replica sees up (itself included).",
                [rg] { return static_cast<double>(rg->up_count()); });
  reg_.gauge_fn("shoal_proxy_ring_members", "Ring members configured.",
                [rg] { return static_cast<double>(rg->members().size()); });
  reg_.counter_fn("shoal_proxy_ring_forwarded_total",
                  "Blob fetches that streamed from the digest's owner instead of upstream.",
                  [rg] { return static_cast<double>(rg->stats().forwarded.load()); });
  reg_.counter_fn("shoal_proxy_ring_bytes_total",
                  "Blob bytes streamed from other ring members (not counted as upstream bytes).",
                  [rg] { return static_cast<double>(rg->stats().bytes.load()); });
  reg_.counter_fn("shoal_proxy_ring_takeovers_total",
                  "Fetches whose source member failed mid-blob and that the next member took over.",
                  [rg] { return static_cast<double>(rg->stats().takeovers.load()); });
  reg_.counter_fn("shoal_proxy_ring_refused_total",
                  "421 answers from a member that streams the object from this replica (the two "
                  "disagreed on the owner); this replica then fetched upstream.",
                  [rg] { return static_cast<double>(rg->stats().refused.load()); });
  reg_.counter_fn("shoal_proxy_ring_probe_failures_total", "Probes of other members that failed.",
                  [rg] { return static_cast<double>(rg->stats().probe_failures.load()); });
  reg_.counter_fn("shoal_proxy_ring_announce_failures_total",
                  "Announces of this replica to the scheduler (ring.schedulers) that failed.",
                  [rg] { return static_cast<double>(rg->stats().announce_failures.load()); });
  log::info("ring", log::kv("self", cfg_.ring.self),
            log::kv("members", static_cast<std::uint64_t>(cfg_.ring.members.size())));
  return {};
}

// The origin seed (when torrents are on), and the cache events that stop seeding evicted objects.
status app::init_seeder() {
  if (cfg_.torrent.enabled) {
    auto sd = seeder::start(cfg_.torrent, *store_, *state_, cfg_.tls);
    if (!sd) return fail(sd.error().wrap("torrent"));
    seeder_ = std::move(*sd);
    if (auto s = init_grants(); !s) return s;
    blobs_->on_committed(
        [s = seeder_.get()](const digest& d, const object_metainfo& m) { s->seed(d, m); });
  }
  cache_events_ = store_->on_event([this](const cache::event& e) {
    if (e.type == cache::event_type::committed) return;
    // The object left the cache: stop seeding it and forget what we knew about it.
    auto d = e.id;
    boost::asio::post(pool_, [this, d] {
      if (seeder_) seeder_->unload(d);
      (void)state_->forget(d);
    });
  });
  return {};
}

// The grant signer: registry-proxy's own certificate and key sign, with each metainfo answer to a
// node, that node's grant for the answer's swarm (common/grant.h).
status app::init_grants() {
  if (!cfg_.tls.enabled || !cfg_.torrent.require_grants) return {};
  auto sg = grant::signer::load(
      cfg_.tls.cert_file, cfg_.tls.key_file,
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.tls.reload_interval.get()));
  if (!sg) return fail(sg.error().wrap("torrent.require_grants"));
  grant_signer_ = std::move(*sg);
  auto ttl = std::chrono::duration_cast<std::chrono::seconds>(cfg_.torrent.grant_ttl.get());
  grant_for_ = [this, ttl](const tls::peer_identity& caller,
                           const std::string& info_hash) -> std::string {
    if (!caller.is(tls::peer_role::node)) return {};
    auto ih = grant::parse_info_hash(info_hash);
    if (!ih) return {};
    grant::claims c{*ih, caller.name, std::chrono::system_clock::now() + ttl};
    auto g = grant_signer_->sign(c);
    if (!g) {
      grant_failures_.fetch_add(1, std::memory_order_relaxed);
      log::error("grant not signed", log::kv("node", caller.name), log::kv("swarm", info_hash),
                 log::kv("error", g.error().message));
      return {};
    }
    grants_issued_.fetch_add(1, std::memory_order_relaxed);
    return std::move(*g);
  };
  return {};
}

// What the HTTP handler needs: services, the seed's endpoint, the dataset API and health.
handler_deps app::make_handler_deps() {
  handler_deps hd{*ups_, *manifests_, *blobs_, reg_};
  hd.credential_salt = salt_;
  if (seeder_) {
    hd.trackers = cfg_.torrent.trackers;  // plain URLs: each peer adds its own identity
    hd.seed_endpoint = seeder_->endpoint();
    hd.on_metainfo_served = [this](const digest& d) {
      boost::asio::post(pool_, [this, d] { seeder_->seed(d); });
    };
    hd.grant_for = grant_for_;
    if (seeder_->session().roots().size() > 1) {
      hd.metainfo_root_for = [s = seeder_.get()](const tls::peer_identity& p) {
        return s->session().root_for_ca(p.ca_fingerprint);
      };
    }
  }
  hd.metainfo_wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.torrent.metainfo_wait.get());
  if (datasets_) {
    hd.datasets = [ds = datasets_.get()](http::request& r, const http::responder& resp) {
      return ds->handle(r, resp);
    };
    hd.dataset_list = [ds = datasets_.get()] { return ds->list_json(); };
    hd.dataset_copy = [ds = datasets_.get()](const std::string& ref, const std::string& record,
                                             const std::string& manifest) {
      return ds->accept_copy(ref, record, manifest);
    };
    hd.dataset_has_manifest = [ds = datasets_.get()](const digest& md) {
      return ds->has_manifest(md);
    };
  }
  hd.replicas = ring_.get();
  hd.health = [this] {
    daemon::health h;
    auto s = store_->get_stats();
    if (s.capacity_bytes > 0 && s.bytes + s.inflight_bytes > s.capacity_bytes) {
      h.status = "degraded";
      h.reasons.push_back("cache over capacity");
    }
    return h;
  };
  return hd;
}

// The HTTP server with its request metrics and log, listening on http.listen.
status app::start_server() {
  auto so = daemon::server_options_from(cfg_.http, "shoal-registry-proxy");
  auto& req_total = reg_.counter("shoal_proxy_requests_total", "HTTP requests answered.",
                                 {"route", "method", "code"});
  auto& bytes_total =
      reg_.counter("shoal_proxy_response_bytes_total", "Response body bytes sent.", {"route"});
  auto& aborted =
      reg_.counter("shoal_proxy_responses_aborted_total",
                   "Responses cut short (client gone, source failed, timeout).", {"route"});
  auto& latency =
      reg_.histogram("shoal_proxy_request_seconds", "Time to answer a request completely.",
                     {"route"}, metrics::default_buckets());
  so.on_request_done = [&req_total, &bytes_total, &aborted, &latency](const http::request_log& l) {
    std::string route = route_of(l.target);
    std::string method = l.method == "GET" || l.method == "HEAD" ? l.method : "other";
    req_total.with({route, method, std::to_string(l.status)}).inc();
    bytes_total.with({route}).inc(l.body_bytes_sent);
    if (l.aborted) aborted.with({route}).inc();
    latency.with({route}).observe(std::chrono::duration<double>(l.duration).count());
    daemon::log_request(l);
  };
  so.tls = tls_;
  server_ =
      std::make_unique<http::server>(rt_.io(), so, [this](http::request&& r, http::responder resp) {
        (*handler_)(std::move(r), std::move(resp));
      });
  if (auto s = daemon::listen(*server_, cfg_.http); !s) return fail(s.error());
  log::info("registry-proxy listening", log::kv("address", cfg_.http.listen),
            log::kv("port", server_->port()), log::kv("upstreams", ups_->all().size()),
            log::kv("tls", tls_ != nullptr));
  return {};
}

std::vector<version::library> linked_libraries() {
  auto libs = version::common_libraries();
  libs.push_back(cache::rocksdb_version());
  libs.push_back(swarm::libtorrent_version());
  return libs;
}

void app::register_metrics() {
  metrics::register_process_metrics(reg_);
  version::register_build_info(reg_, linked_libraries());
  cache::register_metrics(reg_, *store_);
  if (seeder_) swarm::register_tls_metrics(reg_, seeder_->session(), "shoal_proxy");
  if (grant_for_) {
    reg_.counter_fn("shoal_proxy_grants_issued_total",
                    "Grants signed with metainfo answers to nodes (common/grant.h).",
                    [this] { return static_cast<double>(grants_issued_.load()); });
    reg_.counter_fn("shoal_proxy_grant_failures_total",
                    "Metainfo answers to nodes sent without a grant because signing failed.",
                    [this] { return static_cast<double>(grant_failures_.load()); });
  }
  if (tls_) {
    tls::register_metrics(reg_, *tls_, "shoal_proxy");
    // server_ is made after the metrics; scrapes only come through it.
    http::register_tls_refusal_metrics(reg_, "shoal_proxy",
                                       [this]() -> const http::server* { return server_.get(); });
  }
  auto* b = blobs_.get();
  reg_.gauge_fn("shoal_proxy_fetches_in_flight", "Upstream blob fetches in flight.",
                [b] { return static_cast<double>(b->inflight_count()); });
  reg_.gauge_fn("shoal_proxy_fetches_queued",
                "Upstream blob fetches waiting for a slot (torrent.fetch_concurrency).",
                [b] { return static_cast<double>(b->queued_count()); });
  auto* a = access_.get();
  reg_.counter_fn("shoal_proxy_access_checks_upstream_total",
                  "Private-content checks answered by upstream.",
                  [a] { return static_cast<double>(a->get_counters().upstream_allow); });
  reg_.counter_fn("shoal_proxy_access_denied_total", "Requests for private content refused.",
                  [a] { return static_cast<double>(a->get_counters().denied); });
  auto* u = uc_.get();
  reg_.counter_fn("shoal_proxy_token_fetches_total", "Bearer tokens fetched from upstream realms.",
                  [u] { return static_cast<double>(u->get_counters().token_fetches); });
  reg_.counter_fn("shoal_proxy_credential_checks_refused_total",
                  "Upstream checks of not-yet-accepted credentials refused with 429 "
                  "(access.unseen_*).",
                  [u] { return static_cast<double>(u->gate().refused()); });
  if (seeder_) {
    auto* sd = seeder_.get();
    reg_.gauge_fn("shoal_proxy_torrents_loaded", "Objects currently seeded.",
                  [sd] { return static_cast<double>(sd->loaded()); });
    reg_.counter_fn("shoal_proxy_p2p_uploaded_bytes_total", "Payload bytes uploaded to the swarm.",
                    [sd] { return static_cast<double>(sd->uploaded_bytes()); });
    // Super seeding (swarm::superseed_counters): where the origin's link goes beyond one copy.
    const auto* ss = &sd->superseed();
    auto ss_counter = [this](const char* name, const char* help,
                             const std::atomic<std::uint64_t>* v) {
      reg_.counter_fn(name, help, [v] { return static_cast<double>(v->load()); });
    };
    ss_counter("shoal_proxy_superseed_first_offers_total",
               "Pieces offered to a node that no connected node held or had on offer.",
               &ss->offers_first);
    ss_counter("shoal_proxy_superseed_second_offers_total",
               "Pieces offered to a node that another node already held or had on offer (only to "
               "a node that got nothing from the other nodes for 2 s).",
               &ss->offers_second);
    ss_counter("shoal_proxy_superseed_expired_offers_total",
               "Offers dropped because the node did not ask for the piece within 5 s.",
               &ss->offers_expired);
    ss_counter("shoal_proxy_superseed_expired_requested_offers_total",
               "Offers the node asked for whose piece had not arrived after 120 s.",
               &ss->offers_expired_requested);
    ss_counter("shoal_proxy_superseed_repeat_same_node_bytes_total",
               "Payload sent again to a node that had it already (it asked twice for a block, as "
               "after a request timed out).",
               &ss->repeat_bytes_same_node);
    ss_counter("shoal_proxy_superseed_repeat_other_node_bytes_total",
               "Payload of a piece sent to another node after one had it (second copies).",
               &ss->repeat_bytes_other_node);
  }
}

status app::init_datasets() {
  const auto& dc = cfg_.datasets;
  if (!dc.enabled) return {};
  namespace fs = std::filesystem;
  dataset_service_options o;
  o.dir = dc.dir.empty() ? (fs::path(cfg_.state_dir).parent_path() / "datasets").string() : dc.dir;
  o.staging_dir = dc.staging_dir.empty()
                      ? (fs::path(cfg_.cache.dir).parent_path() / "dataset-staging").string()
                      : dc.staging_dir;
  o.parallel_fetches = dc.parallel_fetches;
  o.policy.small_file_max = dc.small_file_max.bytes();
  o.policy.pack_target = dc.pack_target.bytes();
  o.origin.credentials_dir = dc.credentials_dir;
  auto allowed = std::make_shared<std::vector<allowed_origin>>();
  for (const auto& a : dc.allowed_origins) {
    auto e = http::parse_endpoint(a.url);
    if (!e) return fail(errc::config_error, "datasets.allowed_origins: " + e.error().message);
    allowed->push_back(
        allowed_origin{*e, a.private_addresses, a.credentials_file, a.credentials_env, a.buckets});
  }
  o.origin.allowed = std::move(allowed);
  o.max_resolving = dc.max_resolving;
  o.max_queued = static_cast<std::size_t>(dc.max_queued);
  o.origin.connect_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(dc.connect_timeout.get());
  o.origin.stall_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(dc.stall_timeout.get());
  o.origin.max_retries = dc.max_retries;
  o.origin.max_files = static_cast<std::size_t>(dc.max_files);
  o.resolve_pin = std::chrono::duration_cast<std::chrono::seconds>(dc.resolve_pin.get());
  if (seeder_) {
    o.trackers = cfg_.torrent.trackers;
    o.seed_endpoint = seeder_->endpoint();
    o.grant_for = grant_for_;
  }
  if (ring_) {
    copies_ = std::make_unique<dataset_copies>(
        *ring_, reg_,
        std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.ring.probe_interval.get()),
        [this] {
          return datasets_ ? datasets_->own_records()
                           : std::vector<std::pair<std::string, std::string>>{};
        });
    copies_->start(rt_.io());
    o.on_record = [c = copies_.get()](const std::string& ref, const std::string& record) {
      c->push(ref, record);
    };
    o.ready_elsewhere = [r = ring_.get()](const std::string& ref, const std::atomic<bool>& stop) {
      return dataset_copies::ready_at_members(*r, ref, stop);
    };
  }
  dataset_metrics dm;
  dm.origin_gets = &reg_.counter("shoal_proxy_dataset_origin_requests_total",
                                 "Requests sent to dataset origins for object bytes.")
                        .with({});
  dm.origin_bytes = &reg_.counter("shoal_proxy_dataset_origin_bytes_total",
                                  "Bytes received from dataset origins.")
                         .with({});
  dm.origin_changed =
      &reg_.counter("shoal_proxy_dataset_origin_changed_total",
                    "Objects refused because the origin changed them under a resolved version.")
           .with({});
  dm.resolved = &reg_.counter("shoal_proxy_datasets_resolved_total",
                              "Dataset versions resolved into a manifest.")
                     .with({});
  dm.resolve_failures = &reg_.counter("shoal_proxy_dataset_resolve_failures_total",
                                      "Dataset resolutions that failed.")
                             .with({});
  datasets_ = std::make_unique<dataset_service>(std::move(o), rt_.io(), *store_, *state_,
                                                *http_client_, seeder_.get(), dm);
  if (auto s = datasets_->start(); !s) return fail(s.error().wrap("datasets"));
  auto* ds = datasets_.get();
  reg_.gauge_fn("shoal_proxy_datasets_resolving", "Dataset versions being resolved.",
                [ds] { return static_cast<double>(ds->resolving()); });
  return {};
}

int app::run() {
  rt_.run(
      [this] {
        log::info("registry-proxy stopping");
        if (server_) server_->stop(std::chrono::milliseconds(5000));
        if (blobs_) blobs_->shutdown();
      },
      std::chrono::seconds(6), [this] { return server_->connections() == 0; });
  log::info("registry-proxy stopped");
  return 0;
}

void app::stop() { rt_.stop(); }

}  // namespace shoal::proxy
