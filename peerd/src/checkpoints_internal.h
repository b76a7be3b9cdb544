#pragma once
// What the two halves of checkpoint_publisher (checkpoints.cc: the publish steps;
// checkpoints_http.cc: records, restart, presence and the API) share: one publish.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoints.h"

namespace shoal::peerd {

struct checkpoint_publisher::pub {
  std::string key, job, dir;
  std::uint64_t step = 0;
  std::map<std::string, std::vector<std::uint32_t>> ranks;
  mutable std::mutex mu;
  // listing | reading | seeding | registering | registered | unpinned | failed | refused
  // (refused: this publish of a step registered before failed; the registered one stands)
  std::string state = "listing";
  std::string error;
  bool running = false;
  std::optional<digest> manifest;
  std::vector<std::pair<digest, std::uint64_t>> objects;  // distinct, pinned here
  std::uint64_t files = 0, bytes = 0, groups = 0;
  std::atomic<std::uint64_t> bytes_read{0}, bytes_stored{0}, files_done{0};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double read_s = 0, publish_s = 0;  // to the end of reading; to "registered"
  // A publish again of a step registered before: that record (its manifest and pins stand).
  std::shared_ptr<pub> previous;
  std::vector<std::pair<digest, std::uint64_t>> pinned;  // this attempt's pins
  [[nodiscard]] bool held() const { return state == "registered" || state == "refused"; }
};

// The swarm download of group g of `m` (checkpoint `key`) with its torrent: what fetch_group
// takes to seed a group held here (complete: it is added as a seed at once), super-seeded: this
// node published it and is its first holder.
group_spec group_spec_of(const std::string& key, const dataset::manifest& m, std::uint32_t g,
                         std::string torrent);

}  // namespace shoal::peerd
