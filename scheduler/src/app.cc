#include "scheduler/app.h"

#include <openssl/rand.h>

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <fstream>

#include "common/log.h"
#include "common/json_text.h"
#include "scheduler/dataset_catalog.h"

namespace shoal::scheduler {

namespace {

template <class D>
std::chrono::milliseconds ms(const D& d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d.get());
}

}  // namespace

app::app(const scheduler_config& cfg)
    : cfg_(cfg),
      rt_(static_cast<unsigned>(cfg.io_threads)),
      workers_(static_cast<std::size_t>(cfg.worker_threads), "worker"),
      heartbeat_pool_(2, "heartbeat-in"),
      timer_(rt_.io()) {}

result<std::unique_ptr<app>> app::build(const scheduler_config& cfg) {
  std::unique_ptr<app> a(new app(cfg));
  if (auto s = a->init(); !s) return fail(s.error());
  return a;
}

app::~app() {
  if (server_) server_->stop(std::chrono::milliseconds(0));
  if (shared_) shared_->stop();
  timer_.cancel();
  if (http_client_) http_client_->stop();
  workers_.stop();
  workers_.join();
  heartbeat_pool_.stop();
  heartbeat_pool_.join();
}

status app::init_transport() {
  http::client_options co;
  co.max_connections_per_host = static_cast<std::size_t>(cfg_.resolver.threads) + 2;
  http_client_ = std::make_unique<http::client>(http::client_options_with_tls(co, cfg_.tls));
  if (!cfg_.tls.enabled) {
    log::warn(
        "tls.enabled is false: plain HTTP, no caller is authenticated; any host that can "
        "reach this port may heartbeat or announce for any node (single-machine demo only)");
    return {};
  }
  auto t = tls::tls_context::create(cfg_.tls, tls::side::server, "scheduler");
  if (!t) return fail(t.error());
  tls_ = std::move(*t);
  return {};
}

status app::init_auth() {
  if (cfg_.auth.operator_token_file.empty()) {
    if (!cfg_.tls.enabled) {
      log::warn(
          "no auth.operator_token_file in plain mode: anyone who can reach this port may "
          "place and prewarm");
    }
    return {};
  }
  auto t = operator_token::load(cfg_.auth.operator_token_file);
  if (!t) return fail(t.error());
  token_ = std::move(*t);
  return {};
}

status app::init() {
  unsigned char b[8];
  if (RAND_bytes(b, sizeof b) != 1) return fail(errc::internal, "RAND_bytes failed");
  std::string epoch = to_hex(std::span<const std::uint8_t>(b, sizeof b));

  init_tracker();

  init_index(epoch);

  if (auto s = init_transport(); !s) return s;
  manifests_ = std::make_unique<registry_proxy_source>(
      *http_client_,
      registry_proxy_options{cfg_.resolver.registry_proxy, ms(cfg_.resolver.connect_timeout),
                             ms(cfg_.resolver.request_timeout)});
  resolver_options ro;
  ro.tag_ttl = ms(cfg_.resolver.tag_ttl);
  ro.max_manifests = cfg_.resolver.max_manifests;
  ro.threads = cfg_.resolver.threads;
  resolver_ = std::make_unique<resolver>(*manifests_, ro);
  {
    // Datasets are resolved by registry-proxy; the catalog reads their manifests there.
    dataset_catalog_options dco;
    dco.registry_proxy = cfg_.resolver.registry_proxy;
    dco.connect_timeout = ms(cfg_.resolver.connect_timeout);
    dco.request_timeout =
        std::max(ms(cfg_.resolver.request_timeout), std::chrono::milliseconds(30000));
    datasets_ = std::make_unique<registry_proxy_datasets>(*http_client_, dco);
  }
  {
    netsetup::policy pol;
    if (!cfg_.placement.netsetup_policy.empty()) {
      if (auto st = config::load_file(cfg_.placement.netsetup_policy, pol); !st) {
        return fail(st.error().wrap("placement.netsetup_policy"));
      }
    }
    network_ = std::make_unique<cached_network_model>(
        std::make_unique<netsetup_network_model>(std::move(pol)));
  }

  init_failover();
  placer_options po;
  po.cost = cost_model::from(cfg_.placement.cost);
  po.require_network_validation = cfg_.placement.require_network_validation;
  po.reservation_ttl = ms(cfg_.placement.reservation_ttl);
  po.packing_seconds_per_gpu = cfg_.placement.packing_seconds_per_gpu;
  placer_ = std::make_unique<placer>(*index_, *resolver_, *datasets_, *network_, po);

  prewarm_options pw;
  pw.timeout = ms(cfg_.prewarm.timeout);
  pw.retention = ms(cfg_.prewarm.retention);
  pw.max_prewarms = cfg_.prewarm.max_prewarms;
  prewarm_ = std::make_unique<prewarm_manager>(*index_, pw);
  if (auto s = init_shared(); !s) return s;

  extender_options eo;
  eo.mode = cfg_.extender.mode;
  eo.max_missing = parse_threshold(cfg_.extender.max_missing).value_or(threshold{});
  eo.resolve_timeout = ms(cfg_.extender.resolve_timeout);
  eo.max_request_bytes = cfg_.extender.max_request_bytes.bytes();
  extender_ = std::make_unique<extender>(*placer_, eo, reg_);
  init_jobs();

  if (auto s = init_auth(); !s) return s;
  if (auto s = init_checkpoints(); !s) return s;
  if (shared_) {
    // Everything it feeds exists now: load what Redis holds, then read the log.
    shared_->attach(*checkpoints_);
    shared_->start();
  }
  api_ = std::make_unique<api>(api_deps{cfg_, *index_, *tracker_, *placer_, *resolver_, *datasets_,
                                        *prewarm_, *extender_, reg_, token_.get(), failures_.get(),
                                        checkpoints_.get(), checkpoint_grant_for_, jobs_.get(),
                                        shared_.get()});
  register_metrics();

  auto so = daemon::server_options_from(cfg_.http, "shoal-scheduler");
  // The heartbeat and checkpoint registration routes check their own limits (derived from
  // nodes.max_objects_per_node, and checkpoints.max_registration_bytes); the server must let such
  // bodies through.
  so.max_body_bytes = std::max<std::uint64_t>(
      {so.max_body_bytes, heartbeat::max_message_bytes_for(cfg_.nodes.max_objects_per_node),
       cfg_.checkpoints.max_registration_bytes.bytes()});
  so.tls = tls_;
  server_ = std::make_unique<http::server>(
      rt_.io(), so,
      [this](http::request&& r, http::responder resp) { handle(std::move(r), std::move(resp)); });
  if (auto s = daemon::listen(*server_, cfg_.http); !s) return fail(s.error());
  schedule_maintenance();
  log::info("scheduler listening", log::kv("address", cfg_.http.listen),
            log::kv("port", server_->port()), log::kv("epoch", epoch),
            log::kv("registry_proxy", cfg_.resolver.registry_proxy),
            log::kv("extender_mode", cfg_.extender.mode), log::kv("tls", tls_ != nullptr));
  for (const auto& [k, v] : config::non_defaults(cfg_))
    log::info("config", log::kv("key", k), log::kv("value", v));
  return {};
}

std::vector<version::library> linked_libraries() { return version::common_libraries(); }

void app::register_metrics() {
  metrics::register_process_metrics(reg_);
  version::register_build_info(reg_, linked_libraries());
  if (tls_) {
    tls::register_metrics(reg_, *tls_, "shoal_scheduler");
    // server_ is made after the metrics; scrapes only come through it.
    http::register_tls_refusal_metrics(reg_, "shoal_scheduler",
                                       [this]() -> const http::server* { return server_.get(); });
  }
  auto* t = tracker_.get();
  reg_.counter_fn("shoal_tracker_announces_total", "Announces answered.",
                  [t] { return static_cast<double>(t->stats().announces); });
  reg_.counter_fn("shoal_tracker_bad_announces_total", "Announces refused as malformed.",
                  [t] { return static_cast<double>(t->stats().bad_announces); });
  reg_.counter_fn("shoal_tracker_refused_announces_total",
                  "Announces refused because of tracker.max_swarms or tracker.max_peers_per_swarm.",
                  [t] { return static_cast<double>(t->stats().refused_announces); });
  reg_.counter_fn("shoal_tracker_unauthorized_announces_total",
                  "Announces refused because the caller's certificate does not name their node "
                  "(or, for role=origin, is not registry-proxy's).",
                  [t] { return static_cast<double>(t->stats().unauthorized_announces); });
  reg_.counter_fn("shoal_tracker_stale_stops_total",
                  "\"stopped\" announces ignored because the endpoint has announced since with "
                  "another peer id (a finished download replaced by its seed).",
                  [t] { return static_cast<double>(t->stats().stale_stops); });
  reg_.counter_fn("shoal_tracker_skipped_holdings_total",
                  "Heartbeat holdings not recorded in the tracker because of its caps.",
                  [t] { return static_cast<double>(t->stats().skipped_holdings); });
  reg_.gauge_fn("shoal_tracker_swarms", "Swarms known.",
                [t] { return static_cast<double>(t->stats().swarms); });
  reg_.gauge_fn("shoal_tracker_peers", "Peer entries across swarms.",
                [t] { return static_cast<double>(t->stats().peers); });
  auto* idx = index_.get();
  reg_.gauge_fn("shoal_scheduler_nodes", "Nodes known (heartbeating, or not yet dropped).",
                [idx] { return static_cast<double>(idx->stats().nodes); });
  reg_.gauge_fn("shoal_scheduler_nodes_healthy", "Nodes heartbeating and not failing.",
                [idx] { return static_cast<double>(idx->stats().healthy_nodes); });
  reg_.gauge_fn("shoal_scheduler_index_objects", "Distinct objects held by at least one node.",
                [idx] { return static_cast<double>(idx->stats().objects); });
  reg_.gauge_fn("shoal_scheduler_index_holdings", "(node, object) pairs in the cache index.",
                [idx] { return static_cast<double>(idx->stats().holdings); });
  auto* fd = failures_.get();
  reg_.gauge_fn("shoal_scheduler_nodes_failed",
                "Nodes in state failed (failover.failed_after without a heartbeat, reported "
                "failing, netsetup validation failed, or not back within restart_grace).",
                [fd] { return static_cast<double>(fd->failed_nodes()); });
  reg_.gauge_fn("shoal_scheduler_failover_view_stale",
                "1 while the scheduler decides no failure on silence (just started, or too many "
                "nodes silent at once).",
                [fd] { return fd->view_stale() ? 1.0 : 0.0; });
  node_failures_ = &reg_.counter("shoal_scheduler_node_failures_total",
                                 "Nodes found failed, by cause (heartbeat, reported, netsetup, "
                                 "restart_grace).",
                                 {"cause"});
  for (auto cause : {failure_cause::heartbeat, failure_cause::reported, failure_cause::netsetup,
                     failure_cause::restart_grace}) {
    node_failures_->with({std::string(to_string(cause))}).inc(0);
  }
  dropped_ = &reg_.counter("shoal_scheduler_nodes_dropped_total",
                           "Nodes forgotten after missing heartbeats.")
                  .with({});
  auto* res = resolver_.get();
  reg_.counter_fn("shoal_scheduler_resolver_cache_hits_total",
                  "Manifest and tag lookups answered from memory.",
                  [res] { return static_cast<double>(res->stats().hits); });
  reg_.counter_fn("shoal_scheduler_resolver_fetches_total",
                  "Manifests fetched from registry-proxy.",
                  [res] { return static_cast<double>(res->stats().fetches); });
  reg_.counter_fn("shoal_scheduler_resolver_errors_total", "Manifest fetches that failed.",
                  [res] { return static_cast<double>(res->stats().errors); });
  register_checkpoint_metrics(reg_, *checkpoints_);
  prewarm_orders_ =
      &reg_.gauge("shoal_scheduler_prewarm_orders",
                  "Prewarm orders (one per image or dataset per node) by state.", {"state"});
  for (const char* s : {"pending", "queued", "running", "done", "failed"})
    prewarm_orders_->with({s}).set(0);
}

// The checkpoint catalog, and with TLS the signer of its swarms' grants: the scheduler's own
// certificate and key (URI SAN shoal://scheduler, which grant verifiers accept).
status app::init_checkpoints() {
  checkpoints_ = std::make_unique<checkpoint_catalog>(
      checkpoint_catalog_options{cfg_.checkpoints.max_per_job, cfg_.checkpoints.max_bytes.bytes()});
  // Failover resumes from a job's newest checkpoint, and each new one is prewarmed onto the
  // job's standbys as soon as it is registered (jobs.h).
  auto* cat = checkpoints_.get();
  jobs_->set_latest_checkpoint(
      [cat](const std::string& job) -> std::optional<std::pair<std::string, checkpoint_objects>> {
        auto r = cat->latest(job);
        if (!r) return std::nullopt;
        auto objs = cat->objects(r->key());
        if (!objs) return std::nullopt;
        return std::pair{r->key(), checkpoint_objects(objs->begin(), objs->end())};
      });
  cat->on_registered(
      [cat, tell = jobs_->listener()](const std::string& job, const std::string& key) {
        if (auto objs = cat->objects(key))
          tell(job, key, checkpoint_objects(objs->begin(), objs->end()));
      });
  if (!cfg_.tls.enabled) return {};
  auto sg =
      grant::signer::load(cfg_.tls.cert_file, cfg_.tls.key_file, ms(cfg_.tls.reload_interval));
  if (!sg) return fail(sg.error().wrap("checkpoint grants (tls.cert_file, tls.key_file)"));
  checkpoint_grant_for_ = checkpoint_grants(
      std::move(*sg),
      std::chrono::duration_cast<std::chrono::seconds>(cfg_.checkpoints.grant_ttl.get()));
  return {};
}

// The tracker, from the tracker section (announced peers only with SSL torrents, docs/p2p.md).
void app::init_tracker() {
  tracker_options to{.announced_peers_only = cfg_.tls.enabled};
  auto secs = [](const config::duration& d) {
    return std::chrono::duration_cast<std::chrono::seconds>(d.get());
  };
  to.interval = secs(cfg_.tracker.interval);
  to.seed_interval = secs(cfg_.tracker.seed_interval);
  to.min_interval = secs(cfg_.tracker.min_interval);
  to.peer_timeout = secs(cfg_.tracker.peer_timeout);
  to.default_numwant = static_cast<std::uint32_t>(cfg_.tracker.default_numwant);
  to.max_numwant = static_cast<std::uint32_t>(cfg_.tracker.max_numwant);
  to.trust_announced_ip = cfg_.tracker.trust_announced_ip;
  to.max_swarms = cfg_.tracker.max_swarms;
  to.max_peers_per_swarm = cfg_.tracker.max_peers_per_swarm;
  tracker_ = std::make_unique<tracker>(to);
}

namespace {

// A one-line secret (a password file); trailing newline and spaces dropped.
result<std::string> read_secret(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string s;
  if (!in || !std::getline(in, s) || s.size() > 4096)
    return fail(errc::config_error, std::string(key) + ": cannot read one line from " + path);
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  if (s.empty()) return fail(errc::config_error, std::string(key) + ": " + path + " is empty");
  return s;
}

}  // namespace

status app::init_shared() {
  const auto& rc = cfg_.redis;
  if (rc.address.empty() && rc.sentinels.empty()) return {};
  shared_state_options so;
  so.redis.address = rc.address;
  so.redis.sentinels = rc.sentinels;
  for (const auto& [named, local] : rc.tunnels) {
    std::string h;
    int port = 0;
    if (!split_host_port(named, h, port) || !split_host_port(local, h, port)) {
      return fail(errc::config_error,
                  "redis.tunnels: " + named + " → " + local + ": both must be host:port");
    }
  }
  so.redis.tunnels = rc.tunnels;
  so.redis.master_name = rc.master_name;
  so.redis.user = rc.user;
  so.redis.sentinel_user = rc.sentinel_user;
  if (!rc.password_file.empty()) {
    auto p = read_secret(rc.password_file, "redis.password_file");
    if (!p) return fail(p.error());
    so.redis.password = *p;
  }
  if (!rc.sentinel_password_file.empty()) {
    auto p = read_secret(rc.sentinel_password_file, "redis.sentinel_password_file");
    if (!p) return fail(p.error());
    so.redis.sentinel_password = *p;
  }
  so.redis.connect_timeout = ms(rc.connect_timeout);
  so.redis.command_timeout = ms(rc.command_timeout);
  so.prefix = rc.key_prefix;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  unsigned char b[6];
  if (RAND_bytes(b, sizeof b) != 1) return fail(errc::internal, "RAND_bytes failed");
  so.replica_id = std::string(host) + "/" + to_hex(std::span<const std::uint8_t>(b, sizeof b));
  so.log_max_entries = rc.log_max_entries;
  so.read_batch = ms(rc.read_batch);
  so.wait_replicas = rc.wait_replicas;
  so.wait_timeout = ms(rc.wait_timeout);
  so.lease_ttl = ms(rc.lease_ttl);
  so.drop_after = ms(cfg_.nodes.drop_after);
  so.peer_timeout = ms(cfg_.tracker.peer_timeout);
  so.max_objects_per_node = cfg_.nodes.max_objects_per_node;
  so.prewarm_keep = ms(cfg_.prewarm.timeout) + ms(cfg_.prewarm.retention);
  so.job_keep = ms(cfg_.jobs.ttl);
  shared_ = std::make_unique<shared_state>(so, *index_, *tracker_, reg_);
  tracker_->set_observer([s = shared_.get()](const announce_request& a) { s->announced(a); });
  shared_->attach(*prewarm_);
  log::info("shared state in redis",
            log::kv("redis", rc.sentinels.empty() ? rc.address : "sentinels/" + rc.master_name),
            log::kv("replica", so.replica_id));
  return {};
}

// The cluster cache index, from the nodes section; `epoch` is this start's.
void app::init_index(const std::string& epoch) {
  index_options io;
  io.unhealthy_after = ms(cfg_.nodes.unhealthy_after);
  io.drop_after = ms(cfg_.nodes.drop_after);
  io.default_platform = cfg_.resolver.default_platform;
  io.max_nodes = cfg_.nodes.max_nodes;
  io.max_objects_per_node = cfg_.nodes.max_objects_per_node;
  index_ = std::make_unique<cluster_index>(io, epoch);
}

// The failure detector (failures.h), from the failover and nodes sections.
void app::init_failover() {
  failover_options fo;
  fo.unhealthy_after = ms(cfg_.nodes.unhealthy_after);
  fo.failed_after = ms(cfg_.failover.failed_after);
  fo.restart_grace = ms(cfg_.failover.restart_grace);
  fo.max_failed_fraction = cfg_.failover.max_failed_fraction;
  fo.max_events = cfg_.failover.max_events;
  failures_ = std::make_unique<failure_detector>(fo, netsetup_failures(*network_));
}

void app::init_jobs() {
  jobs_options jo;
  jo.max_jobs = cfg_.jobs.max_jobs;
  jo.ttl = ms(cfg_.jobs.ttl);
  jo.failover_preference_ttl = ms(cfg_.jobs.failover_preference_ttl);
  jo.checkpoint_pin =
      std::chrono::duration_cast<std::chrono::seconds>(cfg_.jobs.checkpoint_pin_for.get());
  jo.prewarm_pin = std::chrono::duration_cast<std::chrono::seconds>(cfg_.prewarm.pin_for.get());
  jo.checkpoint_views_dir = cfg_.jobs.checkpoint_views_dir;
  jo.resolve_timeout = ms(cfg_.placement.resolve_timeout);
  jobs_ = std::make_unique<job_registry>(
      job_registry_deps{*index_, *placer_, *resolver_, *datasets_, *prewarm_, *failures_, reg_},
      jo);
  extender_->set_job_preference(
      [j = jobs_.get()](std::string_view job) { return j->preferred_node(job); });
  if (shared_) {
    shared_->attach(*jobs_);
    shared_->attach(*placer_);
  }
}

void app::schedule_maintenance() {
  timer_.expires_after(std::chrono::seconds(1));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    // Off the io thread: expiry walks every node.
    boost::asio::post(heartbeat_pool_, [this] { maintenance(); });
    schedule_maintenance();
  });
}

void app::maintenance() {
  for (const auto& d : index_->expire()) {
    dropped_->inc();
    if (d.bt_port != 0) tracker_->drop_holder(d.ip, d.bt_port);
    log::warn("node dropped: no heartbeat", log::kv("node", d.name));
  }
  // Every 10 s, as announces do: the walk covers every swarm and peer under the lock heartbeats
  // take (at 5,000 nodes x 400 objects it was most of an idle scheduler's CPU every second).
  const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  if (now_s - tracker_expired_s_.load() >= 10) {
    tracker_expired_s_ = now_s;
    tracker_->expire();
  }
  // Sharing state, a replica started a moment ago judges silence from when the schedulers
  // began serving (a replacement lease holder decides at once; docs/ha.md).
  if (shared_) {
    if (auto since = shared_->serving_since()) failures_->serving_since(*since);
  }
  auto events = failures_->evaluate(index_->liveness());  // it logs and keeps them
  for (const auto& e : events) {
    if (e.event == "failed") node_failures_->with({e.cause}).inc();
  }
  // Failover decisions resolve images and datasets: on a worker, never here (jobs.h). Replicas
  // sharing state all remember failed nodes; the lease holder alone decides (docs/ha.md).
  if (jobs_->on_node_events(events, !shared_ || shared_->leader()))
    boost::asio::post(workers_, [this] { (void)jobs_->decide_pending(); });
  jobs_->expire();
  if (token_) (void)token_->reload_if_changed();  // a stat a second; reads only on change
  prewarm_->tick();
  auto c = prewarm_->counts();
  for (const auto& [state, n] : c.orders)
    prewarm_orders_->with({state}).set(static_cast<double>(n));
}

void app::handle(http::request&& req, http::responder resp) {
  auto health = [this] {
    daemon::health h;
    if (shared_) {
      if (auto why = shared_->stale_reason(); !why.empty()) {
        h.status = "degraded";
        h.reasons.push_back("redis unreachable, answering from this replica's view: " + why);
      }
    }
    return h;
  };
  if (req.path == "/readyz" && shared_) {
    // A replica that cannot reach Redis is degraded but still serves: it stays ready (taking
    // every replica out of a Service during a Redis outage would turn degraded into down;
    // docs/ha.md, "Degraded, not down"). /healthz says why.
    auto h = health();
    nlohmann::json j = {{"status", h.status}, {"reasons", h.reasons}};
    resp.send(http::response::json(200, json_text(j)));
    return;
  }
  if (daemon::serve_ops(req, resp, reg_, health)) return;
  if (api::is_heartbeat(req)) {
    boost::asio::post(heartbeat_pool_,
                      [this, req = std::move(req), resp] { resp.send(serve(req)); });
    return;
  }
  if (api::heavy(req)) {
    boost::asio::post(workers_, [this, req = std::move(req), resp] {
      if (resp.client_gone()) return;
      resp.send(serve(req));
    });
    return;
  }
  resp.send(serve(req));
}

http::response app::serve(const http::request& req) {
  auto r = api_->serve(req);
  // Redis unreachable: the answer comes from this replica's own view (docs/ha.md).
  if (shared_) {
    if (auto why = shared_->stale_reason(); !why.empty()) r.headers.set("Shoal-Stale", why);
  }
  return r;
}

int app::run() {
  rt_.run(
      [this] {
        log::info("scheduler stopping");
        timer_.cancel();
        server_->stop(std::chrono::milliseconds(2000));
      },
      std::chrono::seconds(3), [this] { return server_->connections() == 0; });
  return 0;
}

void app::stop() { rt_.stop(); }

}  // namespace shoal::scheduler
