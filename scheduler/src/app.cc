#include "app.h"

#include <openssl/rand.h>

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace shoal::scheduler {

namespace {

std::array<std::uint8_t, 20> parse_ih(const std::string& hex) {
  std::array<std::uint8_t, 20> out{};
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i < 20 && 2 * i + 1 < hex.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(v(hex[2 * i]) << 4 | v(hex[2 * i + 1]));
  }
  return out;
}

}  // namespace

result<std::unique_ptr<app>> app::build(const scheduler_config& cfg) {
  std::unique_ptr<app> a(new app(cfg));
  if (auto s = a->init(); !s) return fail(s.error());
  return a;
}

app::~app() {
  if (server_) server_->stop(std::chrono::milliseconds(0));
}

status app::init() {
  unsigned char b[8];
  RAND_bytes(b, sizeof b);
  epoch_ = to_hex(std::span<const std::uint8_t>(b, sizeof b));
  tracker_options to;
  auto secs = [](const config::duration& d) { return std::chrono::duration_cast<std::chrono::seconds>(d.get()); };
  to.interval = secs(cfg_.tracker.interval);
  to.seed_interval = secs(cfg_.tracker.seed_interval);
  to.min_interval = secs(cfg_.tracker.min_interval);
  to.peer_timeout = secs(cfg_.tracker.peer_timeout);
  to.default_numwant = static_cast<std::uint32_t>(cfg_.tracker.default_numwant);
  to.max_numwant = static_cast<std::uint32_t>(cfg_.tracker.max_numwant);
  to.trust_announced_ip = cfg_.tracker.trust_announced_ip;
  tracker_ = std::make_unique<tracker>(to);
  metrics::register_process_metrics(reg_);
  heartbeats_ = &reg_.counter("shoal_scheduler_heartbeats_total", "Heartbeats accepted.").with({});
  bad_heartbeats_ = &reg_.counter("shoal_scheduler_bad_heartbeats_total", "Heartbeats refused as malformed.").with({});
  auto* t = tracker_.get();
  reg_.counter_fn("shoal_tracker_announces_total", "Announces answered.",
                  [t] { return static_cast<double>(t->stats().announces); });
  reg_.counter_fn("shoal_tracker_bad_announces_total", "Announces refused as malformed.",
                  [t] { return static_cast<double>(t->stats().bad_announces); });
  reg_.gauge_fn("shoal_tracker_swarms", "Swarms known.", [t] { return static_cast<double>(t->stats().swarms); });
  reg_.gauge_fn("shoal_tracker_peers", "Peer entries across swarms.", [t] { return static_cast<double>(t->stats().peers); });
  reg_.gauge_fn("shoal_scheduler_nodes", "Nodes that sent a heartbeat.", [this] {
    std::lock_guard lk(mu_);
    return static_cast<double>(nodes_.size());
  });

  auto so = daemon::server_options_from(cfg_.http, "shoal-scheduler");
  server_ = std::make_unique<http::server>(rt_.io(), so, [this](http::request&& r, http::responder resp) {
    handle(std::move(r), std::move(resp));
  });
  auto hp = http::split_host_port(cfg_.http.listen);
  if (!hp) return fail(hp.error().wrap("http.listen"));
  if (auto s = server_->listen(hp->first, hp->second); !s) return fail(s.error());
  log::info("scheduler listening", log::kv("address", cfg_.http.listen), log::kv("port", server_->port()),
            log::kv("epoch", epoch_));
  return {};
}

void app::handle(http::request&& req, http::responder resp) {
  auto health = [] { return daemon::health{}; };
  if (daemon::serve_ops(req, resp, reg_, health)) return;
  if (req.path == "/announce") return resp.send(tracker_->handle(req));
  if (req.path == "/v1/heartbeat") {
    if (req.method != http::verb::post) return resp.send(http::response::json(405, R"({"error":"use POST"})"));
    return resp.send(on_heartbeat(req));
  }
  if (req.path == "/v1/nodes") return resp.send(nodes_json());
  resp.send(http::response::json(404, R"({"error":"no such endpoint"})"));
}

http::response app::on_heartbeat(const http::request& req) {
  auto m = heartbeat::decode(req.body);
  if (!m) {
    bad_heartbeats_->inc();
    nlohmann::json e = {{"error", m.error().message}};
    return http::response::json(400, e.dump());
  }
  std::string ip = m->ip.empty() ? req.remote.address().to_string() : m->ip;
  std::vector<std::array<std::uint8_t, 20>> hashes;
  hashes.reserve(m->objects.size());
  for (const auto& o : m->objects) {
    if (!o.info_hash.empty()) hashes.push_back(parse_ih(o.info_hash));
  }
  std::string zone = m->labels.count("zone") ? m->labels.at("zone") : "";
  std::string rack = m->labels.count("rack") ? m->labels.at("rack") : "";
  if (m->bt_port != 0) tracker_->set_holdings(m->node, ip, m->bt_port, zone, rack, hashes, m->full);
  heartbeat::reply r;
  r.epoch = epoch_;
  r.ack_seq = m->seq;
  r.resync = m->epoch != epoch_ && !m->full;
  {
    std::lock_guard lk(mu_);
    auto& n = nodes_[m->node];
    n.last = std::move(*m);
    n.seen = std::chrono::steady_clock::now();
  }
  heartbeats_->inc();
  return http::response::json(200, heartbeat::encode(r));
}

http::response app::nodes_json() const {
  nlohmann::json out = nlohmann::json::array();
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  for (const auto& [name, n] : nodes_) {
    double age = std::chrono::duration<double>(now - n.seen).count();
    out.push_back({{"node", name},
                   {"labels", n.last.labels},
                   {"ip", n.last.ip},
                   {"bt_port", n.last.bt_port},
                   {"objects", n.last.objects.size()},
                   {"cache_used", n.last.cache_used},
                   {"cache_capacity", n.last.cache_capacity},
                   {"last_seen_s", age},
                   {"healthy", age < std::chrono::duration<double>(cfg_.node_timeout.get()).count()}});
  }
  return http::response::json(200, out.dump());
}

int app::run() {
  rt_.run([this] { server_->stop(std::chrono::milliseconds(2000)); }, std::chrono::seconds(3),
          [this] { return server_->connections() == 0; });
  return 0;
}

void app::stop() { rt_.stop(); }

}  // namespace shoal::scheduler
