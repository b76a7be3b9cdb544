#pragma once
// state_db: a daemon's side index beside the object store, the one type both daemons keep their
// per-node records in (peerd: each object's torrent and the info-hash map; registry-proxy: tag
// resolutions, media types, visibility, metainfo). Rows are string keys and values in a RocksDB
// of their own directory; what the keys mean is the daemon's schema, not the cache's (the cache
// stays ignorant of tags, torrents and visibility). Not the object store's index (store.h).
//
// Durability: writes go to RocksDB's WAL without a sync per write (a crash may lose the last
// writes, never corrupt the rows), the same as both daemons did before this type existed.
//
// Lifecycle: open() creates the directory and the database if needed; the destructor closes it.
// Threading: every method is thread-safe and blocks on RocksDB: call from worker threads, never
// from an event loop. A read-modify-write across calls is the caller's to serialize.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace shoal::cache {

struct state_db_options {
  // Names the database in errors ("open peerd state /var/lib/shoal/state: ...").
  std::string label = "state index";
  // RocksDB's open file limit (SST files).
  int max_open_files = 128;
};

class state_db {
 public:
  // A group of puts and deletes that write() applies atomically, in order.
  class batch {
   public:
    void put(std::string_view key, std::string_view value);
    void remove(std::string_view key);
    [[nodiscard]] bool empty() const noexcept { return ops_.empty(); }

   private:
    friend class state_db;
    struct op {
      std::string key;
      std::optional<std::string> value;  // nullopt: delete
    };
    std::vector<op> ops_;
  };

  // Fails with the label, the directory and the reason (not a directory, permissions, the
  // database locked by another process, RocksDB's own errors).
  [[nodiscard]] static result<std::unique_ptr<state_db>> open(const std::string& dir,
                                                              const state_db_options& opts = {});
  ~state_db();
  state_db(const state_db&) = delete;
  state_db& operator=(const state_db&) = delete;

  // The value of `key`: nullopt when absent, an error when it cannot be read.
  [[nodiscard]] result<std::optional<std::string>> get(std::string_view key) const;
  [[nodiscard]] status put(std::string_view key, std::string_view value);
  [[nodiscard]] status write(const batch& b);
  // Calls fn(key, value) for every row whose key starts with `prefix`, in key order (the whole
  // key, prefix included).
  [[nodiscard]] status scan(
      std::string_view prefix,
      const std::function<void(std::string_view key, std::string_view value)>& fn) const;

 private:
  struct impl;
  explicit state_db(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

}  // namespace shoal::cache
