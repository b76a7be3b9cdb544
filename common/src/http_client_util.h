#pragma once
// Pure helpers of the HTTP client: URL origins and redirects (on curl's URL API), header and
// range parsing, CURLcode mapping, durations. No state; callable from any thread.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <curl/curl.h>

#include "common/error.h"

namespace shoal::http::detail {

// scheme, lower-case host and explicit port of an http(s) URL.
struct origin {
  std::string scheme;
  std::string host;
  std::string port;

  // "https://example.com:443": the key the client queues connections by.
  [[nodiscard]] std::string key() const { return scheme + "://" + host + ":" + port; }
  bool operator==(const origin&) const = default;
};

// Parses an absolute http:// or https:// URL; anything else is errc::invalid_argument.
[[nodiscard]] result<origin> parse_origin(const std::string& url);
// Resolves a Location value (absolute or relative) against the URL it came from; the result
// must be http(s).
[[nodiscard]] result<std::string> resolve_location(const std::string& base,
                                                   const std::string& location);
// The URL without user info and with the query replaced by "?…", for error messages and logs:
// presigned blob-storage URLs carry credentials in their query.
[[nodiscard]] std::string redact_url(const std::string& url);

bool iequals(std::string_view a, std::string_view b) noexcept;
std::string_view trim(std::string_view s) noexcept;

// "HTTP/1.1 200 OK" → 200 and "OK"; nullopt when the line is not a status line.
struct status_line {
  int status = 0;
  std::string reason;
};
[[nodiscard]] std::optional<status_line> parse_status_line(std::string_view line);

// "bytes 100-199/1000" (total may be "*").
struct content_range {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  std::optional<std::uint64_t> total;
};
[[nodiscard]] std::optional<content_range> parse_content_range(std::string_view v);
// A decimal Content-Length with nothing else.
[[nodiscard]] std::optional<std::uint64_t> parse_u64(std::string_view v);

// Retry-After as delta-seconds or an HTTP date, relative to now; nullopt when unparseable.
[[nodiscard]] std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view v);

// "250ms", "10s", "1.5s".
[[nodiscard]] std::string format_duration(std::chrono::milliseconds d);

// The project code for a curl failure, and whether a retry may help.
[[nodiscard]] errc map_curl_code(CURLcode code) noexcept;
[[nodiscard]] bool is_retryable(CURLcode code) noexcept;

}  // namespace shoal::http::detail
