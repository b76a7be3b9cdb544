#pragma once
// Dataset groups in peerd's swarm: a group is one torrent holding one large object (a single) or
// many small ones (a pack: a multi-file torrent laid out sha256/<hh>/<hex>, exactly the cache's
// object layout). It shares swarm_manager's libtorrent session through its extension hooks.
//
// A download goes into its own directory, <partial_dir>/<info-hash>, which survives restarts:
// adding the same torrent again makes libtorrent check the files already there, so an
// interrupted prefetch resumes with the pieces it had. Members already in the cache get file
// priority 0 (libtorrent keeps bytes of their pieces in its part file, never in the member
// file). When every wanted piece passed its hash, the torrent is removed, every downloaded member
// is adopted into the cache (which verifies its sha256 and renames it into place), the directory
// goes, and the group is added again as a verified seed from the cache's files.
//
// If nothing verifies for `stall_timeout`, the torrent is dropped and the missing members are
// fetched over HTTP from registry-proxy (each straight into the cache, verified). If no byte
// arrives from any source for `fallback_deadline`, the download fails (its partial files stay for
// the next attempt).
//
// Seeds are bounded like swarm_manager's (LRU beyond `max_loaded`, idle unload); a peer asking
// for an unloaded group gets it loaded on demand (single objects through swarm_manager's object
// table, packs from the torrents kept under <dir>/packs).
//
// Threading: public methods are thread-safe; alerts arrive on the session's alert thread;
// finishing and HTTP fallbacks run on the worker pool; a monitor thread watches progress.

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <libtorrent/torrent_info.hpp>

#include "cache/store.h"
#include "common/http_client.h"
#include "state_db.h"
#include "swarm.h"

namespace shoal::peerd {

// A whole file (records, manifests, pack torrents); nullopt when it cannot be opened.
[[nodiscard]] std::optional<std::string> read_file(const std::string& path);

// What a group is, as registry-proxy described it.
struct group_spec {
  std::string torrent;  // .torrent bytes as served (trackers are replaced by ours)
  bool pack = false;
  std::vector<std::pair<digest, std::uint64_t>> objects;  // pack order; a single has one
  std::vector<std::string> seeds;                         // Shoal-Seed endpoints
  std::string fallback_base;  // registry-proxy + origin::dataset_objects_base(<ref>) (+ digest)
  std::string name;           // for logs: "<ref> group <i>"
};

class group_swarm;

class group_download {
 public:
  enum class state { running, complete, failed };
  [[nodiscard]] state current() const;
  [[nodiscard]] std::optional<error> failure() const;
  // Bytes of the group present (members already cached plus verified pieces) and its total.
  [[nodiscard]] std::uint64_t bytes_done() const { return done_.load(); }
  [[nodiscard]] std::uint64_t total() const { return total_; }
  [[nodiscard]] const std::string& info_hash() const { return ih_; }
  // Waits until the download ends or `d` passes; returns the state then.
  state wait_for(std::chrono::milliseconds d) const;

  // Where the bytes came from (payload, this download only).
  std::atomic<std::uint64_t> from_origin{0}, from_peers{0}, from_http{0};

 private:
  friend class group_swarm;
  group_spec spec_;
  std::string ih_;
  std::shared_ptr<const lt::torrent_info> ti_;
  std::string dir_;
  std::uint64_t total_ = 0;
  std::atomic<std::uint64_t> done_{0};
  std::uint64_t present_bytes_ = 0;  // members in the cache before the download

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  state st_ = state::running;
  std::optional<error> err_;
  lt::torrent_handle h_;
  bool finishing_ = false;  // torrent removal requested; adoption follows its alert
  bool fallback_ = false;   // HTTP fallback running or done
  std::chrono::steady_clock::time_point last_progress_;
  std::uint64_t last_done_ = 0;
};

class group_swarm {
 public:
  struct deps {
    cache::store& store;
    state_db& state;
    swarm_manager& swarm;
    http::client& http;
    boost::asio::thread_pool& pool;
  };
  struct options {
    std::string partial_dir;  // downloads in progress (kept across restarts)
    std::string dir;          // <dir>/packs/<info-hash>.torrent: packs this node can seed
    std::chrono::milliseconds stall_timeout{5000};
    std::chrono::milliseconds fallback_deadline{20000};
    std::chrono::milliseconds seed_idle_unload{300000};
    std::size_t max_loaded = 500;
    std::size_t http_parallel = 4;  // members fetched at once by the HTTP fallback
  };
  [[nodiscard]] static result<std::unique_ptr<group_swarm>> start(deps d, options o);
  ~group_swarm();
  group_swarm(const group_swarm&) = delete;
  group_swarm& operator=(const group_swarm&) = delete;
  void stop();

  // Starts (or joins) the download of a group. A group whose members are all cached completes at
  // once (and is loaded as a seed).
  [[nodiscard]] result<std::shared_ptr<group_download>> fetch(group_spec spec);
  [[nodiscard]] std::size_t active() const;
  [[nodiscard]] std::size_t loaded() const;

 private:
  group_swarm(deps d, options o) : d_(d), opts_(std::move(o)) {}
  bool on_alert(lt::alert* a);
  [[nodiscard]] static std::string wanted_info_hash(lt::alert* a);
  [[nodiscard]] static std::optional<std::string> seed_trouble(lt::alert* a, bool is_seed);
  bool on_block(const lt::torrent_handle& th, bool from_origin, std::size_t bytes);
  bool on_unknown(const lt::sha1_hash& ih, lt::add_torrent_params& p);
  void finish(const std::shared_ptr<group_download>& dl);
  void fail(const std::shared_ptr<group_download>& dl, error e);
  void complete(const std::shared_ptr<group_download>& dl);
  void http_fallback(const std::shared_ptr<group_download>& dl);
  void seed(const group_spec& spec, const std::string& ih, bool verified);
  void monitor();
  [[nodiscard]] status check_space(const group_download& dl) const;
  [[nodiscard]] std::string member_path(const group_download& dl, const digest& d) const;

  deps d_;
  options opts_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<group_download>> downloads_;  // by info-hash hex
  struct seed_entry {
    lt::torrent_handle h;
    std::chrono::steady_clock::time_point last_used;
  };
  std::map<std::string, seed_entry> seeds_;  // loaded seeds, by info-hash hex
  std::set<std::string> packs_;              // packs with a torrent under <dir>/packs
  std::set<std::string> adding_seed_;        // seeds whose add waits for the download's removal

  std::thread monitor_;
  std::atomic<bool> stop_{false};
  std::mutex mon_mu_;
  std::condition_variable mon_cv_;
};

}  // namespace shoal::peerd
