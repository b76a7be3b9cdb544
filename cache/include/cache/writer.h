#pragma once
// object_writer: the one owner of a write in progress. Bytes go to a temp file under tmp/ and
// through a streaming sha256; commit() verifies size and hash, fdatasyncs, renames the file into
// objects/, fsyncs the shard directory and writes the index row (synced) before the object
// becomes visible. Anything else (mismatch, I/O error, abort(), destruction without commit)
// discards the temp file and fails the write for every follower.
//
// Threading: one thread at a time drives a writer (it is not internally synchronised); the store
// and followers may be used concurrently from other threads. A writer keeps the store's core
// alive; after the store is closed its commit() fails with errc::cancelled.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cache/inflight.h"
#include "cache/reader.h"
#include "cache/types.h"
#include "common/error.h"
#include "common/sha256.h"

namespace shoal::cache {

namespace detail {
class core;
}

class object_writer {
 public:
  object_writer(const object_writer&) = delete;
  object_writer& operator=(const object_writer&) = delete;
  ~object_writer();  // aborts the write unless it was committed

  // Appends at the current end (bytes_written()).
  [[nodiscard]] status write(std::span<const std::byte> data);
  [[nodiscard]] status write(std::string_view data);
  // Writes at `offset`, which may lie beyond the current end (pieces arriving out of order).
  // Followers see only the contiguous prefix. Rewriting bytes below bytes_written() is refused.
  [[nodiscard]] status write_at(std::uint64_t offset, std::span<const std::byte> data);

  // The whole object in one call, from offset 0, for a caller that already hashed exactly these
  // bytes in memory (`sha256`, e.g. registry-proxy naming a chunk it cut): they are not hashed a
  // second time, and commit() checks `sha256` against the object's id instead. Refused after any
  // other write, or when `data` is not the expected size.
  [[nodiscard]] status write_whole_hashed(std::string_view data, const digest& sha256);

  // Verifies and publishes the object (see the class comment). On error the write has failed.
  [[nodiscard]] result<object_info> commit();
  // Gives up the write: followers see errc::cancelled with `reason`.
  void abort(std::string_view reason);

  // Length of the contiguous prefix written so far.
  [[nodiscard]] std::uint64_t bytes_written() const noexcept { return contiguous_; }
  [[nodiscard]] const digest& id() const noexcept;
  [[nodiscard]] const std::shared_ptr<inflight_object>& inflight() const noexcept {
    return inflight_;
  }

 private:
  friend class detail::core;
  object_writer(std::shared_ptr<detail::core> core, std::shared_ptr<inflight_object> inflight,
                std::string tmp_name);

  [[nodiscard]] status write_bytes(std::uint64_t offset, std::span<const std::byte> data);
  [[nodiscard]] status hash_from_file(std::uint64_t from, std::uint64_t to);
  [[nodiscard]] status ensure_reserved(std::uint64_t end);
  error fail(error e);

  std::shared_ptr<detail::core> core_;
  std::shared_ptr<inflight_object> inflight_;
  std::string tmp_name_;  // name inside tmp/
  sha256_hasher hasher_;
  std::uint64_t contiguous_ = 0;      // bytes [0, contiguous_) written and hashed
  std::uint64_t reserved_ = 0;        // bytes accounted against capacity
  std::uint64_t writeback_from_ = 0;  // start of the range not yet handed to writeback
  std::map<std::uint64_t, std::uint64_t> pending_;  // out-of-order ranges: start -> end
  std::optional<digest> prehashed_;                 // write_whole_hashed: the caller's sha256
  bool done_ = false;
};

enum class write_role { writer, follower, present };

// What begin_write returns: exactly one role applies.
struct write_ticket {
  write_role role = write_role::writer;
  // role::writer: you own the write; drive it to commit() or drop it.
  std::unique_ptr<object_writer> writer;
  // role::writer and role::follower: the in-flight object (follow progress, read early bytes).
  std::shared_ptr<inflight_object> inflight;
  // role::present: the object is already committed; it was opened for you (counts as a hit).
  std::optional<object_reader> reader;
};

}  // namespace shoal::cache
