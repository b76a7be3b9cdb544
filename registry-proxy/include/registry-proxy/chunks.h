#pragma once
// Chunk objects: how a large blob swarms while registry-proxy is still fetching it.
//
// Metainfo covers a whole object (its info-hash comes from every piece hash), so a blob could
// only be swarmed once all of it was in from upstream. A blob at least `2 × chunk_size` long
// that peerd asked metainfo for is therefore also cut, as its bytes stream in, into consecutive
// chunks of `chunk_size` bytes (the last one shorter). Each chunk is an object of its own: its
// sha256 is computed here, it is committed to the cache under that digest, gets its own
// metainfo and is seeded at once. Nodes fetch the chunks through the swarm while the next ones
// are still downloading, join them into the blob and verify the blob's own digest
// (docs/p2p.md, "Chunks").
//
// chunk_list is the published state of one blob's chunks (read by the chunk endpoint);
// chunker feeds it. Both are thread-safe.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/digest.h"
#include "common/error.h"
#include "swarm/metainfo.h"

namespace shoal::proxy {

struct chunk_entry {
  digest id;
  std::uint64_t offset = 0, size = 0;
};

// The chunks of one blob known so far, in order. Lifecycle: created with the blob's upstream
// fetch, appended to by its chunker, then complete (every chunk published) or failed; kept a
// while after (blob_service) for nodes still joining.
class chunk_list {
 public:
  // `cut_publicly`: cut from a fetch made as registry-proxy itself (its chunk objects are public;
  // the blob becomes so only once its own bytes are verified).
  chunk_list(const digest& parent, std::uint64_t size, std::uint64_t chunk_size,
             bool cut_publicly = false)
      : parent_(parent), size_(size), chunk_size_(chunk_size), public_(cut_publicly) {}

  [[nodiscard]] bool cut_publicly() const { return public_; }

  [[nodiscard]] const digest& parent() const { return parent_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] std::uint64_t chunk_size() const { return chunk_size_; }
  // Chunk i starts at i × chunk_size; the last one also takes the remainder (it is between one
  // and two chunk sizes long), so no chunk is a sliver.
  [[nodiscard]] std::uint32_t chunk_count() const {
    return static_cast<std::uint32_t>(size_ / chunk_size_);
  }
  [[nodiscard]] std::uint64_t chunk_length(std::uint32_t i) const {
    return i + 1 < chunk_count() ? chunk_size_ : size_ - std::uint64_t{i} * chunk_size_;
  }

  struct snapshot {
    std::vector<chunk_entry> chunks;
    bool complete = false;
    std::optional<std::string> failed;
  };
  [[nodiscard]] snapshot snap() const;
  [[nodiscard]] bool contains(const digest& chunk) const;

  void publish(chunk_entry e);
  // Fails the list; `even_if_complete` also when every chunk was published (the blob itself
  // turned out not to match its digest, so its chunks do not make it up).
  void fail(std::string why, bool even_if_complete = false);
  // Runs `cb` once more than `have` chunks are published, or the list is complete or failed
  // (at once when that is already so). Returns false when `cb` was queued.
  bool when_beyond(std::size_t have, std::function<void()> cb);

 private:
  void fire_locked(std::vector<std::function<void()>>& out);

  digest parent_;
  std::uint64_t size_, chunk_size_;
  bool public_ = false;
  mutable std::mutex mu_;
  std::vector<chunk_entry> chunks_;
  std::optional<std::string> failed_;
  std::vector<std::pair<std::size_t, std::function<void()>>> waiters_;
};

// Cuts the bytes of one blob into chunk objects on a worker thread of its own (hashing and the
// chunk's cache commit stay off the upstream transfer's thread). update() copies and queues
// (blocking while more than `max_queued` bytes wait); finish() drains and returns whether every
// chunk was committed; abort() drops what is queued and fails the list.
class chunker {
 public:
  // commit(chunk, bytes, meta): stores one chunk object (cache, metainfo, seeding); called on
  // the worker thread, in order.
  using commit_fn =
      std::function<status(const chunk_entry&, const std::string&, const object_metainfo&)>;

  chunker(std::shared_ptr<chunk_list> list, commit_fn commit, std::size_t max_queued = 64u << 20);
  ~chunker();
  chunker(const chunker&) = delete;
  chunker& operator=(const chunker&) = delete;

  void update(const char* data, std::size_t n);
  [[nodiscard]] status finish();
  void abort(const std::string& why);

 private:
  void run();
  void close_chunk();

  std::shared_ptr<chunk_list> list_;
  commit_fn commit_;
  std::size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> q_;
  std::size_t queued_ = 0;
  bool closed_ = false, aborted_ = false;
  std::optional<error> err_;
  std::thread worker_;
  // Worker state.
  std::string buf_;
  std::uint64_t offset_ = 0;
};

// The chunk size used for an object of `size` bytes: `configured`, raised to a multiple of
// 1 MiB that gives at most 256 chunks. 0 when the object is not chunked (configured 0, or the
// object shorter than two chunks). Chunks are objects of their own: their pieces follow
// piece_size_for(chunk size).
[[nodiscard]] std::uint64_t chunk_size_for(std::uint64_t size, std::uint64_t configured);

}  // namespace shoal::proxy
