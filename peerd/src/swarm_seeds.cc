// swarm_manager's seed table (swarm.h): every loaded seed (objects, transient chunks, dataset
// groups) in one table with one LRU bound (max_loaded_torrents) and one idle-unload rule
// (seed_idle_unload without a peer served); seeds loaded on demand when a peer asks for an
// unloaded info-hash; corrupt objects quarantined.
#include <libtorrent/add_torrent_params.hpp>
#include <libtorrent/torrent_info.hpp>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <filesystem>

#include "common/log.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

namespace net = boost::asio;

cache::clock::time_point swarm_manager::pin_expiry() const {
  return cache::clock::now() +
         std::chrono::duration_cast<std::chrono::seconds>(cfg_.seed_idle_unload.get()) * 3;
}

void swarm_manager::put_seed_locked(const std::string& ih, seed_entry e, unloaded& out) {
  if (auto it = seeds_.find(ih); it != seeds_.end()) erase_seed_locked(it, nullptr);
  lru_.push_front(ih);
  e.lru = lru_.begin();
  e.last_used = steady::now();
  seeds_[ih] = std::move(e);
  while (seeds_.size() > static_cast<std::size_t>(cfg_.max_loaded_torrents)) {
    auto victim = seeds_.find(lru_.back());
    erase_seed_locked(victim, &out);
  }
}

void swarm_manager::erase_seed_locked(std::map<std::string, seed_entry>::iterator it,
                                      unloaded* out) {
  if (out) {
    if (it->second.h.is_valid()) out->handles.push_back(it->second.h);
    if (!it->second.transient_file.empty()) out->files.push_back(it->second.transient_file);
  }
  lru_.erase(it->second.lru);
  seeds_.erase(it);
}

void swarm_manager::unload(const unloaded& u) {
  for (const auto& h : u.handles) ses_->remove(h);
  for (const auto& f : u.files) {
    std::error_code ec;
    std::filesystem::remove(f, ec);
  }
}

// A seed in use (an on-demand load, a group asked for again): most recently used; a new one is
// recorded as loaded on demand.
void swarm_manager::touch_seed(const std::string& ih, const digest& d, lt::torrent_handle h) {
  unloaded evicted;
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    if (it != seeds_.end()) {
      it->second.last_used = steady::now();
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    seed_entry e;
    e.id = d;
    e.h = h;
    e.lazy = true;
    put_seed_locked(ih, std::move(e), evicted);
  }
  unload(evicted);
}

// Every 5 s (monitor thread): seeds nobody used for seed_idle_unload are unloaded; the pins of
// the cache objects kept are extended once per seed_idle_unload (a pin lasts three: it always has
// two left). Each extension is a synced index write (renew_pin), so not every 5 s, and never for
// a chunk, whose file is not a cache object.
void swarm_manager::sweep_seeds(steady::time_point now) {
  auto idle = std::chrono::duration_cast<steady::duration>(cfg_.seed_idle_unload.get());
  std::vector<std::pair<std::string, lt::torrent_handle>> snap;
  {
    std::lock_guard g(mu_);
    for (auto& [ih, s] : seeds_) {
      if (s.h.is_valid()) snap.emplace_back(ih, s.h);  // not a group seed being added
    }
  }
  unloaded drop;
  std::vector<digest> keep;
  const auto in_use = swarm::serving_peers(ses_->raw());
  for (auto& [ih, h] : snap) {
    const bool serving = std::binary_search(in_use.begin(), in_use.end(), h);
    std::lock_guard g(mu_);
    auto it = seeds_.find(ih);
    if (it == seeds_.end()) continue;
    if (serving) it->second.last_used = now;
    if (now - it->second.last_used > idle) {
      erase_seed_locked(it, &drop);
    } else if (it->second.type == transfer::kind::object && now - it->second.pin_renewed >= idle) {
      it->second.pin_renewed = now;
      keep.push_back(it->second.id);
    }
  }
  unload(drop);
  auto expiry = pin_expiry();
  for (const auto& d : keep) (void)d_.store.renew_pin(d, "swarm", expiry);
}

std::string swarm_manager::transient_file_of(const digest& d) const {
  std::lock_guard lk(mu_);
  for (const auto& [ih, e] : seeds_) {
    if (e.id == d && !e.transient_file.empty()) return e.transient_file;
  }
  return {};
}

std::optional<digest> swarm_manager::seed_digest(const std::string& ih) const {
  std::lock_guard lk(mu_);
  auto it = seeds_.find(ih);
  if (it == seeds_.end() || it->second.type == transfer::kind::group) return std::nullopt;
  return it->second.id;
}

void swarm_manager::quarantine(const digest& d, const std::string& why) {
  counters_.quarantined.fetch_add(1);
  log::error("held object is corrupt; quarantining it", log::kv("digest", d.str()),
             log::kv("reason", why));
  unloaded u;
  {
    std::lock_guard lk(mu_);
    // Every seed of the object: one per swarm root during a CA rotation.
    for (auto it = seeds_.begin(); it != seeds_.end();) {
      auto next = std::next(it);
      if (it->second.type != transfer::kind::group && it->second.id == d) {
        u.handles.push_back(it->second.h);
        erase_seed_locked(it, nullptr);
      }
      it = next;
    }
  }
  unload(u);
  net::post(d_.pool, [this, d] {
    (void)d_.store.unpin(d, "swarm");
    auto st = d_.store.verify(d);
    if (st) {
      log::warn("object verified intact after a failed piece; keeping it",
                log::kv("digest", d.str()));
      return;
    }
    log::error("object quarantined", log::kv("digest", d.str()),
               log::kv("error", st.error().message));
    (void)d_.state.forget(d);
  });
}

// On-demand loading of an unknown info-hash, in one place: a dataset pack held here (its torrent
// under <dir>/packs), else an object of the object table.
bool swarm_manager::prepare_on_demand(const lt::sha1_hash& h, lt::add_torrent_params& p) {
  if (stop_.load()) return false;
  std::string ih = swarm::hash_hex(h);
  if (prepare_pack_on_demand(ih, p)) return true;
  auto d = d_.state.by_info_hash(ih);
  return d && held_seed_params(*d, p);
}

bool swarm_manager::held_seed_params(const digest& d, lt::add_torrent_params& p) {
  if (!d_.store.contains(d)) return false;
  auto t = d_.state.torrent(d);
  if (!t) return false;
  auto ti = parse_torrent(*t);
  if (!ti) return false;
  p.ti = ti;
  p.save_path = d_.store.shard_dir(d);
  // Seed mode without trusted pieces: each piece is hashed before its first upload.
  p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
            lt::torrent_flags::override_trackers;
  p.trackers = trackers();
  return true;
}

void swarm_manager::load_seed(const digest& d, bool trusted) {
  if (stop_.load() || !ses_) return;
  lt::add_torrent_params p;
  if (!held_seed_params(d, p)) return;
  if (trusted) swarm::trust_all_pieces(p);
  std::string ih = swarm::hash_hex(p.ti->info_hashes().v1);
  {
    std::lock_guard lk(mu_);
    if (seeds_.count(ih)) return;
  }
  if (by_hash(ih)) return;
  // As an on-demand load; on_torrent_added enters it in the seed table (idle unload, LRU) and
  // pins the object, and tells the two apart in its log line by loading_.
  p.flags |= lt::torrent_flags::duplicate_is_error;
  {
    std::lock_guard lk(mu_);
    loading_.insert(ih);
  }
  lt::error_code ec;
  (void)ses_->add_torrent(std::move(p), ec);
  if (ec) {
    std::lock_guard lk(mu_);
    loading_.erase(ih);
  }
  if (ec && ec != lt::errors::duplicate_torrent)
    log::warn("cannot load a seed", log::kv("digest", d.str()), log::kv("error", ec.message()));
  if (auto t = d_.state.torrent(d)) seed_other_roots(d, *t, trusted);
}

void swarm_manager::seed_other_roots(const digest& d, const std::string& torrent, bool trusted) {
  if (stop_.load() || !ses_) return;
  auto roots = ses_->roots();
  if (roots.size() < 2) return;
  auto m = object_metainfo::parse(torrent, d);
  if (!m) return;
  for (const auto& root : roots) {
    if (root == m->ssl_cert) continue;
    object_metainfo other = *m;
    other.ssl_cert = root;
    std::string ih = other.info_hash_hex();
    {
      std::lock_guard lk(mu_);
      if (seeds_.count(ih) || jobs_.count(ih)) continue;
    }
    lt::add_torrent_params p;
    p.ti = parse_torrent(other.torrent_file({}));
    if (!p.ti) continue;
    p.save_path = d_.store.shard_dir(d);
    p.flags = lt::torrent_flags::seed_mode | lt::torrent_flags::update_subscribe |
              lt::torrent_flags::override_trackers | lt::torrent_flags::duplicate_is_error;
    p.trackers = trackers();
    // The same bytes and piece hashes as the torrent that just verified them.
    if (trusted) swarm::trust_all_pieces(p);
    lt::error_code ec;
    auto h = ses_->add_torrent(std::move(p), ec);
    if (ec) {
      if (ec != lt::errors::duplicate_torrent)
        log::warn("cannot seed under another root", log::kv("digest", d.str()),
                  log::kv("error", ec.message()));
      continue;
    }
    unloaded evicted;
    {
      std::lock_guard lk(mu_);
      seed_entry e;
      e.id = d;
      e.h = h;
      e.lazy = !trusted;
      put_seed_locked(ih, std::move(e), evicted);
    }
    unload(evicted);
    log::info("seeding under another root", log::kv("digest", d.str()), log::kv("info_hash", ih));
  }
}

std::vector<std::pair<digest, std::string>> swarm_manager::info_hashes() const {
  return d_.state.all();
}

std::uint64_t swarm_manager::holdings_generation() const noexcept { return d_.state.generation(); }

}  // namespace shoal::peerd
