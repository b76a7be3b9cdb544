#pragma once
// A blob fetched as chunk objects while registry-proxy still downloads it (registry-proxy's
// chunks.h, docs/p2p.md "Chunks").
//
// registry-proxy cuts a large blob into consecutive chunk objects as it streams in from
// upstream; each chunk has its own sha256 and metainfo and is seeded at once. A chunked_blob
// learns the chunks as they are published (the origin protocol's chunk list, long-polled), fetches
// each through the swarm as an object of its own (swarm_manager::fetch; stall fallback over
// HTTP reads the chunk's range of the blob), then joins the chunks into the blob, which the
// cache commits only if it matches the blob's digest. Readers (containerd through the mirror)
// get bytes as soon as the chunk holding them has them; the blob's last byte is held back until
// the whole blob is verified, so a client never takes wrong bytes for the blob.
//
// registry-proxy may stop listing the chunks mid-blob: the replica cutting it died (another
// replica answers the list with 404, not cutting it itself) or restarted. The chunks listed so
// far are still fetched (their fallback ranges move to a live replica), and the rest of the blob
// comes as ranges of it from registry-proxy, written after them (take_tail): the blob completes
// and is verified whole as always.
//
// Lifecycle: created by the fetcher when registry-proxy answers that the object is chunked;
// start() runs the driver on a thread of its own (it long-polls); the object ends complete (the
// blob is in the cache and its metainfo recorded, so the node seeds it later) or failed (every
// waiting reader gets the error). Every wait is bounded by the swarm's fallback_deadline.
// registry-proxy shedding load (429 + Retry-After) is waited out and asked again within that
// deadline; past it the fetch fails as busy (errc::busy) with the last Retry-After kept for the
// client's 503 (retry_after()). The fetcher answers the client only after the first chunk-list
// round (first_round()), so shedding at the start is a 503, not a 200 that breaks off.
// Public methods are thread-safe.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/endpoints.h"
#include "common/http_client.h"
#include "peerd/state_db.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

class chunked_blob : public std::enable_shared_from_this<chunked_blob> {
 public:
  struct deps {
    swarm_manager& swarm;
    cache::store& store;
    state_db& state;
    http::client& http;
    std::string proxy;  // registry-proxy base URL (when `call` is empty, and the fallback's `url`)
    // A read of registry-proxy, `req.url` a path and query, moving between its replicas
    // (proxy_link); empty: `proxy` + path through `http`, once.
    std::function<result<http::full_response>(http::client_request, std::size_t)> call;
    // The replicas, for the chunks' swarm fallback ranges (fallback_info::endpoints); may be null.
    std::shared_ptr<endpoints::endpoint_set> endpoints;
    std::chrono::milliseconds poll_wait{5000};  // long-poll wait per chunk-list request
    std::chrono::milliseconds connect_timeout{2000};
    std::chrono::milliseconds deadline{30000};  // no progress this long: the blob fails
  };
  enum class state { running, complete, failed };

  chunked_blob(deps d, std::string ns, std::string repo, const digest& id, std::uint64_t size,
               std::uint64_t chunk_size, std::string authorization);
  ~chunked_blob();
  chunked_blob(const chunked_blob&) = delete;
  chunked_blob& operator=(const chunked_blob&) = delete;

  void start();
  [[nodiscard]] const digest& id() const { return id_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] state current() const;
  [[nodiscard]] std::optional<error> failure() const;
  // Blocks until the first chunk-list answer was taken in (its chunks started) or the fetch
  // failed; bounded by the deadline.
  [[nodiscard]] status first_round();
  // registry-proxy's Retry-After when the fetch failed on its shedding load, else empty.
  [[nodiscard]] std::string retry_after() const;
  // Chunks known so far and complete locally (for status).
  [[nodiscard]] std::pair<std::uint32_t, std::uint32_t> chunks_done() const;

  // Delivers up to `max` bytes from `off` once they exist (at least one byte), or an error; on
  // some internal thread, so keep the callback short.
  void read(std::uint64_t off, std::size_t max, std::function<void(result<std::string>)> cb);
  // A Range reader wants [off, end) soon: the pieces under its first swarm.range_deadline_bytes
  // get deadlines in the chunks that hold them, now for chunks already joined, else as each
  // chunk is joined (download::want_range). A range of at most swarm.range_direct_bytes whose
  // chunk is not joined yet is also asked of registry-proxy at once (a `Range` GET of the blob,
  // which registry-proxy answers as soon as its upstream fetch reaches it), and reads inside it
  // are served from those bytes: a lazy reader does not wait for registry-proxy to cut every
  // chunk before its range. registry-proxy is the origin the metainfo comes from, so its bytes
  // need no piece check; bytes from peers still come only from verified pieces, and the blob's
  // last byte still only once the whole blob verified.
  void want_range(std::uint64_t off, std::uint64_t end);
  // A local reader takes the whole blob from byte 0: every chunk joined, now or later, asks for
  // its pieces in order (download::want_in_order; swarm.in_order_readers).
  void want_in_order();
  // Blocks until the blob is committed to the cache or has failed.
  [[nodiscard]] status wait();
  // Ends the fetch if it still runs (errc::cancelled), skips what the driver would still do
  // after it (seeding the whole blob), and joins its threads, so none of them touches the swarm,
  // cache or HTTP client given in deps after this returns. The owner (fetcher) calls it before
  // those go away; with them stopped first (the swarm fails its downloads, the HTTP client its
  // calls) it returns at once. Idempotent; not from one of the fetch's own threads.
  void stop();

 private:
  struct chunk {
    digest id;
    std::uint64_t offset = 0, size = 0;
    std::shared_ptr<download> dl;  // null once held in the local cache
    bool ready = false;            // dl set or held locally
  };
  using read_cb = std::function<void(result<std::string>)>;
  using waiter = std::pair<std::pair<std::uint64_t, std::size_t>, read_cb>;
  // [off, end) of the blob read from registry-proxy for a small Range (want_range).
  struct direct_range {
    std::uint64_t off = 0, end = 0;
    bool done = false;    // answered (bytes set) or failed (bytes null: reads use the chunk)
    bool exited = false;  // its thread no longer needs the lock (it may be joined)
    std::shared_ptr<const std::string> bytes;
    std::vector<waiter> waiters;  // reads inside it while it is asked
  };
  static constexpr std::size_t max_direct = 4;  // held per blob, in flight or answered

  void drive();
  // Sleeps `d`, or less when stop() is called; false when stopping.
  bool pause(std::chrono::milliseconds d);
  // Waits (at most 60 s, or until stop()) for another writer's copy of `d` to be committed.
  [[nodiscard]] status wait_written_elsewhere(const digest& d, const std::string& what);
  // `lost`: set when the failure is registry-proxy no longer listing the chunks (the replica
  // cutting the blob died or restarted: 404 from another, no answer, 5xx), which take_tail()
  // survives.
  [[nodiscard]] status learn_chunks(bool& lost);
  // The chunks not listed yet come as ranges of the blob from registry-proxy (any replica), into
  // the blob after the listed ones; readers of them read the blob as it is written. False when
  // the fetch already ended.
  bool take_tail(const error& why);
  [[nodiscard]] status write_tail(cache::object_writer& w, std::uint64_t from);
  // Reads up to `n` bytes at `off` of the blob being written, once they are written.
  void read_written(std::uint64_t off, std::uint64_t n, read_cb cb);
  // A registry-proxy read (deps::call), `req.url` a path and query.
  [[nodiscard]] result<http::full_response> call(http::client_request req, std::size_t max_body);
  // One request to registry-proxy; its 429s are waited out (Retry-After) until `until`.
  [[nodiscard]] result<http::full_response> ask(const http::client_request& r, std::size_t max_body,
                                                std::chrono::steady_clock::time_point until,
                                                const std::string& what);
  [[nodiscard]] status start_chunk(std::uint32_t i);
  // Chunk `i` without a swarm: its range of the blob from registry-proxy into the cache.
  [[nodiscard]] status chunk_ready(std::uint32_t i, std::shared_ptr<download> dl);
  // Deadlines in chunk `c`'s download for the part of [off, end) it holds.
  static void want_in_chunk(const chunk& c, std::uint64_t off, std::uint64_t end);
  [[nodiscard]] status fetch_chunk_range(std::uint32_t i, const std::string& why);
  // Chunk `i`, seeded here from a transient file of an earlier fetch of this blob (`path`, ""
  // when none), into the cache under its digest; its range from registry-proxy when that fails.
  [[nodiscard]] status adopt_seeded_chunk(std::uint32_t i, const std::string& path);
  void start_direct(std::uint64_t off, std::uint64_t end);
  void fetch_direct(const std::shared_ptr<direct_range>& d);
  // Serves a read from an answered direct range that holds `off` (true), or queues it on one
  // still being asked (true); false: no direct range holds it. Called with mu_ held (`lk`); may
  // unlock it.
  bool serve_direct(std::unique_lock<std::mutex>& lk, std::uint64_t off, std::uint64_t limit,
                    std::size_t max, read_cb& cb);
  [[nodiscard]] status wait_chunk(std::uint32_t i);
  [[nodiscard]] status assemble();
  // Appends chunk i (`len` bytes of `cid`, from the finished download's file at `path`, or
  // from the cache when `path` is empty) to the blob, straight from a mapping of its file.
  [[nodiscard]] status append_chunk(cache::object_writer& w, std::uint32_t i, const digest& cid,
                                    const std::string& path, std::uint64_t len);
  void mark_verified();
  void record_metainfo();
  void seed_whole();
  void finish(std::optional<error> e);
  // `waited`: a joined chunk's when_in_file answered (its file, or else read_piece, now).
  void serve(std::uint64_t off, std::size_t max, read_cb cb, bool waited = false);
  [[nodiscard]] std::string blob_path() const;

  deps d_;
  std::string ns_, repo_;
  digest id_;
  std::uint64_t size_, chunk_size_;
  std::uint32_t count_;
  std::string auth_;
  std::thread driver_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  state st_ = state::running;
  std::optional<error> err_;
  std::vector<chunk> chunks_;  // indexed by chunk number; entries fill in order
  std::uint32_t known_ = 0;
  std::uint32_t tail_from_ = UINT32_MAX;              // chunks from here come as ranges (take_tail)
  std::shared_ptr<cache::inflight_object> inflight_;  // the blob being written here
  bool first_round_ = false;                          // the first chunk-list answer was taken in
  std::string retry_after_;                           // set when shedding load failed the fetch
  bool verified_ = false;  // the blob's sha256 matched (its last byte may be served)
  std::multimap<std::uint32_t, waiter> waiting_;                 // by chunk
  std::vector<waiter> final_;                                    // need the verified blob
  bool in_order_ = false;                                        // want_in_order
  std::vector<std::pair<std::uint64_t, std::uint64_t>> wanted_;  // want_range's [off, end), newest
                                                                 // last, at most 16
  std::vector<std::shared_ptr<direct_range>> direct_;            // at most max_direct
  std::vector<std::pair<std::thread, std::shared_ptr<direct_range>>> direct_threads_;
  bool stopping_ = false;  // stop() was called (under mu_)
};

}  // namespace shoal::peerd
