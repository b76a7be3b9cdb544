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
#include <mutex>
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

// One entry of datasets.allowed_origins: a scheme+host+port dataset origins (HTTP bases and S3
// endpoints) and every redirect hop may use, and the S3 credentials bound to it.
struct allowed_origin {
  http::endpoint at;
  // Whether a host name here may resolve to loopback, link-local or private addresses. An IP
  // literal names its own address: no need for this.
  bool private_addresses = false;
  std::string credentials_file;      // S3: the file requests to this endpoint are signed with
  bool credentials_env = false;      // S3: else the process's AWS_* variables (else: unsigned)
  std::vector<std::string> buckets;  // S3: the buckets datasets may read here (empty: any)
};

// The entry of `allowed` for `e`, or null.
[[nodiscard]] const allowed_origin* find_allowed(const std::vector<allowed_origin>& allowed,
                                                 const http::endpoint& e);
// Whether `ip` (dotted IPv4 or IPv6 text) is an ordinary public unicast address: not loopback,
// link-local, private (RFC 1918, ULA), shared (100.64/10), unspecified, multicast, broadcast or
// reserved; IPv4-mapped IPv6 addresses are judged as their IPv4 address.
[[nodiscard]] bool public_address(const std::string& ip);
// The policy every dataset origin request runs under: each hop's scheme+host+port must be in
// `allowed`, and each address connected to must be public unless the entry names it (an IP
// literal) or allows private addresses. Refusals are errc::unauthorized errors that name the hop
// and never anything fetched from it.
[[nodiscard]] http::connect_policy dataset_connect_policy(
    std::shared_ptr<const std::vector<allowed_origin>> allowed);

struct origin_options {
  // Relative credentials_file names in `allowed` are resolved here.
  std::string credentials_dir;
  // Where datasets may come from. Unset (unit tests): anywhere, and a declaration's
  // credentials_file names a file in credentials_dir. Set (the daemon, always): only these, with
  // the credentials bound to them; a declaration's credentials_file must be the bound one.
  std::shared_ptr<const std::vector<allowed_origin>> allowed;
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds stall_timeout{30000};
  int max_retries = 5;                 // whole-request retries of a fetch, each resuming
  std::size_t max_files = 10'000'000;  // objects a listing may select
  std::size_t max_depth = 64;          // http origins: directory nesting
};

// The room staging files may take. The sizes an origin lists are foreign: a fetch reserves the
// listed size before it writes a byte, against the cache's quota (with what the cache holds and
// the other staging files; least recently used objects are evicted to make room) and against the
// filesystem's free space, and checks the free space again while it writes.
class staging_budget {
 public:
  staging_budget(cache::store& store, std::string dir, std::uint64_t keep_free)
      : store_(store), dir_(std::move(dir)), keep_free_(keep_free) {}
  // Reserves `n` bytes of which `need` are still to be written; errc::no_space saying which
  // limit when they do not fit.
  [[nodiscard]] status reserve(std::uint64_t n, std::uint64_t need);
  void release(std::uint64_t n);
  // Whether the filesystem can still take `n` more bytes and keep `keep_free` free.
  [[nodiscard]] status check_free(std::uint64_t n) const;
  [[nodiscard]] std::uint64_t reserved() const { return reserved_.load(); }

 private:
  cache::store& store_;
  std::string dir_;
  std::uint64_t keep_free_;
  std::mutex mu_;
  std::atomic<std::uint64_t> reserved_{0};
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
  // With `budget`, the staging file's listed size is reserved first (and the free space checked
  // while writing). A fetch that fails removes its staging file, unless resumable_failure(): then
  // the bytes stay for the next attempt (registry-proxy stopping, the origin down for a while),
  // until the start-up sweep.
  [[nodiscard]] result<fetch_report> fetch(const origin_object& o, cache::store& store,
                                           const std::string& staging_dir,
                                           const std::optional<digest>& expected,
                                           const std::function<void(std::uint64_t)>& progress,
                                           const std::atomic<bool>& cancel,
                                           staging_budget* budget = nullptr) const;

  // Where an object lives at the origin, for messages ("s3://bucket/prefix/a/b", "https://h/a/b").
  [[nodiscard]] std::string describe(const std::string& path) const;
  [[nodiscard]] const dataset::declaration& declaration() const { return decl_; }

 private:
  dataset_origin(dataset::declaration d, http::client& http, origin_options o)
      : decl_(std::move(d)), http_(http), opts_(std::move(o)) {}
  [[nodiscard]] result<std::vector<origin_object>> list_s3(const std::atomic<bool>& cancel) const;
  [[nodiscard]] result<std::vector<origin_object>> list_http(const std::atomic<bool>& cancel) const;
  [[nodiscard]] result<fetch_report> fetch_staged(
      const origin_object& o, cache::store& store, const std::string& path,
      const std::optional<digest>& expected, const std::function<void(std::uint64_t)>& progress,
      const std::atomic<bool>& cancel, staging_budget* budget) const;
  [[nodiscard]] http::client_request request_for(const std::string& path, std::uint64_t from,
                                                 std::uint64_t size) const;

  dataset::declaration decl_;
  http::client& http_;
  origin_options opts_;
  std::unique_ptr<s3::client> s3_;
};

// Whether a fetch that failed so keeps its staging file (a valid prefix to resume from): it was
// cancelled, timed out, the origin was unreachable, answered 5xx or would not resume. An object
// that changed (size, digest) or is gone, a refusal (policy, 401/403), a full disk, a local
// write error and the like remove it.
[[nodiscard]] bool resumable_failure(const error& e);
// How long a staging file kept for a resume may wait for it (swept at start).
inline constexpr std::chrono::hours kStagingKeep{24};

// The staging file name for an origin object: sha256 of (origin url, path, size, version).
[[nodiscard]] std::string staging_name(const std::string& origin_url, const origin_object& o);

}  // namespace shoal::proxy
