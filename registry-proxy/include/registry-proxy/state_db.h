#pragma once
// registry-proxy's records in its side index (cache::state_db, under state_dir): tag
// resolutions, manifest media types, object visibility (public, or private to the repositories
// it was fetched from), and each object's metainfo (piece hashes) so it is computed once. Rows:
// "t/<tag key>" and "v/<64 hex>" → versioned JSON, "m/<64 hex>" → media type, "i/<64 hex>" →
// metainfo. Thread-safe; every call does blocking RocksDB work (call it from worker threads).

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/state_db.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::proxy {

struct tag_entry {
  digest dig;
  std::string media_type;
  std::int64_t fetched_ms = 0;  // wall clock, ms since epoch
  bool is_public = false;
};

struct visibility {
  bool is_public = false;
  std::vector<std::string>
      repos;  // "<upstream>/<repo>" it was fetched from with client credentials
};

class state_db {
 public:
  [[nodiscard]] static result<std::unique_ptr<state_db>> open(const std::string& dir);
  state_db(const state_db&) = delete;
  state_db& operator=(const state_db&) = delete;

  [[nodiscard]] std::optional<tag_entry> get_tag(const std::string& key) const;
  [[nodiscard]] status put_tag(const std::string& key, const tag_entry& e);
  // Deletes the tag rows fetched before `older_than_ms` (wall clock, ms since epoch) and rows
  // that are not JSON; returns how many went.
  [[nodiscard]] result<std::size_t> sweep_tags(std::int64_t older_than_ms);

  [[nodiscard]] std::optional<std::string> get_media_type(const digest& d) const;
  [[nodiscard]] status put_media_type(const digest& d, const std::string& mt);

  [[nodiscard]] std::optional<visibility> get_visibility(const digest& d) const;
  // Merges: public stays public; a repository is added once.
  [[nodiscard]] status add_visibility(const digest& d, bool is_public, const std::string& repo);

  [[nodiscard]] std::optional<std::string> get_metainfo(const digest& d) const;
  [[nodiscard]] status put_metainfo(const digest& d, const std::string& info_dict);

  // Forgets everything about an object (it left the cache).
  [[nodiscard]] status forget(const digest& d);

 private:
  explicit state_db(std::unique_ptr<cache::state_db> db) : db_(std::move(db)) {}
  [[nodiscard]] std::optional<std::string> get(const std::string& key) const;
  [[nodiscard]] status put(const std::string& key, const std::string& value);
  std::unique_ptr<cache::state_db> db_;
  mutable std::mutex mu_;  // serializes read-modify-write of visibility
};

}  // namespace shoal::proxy
