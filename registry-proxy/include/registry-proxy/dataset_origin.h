#pragma once
// A dataset's origin as registry-proxy reads it: the listing of what a declaration selects
// (S3 ListObjectsV2, or an https:// base whose directories nginx lists as JSON) and the fetch of
// one object into the cache.
//
// A fetch streams the object to a staging file on the cache's filesystem while hashing it
// (sha256), then hands the file to the cache (adopt_file), which verifies it again and renames
// it into place. Memory stays bounded (the bytes go from the socket to the file), and a fetch
// that breaks resumes: within one request through the HTTP client's Range resume, across
// requests (origin down, registry-proxy restarted) from the staging file's length, whose name is
// derived from the origin object's identity (key, size, ETag or mtime) so a changed object never
// continues an old one's bytes.
//
// Threading: an origin is immutable after make(); list() and fetch() block and may run on many
// threads at once.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.h"
#include "common/dataset.h"
#include "common/digest.h"
#include "common/error.h"
#include "common/http_client.h"
#include "registry-proxy/s3.h"

namespace shoal::proxy {

struct origin_options {
  // Declarations name credentials files relative to this directory (never outside it).
  std::string credentials_dir;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds stall_timeout{30000};
  int max_retries = 5;                 // whole-request retries of a fetch, each resuming
  std::size_t max_files = 10'000'000;  // objects a listing may select
  std::size_t max_depth = 64;          // http origins: directory nesting
};

// One selected object of the origin.
struct origin_object {
  std::string path;  // dataset-relative, checked with dataset::check_path
  std::uint64_t size = 0;
  std::string
      version;  // S3 ETag or HTTP mtime: part of the staging identity, never trusted for content
};

// What one fetch did (for progress and metrics).
struct fetch_report {
  digest id;
  std::uint64_t origin_bytes = 0;   // bytes received from the origin
  std::uint64_t resumed_bytes = 0;  // bytes reused from an earlier, interrupted fetch
  int requests = 0;
};

class dataset_origin {
 public:
  [[nodiscard]] static result<std::unique_ptr<dataset_origin>> make(const dataset::declaration& d,
                                                                    http::client& http,
                                                                    origin_options o);

  // Every object the declaration selects, sorted by path. Keys that fail dataset::check_path are
  // refused: the error names the key and the rule it breaks. Directory markers ("a/" keys of
  // size 0) are skipped. `cancel` is polled between requests.
  [[nodiscard]] result<std::vector<origin_object>> list(const std::atomic<bool>& cancel) const;

  // Fetches one object into the cache as a dataset_file. With `expected`, the bytes must hash to
  // it: otherwise the error is errc::digest_mismatch, "origin changed under version ...".
  // `progress(n)` is called with each chunk's size as it arrives.
  [[nodiscard]] result<fetch_report> fetch(const origin_object& o, cache::store& store,
                                           const std::string& staging_dir,
                                           const std::optional<digest>& expected,
                                           const std::function<void(std::uint64_t)>& progress,
                                           const std::atomic<bool>& cancel) const;

  // Where an object lives at the origin, for messages ("s3://bucket/prefix/a/b", "https://h/a/b").
  [[nodiscard]] std::string describe(const std::string& path) const;
  [[nodiscard]] const dataset::declaration& declaration() const { return decl_; }

 private:
  dataset_origin(dataset::declaration d, http::client& http, origin_options o)
      : decl_(std::move(d)), http_(http), opts_(std::move(o)) {}
  [[nodiscard]] result<std::vector<origin_object>> list_s3(const std::atomic<bool>& cancel) const;
  [[nodiscard]] result<std::vector<origin_object>> list_http(const std::atomic<bool>& cancel) const;
  [[nodiscard]] http::client_request request_for(const std::string& path, std::uint64_t from,
                                                 std::uint64_t size) const;

  dataset::declaration decl_;
  http::client& http_;
  origin_options opts_;
  std::unique_ptr<s3::client> s3_;
};

// The staging file name for an origin object: sha256 of (origin url, path, size, version).
[[nodiscard]] std::string staging_name(const std::string& origin_url, const origin_object& o);

}  // namespace shoal::proxy
