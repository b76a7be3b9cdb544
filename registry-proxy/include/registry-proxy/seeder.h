#pragma once
// The origin seed: every committed object can be seeded from the cache file itself (no copy, no
// rehash). Seeding everything forever would load thousands of torrents into one session, which
// libtorrent handles badly, so torrents are loaded on demand (when an object is committed, and
// whenever its metainfo is served: someone is about to join its swarm), kept while peers use
// them, and unloaded after `idle_unload` or when more than `max_loaded` are loaded (least
// recently used first). A loaded object is pinned in the cache so eviction never pulls a file
// from under libtorrent.

#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "swarm/metainfo.h"
#include "swarm/swarm.h"
#include "registry-proxy/config.h"
#include "registry-proxy/state_db.h"

namespace shoal::proxy {

class seeder {
 public:
  // With `tls.enabled` every torrent is an SSL torrent rooted at the cluster CA (the process's
  // metainfo roots, swarm::enable_members_only, must be set first), served on SSL sockets only
  // with registry-proxy's certificate (swarm/swarm.h). During a CA rotation (a second swarm
  // certificate, tls.swarm_extra_cert_file) every object is seeded under each root the session
  // holds a certificate for: one torrent per root, loaded and unloaded together.
  [[nodiscard]] static result<std::unique_ptr<seeder>> start(const torrent_config& cfg,
                                                             cache::store& store, state_db& st,
                                                             const tls::tls_config& tls = {});
  ~seeder();
  seeder(const seeder&) = delete;
  seeder& operator=(const seeder&) = delete;

  // Loads (or refreshes) the torrent of a committed object. Blocking; worker threads only.
  void seed(const digest& d, const object_metainfo& m);
  // Loads it from the stored metainfo, if the object is here.
  void seed(const digest& d);
  void unload(const digest& d);
  void stop();

  // Dataset packs (datasets.h): several small objects in one multi-file torrent, seeded from the
  // cache's objects directory. `key` is the pack's identity (dataset::pack_key). Every member is
  // pinned while the pack is loaded; packs follow the same idle and LRU rules as objects (their
  // own count, also bounded by max_loaded_torrents). Blocking; worker threads only.
  void seed_pack(const digest& key, const pack_metainfo& m);
  [[nodiscard]] std::size_t loaded_packs() const;

  // "ip:port" peers can connect to (the announce_ip or listen address, with the bound port).
  [[nodiscard]] std::string endpoint() const;
  [[nodiscard]] std::size_t loaded() const;
  [[nodiscard]] std::uint64_t uploaded_bytes() const { return uploaded_.load(); }
  // What super seeding did (swarm::superseed_counters): offers, and payload sent twice.
  [[nodiscard]] const swarm::superseed_counters& superseed() const { return *superseed_; }
  [[nodiscard]] std::vector<std::string> trackers() const;
  [[nodiscard]] const swarm::session& session() const { return *ses_; }

 private:
  seeder(torrent_config cfg, cache::store& store, state_db& st)
      : cfg_(std::move(cfg)), store_(store), st_(st) {}
  void sweep();
  void sweep_packs();
  void unload_pack_locked(const digest& key, std::vector<digest>& unpin);
  // Seeds `m`'s object under every root of the session but m's own (a CA rotation); the
  // handles added. Under load_mu_.
  std::vector<lt::torrent_handle> seed_other_roots(const digest& d, const object_metainfo& m);

  struct entry {
    lt::torrent_handle h;
    std::vector<lt::torrent_handle> other_roots;  // the same object under the other roots
    std::chrono::steady_clock::time_point last_used;
    std::list<digest>::iterator lru;
  };
  // Removes every torrent of a loaded object (one per root). Under mu_.
  void remove_locked(const entry& e);

  torrent_config cfg_;
  cache::store& store_;
  state_db& st_;
  std::unique_ptr<swarm::session> ses_;
  // Serializes loading. Two loaders of one object (its commit and a metainfo request arrive
  // together) would both reach add_seed(), and libtorrent hands the second the first one's
  // handle for the same info-hash: the loser must never remove() it.
  std::mutex load_mu_;
  mutable std::mutex mu_;
  std::map<digest, entry> loaded_;
  std::list<digest> lru_;  // front: most recently used
  std::atomic<std::uint64_t> uploaded_{0};
  std::shared_ptr<swarm::superseed_counters> superseed_ =
      std::make_shared<swarm::superseed_counters>();
  struct pack_entry {
    lt::torrent_handle h;
    std::chrono::steady_clock::time_point last_used;
    std::vector<digest> members;
  };
  std::map<digest, pack_entry> packs_;  // guarded by mu_, by pack key
  std::thread sweeper_;
  std::atomic<bool> stop_{false};
  std::mutex sweep_mu_;
  std::condition_variable sweep_cv_;
};

}  // namespace shoal::proxy
