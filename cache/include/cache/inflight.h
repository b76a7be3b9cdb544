#pragma once
// inflight_object: the shared state of one write in progress, seen by its writer and by any
// number of followers (callers whose begin_write found the digest already being written).
//
// A follower may read the bytes already written (pread, or sendfile on fd()) so a server can
// stream an object while it is still arriving; those bytes are NOT verified until the state is
// `committed`. When the write fails (hash or size mismatch, I/O error, abort, or the writer handle
// dropped without commit) the state becomes `failed` and followers must discard what they read.
//
// Lifetime: shared_ptr, held by the store while the write is in progress and by every follower;
// the temp file's fd stays open until the last holder lets go (it remains valid after the commit
// renames the file, and after a failure unlinks it). Thread-safe.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "cache/types.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache {

namespace detail {
class core;
}
class object_writer;

enum class write_state : std::uint8_t { writing, committed, failed };

// A snapshot of a write: how many leading bytes exist and whether it is still going.
struct progress {
  write_state state = write_state::writing;
  std::uint64_t available = 0;  // bytes [0, available) are written (final size once committed)
  std::optional<error> err;     // set when state == failed
  // Every byte is written and the content matched its digest; the commit (fdatasync, rename,
  // index row) may still be running. Bytes read now are final and correct, though the cache may
  // still fail to keep them. Always true once committed.
  bool verified = false;
};

class inflight_object {
 public:
  using callback = std::function<void(const progress&)>;

  inflight_object(const inflight_object&) = delete;
  inflight_object& operator=(const inflight_object&) = delete;
  ~inflight_object();

  [[nodiscard]] const digest& id() const noexcept { return id_; }
  [[nodiscard]] object_kind kind() const noexcept { return kind_; }
  [[nodiscard]] std::optional<std::uint64_t> expected_size() const noexcept { return expected_; }
  [[nodiscard]] std::uint64_t available() const noexcept {
    return available_.load(std::memory_order_acquire);
  }
  [[nodiscard]] write_state state() const noexcept {
    return state_.load(std::memory_order_acquire);
  }
  [[nodiscard]] progress snapshot() const;
  // The temp file (read-only use: pread/sendfile below available()). -1 for adoptions.
  [[nodiscard]] int fd() const noexcept { return fd_; }

  // Calls `cb` once: when more than `offset` bytes exist, or on commit, or on failure, whichever
  // comes first. Runs immediately on the calling thread if that is already true, else later on
  // the writer's thread (keep it short and non-blocking; it may call wait_for again).
  void wait_for(std::uint64_t offset, callback cb);
  // Blocks until more than `offset` bytes exist, the write ends, or `timeout` passes; returns the
  // state at that moment (check `available` and `state`).
  [[nodiscard]] progress wait(std::uint64_t offset, std::chrono::milliseconds timeout) const;
  // Calls `cb` once: when the content is verified (see progress::verified), or on commit, or on
  // failure, whichever comes first; same threading as wait_for. A server streaming an object
  // that is still arriving holds its last byte until then.
  void wait_verified(callback cb);

  // Reads written bytes at `offset` (up to out.size(), fewer at the current end). Fails if the
  // write failed, before or during the read, so a caller never mistakes failed bytes for data.
  [[nodiscard]] result<std::size_t> pread(std::uint64_t offset, std::span<std::byte> out) const;

 private:
  friend class detail::core;
  friend class object_writer;

  inflight_object(const digest& id, object_kind kind, std::optional<std::uint64_t> expected,
                  int fd) noexcept
      : id_(id), kind_(kind), expected_(expected), fd_(fd) {}

  // Writer side: publish that [0, n) now exists and fire the waiters that asked for less.
  void advance(std::uint64_t n);
  void mark_verified();
  void finish_committed(std::uint64_t size);
  void finish_failed(error e);

  struct waiter {
    std::uint64_t offset;
    callback cb;
    bool on_verified = false;  // wait_verified: offset is ignored
  };
  void fire(std::vector<waiter>& ready, const progress& p);

  const digest id_;
  const object_kind kind_;
  const std::optional<std::uint64_t> expected_;
  int fd_ = -1;
  std::atomic<std::uint64_t> available_{0};
  std::atomic<write_state> state_{write_state::writing};
  std::atomic<bool> verified_{false};
  std::atomic<bool> has_waiters_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<error> error_;   // guarded by mu_
  std::vector<waiter> waiters_;  // guarded by mu_
};

}  // namespace shoal::cache
