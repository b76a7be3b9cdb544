#pragma once
// peerd's records in its side index (cache::state_db, under <cache.dir>/../state): the torrent
// of every object it holds (so any holder can serve its swarm later without rehashing) and the
// info-hash → digest map the on-demand seeder needs, mirrored in memory for lookups from
// libtorrent's network thread. Rows: "t/<64 hex digest>" → .torrent bytes, "h/<40 hex
// info-hash>" → 64 hex digest. Thread-safe; put/torrent/forget block on RocksDB (worker
// threads), the lookups by hash only read memory.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/state_db.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::peerd {

class state_db {
 public:
  [[nodiscard]] static result<std::unique_ptr<state_db>> open(const std::string& dir);
  state_db(const state_db&) = delete;
  state_db& operator=(const state_db&) = delete;

  // Stores the torrent of an object (info-hash given as 40 hex characters).
  [[nodiscard]] status put(const digest& d, const std::string& info_hash_hex,
                           const std::string& torrent);
  [[nodiscard]] std::optional<std::string> torrent(const digest& d) const;
  [[nodiscard]] std::optional<digest> by_info_hash(const std::string& info_hash_hex) const;
  [[nodiscard]] std::optional<std::string> info_hash(const digest& d) const;
  [[nodiscard]] status forget(const digest& d);
  // Every (digest, info-hash) known, sorted by digest.
  [[nodiscard]] std::vector<std::pair<digest, std::string>> all() const;
  // A number that changes with every put() and forget(), i.e. whenever all() may give something
  // else. Read it before all(): while it has not moved since, neither has the list.
  [[nodiscard]] std::uint64_t generation() const noexcept {
    return generation_.load(std::memory_order_acquire);
  }

 private:
  explicit state_db(std::unique_ptr<cache::state_db> db) : db_(std::move(db)) {}
  std::unique_ptr<cache::state_db> db_;
  mutable std::mutex mu_;
  std::map<std::string, digest> by_hash_;
  std::map<digest, std::string> hash_of_;
  std::atomic<std::uint64_t> generation_{1};  // bumped under mu_ with each change to the maps
};

}  // namespace shoal::peerd
