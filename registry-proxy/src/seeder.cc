#include "registry-proxy/seeder.h"

#include <libtorrent/alert_types.hpp>
#include <libtorrent/session_stats.hpp>
#include <libtorrent/torrent_status.hpp>

#include "common/log.h"
#include "common/thread_name.h"

namespace shoal::proxy {

result<std::unique_ptr<seeder>> seeder::start(const torrent_config& cfg, cache::store& store,
                                              state_db& st, const tls::tls_config& tls) {
  if (tls.enabled && metainfo_root().empty()) {
    return fail(errc::config_error,
                "seeder: tls is on but no metainfo root is set (swarm::enable_members_only)");
  }
  for (const auto& t : cfg.trackers) {
    if (tls.enabled && !t.starts_with("https://")) {
      log::warn(
          "tls is on but a tracker URL is not https: SSL torrents announce to it in plain "
          "HTTP, which a TLS scheduler refuses",
          log::kv("tracker", t));
    }
  }
  std::unique_ptr<seeder> s(new seeder(cfg, store, st));
  swarm::settings ss;
  swarm::apply_tls(ss, tls);
  ss.listen = cfg.listen;
  ss.connections_limit = cfg.connections_limit;
  ss.upload_rate_limit = cfg.upload_rate_limit.bytes();
  ss.peer_fingerprint = std::string(cfg.super_seeding ? swarm::superseeding_origin_fingerprint
                                                      : swarm::origin_fingerprint);
  ss.libtorrent = cfg.libtorrent;
  ss.require_grants = cfg.require_grants;
  auto ses = swarm::session::start(ss);
  if (!ses) return fail(ses.error());
  s->ses_ = std::move(*ses);
  if (cfg.super_seeding)
    s->ses_->raw().add_extension(swarm::origin_superseed_plugin(
        cfg.superseed_offers, cfg.superseed_in_order, cfg.superseed_max_in_flight, s->superseed_));
  auto* self = s.get();
  static const int sent_idx = lt::find_metric_idx("net.sent_payload_bytes");
  s->ses_->on_alert([self](lt::alert* a) {
    if (auto* st = lt::alert_cast<lt::session_stats_alert>(a)) {
      auto c = st->counters();
      if (sent_idx >= 0)
        self->uploaded_.store(static_cast<std::uint64_t>(c[static_cast<std::size_t>(sent_idx)]));
    }
  });
  s->sweeper_ = std::thread([self] {
    name_this_thread("seed-sweeper");
    std::unique_lock lk(self->sweep_mu_);
    while (!self->stop_.load()) {
      self->sweep_cv_.wait_for(lk, std::chrono::seconds(5));
      if (self->stop_.load()) break;
      lk.unlock();
      self->sweep();
      lk.lock();
    }
  });
  log::info("origin seeder started", log::kv("listen", cfg.listen),
            log::kv("port", s->ses_->listen_port()),
            log::kv("members_only", tls.enabled ? "true (SSL torrents, cluster CA)" : "false"));
  return s;
}

seeder::~seeder() { stop(); }

void seeder::stop() {
  if (stop_.exchange(true)) return;
  sweep_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  std::vector<digest> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [d, e] : loaded_) all.push_back(d);
  }
  for (const auto& d : all) (void)store_.unpin(d, "seeder");
  std::vector<digest> members;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, p] : packs_) members.insert(members.end(), p.members.begin(), p.members.end());
    packs_.clear();
  }
  for (const auto& d : members) (void)store_.unpin(d, "seeder");
  if (ses_) ses_->stop();
}

std::vector<std::string> seeder::trackers() const {
  std::vector<std::string> out;
  for (const auto& t : cfg_.trackers)
    out.push_back(swarm::tracker_url(t, cfg_.node_name, "", "", "origin") +
                  (cfg_.announce_ip.empty() ? "" : "&ip=" + cfg_.announce_ip));
  return out;
}

std::string seeder::endpoint() const {
  std::string host = cfg_.announce_ip;
  if (host.empty()) {
    auto colon = cfg_.listen.rfind(':');
    host = cfg_.listen.substr(0, colon);
  }
  return host + ":" + std::to_string(ses_ ? ses_->listen_port() : 0);
}

std::size_t seeder::loaded() const {
  std::lock_guard lk(mu_);
  return loaded_.size();
}

void seeder::seed(const digest& d) {
  {
    std::lock_guard lk(mu_);
    auto it = loaded_.find(d);
    if (it != loaded_.end()) {
      it->second.last_used = std::chrono::steady_clock::now();
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
  }
  auto t = st_.get_metainfo(d);
  if (!t) return;
  auto m = object_metainfo::parse(*t, d);
  if (!m) return;
  seed(d, *m);
}

void seeder::seed(const digest& d, const object_metainfo& m) {
  if (stop_.load()) return;
  std::lock_guard load(load_mu_);
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    auto it = loaded_.find(d);
    if (it != loaded_.end()) {
      it->second.last_used = now;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
  }
  // Pin first: the file must not be evicted while libtorrent may read it.
  auto expiry = cache::clock::now() +
                std::chrono::duration_cast<std::chrono::seconds>(cfg_.idle_unload.get()) * 3;
  if (!store_.contains(d)) return;
  if (auto p = store_.pin(d, "seeder", expiry); !p) {
    log::debug("not seeding an object that left the cache", log::kv("digest", d.str()),
               log::kv("error", p.error().message));
    return;
  }
  auto h = ses_->add_seed(m, store_.shard_dir(d), trackers());
  std::vector<lt::torrent_handle> others;
  if (h) others = seed_other_roots(d, m);
  if (!h) {
    // Already loaded by a concurrent seed() of the same object: theirs stands, drop our pin.
    if (!h.error().is(errc::already_exists)) {
      log::warn("cannot seed", log::kv("digest", d.str()), log::kv("error", h.error().message));
    }
    (void)store_.unpin(d, "seeder");
    return;
  }
  std::vector<digest> evict;
  {
    std::lock_guard lk(mu_);
    if (loaded_.count(d)) {
      // Unreachable while loads are serialized. The handle is the other loader's torrent (the
      // same info-hash), so only our pin is dropped.
      (void)store_.unpin(d, "seeder");
      return;
    }
    lru_.push_front(d);
    loaded_[d] = entry{*h, std::move(others), now, lru_.begin()};
    while (loaded_.size() > static_cast<std::size_t>(cfg_.max_loaded_torrents)) {
      digest victim = lru_.back();
      evict.push_back(victim);
      auto vit = loaded_.find(victim);
      remove_locked(vit->second);
      lru_.pop_back();
      loaded_.erase(vit);
    }
  }
  for (const auto& v : evict) (void)store_.unpin(v, "seeder");
  log::debug("seeding", log::kv("digest", d.str()), log::kv("info_hash", m.info_hash_hex()));
}

std::vector<lt::torrent_handle> seeder::seed_other_roots(const digest& d,
                                                         const object_metainfo& m) {
  std::vector<lt::torrent_handle> out;
  for (const auto& root : ses_->roots()) {
    if (root == m.ssl_cert) continue;
    object_metainfo other = m;
    other.ssl_cert = root;
    auto h = ses_->add_seed(other, store_.shard_dir(d), trackers());
    if (h) {
      out.push_back(*h);
      log::debug("seeding under another root", log::kv("digest", d.str()),
                 log::kv("info_hash", other.info_hash_hex()));
    } else if (!h.error().is(errc::already_exists)) {
      log::warn("cannot seed under another root", log::kv("digest", d.str()),
                log::kv("error", h.error().message));
    }
  }
  return out;
}

void seeder::remove_locked(const entry& e) {
  ses_->remove(e.h);
  for (const auto& h : e.other_roots) ses_->remove(h);
}

void seeder::unload(const digest& d) {
  {
    std::lock_guard lk(mu_);
    auto it = loaded_.find(d);
    if (it == loaded_.end()) return;
    remove_locked(it->second);
    lru_.erase(it->second.lru);
    loaded_.erase(it);
  }
  (void)store_.unpin(d, "seeder");
}

void seeder::sweep() {
  auto now = std::chrono::steady_clock::now();
  auto idle =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.idle_unload.get());
  std::vector<std::pair<digest, std::vector<lt::torrent_handle>>> snapshot;
  {
    std::lock_guard lk(mu_);
    for (auto& [d, e] : loaded_) {
      snapshot.emplace_back(d, e.other_roots);
      snapshot.back().second.insert(snapshot.back().second.begin(), e.h);
    }
  }
  ses_->raw().post_session_stats();
  std::vector<digest> idle_ones;
  for (auto& [d, hs] : snapshot) {
    if (!hs.front().is_valid()) continue;
    int peers = 0;
    for (const auto& h : hs) {
      if (h.is_valid()) peers += h.status().num_peers;
    }
    std::lock_guard lk(mu_);
    auto it = loaded_.find(d);
    if (it == loaded_.end()) continue;
    if (peers > 0) {
      it->second.last_used = now;
    } else if (now - it->second.last_used > idle) {
      idle_ones.push_back(d);
    }
  }
  for (const auto& d : idle_ones) {
    log::debug("unloading idle torrent", log::kv("digest", d.str()));
    unload(d);
  }
  // Renew pins of what stays loaded.
  std::vector<digest> keep;
  {
    std::lock_guard lk(mu_);
    for (auto& [d, e] : loaded_) keep.push_back(d);
  }
  auto expiry = cache::clock::now() +
                std::chrono::duration_cast<std::chrono::seconds>(cfg_.idle_unload.get()) * 3;
  // pin + unpin extends the expiry and leaves the count (one per loaded torrent) unchanged.
  for (const auto& d : keep) {
    if (store_.pin(d, "seeder", expiry)) (void)store_.unpin(d, "seeder");
  }
  sweep_packs();
}

// ---- dataset packs

std::size_t seeder::loaded_packs() const {
  std::lock_guard lk(mu_);
  return packs_.size();
}

void seeder::seed_pack(const digest& key, const pack_metainfo& m) {
  if (stop_.load()) return;
  std::lock_guard load(load_mu_);
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    auto it = packs_.find(key);
    if (it != packs_.end()) {
      it->second.last_used = now;
      return;
    }
  }
  // Pin every member first: no file may be evicted from under libtorrent.
  auto expiry = cache::clock::now() +
                std::chrono::duration_cast<std::chrono::seconds>(cfg_.idle_unload.get()) * 3;
  std::vector<digest> pinned;
  pinned.reserve(m.files.size());
  for (const auto& [d, size] : m.files) {
    if (!store_.contains(d) || !store_.pin(d, "seeder", expiry)) {
      log::debug("not seeding a pack whose member left the cache", log::kv("member", d.str()));
      for (const auto& p : pinned) (void)store_.unpin(p, "seeder");
      return;
    }
    pinned.push_back(d);
  }
  auto h = ses_->add_pack_seed(m, store_.pack_dir(), trackers());
  if (!h) {
    if (!h.error().is(errc::already_exists)) {
      log::warn("cannot seed a pack", log::kv("pack", key.str()),
                log::kv("error", h.error().message));
    }
    for (const auto& p : pinned) (void)store_.unpin(p, "seeder");
    return;
  }
  std::vector<digest> unpin;
  {
    std::lock_guard lk(mu_);
    packs_[key] = pack_entry{*h, now, std::move(pinned)};
    while (packs_.size() > static_cast<std::size_t>(cfg_.max_loaded_torrents)) {
      auto oldest = packs_.begin();
      for (auto it = packs_.begin(); it != packs_.end(); ++it) {
        if (it->second.last_used < oldest->second.last_used) oldest = it;
      }
      unload_pack_locked(oldest->first, unpin);
    }
  }
  for (const auto& d : unpin) (void)store_.unpin(d, "seeder");
  log::debug("seeding a pack", log::kv("pack", key.str()), log::kv("objects", m.files.size()),
             log::kv("info_hash", m.info_hash_hex()));
}

void seeder::unload_pack_locked(const digest& key, std::vector<digest>& unpin) {
  auto it = packs_.find(key);
  if (it == packs_.end()) return;
  ses_->remove(it->second.h);
  unpin.insert(unpin.end(), it->second.members.begin(), it->second.members.end());
  packs_.erase(it);
}

void seeder::sweep_packs() {
  auto now = std::chrono::steady_clock::now();
  auto idle =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(cfg_.idle_unload.get());
  std::vector<std::pair<digest, lt::torrent_handle>> snapshot;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, p] : packs_) snapshot.emplace_back(k, p.h);
  }
  std::vector<digest> unpin, keep;
  for (auto& [k, h] : snapshot) {
    int peers = h.is_valid() ? h.status().num_peers : 0;
    std::lock_guard lk(mu_);
    auto it = packs_.find(k);
    if (it == packs_.end()) continue;
    if (peers > 0) it->second.last_used = now;
    if (now - it->second.last_used > idle) {
      log::debug("unloading an idle pack", log::kv("pack", k.str()));
      unload_pack_locked(k, unpin);
    } else {
      keep.insert(keep.end(), it->second.members.begin(), it->second.members.end());
    }
  }
  for (const auto& d : unpin) (void)store_.unpin(d, "seeder");
  auto expiry = cache::clock::now() +
                std::chrono::duration_cast<std::chrono::seconds>(cfg_.idle_unload.get()) * 3;
  for (const auto& d : keep) {
    if (store_.pin(d, "seeder", expiry)) (void)store_.unpin(d, "seeder");
  }
}

}  // namespace shoal::proxy
