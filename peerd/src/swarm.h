#pragma once
// peerd's swarm: one libtorrent session where objects are downloaded (pieces in whatever order
// suits the swarm, with deadlines near each local reader's position) and seeded afterwards.
//
// Downloads live in a partial directory on the cache's filesystem. When every piece has passed
// its hash, the file is moved into the cache's object directory and adopted (the cache verifies
// the object's sha256 before it becomes visible), and the torrent keeps seeding from there.
//
// Seeds are not kept loaded forever: after `seed_idle_unload` without peers, or beyond
// `max_loaded_torrents` (least recently used first), a seed is unloaded. Any node still holds
// the object, reports it to the scheduler (holdings), and when a peer connects for an unloaded
// info-hash, the torrent is loaded on the spot (libtorrent's on_unknown_torrent plugin hook) in
// seed mode without trusted pieces: each piece is verified on its first upload, so an object
// corrupted on disk is detected, never sent, and quarantined.
//
// If the swarm stalls (no piece for `stall_timeout`), missing pieces are fetched from
// registry-proxy over HTTP with Range and injected with add_piece (libtorrent checks their
// hashes too). If nothing arrives from any source for `fallback_deadline`, the download fails
// and the local readers get an error (containerd then tries its next host).
//
// Threading: libtorrent's network thread, our alert pump thread, and a monitor thread; public
// methods are thread-safe.

#include <boost/asio/thread_pool.hpp>
#include <libtorrent/fwd.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/http_client.h"
#include "swarm/metainfo.h"
#include "swarm/swarm.h"
#include "config.h"
#include "state_db.h"

namespace shoal::peerd {

using piece_buffer = std::shared_ptr<const std::string>;

// Where bytes came from, for status and the demo report.
struct source_counters {
  std::atomic<std::uint64_t> from_origin{0};    // BitTorrent blocks from registry-proxy
  std::atomic<std::uint64_t> from_peers{0};     // BitTorrent blocks from other nodes
  std::atomic<std::uint64_t> from_http{0};      // HTTP fallback ranges from registry-proxy
  std::atomic<std::uint64_t> served_local{0};   // bytes served to local clients
  std::atomic<std::uint64_t> uploaded{0};       // payload uploaded to peers (session total)
  std::atomic<std::uint64_t> hash_failures{0};  // pieces rejected (bad data from a peer or HTTP)
  std::atomic<std::uint64_t> quarantined{0};    // local objects found corrupt while seeding
  std::atomic<std::uint64_t> fallbacks{0};      // HTTP fallback ranges fetched
  std::atomic<std::uint64_t> downloads_ok{0}, downloads_failed{0};
};

// How to fetch ranges of the object from registry-proxy when the swarm stalls.
struct fallback_info {
  std::string url;            // full blob URL on registry-proxy (with ns=)
  std::string authorization;  // the client's Authorization header, if any
  std::uint64_t offset = 0;   // where the object starts inside `url` (a chunk of a larger blob)
};

class swarm_manager;

class download : public std::enable_shared_from_this<download> {
 public:
  enum class state { running, complete, failed };

  download(const digest& d, object_metainfo m, std::string partial_dir)
      : id_(d),
        meta_(std::move(m)),
        partial_dir_(std::move(partial_dir)),
        have_(meta_.piece_count(), false) {}

  [[nodiscard]] const digest& id() const { return id_; }
  [[nodiscard]] const object_metainfo& meta() const { return meta_; }
  [[nodiscard]] state current() const;
  [[nodiscard]] std::optional<error> failure() const;
  [[nodiscard]] std::uint32_t pieces_done() const;
  // The complete object's file (the cache's, or the partial file of a transient download), empty
  // before completion: only then are all its bytes in a file (a piece that passed its hash may
  // still sit in libtorrent's store buffer).
  [[nodiscard]] std::string complete_path() const;
  // Blocks until the download is complete or failed, or `timeout` passed; returns the state.
  [[nodiscard]] state wait_done(std::chrono::steady_clock::duration timeout) const;
  [[nodiscard]] bool transient() const { return transient_; }

  // Delivers the verified bytes of piece `i` once it exists (or an error), on some internal
  // thread; keep the callback short. Also tells the swarm a local reader needs this piece soon.
  void read_piece(std::uint32_t i, std::function<void(result<piece_buffer>)> cb);

 private:
  friend class swarm_manager;
  using piece_cb = std::function<void(result<piece_buffer>)>;

  digest id_;
  object_metainfo meta_;
  std::string partial_dir_;
  swarm_manager* mgr_ = nullptr;
  lt::torrent_handle h_;
  fallback_info fallback_;
  std::string torrent_;
  // A transient download (a chunk of a larger blob, chunked.h) is not committed to the cache:
  // every piece passed its SHA-1 and the blob it belongs to is verified whole, so the file stays
  // in the partial directory, is seeded from there while wanted and deleted when unloaded.
  bool transient_ = false;

  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;  // notified when st_ leaves running
  state st_ = state::running;
  std::optional<error> err_;
  std::vector<bool> have_;
  std::uint32_t done_ = 0;
  std::map<std::uint32_t, std::vector<piece_cb>> waiting_;  // piece not finished yet
  std::map<std::uint32_t, std::vector<piece_cb>> reading_;  // read_piece issued
  std::string object_path_;                                 // once complete
  // last_progress_: the last piece that passed its hash (stall and deadline are measured from it).
  std::chrono::steady_clock::time_point started_, last_progress_;
  bool fallback_inflight_ = false;
  // Once the swarm has stalled, HTTP ranges follow each other without another stall_timeout
  // while each range verifies and no peer delivers a block; a peer block ends the chain.
  bool fallback_chain_ = false;
  std::chrono::steady_clock::time_point fallback_started_, last_peer_block_;
  std::uint32_t cursor_ = 0;  // lowest piece a reader waits for
};

class swarm_manager {
 public:
  struct deps {
    cache::store& store;
    state_db& state;
    http::client& http;
    boost::asio::thread_pool& pool;
  };
  [[nodiscard]] static result<std::unique_ptr<swarm_manager>> start(
      const swarm_config& cfg, const node_config& node, const std::string& scheduler_url, deps d);
  ~swarm_manager();
  swarm_manager(const swarm_manager&) = delete;
  swarm_manager& operator=(const swarm_manager&) = delete;

  // Starts, or joins, the download of an object. `seeds` are endpoints to connect to at once
  // (registry-proxy's Shoal-Seed), in addition to the tracker's answers.
  [[nodiscard]] result<std::shared_ptr<download>> fetch(const digest& d, const std::string& torrent,
                                                        const object_metainfo& m,
                                                        const std::vector<std::string>& seeds,
                                                        fallback_info fb, bool transient = false);
  [[nodiscard]] std::shared_ptr<download> find(const digest& d) const;

  // Info-hashes of every complete object held here (for the scheduler's holder index).
  [[nodiscard]] std::vector<std::pair<digest, std::string>> holdings() const;
  [[nodiscard]] const source_counters& counters() const { return counters_; }
  [[nodiscard]] source_counters& counters_mut() { return counters_; }
  [[nodiscard]] std::size_t active_downloads() const;
  [[nodiscard]] std::size_t loaded_torrents() const;
  // JSON-ready snapshot of active downloads: digest, pieces done/total, rate.
  struct download_status {
    digest id;
    std::uint32_t done = 0, total = 0;
    std::uint64_t size = 0;
    int peers = 0;
    std::int64_t download_rate = 0, upload_rate = 0;
  };
  [[nodiscard]] std::vector<download_status> status() const;
  [[nodiscard]] std::uint16_t listen_port() const { return ses_ ? ses_->listen_port() : 0; }
  [[nodiscard]] std::string endpoint() const;
  void stop();

  [[nodiscard]] boost::asio::thread_pool& pool() { return d_.pool; }
  [[nodiscard]] int streaming_window() const { return cfg_.streaming_window; }

  // Dataset groups (group_swarm.h) share this session. Their hooks see every alert first (and
  // return true for the alerts of their own torrents) and may load a torrent a peer asks for
  // before the object table is consulted. Set once, before the session carries traffic.
  struct extension {
    std::function<bool(lt::alert*)> on_alert;
    std::function<bool(const lt::sha1_hash&, lt::add_torrent_params&)> on_unknown_torrent;
    // A block arrived from a peer (network thread; compare handles, no sync libtorrent calls).
    // Returns true when the torrent is the extension's.
    std::function<bool(const lt::torrent_handle&, bool from_origin, std::size_t bytes)> on_block;
  };
  void set_extension(extension e);
  [[nodiscard]] lt::session& session_for_extension() { return ses_->raw(); }
  [[nodiscard]] std::vector<std::string> tracker_urls() const { return trackers(); }
  [[nodiscard]] const swarm_config& config() const { return cfg_; }

  // Internal (plugin and download callbacks).
  bool prepare_on_demand(const lt::sha1_hash& ih, lt::add_torrent_params& p);
  // A block arrived from a peer (network thread).
  void on_block(const lt::torrent_handle& th, bool from_origin, std::size_t bytes);
  void request_piece(const std::shared_ptr<download>& dl, std::uint32_t piece);

 private:
  swarm_manager(const swarm_config& cfg, const node_config& node, std::string scheduler_url, deps d)
      : cfg_(cfg), node_(node), scheduler_(std::move(scheduler_url)), d_(d) {}
  void on_alert(lt::alert* a);
  void on_piece_finished(lt::piece_finished_alert* pf);
  void on_read_piece(lt::read_piece_alert* rp);
  void on_torrent_finished(lt::torrent_finished_alert* tf);
  // A seed that goes back to checking or downloading has left seed mode (a corrupt piece).
  void on_state_changed(lt::state_changed_alert* sc);
  void on_hash_failed(lt::hash_failed_alert* hf);
  void on_torrent_failure(const std::string& ih, const std::string& why);
  void on_torrent_added(lt::add_torrent_alert* at);
  // The object a seed of this info-hash serves, if it is one.
  [[nodiscard]] std::optional<digest> seed_digest(const std::string& ih) const;
  void monitor();
  void complete(const std::shared_ptr<download>& dl);
  void complete_transient(const std::shared_ptr<download>& dl);
  // Marks `dl` complete with its bytes at `path`, moves it from the downloads to the seeds (a
  // transient one with the file to delete when it is unloaded) and serves its waiting readers
  // from the file. With `only_running`, false (and nothing done) when it had already ended.
  bool settle_complete(const std::shared_ptr<download>& dl, const std::string& path,
                       bool only_running, std::string transient_file);
  void fail(const std::shared_ptr<download>& dl, error e);
  void start_fallback(const std::shared_ptr<download>& dl);
  void quarantine(const digest& d, const std::string& why);
  void touch_seed(const std::string& ih, const digest& d, lt::torrent_handle h);
  std::vector<std::string> trackers() const;
  std::shared_ptr<download> by_hash(const std::string& ih) const;
  std::shared_ptr<download> by_alert(const lt::torrent_alert* a) const;

  swarm_config cfg_;
  node_config node_;
  std::string scheduler_;
  deps d_;
  std::unique_ptr<swarm::session> ses_;
  source_counters counters_;

  mutable std::mutex mu_;
  std::map<digest, std::shared_ptr<download>> downloads_;   // running
  std::map<std::string, std::shared_ptr<download>> by_ih_;  // running, by info-hash hex
  struct seed_entry {
    digest id;
    lt::torrent_handle h;
    std::chrono::steady_clock::time_point last_used;
    std::list<std::string>::iterator lru;
    bool lazy = false;           // loaded on demand: pieces verified on first upload
    std::string transient_file;  // deleted once unloaded (transient downloads)
  };
  std::map<std::string, seed_entry> seeds_;  // by info-hash hex
  std::list<std::string> lru_;

  std::mutex ext_mu_;
  std::shared_ptr<const extension> ext_;

  std::thread monitor_;
  std::atomic<bool> stop_{false};
  std::mutex mon_mu_;
  std::condition_variable mon_cv_;
};

}  // namespace shoal::peerd
