#pragma once
// What the parts of registry-proxy's dataset service share, private to them: the record of a
// declared dataset, the single flight of a pack group, and small helpers for answers, files and
// cache objects. datasets.cc holds the service's lifecycle and its pack groups,
// datasets_http.cc the HTTP API, datasets_resolve.cc the resolution of a declaration into a
// manifest.
#include "registry-proxy/datasets.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/file.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "registry-proxy/seeder.h"
#include "common/siphash.h"
#include "common/json_text.h"

namespace shoal::proxy {

namespace fs = std::filesystem;
namespace net = boost::asio;
using nlohmann::json;
using steady = std::chrono::steady_clock;

namespace datasets_detail {

inline http::response json_answer(unsigned status, const json& j) {
  return http::response::json(status, json_text(j));
}

inline http::response json_error(unsigned status, const std::string& message) {
  return origin::plain_error(status, utf8_safe(message, 2048));
}

// Runs `f` (returning status) so that nothing escapes: a pool task or thread body that throws
// would end the process, or leave its waiters waiting. What it threw becomes an internal error.
template <class F>
status guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(errc::internal, "internal error: unknown exception");
  }
}

// Runs the body `f` of a pool task that answers `resp`: what it throws is logged and answered
// 500, and never leaves the pool's thread.
template <class F>
void answer_guarded(const http::responder& resp, F&& f) noexcept {
  std::string why;
  try {
    f();
    return;
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "unknown exception";
  }
  try {
    log::error("dataset request failed", log::kv("error", utf8_safe(why)));
    resp.send(json_error(500, "internal error: " + why));
  } catch (...) {
  }
}

inline unsigned status_for(const error& e) {
  if (e.is(errc::not_found)) return 404;
  if (e.is(errc::invalid_argument)) return 400;
  if (e.is(errc::digest_mismatch)) return 409;
  if (e.is(errc::unauthorized)) return 502;
  if (e.is(errc::timeout)) return 504;
  if (e.is(errc::no_space)) return 507;
  return 502;
}

inline result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return fail(errc::not_found, "cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Reads a cache object's bytes for build_pack().
inline result<std::size_t> read_object(cache::store& store, const digest& d, std::uint64_t off,
                                       char* buf, std::size_t n) {
  unique_fd fd(::open(store.object_path(d).c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(errno, "open " + store.object_path(d));
  ssize_t r;
  do {
    r = ::pread(fd.get(), buf, n, static_cast<off_t>(off));
  } while (r < 0 && errno == EINTR);
  if (r < 0) return fail_errno(errno, "read " + store.object_path(d));
  return static_cast<std::size_t>(r);
}

}  // namespace datasets_detail

// One declared dataset. Immutable identity (ref, declaration); state behind `mu`.
struct dataset_service::record {
  std::string ref;
  dataset::declaration decl;
  std::string decl_json;

  mutable std::mutex mu;
  std::string state = "resolving";  // resolving | ready | failed
  std::optional<digest> manifest_digest;
  std::string error;
  int interrupted = 0;   // starts of registry-proxy that found this record resolving, in a row
  bool standby = false;  // a copy of another ring member's record (accept_copy)
  bool queued = false;   // waiting for a resolver thread
  std::uint64_t files = 0, bytes = 0, groups = 0;
  double resolve_seconds = 0;
  std::shared_ptr<const dataset::manifest> manifest;
  std::shared_ptr<const std::unordered_map<digest, std::uint32_t, keyed_hash>>
      by_digest;  // digest → a file index
  std::shared_ptr<const dataset_origin> origin;
  bool running = false;

  std::atomic<std::uint64_t> files_total{0}, files_done{0}, bytes_total{0}, bytes_done{0};
  std::atomic<std::uint64_t> origin_bytes{0}, resumed_bytes{0};
  steady::time_point started = steady::now();
};

// The single flight of "make group G of a dataset ready to download" (fetches again what was
// evicted), with the requests waiting for it.
struct dataset_service::group_job {
  std::mutex mu;
  bool done = false;
  unsigned status = 200;
  std::string torrent, info_hash, kind, message;
  std::uint64_t bytes = 0;
  std::atomic<std::uint64_t> bytes_done{0};
  std::vector<std::function<void()>> waiters;
};

}  // namespace shoal::proxy
