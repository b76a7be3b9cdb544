#include "peerd/heartbeat_sender.h"

#include "peerd/health.h"

#include <algorithm>

#include "common/log.h"
#include "common/platform.h"
#include "common/thread_name.h"
#include "prewarm.h"
#include "scheduler_link.h"

namespace shoal::peerd {

heartbeat_sender::heartbeat_sender(deps d) : d_(std::move(d)), platform_(oci::host_platform()) {
  if (!d_.cfg.node.netsetup_report.empty())
    report_ = std::make_unique<netsetup_report>(d_.cfg.node.netsetup_report);
  for (const auto& u : scheduler_urls(d_.cfg.upstream)) url_ += (url_.empty() ? "" : ",") + u;
}

heartbeat_sender::~heartbeat_sender() { stop(); }

void heartbeat_sender::start() {
  thread_ = std::thread([this] {
    name_this_thread("heartbeat");
    loop();
  });
}

void heartbeat_sender::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void heartbeat_sender::poke() {
  {
    std::lock_guard lk(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

heartbeat::message heartbeat_sender::build_message() {
  const auto& node = d_.cfg.node;
  heartbeat::message m;
  m.node = node.name;
  m.labels = node.labels;
  if (!m.labels.count("platform")) m.labels["platform"] = platform_;
  if (!node.zone.empty()) m.labels["zone"] = node.zone;
  if (!node.rack.empty()) m.labels["rack"] = node.rack;
  if (!node.fabric.empty()) m.labels["fabric"] = node.fabric;
  for (const auto& g : node.gpus) {
    if (g.count > 0) m.gpus.push_back({g.model, static_cast<std::uint32_t>(g.count)});
  }
  auto ep = d_.swarm.endpoint();
  m.ip = ep.substr(0, ep.rfind(':'));
  m.bt_port = d_.swarm.listen_port();
  m.http_port = d_.http_port ? d_.http_port() : 0;
  if (report_) {
    const auto& r = report_->current();
    if (r.ok) {
      m.netsetup = r.text;
    } else {
      m.health = "degraded";
      m.health_reasons.push_back(r.reason);
    }
  }
  if (d_.health) {
    auto h = d_.health->current();
    health_verdict mine{m.health, m.health_reasons};
    merge_health(mine, h);
    m.health = mine.state;
    m.health_reasons = std::move(mine.reasons);
    if (m.health_reasons.size() > 32) m.health_reasons.resize(32);
    for (auto& r : m.health_reasons) {
      if (r.size() > 500) r = r.substr(0, 497) + "...";  // the schema's bound is 512 bytes
    }
  }
  auto cs = d_.store.get_stats();
  m.cache_capacity = cs.capacity_bytes;
  m.cache_used = cs.bytes;
  // Prewarm reports before the holdings: an order reported done has its objects listed below.
  if (d_.prewarm) m.orders = d_.prewarm->reports();
  if (d_.datasets) m.datasets = d_.datasets();
  if (d_.checkpoints) m.checkpoints = d_.checkpoints();
  if (d_.pods) {
    if (auto pods = d_.pods()) {
      m.pods_known = true;
      m.pods = std::move(*pods);
    }
  }

  m.epoch = epoch_;
  m.seq = seq_ + 1;
  m.full = need_full_;
  // A document the scheduler already holds is not sent again (22 KB for an 8-NIC node, every
  // interval); a full message always carries it.
  if (!m.full && keeps_netsetup_ && !m.netsetup.empty() && m.netsetup == acked_netsetup_) {
    m.netsetup.clear();
    m.netsetup_unchanged = true;
  }
  // Generations first, then the lists: a change in between is in the lists and moves the
  // generation, so the next message walks again (never the other way round).
  const generations gen{d_.store.held_generation(), d_.swarm.holdings_generation()};
  built_gen_ = gen;
  built_seq_ = m.seq;
  if (!m.full && acked_gen_ && *acked_gen_ == gen) return m;  // nothing held changed
  ++walks_;
  // Both lists sorted by digest, then merged with acked_ (sorted too): no map of every object.
  auto hashes = d_.swarm.info_hashes();  // sorted (the state index's map order)
  auto held = d_.store.list_held();
  std::sort(held.begin(), held.end(),
            [](const cache::held_info& a, const cache::held_info& b) { return a.id < b.id; });
  auto h = hashes.begin();
  auto object_of = [&](const cache::held_info& info) {
    heartbeat::held_object o;
    o.id = info.id;
    o.size = info.size;
    o.kind = std::string(cache::to_string(info.kind));
    while (h != hashes.end() && h->first < info.id) ++h;
    if (h != hashes.end() && h->first == info.id) o.info_hash = std::move(h->second);
    return o;
  };
  if (m.full) {
    m.objects.reserve(held.size());
    for (const auto& info : held) m.objects.push_back(object_of(info));
    return m;
  }
  auto a = acked_.begin();
  for (const auto& info : held) {
    for (; a != acked_.end() && a->first < info.id; ++a) m.removed.push_back(a->first);
    auto o = object_of(info);
    const bool same = a != acked_.end() && a->first == info.id && a->second == o.info_hash;
    if (a != acked_.end() && a->first == info.id) ++a;
    if (!same) m.objects.push_back(std::move(o));
  }
  for (; a != acked_.end(); ++a) m.removed.push_back(a->first);
  return m;
}

bool heartbeat_sender::on_reply(const heartbeat::message& sent, const result<heartbeat::reply>& r) {
  seq_ = sent.seq;
  // acked_ matches the generations read for this message only if it was the one built last
  // and is applied below; anything else walks again.
  const std::optional<generations> gen =
      sent.seq == built_seq_ ? std::optional<generations>(built_gen_) : std::nullopt;
  acked_gen_.reset();
  if (!r) {
    // The scheduler may or may not have applied it: only a full list is safe next.
    need_full_ = true;
    return false;
  }
  bool new_epoch = !r->epoch.empty() && r->epoch != epoch_;
  epoch_ = r->epoch;
  if (new_epoch && d_.on_new_epoch) d_.on_new_epoch();
  if (d_.prewarm && !r->orders.empty()) d_.prewarm->submit(r->orders);
  if (r->resync) {
    need_full_ = true;
    return true;
  }
  if (sent.full) acked_.clear();
  if (!sent.netsetup_unchanged) acked_netsetup_ = sent.netsetup;
  keeps_netsetup_ = r->keeps_netsetup;
  for (const auto& o : sent.objects) acked_[o.id] = o.info_hash;
  for (const auto& d : sent.removed) acked_.erase(d);
  need_full_ = false;
  acked_gen_ = gen;
  // A scheduler that does not keep documents (an older replica behind the same address) took
  // the one left out for none: it goes again at once.
  return sent.netsetup_unchanged && !r->keeps_netsetup;
}

result<heartbeat::reply> heartbeat_sender::send(const heartbeat::message& m) {
  if (d_.scheduler == nullptr) return fail(errc::config_error, "no scheduler");
  auto r = d_.scheduler->request("POST", "/v1/heartbeat");
  r.body = heartbeat::encode(m);
  r.headers.emplace_back("Content-Type", "application/json");
  // The last message before a stop must not hold the stop up for long.
  if (m.leaving) {
    r.timeouts.connect = std::min(r.timeouts.connect, std::chrono::milliseconds(1000));
    r.timeouts.stall = std::min(r.timeouts.stall, std::chrono::milliseconds(2000));
  }
  auto f = d_.scheduler->call(std::move(r), 64u << 20);
  if (!f) return fail(f.error());
  if (f->status != 200) {
    return fail(errc::upstream_error, "scheduler answered HTTP " + std::to_string(f->status) +
                                          ": " + f->body.substr(0, 200));
  }
  return heartbeat::decode_reply(f->body);
}

void heartbeat_sender::loop() {
  auto interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.swarm.heartbeat_interval.get());
  bool immediate = true;
  // A refusal (a certificate the scheduler does not take for this node, a CA it does not trust)
  // is logged as a warning once per distinct error, not every interval; other failures (the
  // scheduler restarting) stay at debug.
  std::string warned;
  while (!stop_.load()) {
    if (!immediate) {
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, interval, [&] { return stop_.load() || poked_; });
      poked_ = false;
      if (stop_.load()) break;
    }
    auto m = build_message();
    auto r = send(m);
    if (!r) {
      const auto& msg = r.error().message;
      bool refused =
          msg.find("HTTP 403") != std::string::npos || msg.find("HTTP 400") != std::string::npos ||
          msg.find("SSL") != std::string::npos || msg.find("certificate") != std::string::npos;
      if (refused && msg != warned) {
        warned = msg;
        log::warn("heartbeat refused", log::kv("error", msg), log::kv("url", url_));
      } else {
        log::debug("heartbeat failed", log::kv("error", msg), log::kv("seq", m.seq));
      }
    } else {
      warned.clear();
      if (r->resync) {
        log::info("scheduler asked for a full heartbeat", log::kv("epoch", r->epoch),
                  log::kv("seq", m.seq));
      }
    }
    // A resync is answered at once, but only once in a row: a scheduler refusing even full lists
    // must not make us spin.
    bool again = on_reply(m, r);
    immediate = again && !m.full;
  }
  // A clean stop (SIGTERM: a restart, a rolling update) says so: the scheduler then counts the
  // silence that follows as a restart, within its failover.restart_grace, not as a failure.
  auto m = build_message();
  m.leaving = true;
  if (auto r = send(m); r) {
    log::info("told the scheduler this node is stopping", log::kv("url", url_));
  } else {
    log::info("could not tell the scheduler this node is stopping",
              log::kv("error", r.error().message));
  }
}

}  // namespace shoal::peerd
