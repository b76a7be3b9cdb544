#pragma once
// Helpers shared by peerd's unit tests: a temp directory removed with its contents,
// deterministic object bytes, an object's metainfo, a stand-in for registry-proxy's blob URL
// (Range), and one node's storage and swarm on loopback. Header-only because every *_test.cc is
// its own executable.

#include <unistd.h>

#include <boost/asio/thread_pool.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "../common/support/test_http_server.h"
#include "cache/store.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/sha256.h"
#include "peerd/config.h"
#include "peerd/state_db.h"
#include "peerd/swarm.h"

namespace shoal::peerd::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/shoal-peerd-test-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (!p) std::abort();
    path_ = p;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `n` pseudo-random bytes, the same for the same seed.
inline std::string bytes_of(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; i += 8) {
    auto v = rng();
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) out[i + k] = static_cast<char>(v >> (8 * k));
  }
  return out;
}

// The metainfo registry-proxy would publish for `bytes`.
inline object_metainfo meta_of(const std::string& bytes) {
  metainfo_builder b(bytes.size());
  b.update(bytes.data(), bytes.size());
  auto m = b.finish(sha256_of(bytes));
  if (!m) throw std::runtime_error(m.error().message);
  return *m;
}

// A stand-in for registry-proxy's blob URL answering Range requests from `bytes`.
inline ::shoal::testing::reply range_reply(const std::string& bytes,
                                           const ::shoal::testing::recorded_request& r) {
  ::shoal::testing::reply out;
  auto range = r.header("Range");
  if (!range || range->rfind("bytes=", 0) != 0) {
    out.body = bytes;
    return out;
  }
  auto dash = range->find('-');
  std::uint64_t from = std::stoull(range->substr(6, dash - 6));
  std::uint64_t to = std::stoull(range->substr(dash + 1));
  out.status = 206;
  out.body = bytes.substr(from, to - from + 1);
  out.headers.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                                std::to_string(to) + "/" +
                                                std::to_string(bytes.size()));
  return out;
}

// One node's storage and swarm on loopback, without a tracker: its cache (1 GiB, no scrub
// throttle), state index, HTTP client, worker pool and swarm (listening on 127.0.0.1, partial
// directory in its own temp directory; `swarm_cfg` says so once started).
struct swarm_node {
  explicit swarm_node(const std::string& name, swarm_config c = {}) : swarm_cfg(std::move(c)) {
    // SHOAL_TRACE=1 shows every libtorrent alert (debugging a failure by hand).
    if (std::getenv("SHOAL_TRACE")) log::init(log::format::text, log::level::trace, "peerd_test");
    cache::options co;
    co.root = dir.path() + "/cache";
    co.quota_bytes = 1ull << 30;
    co.scrub_bytes_per_sec = 0;
    auto st = cache::store::open(co);
    if (!st) throw std::runtime_error(st.error().message);
    store = std::move(*st);
    auto sdb = state_db::open(dir.path() + "/state");
    if (!sdb) throw std::runtime_error(sdb.error().message);
    state = std::move(*sdb);
    swarm_cfg.listen = "127.0.0.1:0";
    swarm_cfg.partial_dir = dir.path() + "/partial";
    node_config nc;
    nc.name = name;
    auto sw =
        swarm_manager::start(swarm_cfg, nc, {}, swarm_manager::deps{*store, *state, http, pool});
    if (!sw) throw std::runtime_error(sw.error().message);
    swarm = std::move(*sw);
  }
  ~swarm_node() { stop(); }
  swarm_node(const swarm_node&) = delete;
  swarm_node& operator=(const swarm_node&) = delete;

  // Swarm, HTTP client, worker pool (joined: no task of theirs runs after), then the cache.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    swarm->stop();
    http.stop();
    pool.join();
    store->stop();
  }

  [[nodiscard]] std::string endpoint() const {
    return "127.0.0.1:" + std::to_string(swarm->listen_port());
  }

  // Puts a complete object into the cache and the state index, without loading its torrent:
  // the situation of a node whose seed was unloaded (or that restarted).
  void hold(const std::string& bytes, const object_metainfo& m) {
    std::string tmp = dir.path() + "/cache/in.tmp";
    std::ofstream(tmp, std::ios::binary) << bytes;
    auto st = store->adopt_file(tmp, m.object, cache::object_kind::blob);
    if (!st) throw std::runtime_error(st.error().message);
    auto p = state->put(m.object, m.info_hash_hex(), m.torrent_file({}));
    if (!p) throw std::runtime_error(p.error().message);
  }

  temp_dir dir;
  swarm_config swarm_cfg;
  std::unique_ptr<cache::store> store;
  std::unique_ptr<state_db> state;
  http::client http;
  boost::asio::thread_pool pool{4};
  std::unique_ptr<swarm_manager> swarm;

 private:
  bool stopped_ = false;
};

}  // namespace shoal::peerd::testing
