#pragma once
// A small S3 client for dataset origins: ListObjectsV2 (paged) and ranged GETs, signed with AWS
// Signature Version 4 by libcurl (CURLOPT_AWS_SIGV4), path-style URLs so any S3-compatible
// endpoint works (MinIO, Ceph, s3rver in tests).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/http_client.h"

namespace shoal::s3 {

struct credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // optional (STS)
};

// From a file holding "ACCESS_KEY:SECRET" (first line), else from AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN. Errors name the file or the missing variable.
[[nodiscard]] result<credentials> load_credentials(const std::string& file);

struct config {
  std::string endpoint;  // "https://s3.us-east-1.amazonaws.com" or "http://127.0.0.1:4568"
  std::string region = "us-east-1";
  std::string bucket;
  credentials creds;
  http::timeouts timeouts;
};

struct object {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;  // as the server sent it (quotes removed); NOT a sha256
};

struct list_page {
  std::vector<object> objects;
  bool truncated = false;
  std::string next_token;
};

// Parses one ListObjectsV2 answer with expat. Bounded: refuses absurd input (over 64 MiB, keys
// over 64 KiB, nesting over 32) and any DOCTYPE (so no entity expansion) with a clear error. An
// S3 <Error> document becomes an upstream_error quoting its <Code> and <Message> (bounded, ASCII).
[[nodiscard]] result<list_page> parse_list_page(std::string_view xml);

// RFC 3986 encoding as SigV4 wants it: unreserved characters stay, '/' stays when `keep_slash`.
[[nodiscard]] std::string uri_encode(std::string_view s, bool keep_slash);

class client {
 public:
  client(http::client& http, config cfg) : http_(http), cfg_(std::move(cfg)) {}

  // Every object under `prefix` (all pages), at most `max_objects`. Blocking.
  [[nodiscard]] result<std::vector<object>> list(const std::string& prefix,
                                                 std::size_t max_objects = 100'000'000);
  // A signed GET of `key` (whole, or bytes [first, last]) to submit with streaming callbacks.
  [[nodiscard]] http::client_request get(
      const std::string& key,
      std::optional<std::pair<std::uint64_t, std::uint64_t>> range = {}) const;
  [[nodiscard]] std::string object_url(const std::string& key) const;
  [[nodiscard]] const config& cfg() const { return cfg_; }

  // Applies SigV4 signing to a request (exposed for tests against AWS's published examples).
  void sign(http::client_request& r, const std::string& service = "s3") const;

 private:
  http::client& http_;
  config cfg_;
};

}  // namespace shoal::s3
