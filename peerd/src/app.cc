#include "peerd/app.h"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <filesystem>

#include "cache/version.h"
#include "common/log.h"
#include "checkpoints.h"
#include "datasets.h"
#include "peerd/blob_access.h"
#include "peerd/fetcher.h"
#include "peerd/cri.h"
#include "peerd/health.h"
#include "peerd/heartbeat_sender.h"
#include "mirror.h"
#include "prewarm.h"
#include "proxy_link.h"
#include "scheduler_link.h"
#include "peerd/state_db.h"
#include "peerd/swarm.h"
#include "swarm/version.h"

namespace shoal::peerd {

app::app(const peerd_config& cfg)
    : cfg_(cfg),
      rt_(static_cast<unsigned>(cfg.io_threads)),
      pool_(static_cast<std::size_t>(cfg.worker_threads), "worker") {}

app::~app() {
  if (prewarm_) prewarm_->request_stop();
  if (datasets_) datasets_->request_stop();
  if (restores_) restores_->request_stop();
  if (publisher_) publisher_->request_stop();
  heartbeat_.reset();
  health_.reset();
  pods_.reset();
  if (metrics_server_) metrics_server_->stop(std::chrono::milliseconds(0));
  if (server_) server_->stop(std::chrono::milliseconds(0));
  if (swarm_) swarm_->stop();
  if (http_client_) http_client_->stop();
  prewarm_.reset();
  publisher_.reset();
  restores_.reset();
  datasets_.reset();
  pool_.join();
  cache_events_.reset();
  if (store_) store_->stop();
}

result<std::unique_ptr<app>> app::build(const peerd_config& cfg) {
  std::unique_ptr<app> a(new app(cfg));
  if (auto s = a->init(); !s) return fail(s.error());
  return a;
}

status app::init() {
  if (cfg_.node.name.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    cfg_.node.name = host;
  }
  if (cfg_.swarm.partial_dir.empty()) {
    cfg_.swarm.partial_dir =
        std::filesystem::path(cfg_.cache.dir).parent_path().string() + "/partial";
  }
  if (auto s = clean_partial_dir(); !s) return s;
  if (auto s = init_tls(); !s) return s;
  // BitTorrent between members: every torrent rooted at tls.ca_file (swarm/swarm.h).
  if (auto s = swarm::enable_members_only(cfg_.tls); !s) return fail(s.error());
  // Every outbound call (registry-proxy, the scheduler) presents this node's certificate.
  http_client_ = std::make_unique<http::client>(http::client_options_with_tls({}, cfg_.tls));
  auto sl = scheduler_link::create(cfg_.upstream, *http_client_);
  if (!sl) return fail(sl.error());
  scheduler_ = std::move(*sl);
  auto pl = proxy_link::create(cfg_.upstream, *http_client_);
  if (!pl) return fail(pl.error());
  proxy_ = std::move(*pl);
  cache::options co = cache::to_options(cfg_.cache);
  auto st = cache::store::open(co);
  if (!st) return fail(st.error().wrap("cache " + co.root));
  store_ = std::move(*st);
  store_->start_background();

  auto sdb =
      state_db::open(std::filesystem::path(cfg_.cache.dir).parent_path().string() + "/state");
  if (!sdb) return fail(sdb.error());
  state_ = std::move(*sdb);

  // Torrents announce to every replica, the one that last answered first (swarm.cc trackers()).
  swarm_manager::bases_fn bases;
  if (scheduler_) bases = [s = scheduler_.get()] { return s->bases(); };
  auto sw =
      swarm_manager::start(cfg_.swarm, cfg_.node, std::move(bases),
                           swarm_manager::deps{*store_, *state_, *http_client_, pool_}, cfg_.tls);
  if (!sw) return fail(sw.error().wrap("swarm"));
  swarm_ = std::move(*sw);
  cache_events_ = store_->on_event([this](const cache::event& e) {
    if (e.type == cache::event_type::committed) return;
    auto d = e.id;
    boost::asio::post(pool_, [this, d] { (void)state_->forget(d); });
  });
  if (auto s = init_groups(); !s) return s;
  access_ =
      std::make_unique<blob_access>(blob_access::deps{cfg_, *http_client_, reg_, proxy_.get()});
  {
    fetcher::deps fd{cfg_, *store_, *swarm_, *http_client_, pool_, reg_};
    fd.state = state_.get();
    fd.access = access_.get();
    fd.proxy = proxy_.get();
    fetcher_ = std::make_unique<fetcher>(std::move(fd));
  }
  if (auto s = init_datasets(); !s) return s;
  if (auto s = init_checkpoints(); !s) return s;
  {
    mirror::deps md{cfg_, *store_, *swarm_, *fetcher_, *access_, *http_client_, pool_, reg_};
    md.proxy = proxy_.get();
    if (datasets_) {
      md.datasets = [ds = datasets_.get()](const http::request& r, const http::responder& resp) {
        return ds->handle(r, resp);
      };
    }
    if (restores_) {
      md.checkpoints = [this](const http::request& r, const http::responder& resp) {
        return handle_checkpoints(r, resp);
      };
    }
    mirror_ = std::make_unique<mirror>(std::move(md));
  }
  register_metrics();

  if (auto s = start_server(); !s) return s;
  if (auto s = start_metrics_server(); !s) return s;
  if (scheduler_) start_heartbeat();
  log::info("peerd listening", log::kv("node", cfg_.node.name),
            log::kv("address", cfg_.http.listen), log::kv("bt", swarm_->endpoint()),
            log::kv("registry_proxy", proxy_->urls().size() == 1
                                          ? proxy_->urls().front()
                                          : std::to_string(proxy_->urls().size()) + " replicas"),
            log::kv("metrics", cfg_.metrics_listen), log::kv("tls", cfg_.tls.enabled));
  return {};
}

// Prewarm orders, the health hook, the CRI watch and the heartbeats: what a node with a
// scheduler runs.
void app::start_heartbeat() {
  prewarm_ = std::make_unique<prewarm_executor>(
      prewarm_executor::deps{cfg_, *store_, *swarm_, *fetcher_, *http_client_, datasets_.get(),
                             restores_.get(), proxy_.get()},
      prewarm_executor::options{});
  health_ = std::make_unique<health_monitor>(cfg_.node);
  health_->start();
  heartbeat_sender::deps hd{
      cfg_, *store_, *swarm_, *http_client_, [this] { return server_->port(); }, prewarm_.get()};
  hd.health = health_.get();
  hd.scheduler = scheduler_.get();
  pods_ = std::make_unique<cri::pod_watcher>(cfg_.node, reg_);
  pods_->start();
  if (!cfg_.node.cri_socket.empty()) hd.pods = [p = pods_.get()] { return p->current(); };
  if (publisher_) hd.on_new_epoch = [pb = publisher_.get()] { pb->register_again(); };
  if (datasets_) hd.datasets = [ds = datasets_.get()] { return ds->presence(); };
  if (restores_) {
    hd.checkpoints = [rs = restores_.get(), pb = publisher_.get()] {
      auto out = rs->presence();
      for (auto& p : pb->presence()) {
        auto same = std::find_if(out.begin(), out.end(),
                                 [&](const auto& o) { return o.dataset == p.dataset; });
        if (same == out.end()) out.push_back(std::move(p));
      }
      return out;
    };
  }
  heartbeat_ = std::make_unique<heartbeat_sender>(std::move(hd));
  prewarm_->on_change([hb = heartbeat_.get()] { hb->poke(); });
  prewarm_->start();
  heartbeat_->start();
}

// TLS for the outbound calls: with it on, both upstream URLs must be https (a plain one would
// send the node's forwarded credentials in clear); with it off, one loud warning that they are.
status app::init_tls() {
  if (!cfg_.tls.enabled) {
    log::warn(
        "tls.enabled is false: registry credentials forwarded to registry-proxy, heartbeats and "
        "every other call to registry-proxy and the scheduler go in clear text over plain HTTP, "
        "and nothing proves this node's identity (single-machine demo only)");
    return {};
  }
  std::vector<std::pair<std::string, std::string>> urls{
      {"upstream.registry_proxy", cfg_.upstream.registry_proxy}};
  for (const auto& u : endpoints::split_list(cfg_.upstream.registry_proxies))
    urls.emplace_back("an upstream.registry_proxies entry", u);
  for (const auto& u : scheduler_urls(cfg_.upstream)) urls.emplace_back("a scheduler URL", u);
  for (const auto& [key, url] : urls) {
    if (!url.empty() && !url.starts_with("https://")) {
      return fail(errc::config_error,
                  key + " is " + url + ": with tls.enabled it must be an https:// URL");
    }
  }
  // Loads the files now, so a missing or mismatched certificate or key stops the start with a
  // clear error rather than failing every call later (libcurl reads them per connection).
  auto t = tls::tls_context::create(cfg_.tls, tls::side::server, "peerd");
  if (!t) return fail(t.error().wrap("tls"));
  metrics_tls_ = std::move(*t);
  tls::register_metrics(reg_, *metrics_tls_, "shoal_peerd");
  auto ci = metrics_tls_->certificate();
  const std::string want = "shoal://node/" + cfg_.node.name;
  if (ci.identity_uri != want) {
    log::warn(
        "the certificate does not name this node: registry-proxy and the scheduler will "
        "take this node for whoever it names",
        log::kv("node", cfg_.node.name), log::kv("expected", want),
        log::kv("certificate", ci.identity_uri.empty() ? "(no shoal:// URI)" : ci.identity_uri));
  }
  return {};
}

// The metrics listener: /metrics and /healthz only, on the node address for scrapers on other
// hosts; TLS with the node certificate when tls.enabled (a client certificate of the cluster CA
// required unless tls.require_client_cert is false).
status app::start_metrics_server() {
  if (cfg_.metrics_listen.empty()) return {};
  daemon::http_config hc;
  hc.listen = cfg_.metrics_listen;
  hc.max_connections = 64;
  hc.max_connections_per_address = 8;
  hc.max_body_bytes = config::byte_size::kib(1);
  auto so = daemon::server_options_from(hc, "shoal-peerd");
  so.tls = metrics_tls_;
  if (!metrics_tls_) {
    log::warn(
        "metrics_listen serves plain HTTP (tls.enabled is false): anyone who reaches it "
        "may read this node's metrics (counters and gauges, no digests or credentials)",
        log::kv("address", cfg_.metrics_listen));
  }
  metrics_server_ = std::make_unique<http::server>(
      rt_.io(), so, [this](http::request&& req, http::responder resp) {
        if (req.path == "/metrics" || req.path == "/healthz") {
          if (daemon::serve_ops(req, resp, reg_, [] { return daemon::health{}; })) return;
        }
        resp.send(http::response::json(
            404, R"({"error":"the metrics listener serves /metrics and /healthz only"})"));
      });
  auto hp = http::split_host_port(hc.listen);
  if (!hp) return fail(hp.error().wrap("metrics_listen"));
  if (auto s = metrics_server_->listen(hp->first, hp->second); !s) {
    return fail(s.error().wrap("metrics_listen " + hc.listen));
  }
  log::info("metrics listening", log::kv("address", cfg_.metrics_listen),
            log::kv("port", metrics_server_->port()), log::kv("tls", metrics_tls_ != nullptr));
  return {};
}

// Empties the partial-download directory at start.
status app::clean_partial_dir() {
  // Downloads never survive a restart (each is re-requested by its client), so whatever is in
  // the partial directory now is debris of a crash: remove it, it is outside the cache quota.
  std::error_code ec;
  std::uint64_t bytes = 0, files = 0;
  if (std::filesystem::exists(cfg_.swarm.partial_dir, ec)) {
    for (auto it = std::filesystem::recursive_directory_iterator(cfg_.swarm.partial_dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec)) {
        bytes += it->file_size(ec);
        ++files;
      }
    }
    std::filesystem::remove_all(cfg_.swarm.partial_dir, ec);
    if (ec) return fail(ec, "clean " + cfg_.swarm.partial_dir + ": " + ec.message());
  }
  std::filesystem::create_directories(cfg_.swarm.partial_dir, ec);
  if (ec) return fail(ec, "create " + cfg_.swarm.partial_dir + ": " + ec.message());
  if (files)
    log::info("removed unfinished downloads", log::kv("files", files), log::kv("bytes", bytes));
  return {};
}

// The HTTP server (containerd's mirror endpoint and the node API) with its request metrics.
status app::start_server() {
  auto so = daemon::server_options_from(cfg_.http, "shoal-peerd");
  auto& req_total =
      reg_.counter("shoal_peerd_requests_total", "HTTP requests answered.", {"kind", "code"});
  auto& aborted =
      reg_.counter("shoal_peerd_responses_aborted_total", "Responses cut short.", {"kind"});
  so.on_request_done = [&req_total, &aborted](const http::request_log& l) {
    std::string_view t = l.target;
    std::string kind = t.find("/blobs/") != std::string_view::npos       ? "blob"
                       : t.find("/manifests/") != std::string_view::npos ? "manifest"
                       : t.rfind("/shoal/", 0) == 0                      ? "api"
                                                                         : "other";
    req_total.with({kind, std::to_string(l.status)}).inc();
    if (l.aborted) aborted.with({kind}).inc();
    daemon::log_request(l);
  };
  server_ =
      std::make_unique<http::server>(rt_.io(), so, [this](http::request&& r, http::responder resp) {
        (*mirror_)(std::move(r), std::move(resp));
      });
  if (auto s = daemon::listen(*server_, cfg_.http); !s) return fail(s.error());
  return {};
}

// Dataset groups in the swarm engine (when datasets are on); the fetcher fetches them.
status app::init_groups() {
  const auto& dc = cfg_.datasets;
  if (!dc.enabled) return {};
  auto base = std::filesystem::path(cfg_.cache.dir).parent_path();
  swarm_manager::group_options go;
  go.partial_dir = dc.partial_dir.empty() ? (base / "dataset-partial").string() : dc.partial_dir;
  go.dir = dataset_dir();
  if (auto s = swarm_->enable_groups(go); !s) return fail(s.error().wrap("datasets"));
  auto* g = swarm_.get();
  reg_.gauge_fn("shoal_peerd_dataset_downloads_active", "Dataset groups being downloaded.",
                [g] { return static_cast<double>(g->active_groups()); });
  reg_.gauge_fn("shoal_peerd_dataset_seeds_loaded", "Dataset groups loaded as seeds.",
                [g] { return static_cast<double>(g->loaded_groups()); });
  return {};
}

std::string app::dataset_dir() const {
  const auto& dc = cfg_.datasets;
  auto base = std::filesystem::path(cfg_.cache.dir).parent_path();
  return dc.dir.empty() ? (base / "datasets").string() : dc.dir;
}

status app::init_datasets() {
  const auto& dc = cfg_.datasets;
  if (!dc.enabled) return {};
  auto base = std::filesystem::path(cfg_.cache.dir).parent_path();
  dataset_manager::options o;
  o.views_dir = dc.views_dir.empty() ? (base / "views").string() : dc.views_dir;
  o.dir = dataset_dir();
  o.parallel_groups = dc.parallel_groups;
  o.resolve_wait = std::chrono::duration_cast<std::chrono::milliseconds>(dc.resolve_wait.get());
  o.max_manifest = static_cast<std::size_t>(dc.max_manifest.bytes());
  o.pin_ttl = std::chrono::duration_cast<std::chrono::seconds>(dc.pin_ttl.get());
  o.pin_ttl_max = std::chrono::duration_cast<std::chrono::seconds>(dc.pin_ttl_max.get());
  o.expiry_interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(dc.expiry_check_interval.get());
  datasets_ = std::make_unique<dataset_manager>(
      dataset_manager::deps{cfg_, *store_, *fetcher_, *http_client_, pool_, scheduler_.get(),
                            proxy_.get()},
      std::move(o));
  if (auto s = datasets_->start(); !s) return fail(s.error().wrap("datasets"));
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
  auto* w = swarm_.get();
  const auto* c = &w->counters();
  reg_.counter_fn("shoal_peerd_bytes_from_origin_total",
                  "Payload bytes received from registry-proxy over BitTorrent.",
                  [c] { return static_cast<double>(c->from_origin.load()); });
  reg_.counter_fn("shoal_peerd_bytes_from_peers_total", "Payload bytes received from other nodes.",
                  [c] { return static_cast<double>(c->from_peers.load()); });
  reg_.counter_fn("shoal_peerd_bytes_from_http_fallback_total",
                  "Bytes fetched from registry-proxy over HTTP after a stall.",
                  [c] { return static_cast<double>(c->from_http.load()); });
  reg_.counter_fn("shoal_peerd_bytes_served_local_total", "Blob bytes served to local clients.",
                  [c] { return static_cast<double>(c->served_local.load()); });
  reg_.counter_fn("shoal_peerd_range_deadline_pieces_total",
                  "Pieces given a deadline because a Range request wanted them "
                  "(swarm.range_deadline_bytes).",
                  [c] { return static_cast<double>(c->range_deadline_pieces.load()); });
  reg_.counter_fn("shoal_peerd_stream_flushes_total",
                  "Flushes of a running download's writes so local readers could take its "
                  "verified pieces from its file.",
                  [c] { return static_cast<double>(c->stream_flushes.load()); });
  reg_.counter_fn("shoal_peerd_hashed_while_downloading_bytes_total",
                  "Bytes of downloaded objects whose sha256 was computed from their file while "
                  "the download still ran (the prefix local readers had confirmed).",
                  [c] { return static_cast<double>(c->hashed_while_downloading.load()); });
  reg_.counter_fn("shoal_peerd_hashed_after_download_bytes_total",
                  "Bytes of downloaded objects hashed after their last piece landed (what no "
                  "reader's prefix covered), before the cache commits them.",
                  [c] { return static_cast<double>(c->hashed_after_download.load()); });
  reg_.counter_fn("shoal_peerd_range_direct_total",
                  "Small Range requests of a chunk registry-proxy had not cut yet, read from "
                  "registry-proxy directly (swarm.range_direct_bytes).",
                  [c] { return static_cast<double>(c->range_direct.load()); });
  reg_.counter_fn("shoal_peerd_range_direct_bytes_total",
                  "Bytes of those Range requests, served to the client from registry-proxy.",
                  [c] { return static_cast<double>(c->range_direct_bytes.load()); });
  reg_.counter_fn("shoal_peerd_chunked_tails_total",
                  "Blobs fetched in chunks whose remaining chunks came as ranges of the blob, "
                  "because registry-proxy stopped listing them (the replica cutting it died or "
                  "restarted).",
                  [c] { return static_cast<double>(c->chunked_tails.load()); });
  reg_.counter_fn("shoal_peerd_bytes_uploaded_total", "Payload bytes uploaded to peers.",
                  [c] { return static_cast<double>(c->uploaded.load()); });
  reg_.counter_fn("shoal_peerd_swarm_received_bytes_total",
                  "Bytes libtorrent's peer connections received: payload, protocol messages and "
                  "TLS framing (not TCP/IP headers); updated every 5 s.",
                  [c] { return static_cast<double>(c->wire_received.load()); });
  reg_.counter_fn("shoal_peerd_swarm_sent_bytes_total",
                  "Bytes libtorrent's peer connections sent, as above; updated every 5 s.",
                  [c] { return static_cast<double>(c->wire_sent.load()); });
  reg_.counter_fn("shoal_peerd_swarm_redundant_bytes_total",
                  "Payload bytes received that the node already had (the same block from two "
                  "peers); updated every 5 s.",
                  [c] { return static_cast<double>(c->redundant.load()); });
  reg_.counter_fn("shoal_peerd_swarm_haves_received_total",
                  "HAVE messages received from peers; updated every 5 s.",
                  [c] { return static_cast<double>(c->haves_received.load()); });
  reg_.counter_fn("shoal_peerd_hash_failures_total",
                  "Pieces rejected because they failed their hash check.",
                  [c] { return static_cast<double>(c->hash_failures.load()); });
  reg_.counter_fn("shoal_peerd_quarantined_total", "Held objects found corrupt while seeding.",
                  [c] { return static_cast<double>(c->quarantined.load()); });
  reg_.counter_fn("shoal_peerd_http_fallbacks_total",
                  "Ranges fetched over HTTP because the swarm stalled.",
                  [c] { return static_cast<double>(c->fallbacks.load()); });
  if (auto* ds = datasets_.get()) {
    reg_.counter_fn("shoal_peerd_dataset_views_expired_total",
                    "Dataset views removed (and unpinned) because nobody renewed them.",
                    [ds] { return static_cast<double>(ds->views_expired()); });
    using how = dataset_manager::view_file;
    for (auto [h, name, help] :
         {std::tuple{how::cloned, "shoal_peerd_dataset_view_files_cloned_total",
                     "View files made as clones of cache objects (FICLONE; no bytes copied)."},
          std::tuple{how::sealed, "shoal_peerd_dataset_view_files_sealed_total",
                     "View files made as sealed (immutable) hard links to cache objects."},
          std::tuple{how::copied, "shoal_peerd_dataset_view_files_copied_total",
                     "View files made as copies (the filesystem can neither clone nor seal, "
                     "or another view links the object)."}}) {
      reg_.counter_fn(name, help, [ds, h] { return static_cast<double>(ds->view_files(h)); });
    }
  }
  reg_.gauge_fn("shoal_peerd_downloads_active", "Objects being downloaded.",
                [w] { return static_cast<double>(w->active_downloads()); });
  reg_.gauge_fn("shoal_peerd_torrents_loaded", "Torrents loaded in the session.",
                [w] { return static_cast<double>(w->loaded_torrents()); });
  if (const auto* ses = w->session()) swarm::register_tls_metrics(reg_, *ses, "shoal_peerd");
}

int app::run() {
  rt_.run(
      [this] {
        log::info("peerd stopping");
        if (prewarm_) prewarm_->request_stop();
        if (metrics_server_) metrics_server_->stop(std::chrono::milliseconds(0));
        if (server_) server_->stop(std::chrono::milliseconds(3000));
      },
      std::chrono::seconds(4), [this] { return server_->connections() == 0; });
  log::info("peerd stopped");
  return 0;
}

void app::stop() { rt_.stop(); }

}  // namespace shoal::peerd
