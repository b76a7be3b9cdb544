#pragma once
// index: the RocksDB database under <root>/index, behind a small non-throwing interface so the
// rest of the cache never sees RocksDB types. Every rocksdb::Status is converted to a shoal
// error (NoSpace -> errc::no_space, everything else -> errc::io_error with the status text).
//
// Lifecycle: open() once, closed by the destructor. Thread-safe (RocksDB is).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "codec.h"
#include "common/error.h"

namespace shoal::cache::detail {

class index {
 public:
  // A group of changes applied atomically by write().
  class batch {
   public:
    batch();
    ~batch();
    batch(batch&&) noexcept;
    batch& operator=(batch&&) noexcept;
    void put(std::string_view key, std::string_view value);
    void del(std::string_view key);
    [[nodiscard]] std::size_t count() const noexcept;
    void clear();

   private:
    friend class index;
    struct impl;
    std::unique_ptr<impl> impl_;
  };

  struct open_options {
    // Move a database that RocksDB reports as corrupt aside (index.corrupt.<ms>) and start empty,
    // instead of failing: the objects are then re-adopted by reconciliation.
    bool recover_corruption = true;
  };

  [[nodiscard]] static result<std::unique_ptr<index>> open(const std::string& dir,
                                                           const open_options& opts);
  ~index();
  index(const index&) = delete;
  index& operator=(const index&) = delete;

  [[nodiscard]] status put(std::string_view key, std::string_view value, bool sync);
  [[nodiscard]] status write(batch& b, bool sync);
  // Calls fn for every record in key order.
  [[nodiscard]] status scan(
      const std::function<void(std::string_view key, std::string_view value)>& fn) const;
  // Clears a background error (after ENOSPC was relieved) so writes are accepted again.
  [[nodiscard]] status resume();
  // Persists the memtable to SST files (bulk loads; makes the next open fast).
  [[nodiscard]] status flush();
  [[nodiscard]] std::uint64_t estimate_keys() const;
  // True if open() found a corrupt database and moved it aside.
  [[nodiscard]] bool recovered_from_corruption() const noexcept { return recovered_; }

 private:
  index() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
  bool recovered_ = false;
};

}  // namespace shoal::cache::detail
