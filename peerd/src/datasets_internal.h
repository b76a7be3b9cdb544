#pragma once
// What the parts of peerd's dataset manager share, private to them: a prefetch job and small
// helpers. datasets.cc holds the lifecycle, the prefetch steps and presence, datasets_fetch.cc
// fetching the pack groups and materializing views, datasets_http.cc the node's dataset API.
#include "datasets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/log.h"
#include "common/checkpoint.h"
#include "common/origin_protocol.h"
#include "swarm/metainfo.h"

namespace shoal::peerd {

namespace fs = std::filesystem;
namespace net = boost::asio;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace datasets_detail {

// Makes a tree writable again (views are 0555) and removes it.
inline void remove_tree(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  for (auto it = fs::recursive_directory_iterator(path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec)) ::chmod(it->path().c_str(), 0755);
  }
  ::chmod(path.c_str(), 0755);
  fs::remove_all(path, ec);
}

inline http::response json_answer(unsigned status, const std::string& body) {
  return http::response::json(status, body);
}

inline http::response json_error(unsigned status, const std::string& message) {
  return origin::plain_error(status, message);
}

}  // namespace datasets_detail

struct dataset_manager::job {
  std::string ref;
  mutable std::mutex mu;
  std::condition_variable cv;
  // queued | resolving | fetching | materializing | ready | failed
  std::string state = "queued";
  std::string error;
  bool running = false;
  bool view = false;         // the view is materialized
  bool view_pinned = false;  // every object carries the view's pin
  // When the view and its pins expire (persisted as "expires", ms since the epoch).
  std::optional<cache::time_point> expires;
  std::optional<digest> manifest_digest;
  std::shared_ptr<const dataset::manifest> manifest;  // what this job fetches and shows
  std::shared_ptr<const dataset::manifest> full;      // as published (differs only with ranks)
  std::vector<std::uint32_t> ranks;      // checkpoints: the ranks restored (empty: all)
  std::vector<std::uint32_t> group_ids;  // manifest's groups in full's numbering (empty: same)
  std::vector<std::pair<digest, std::uint64_t>> objects;  // distinct, for presence
  std::vector<std::pair<std::string, std::optional<cache::time_point>>> pending_pins;
  std::vector<std::shared_ptr<group_download>> active;
  std::uint64_t files = 0, total = 0, groups = 0;
  std::atomic<std::uint64_t> groups_done{0}, done_bytes{0}, local_bytes{0};
  std::atomic<std::uint64_t> from_peers{0}, from_origin{0}, from_http{0};
  std::atomic<bool> cancel{false};
  steady::time_point started = steady::now(), fetch_started = steady::now(), ended;
  double seconds = 0;  // of the last prefetch that ended

  std::uint64_t bytes_done_locked() const {
    std::uint64_t b = done_bytes.load();
    for (const auto& dl : active) b += dl->bytes_done();
    return std::min(b, total);
  }
};

}  // namespace shoal::peerd
