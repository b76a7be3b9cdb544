#pragma once
// peerd's swarm engine: one libtorrent session, one engine (swarm_manager) for every transfer
// this node makes and every torrent it seeds. A transfer is a job of one of three kinds:
//   - object: a blob or manifest, committed to the cache when complete;
//   - chunk: a transient object (a chunk of a larger blob, chunked.h), kept in the partial
//     directory and seeded from there while wanted;
//   - group: a dataset group, one torrent holding one large object (a single) or many small ones
//     (a pack: a multi-file torrent laid out sha256/<hh>/<hex>, the cache's object layout).
//
// Objects download into the partial directory (pieces in whatever order suits the swarm, with
// deadlines near each local reader's position). When every piece has passed its hash, the file
// is moved into the cache's staging directory, the torrent is removed and the cache adopts the
// file (it verifies its sha256 and never replaces a committed object: when another path committed
// the same object meanwhile, the staged copy is verified and dropped, the object stays); the
// object is then seeded from the cache's file by a fresh torrent. Only then is the download
// complete: a reader holds back an object's last byte until then (mirror.cc), so a body whose
// pieces passed SHA-1 but whose sha256 does not match is never delivered whole.
// A group downloads into its own directory, <datasets partial_dir>/<info-hash>, which survives
// restarts: adding the same torrent again makes libtorrent check the files there, so an
// interrupted prefetch resumes. Members already cached get file priority 0. When every wanted
// piece verified, the torrent is removed, every member is adopted into the cache, the directory
// goes and the group is added again as a verified seed from the cache's files.
//
// One monitor thread watches every running job. If nothing verifies for `stall_timeout` (and no
// block arrives either, for up to 3 × stall_timeout, until a piece fails its hash), the
// missing bytes come from registry-proxy over HTTP: an object's missing pieces as Ranges injected
// with add_piece (after a stall, ranges follow each other while each verifies and no peer sends
// a block), a group's missing members each straight into the cache (its torrent is dropped). If
// nothing arrives from any source for `fallback_deadline`, the job fails through the one failure
// path (fail()): state, error, downloads_failed, waiters and readers woken, torrent removed (an
// object's partial file deleted, a group's partial files kept for the next attempt).
//
// One seed table holds every loaded seed (objects, transient chunks, groups): after
// `seed_idle_unload` without peers, or beyond `max_loaded_torrents` (least recently used first),
// a seed is unloaded. Any node still holds the objects, reports them to the scheduler, and when
// a peer connects for an unloaded info-hash the torrent is loaded on the spot (libtorrent's
// on_unknown_torrent plugin hook: objects from the object table, packs from the torrents kept
// under <datasets dir>/packs) in seed mode without trusted pieces: each piece is verified on its
// first upload, so an object corrupted on disk is detected, never sent, and quarantined.
//
// Threading: libtorrent's network thread, our alert pump thread (one dispatch for every alert),
// the monitor thread, and the worker pool (commits, group adoption and HTTP fallbacks); public
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
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/endpoints.h"
#include "common/fd.h"
#include "common/http_client.h"
#include "common/sha256.h"
#include "swarm/metainfo.h"
#include "swarm/swarm.h"
#include "peerd/config.h"
#include "peerd/state_db.h"

namespace shoal::peerd {

using piece_buffer = std::shared_ptr<const std::string>;

// Reads exactly [off, off + len) of the file at `path` (a download's file, or a committed
// object's by its path), or why not.
[[nodiscard]] result<std::string> read_file_range(const std::string& path, std::uint64_t off,
                                                  std::uint64_t len);

// Where bytes came from, for status and the demo report.
struct source_counters {
  std::atomic<std::uint64_t> from_origin{0};   // BitTorrent blocks from registry-proxy
  std::atomic<std::uint64_t> from_peers{0};    // BitTorrent blocks from other nodes
  std::atomic<std::uint64_t> from_http{0};     // HTTP fallback ranges from registry-proxy
  std::atomic<std::uint64_t> served_local{0};  // bytes served to local clients
  std::atomic<std::uint64_t> uploaded{0};      // payload uploaded to peers (session total)
  // libtorrent's session totals, every 5 s: every byte its peer connections received and sent
  // (payload, protocol messages and TLS records; not TCP/IP headers), payload blocks received that
  // were already had (end game, a piece verified from another peer first), and HAVE messages
  // received.
  std::atomic<std::uint64_t> wire_received{0}, wire_sent{0}, redundant{0}, haves_received{0};
  // Why redundant payload arrived (libtorrent's ses.waste_piece_*): a block re-requested after its
  // request timed out, one cancelled too late, end game, and the rest (unknown, seed, closing).
  std::atomic<std::uint64_t> waste_timed_out{0}, waste_cancelled{0}, waste_end_game{0},
      waste_other{0};
  // Pieces rejected (bad data from a peer or HTTP), and objects whose pieces all passed but whose
  // sha256 did not match (a poisoned metainfo).
  std::atomic<std::uint64_t> hash_failures{0};
  std::atomic<std::uint64_t> quarantined{0};  // local objects found corrupt while seeding
  std::atomic<std::uint64_t> fallbacks{0};    // HTTP fallback ranges fetched
  std::atomic<std::uint64_t> downloads_ok{0}, downloads_failed{0};
  std::atomic<std::uint64_t> range_deadline_pieces{0};  // pieces given deadlines for a Range
  // Flushes asked so a reader could take verified pieces of a running download from its file.
  std::atomic<std::uint64_t> stream_flushes{0};
  // Bytes of downloaded objects hashed (sha256) from their file while the download still ran,
  // and after its last piece (what the readers' prefix had not covered).
  std::atomic<std::uint64_t> hashed_while_downloading{0}, hashed_after_download{0};
  // Small Ranges of a chunk not cut yet, read from registry-proxy directly, and their bytes.
  std::atomic<std::uint64_t> range_direct{0}, range_direct_bytes{0};
  // Blobs fetched in chunks whose rest came as ranges: registry-proxy stopped listing chunks.
  std::atomic<std::uint64_t> chunked_tails{0};
};

// How to fetch ranges of the object from registry-proxy when the swarm stalls.
struct fallback_info {
  std::string url;            // full blob URL on registry-proxy (with ns=)
  std::string authorization;  // the client's Authorization header, if any
  std::uint64_t offset = 0;   // where the object starts inside `url` (a chunk of a larger blob)
  // The registry-proxy replicas (proxy_link's set), when peerd knows several: each range is
  // asked of the first in the set's order for `path` (url's path and query) instead of `url`,
  // and a replica that fails a range (died mid-blob, refused, 503) is passed over by the next
  // one, so an object whose replica died while it streamed still completes from another.
  std::shared_ptr<endpoints::endpoint_set> endpoints;
  std::string path;
};

class swarm_manager;

// A whole file (records, manifests, pack torrents); nullopt when it cannot be opened.
[[nodiscard]] std::optional<std::string> read_file(const std::string& path);

// The one parse of a .torrent (an object's, a chunk's, a group's, a held seed's) into libtorrent's
// form: nullptr when it does not parse, with libtorrent's reason in `why` (when given).
[[nodiscard]] std::shared_ptr<lt::torrent_info> parse_torrent(std::string_view torrent,
                                                              std::string* why = nullptr);

// What a dataset group is, as registry-proxy described it.
struct group_spec {
  std::string torrent;  // .torrent bytes as served (trackers are replaced by ours)
  bool pack = false;
  std::vector<std::pair<digest, std::uint64_t>> objects;  // pack order; a single has one
  std::vector<std::string> seeds;                         // Shoal-Seed endpoints
  std::string fallback_base;  // registry-proxy + origin::dataset_objects_base(<ref>) (+ digest)
  // The registry-proxy replicas when peerd knows several: the objects are asked of the first in
  // their order at `fallback_path` (+ digest) instead of fallback_base, and when one fails with
  // no answer or a 503, the objects still missing are asked of the next.
  std::shared_ptr<endpoints::endpoint_set> fallback_endpoints;
  std::string fallback_path;
  std::string name;   // for logs: "<ref> group <i>"
  std::string grant;  // registry-proxy's grant for this node and swarm (Shoal-Grant)
  // Seed it the way registry-proxy seeds (swarm.h, origin_superseed_plugin): this node is the
  // group's first and only holder (the writer of a checkpoint), so it offers each peer a few
  // pieces at a time and sends every piece once before any twice. Only when the group is
  // complete here and swarm.superseed_published is on.
  bool superseed = false;
};

// What every job of the engine shares: its state, error, torrent and progress clock.
class transfer {
 public:
  enum class kind { object, chunk, group };
  enum class state { running, complete, failed };
  virtual ~transfer() = default;
  [[nodiscard]] state current() const;
  [[nodiscard]] std::optional<error> failure() const;
  [[nodiscard]] kind type() const { return kind_; }
  [[nodiscard]] const std::string& info_hash() const { return ih_; }

 protected:
  friend class swarm_manager;
  explicit transfer(kind k) : kind_(k) {}
  // Blocks until the job leaves running or `timeout` passed; returns the state.
  state wait(std::chrono::steady_clock::duration timeout) const;

  kind kind_;
  std::string ih_;  // info-hash hex
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // notified when st_ leaves running
  state st_ = state::running;
  std::optional<error> err_;
  lt::torrent_handle h_;
  // last_progress_: the last verified piece (or fallback byte of a group); stall and deadline are
  // measured from it.
  std::chrono::steady_clock::time_point started_, last_progress_;
  // The last block received from any peer, and whether a piece failed its hash: blocks still
  // arriving hold off the HTTP fallback until the first hash failure (blocks_flowing()).
  std::chrono::steady_clock::time_point last_block_;
  bool hash_failed_ = false;
};

// An object or a chunk.
class download : public transfer, public std::enable_shared_from_this<download> {
 public:
  download(const digest& d, object_metainfo m, std::string partial_dir)
      : transfer(kind::object),
        id_(d),
        meta_(std::move(m)),
        partial_dir_(std::move(partial_dir)),
        have_(meta_.piece_count(), false),
        in_file_(meta_.piece_count(), false) {
    ih_ = meta_.info_hash_hex();
  }

  [[nodiscard]] const digest& id() const { return id_; }
  [[nodiscard]] const object_metainfo& meta() const { return meta_; }
  [[nodiscard]] std::uint32_t pieces_done() const;
  // The complete object's file (the cache's, or the partial file of a transient download), empty
  // before completion: only then are all its bytes in a file (a piece that passed its hash may
  // still sit in libtorrent's store buffer).
  [[nodiscard]] std::string complete_path() const;
  // The whole object's sha256 matched its digest: its last byte may go to readers, from the
  // download's file, while the cache still commits it (fdatasync, rename).
  [[nodiscard]] bool verified() const;
  // Blocks until the download is complete or failed, or `timeout` passed; returns the state.
  [[nodiscard]] state wait_done(std::chrono::steady_clock::duration timeout) const {
    return wait(timeout);
  }
  // Calls `cb` once the download leaves running: success when it is complete (an object's
  // sha256 verified and committed), its error when it failed. At once, on this thread, when it
  // already has; else on the thread that ends it. Keep it short.
  void when_settled(std::function<void(shoal::status)> cb);
  // A transient download (a chunk of a larger blob, chunked.h) is not committed to the cache:
  // every piece passed its SHA-1 and the blob it belongs to is verified whole, so the file stays
  // in the partial directory, is seeded from there while wanted and deleted when unloaded.
  [[nodiscard]] bool transient() const { return kind_ == kind::chunk; }

  // Delivers the verified bytes of piece `i` once it exists (or an error), on some internal
  // thread; keep the callback short. Also tells the swarm a local reader needs this piece soon.
  void read_piece(std::uint32_t i, std::function<void(result<piece_buffer>)> cb);
  // Calls `cb` once piece `i` passed its hash and its bytes are in the download's file
  // (partial_path()), or once the download left running (the caller then reads as it reads a
  // complete or failed download). A piece passes its hash from libtorrent's store buffer, maybe
  // before a disk thread wrote it, so a flush (a fence in the disk queue, one at a time, covering
  // every piece verified when it was asked) confirms the writes first. Readers that follow the
  // download take its verified bytes straight from the file (sendfile), in batches of whatever
  // verified meanwhile, instead of one read_piece at a time behind every queued write. On some
  // internal thread; keep it short.
  void when_in_file(std::uint32_t i, std::function<void()> cb);
  // Consecutive bytes from `off` (at most `max`) whose pieces are known to be in the file; 0 when
  // the piece at `off` is not (yet), or the download is no longer running (and not verified).
  [[nodiscard]] std::uint64_t file_run(std::uint64_t off, std::uint64_t max) const;
  // The download's file: where libtorrent writes it while it runs, then (an object, once every
  // piece verified) the cache's staging directory until the cache adopts it. A reader that opened
  // it keeps reading the same file through every rename.
  [[nodiscard]] std::string partial_path() const;
  // A local reader takes the whole object from byte 0: with swarm.in_order_readers, the download
  // asks for pieces in order from now on (libtorrent's sequential_download).
  void want_in_order();
  // A Range reader wants bytes [off, end) soon: the pieces under its first
  // swarm.range_deadline_bytes that are not here yet get deadlines (libtorrent's time-critical
  // picking, ahead of rarest-first). Returns how many pieces got one.
  std::uint32_t want_range(std::uint64_t off, std::uint64_t end);

 private:
  friend class swarm_manager;
  using piece_cb = std::function<void(result<piece_buffer>)>;

  digest id_;
  object_metainfo meta_;
  std::string partial_dir_;
  swarm_manager* mgr_ = nullptr;
  fallback_info fallback_;
  std::string torrent_;

  std::vector<bool> have_;
  std::uint32_t done_ = 0;
  std::map<std::uint32_t, std::vector<piece_cb>> waiting_;   // piece not finished yet
  std::map<std::uint32_t, std::vector<piece_cb>> reading_;   // read_piece issued
  std::vector<std::function<void(shoal::status)>> settled_;  // when_settled
  std::string object_path_;                                  // once complete
  // Pieces whose writes a flush confirmed (when_in_file), readers waiting for one, and the
  // pieces the flush in flight covers.
  std::vector<bool> in_file_;
  std::map<std::uint32_t, std::vector<std::function<void()>>> file_waiting_;
  std::vector<std::uint32_t> fencing_;
  bool fence_inflight_ = false;
  bool in_order_ = false;    // want_in_order: sequential piece order asked
  std::string staged_path_;  // set once the file moved to the cache's staging directory
  // The object's sha256, fed from its file as flushes confirm a longer prefix of verified pieces
  // (swarm_hash.cc): with readers following the download in order, the whole object is hashed
  // when its last piece lands. hasher_ and hash_fd_ belong to the one hash step running
  // (hashing_); the rest is under mu_.
  sha256_hasher hasher_;
  unique_fd hash_fd_;                      // the download's file, opened by the first hash step
  std::uint64_t hashed_ = 0;               // bytes fed to hasher_
  bool hashing_ = false;                   // a hash step is queued or running
  bool hash_final_ = false;                // the file is staged: hash to its end, then adopt
  bool hash_broken_ = false;               // a step failed: the cache hashes the file itself
  bool verified_ = false;                  // see verified()
  std::vector<std::string> finish_peers_;  // the download's peers, for the seed that follows
  [[nodiscard]] std::uint64_t confirmed_prefix_locked() const;
  [[nodiscard]] std::string file_path_locked() const;  // partial_path(), under mu_
  // Every when_in_file reader, taken out of file_waiting_ (under mu_) when the download ends.
  std::vector<std::function<void()>> take_file_waiters();
  // Every piece verified and the file moved to staging: the torrent is gone, adoption runs.
  bool finishing_ = false;
  // A transient download whose pieces all verified: its writes are being flushed (a piece's hash
  // can pass from libtorrent's store buffer before the piece is in the file); flushed_ once asked.
  bool flushing_ = false, flushed_ = false;
  bool fallback_inflight_ = false;
  // Once the swarm has stalled, HTTP ranges follow each other without another stall_timeout
  // while each range verifies and no peer delivers a block (last_block_); a peer block ends the
  // chain.
  bool fallback_chain_ = false;
  std::chrono::steady_clock::time_point fallback_started_;
  std::uint32_t cursor_ = 0;  // lowest piece a reader waits for
};

// A dataset group (single or pack).
class group_download : public transfer {
 public:
  group_download() : transfer(kind::group) {}
  // Bytes of the group present (members already cached plus verified pieces) and its total.
  [[nodiscard]] std::uint64_t bytes_done() const { return done_.load(); }
  [[nodiscard]] std::uint64_t total() const { return total_; }
  // Waits until the download ends or `d` passes; returns the state then.
  state wait_for(std::chrono::milliseconds d) const { return wait(d); }

  // Where the bytes came from (payload, this download only).
  std::atomic<std::uint64_t> from_origin{0}, from_peers{0}, from_http{0};

 private:
  friend class swarm_manager;
  group_spec spec_;
  std::shared_ptr<const lt::torrent_info> ti_;
  std::string dir_;
  std::uint64_t total_ = 0;
  std::atomic<std::uint64_t> done_{0};
  std::uint64_t present_bytes_ = 0;  // members in the cache before the download
  // Every wanted piece verified: the writes are flushed, then the torrent is removed, then its
  // members are adopted (torrent_removed_alert comes before libtorrent's pending writes end).
  bool finishing_ = false;
  bool removing_ = false;  // its removal requested (once: two cache_flushed_alerts come)
  bool fallback_ = false;  // HTTP fallback running or done
};

class swarm_manager {
 public:
  struct deps {
    cache::store& store;
    state_db& state;
    http::client& http;
    boost::asio::thread_pool& pool;
  };
  // Where dataset groups live (app.cc from the datasets config). Stall, deadline and seed limits
  // are the swarm config's, shared with objects.
  struct group_options {
    std::string partial_dir;        // group downloads in progress (kept across restarts)
    std::string dir;                // <dir>/packs/<info-hash>.torrent: packs this node can seed
    std::size_t http_parallel = 4;  // members fetched at once by a group's HTTP fallback
  };
  // With `tls.enabled` every torrent is an SSL torrent (BitTorrent between members, swarm.h): the
  // process's metainfo root must be set first (swarm::enable_members_only), the session listens
  // on SSL sockets only and uses this node's certificate. `scheduler_bases` gives the
  // scheduler replicas' base URLs, the preferred first (scheduler_link::bases); empty or unset:
  // torrents have no tracker.
  using bases_fn = std::function<std::vector<std::string>()>;
  [[nodiscard]] static result<std::unique_ptr<swarm_manager>> start(
      const swarm_config& cfg, const node_config& node, bases_fn scheduler_bases, deps d,
      const tls::tls_config& tls = {});
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
  // Keeps registry-proxy's grant (a metainfo answer's Shoal-Grant, common/grant.h) for the swarm
  // it names, to present to peers in that swarm: call before fetch() with the answer's grant.
  // No-op for an empty grant or with grants off; one that does not parse is logged and dropped.
  void note_grant(const std::string& grant);

  // Makes dataset groups available (creates the directories, lists the packs held). Once, before
  // the first fetch_group.
  [[nodiscard]] shoal::status enable_groups(group_options o);
  // Starts (or joins) the download of a dataset group. A group whose members are all cached
  // completes at once (and is loaded as a seed).
  [[nodiscard]] result<std::shared_ptr<group_download>> fetch_group(group_spec spec);

  // Loads the seed of an object held here now (its torrent from the state db), so it announces
  // and peers can reach it (with SSL torrents a seed cannot be loaded when a peer asks, since the
  // handshake names only loaded torrents): a blob fetched in chunks calls this for its
  // whole-object torrent, with TLS or without. `trusted`:
  // the caller has just verified the object's sha256 and its torrent came from registry-proxy
  // (or was computed from these bytes), so its pieces are not hashed again before their first
  // upload. No-op when it is loaded already, or when the object or its torrent is not held.
  // Blocking (state db): never on the io loop.
  void load_seed(const digest& d, bool trusted = false);
  [[nodiscard]] bool ssl() const { return ses_ && ses_->ssl(); }
  [[nodiscard]] const swarm::session* session() const { return ses_.get(); }

  // Every (digest, info-hash) of the state index, sorted by digest, whether the cache still
  // holds the object or not: the caller matches them with the cache's own list (the heartbeat
  // reports the objects both have, for the scheduler's holder index).
  [[nodiscard]] std::vector<std::pair<digest, std::string>> info_hashes() const;
  // Changes whenever info_hashes() does (state_db::generation()); what the cache holds moves
  // store::held_generation().
  [[nodiscard]] std::uint64_t holdings_generation() const noexcept;
  [[nodiscard]] const source_counters& counters() const { return counters_; }
  [[nodiscard]] source_counters& counters_mut() { return counters_; }
  // The file of a chunk this node downloaded and still seeds without holding it in the cache
  // (a transient download of a blob fetched in chunks), or "": a later fetch of the same blob
  // finds the chunk "already held and seeded" and takes its bytes from there.
  [[nodiscard]] std::string transient_file_of(const digest& d) const;
  // Objects and chunks: running, and running plus loaded as seeds.
  [[nodiscard]] std::size_t active_downloads() const;
  [[nodiscard]] std::size_t loaded_torrents() const;
  // Dataset groups: running, and loaded as seeds.
  [[nodiscard]] std::size_t active_groups() const;
  [[nodiscard]] std::size_t loaded_groups() const;
  // JSON-ready snapshot of active object downloads: digest, pieces done/total, rate.
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
  [[nodiscard]] bool in_order_readers() const { return cfg_.in_order_readers; }
  [[nodiscard]] std::uint64_t range_deadline_bytes() const {
    return cfg_.range_deadline_bytes.bytes();
  }
  [[nodiscard]] std::uint64_t range_direct_bytes() const { return cfg_.range_direct_bytes.bytes(); }
  [[nodiscard]] const swarm_config& config() const { return cfg_; }

  // Internal (plugin and download callbacks).
  // Loads the torrent of an unloaded seed a peer asks for (a pack, or an object of the table).
  bool prepare_on_demand(const lt::sha1_hash& ih, lt::add_torrent_params& p);
  // The add parameters of an object held here as a seed (its torrent from the state db, seed
  // mode without trusted pieces); false when the object or its torrent is not held.
  bool held_seed_params(const digest& d, lt::add_torrent_params& p);
  // During a CA rotation (the session holds a certificate pair for more than one root): seeds
  // the held object `d`, whose torrent is `torrent`, under every other root too, each torrent
  // its own entry of the seed table (the same digest). `trusted`: its pieces were just verified
  // (else each is hashed before its first upload). Blocking; never on the network thread.
  void seed_other_roots(const digest& d, const std::string& torrent, bool trusted);
  // A block arrived from a peer (network thread).
  void on_block(const lt::torrent_handle& th, bool from_origin, std::size_t bytes);
  void request_piece(const std::shared_ptr<download>& dl, std::uint32_t piece);
  // download::when_in_file's flush, and its answer (false: no flush of ours was in flight).
  void start_fence(const std::shared_ptr<download>& dl);
  bool fence_done(const std::shared_ptr<download>& dl);
  // The object's sha256 as its bytes land (swarm_hash.cc): queues a hash step on the worker pool
  // when the prefix confirmed in the file grew (or the file is staged) and none runs.
  void hash_more(const std::shared_ptr<download>& dl);

 private:
  swarm_manager(const swarm_config& cfg, const node_config& node, bases_fn scheduler_bases, deps d)
      : cfg_(cfg), node_(node), scheduler_(std::move(scheduler_bases)), d_(d) {}
  using steady = std::chrono::steady_clock;

  // Alerts (swarm_alerts.cc): one dispatch; group torrents first (swarm_groups.cc).
  void on_alert(lt::alert* a);
  void on_piece_finished(lt::piece_finished_alert* pf);
  void on_read_piece(lt::read_piece_alert* rp);
  void on_torrent_finished(lt::torrent_finished_alert* tf);
  // A seed that goes back to checking or downloading has left seed mode (a corrupt piece).
  void on_state_changed(lt::state_changed_alert* sc);
  void on_hash_failed(lt::hash_failed_alert* hf);
  void on_torrent_failure(const std::string& ih, const std::string& why);
  void on_torrent_added(lt::add_torrent_alert* at);
  void on_session_stats(lt::session_stats_alert* ss);
  bool on_group_alert(lt::alert* a);
  void on_group_seed_trouble(const std::string& ih, const std::string& why);

  // The one failure path (swarm.cc).
  void fail(const std::shared_ptr<transfer>& job, error e);
  // Runs a step of `job` on the worker pool; an exception fails the job instead of escaping.
  void post_step(const std::shared_ptr<transfer>& job, std::function<void()> step);

  // Objects (swarm.cc).
  // Where libtorrent's move puts a finished object's file: the cache's staging directory.
  [[nodiscard]] std::string staged_file(const digest& d) const {
    return d_.store.staging_dir() + "/" + d.hex();
  }
  // The file is in the staging directory: drop the torrent, then adopt (complete).
  void finish_object(const std::shared_ptr<download>& dl, const lt::torrent_handle& h);
  // One hash step (swarm_hash.cc): feeds the confirmed prefix; once the file is staged, hashes the
  // rest and completes: verified, the readers take the last byte and the cache adopts the file
  // on the strength of this hash (cache::content_proof).
  void hash_step(const std::shared_ptr<download>& dl);
  // Adopts the staged file (worker pool); `peers` were the download's. With `proof`, the object
  // verified already (hash_step) and the cache takes this process's hash for its own.
  void complete(const std::shared_ptr<download>& dl, const std::vector<std::string>& peers,
                const cache::content_proof* proof);
  // Seeds a committed object from the cache's file (trusted pieces); the handle, invalid when it
  // could not be added. `peers`: endpoints to reconnect to (the download's).
  lt::torrent_handle seed_object(const std::shared_ptr<download>& dl,
                                 const std::vector<std::string>& peers);
  void complete_transient(const std::shared_ptr<download>& dl);
  // Marks `dl` complete with its bytes at `path`, moves it from the downloads to the seeds (a
  // transient one with the file to delete when it is unloaded) and serves its waiting readers
  // from the file. With `only_running`, false (and nothing done) when it had already ended.
  bool settle_complete(const std::shared_ptr<download>& dl, const std::string& path,
                       bool only_running, std::string transient_file);
  std::vector<std::string> trackers() const;
  // Adds the "host:port" endpoints (registry-proxy's Shoal-Seed) as peers; malformed ones are
  // skipped.
  static void add_seed_peers(lt::add_torrent_params& p, const std::vector<std::string>& seeds);
  std::shared_ptr<download> by_hash(const std::string& ih) const;
  std::shared_ptr<download> by_alert(const lt::torrent_alert* a) const;
  std::shared_ptr<group_download> group_by_hash(const std::string& ih) const;

  // Groups (swarm_groups.cc).
  [[nodiscard]] result<std::shared_ptr<group_download>> prepare_group(group_spec spec);
  [[nodiscard]] shoal::status add_group_torrent(const std::shared_ptr<group_download>& dl);
  void finish_group(const std::shared_ptr<group_download>& dl);
  void complete_group(const std::shared_ptr<group_download>& dl);
  void seed_group(const group_spec& spec, const std::string& ih);
  [[nodiscard]] shoal::status check_space(const group_download& dl) const;
  [[nodiscard]] std::string member_path(const group_download& dl, const digest& d) const;
  bool prepare_pack_on_demand(const std::string& ih, lt::add_torrent_params& p);

  // The monitor and the HTTP fallbacks of objects and groups (swarm_fallback.cc).
  void monitor();
  void watch(const std::shared_ptr<transfer>& job, steady::time_point now);
  [[nodiscard]] bool blocks_flowing(const transfer& job, steady::time_point now) const;
  void start_fallback(const std::shared_ptr<download>& dl);
  void start_group_fallback(const std::shared_ptr<group_download>& dl);
  void group_http_fallback(const std::shared_ptr<group_download>& dl);
  [[nodiscard]] std::optional<error> group_fetch_members(
      const std::shared_ptr<group_download>& dl,
      const std::vector<std::pair<digest, std::uint64_t>>& missing, bool& replica_failed);

  // The seed table (swarm_seeds.cc).
  struct seed_entry {
    transfer::kind type = transfer::kind::object;
    digest id;             // objects and chunks
    lt::torrent_handle h;  // invalid while a group seed is being added
    steady::time_point last_used;
    std::list<std::string>::iterator lru;
    bool lazy = false;                 // loaded on demand: pieces verified on first upload
    std::string transient_file;        // deleted once unloaded (transient downloads)
    steady::time_point pin_renewed{};  // the object's "swarm" pin last extended (sweep_seeds)
  };
  struct unloaded {
    std::vector<lt::torrent_handle> handles;
    std::vector<std::string> files;
  };
  // Adds (or refreshes) a seed; those beyond max_loaded_torrents go into `out`. Under mu_.
  void put_seed_locked(const std::string& ih, seed_entry e, unloaded& out);
  void erase_seed_locked(std::map<std::string, seed_entry>::iterator it, unloaded* out);
  void unload(const unloaded& u);
  void touch_seed(const std::string& ih, const digest& d, lt::torrent_handle h);
  void sweep_seeds(steady::time_point now);
  void quarantine(const digest& d, const std::string& why);
  // The object a seed of this info-hash serves, if it is one (not a group).
  [[nodiscard]] std::optional<digest> seed_digest(const std::string& ih) const;
  [[nodiscard]] cache::clock::time_point pin_expiry() const;

  swarm_config cfg_;
  node_config node_;
  bases_fn scheduler_;
  deps d_;
  std::unique_ptr<swarm::session> ses_;
  source_counters counters_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<transfer>> jobs_;  // running, by info-hash hex
  std::map<digest, std::shared_ptr<download>> downloads_;  // running objects, by digest
  std::map<std::string, seed_entry> seeds_;                // by info-hash hex
  std::list<std::string> lru_;
  std::optional<group_options> groups_;  // set by enable_groups
  std::atomic<bool> groups_enabled_{false};
  std::set<std::string> packs_;    // packs with a torrent under <dir>/packs
  std::set<std::string> loading_;  // seeds load_seed added, until on_torrent_added (info-hash hex)

  std::thread monitor_;
  std::atomic<bool> stop_{false};
  std::mutex mon_mu_;
  std::condition_variable mon_cv_;
};

}  // namespace shoal::peerd
