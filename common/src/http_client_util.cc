#include "http_client_util.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>
#include <memory>

#include "common/utf8.h"

namespace shoal::http::detail {
namespace {

struct curlu_deleter {
  void operator()(CURLU* u) const noexcept { curl_url_cleanup(u); }
};
using curlu_ptr = std::unique_ptr<CURLU, curlu_deleter>;

// Reads one part of a parsed URL; empty when absent.
std::string get_part(CURLU* u, CURLUPart part, unsigned flags = 0) {
  char* out = nullptr;
  if (curl_url_get(u, part, &out, flags) != CURLUE_OK || out == nullptr) return {};
  std::string s(out);
  curl_free(out);
  return s;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

result<origin> parse_origin(const std::string& url) {
  curlu_ptr u(curl_url());
  if (!u) return fail(errc::internal, "curl_url: out of memory");
  if (CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0); rc != CURLUE_OK) {
    return fail(errc::invalid_argument,
                "invalid URL " + redact_url(url) + ": " + curl_url_strerror(rc));
  }
  origin o;
  o.scheme = lower(get_part(u.get(), CURLUPART_SCHEME));
  if (o.scheme != "http" && o.scheme != "https") {
    return fail(errc::invalid_argument, "unsupported URL scheme in " + redact_url(url));
  }
  o.host = lower(get_part(u.get(), CURLUPART_HOST));
  o.port = get_part(u.get(), CURLUPART_PORT, CURLU_DEFAULT_PORT);
  if (o.host.empty()) return fail(errc::invalid_argument, "URL without host: " + redact_url(url));
  return o;
}

result<std::string> resolve_location(const std::string& base, const std::string& location) {
  curlu_ptr u(curl_url());
  if (!u) return fail(errc::internal, "curl_url: out of memory");
  if (curl_url_set(u.get(), CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) {
    return fail(errc::invalid_argument, "invalid URL " + redact_url(base));
  }
  // Setting a URL on a handle that already holds one resolves a relative reference against it.
  if (CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, location.c_str(), 0); rc != CURLUE_OK) {
    return fail(errc::protocol_error,
                "bad redirect Location " + redact_url(location) + ": " + curl_url_strerror(rc));
  }
  std::string out = get_part(u.get(), CURLUPART_URL);
  std::string scheme = lower(get_part(u.get(), CURLUPART_SCHEME));
  if (scheme != "http" && scheme != "https") {
    return fail(errc::protocol_error, "redirect to a non-HTTP URL " + redact_url(out));
  }
  return out;
}

std::string redact_url(const std::string& url) {
  curlu_ptr u(curl_url());
  if (!u ||
      curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
    // Unparseable: show only a prefix up to the first character that could start a secret.
    // The text is foreign (a Location header): well-formed UTF-8 whatever its bytes.
    auto cut = url.find_first_of("?@#");
    return utf8_safe(std::string_view(url).substr(0, std::min<std::size_t>(cut, 200)), 200) +
           (cut == std::string::npos ? "" : "…");
  }
  bool had_query = !get_part(u.get(), CURLUPART_QUERY).empty();
  curl_url_set(u.get(), CURLUPART_USER, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_PASSWORD, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_QUERY, nullptr, 0);
  curl_url_set(u.get(), CURLUPART_FRAGMENT, nullptr, 0);
  std::string out = get_part(u.get(), CURLUPART_URL);
  if (had_query) out += "?…";
  return utf8_safe(out, 2048);
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<status_line> parse_status_line(std::string_view line) {
  line = trim(line);
  if (!line.starts_with("HTTP/")) return std::nullopt;
  auto sp = line.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(sp + 1);
  if (rest.size() < 3) return std::nullopt;
  int code = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + 3, code);
  if (ec != std::errc() || p != rest.data() + 3 || code < 100 || code > 999) return std::nullopt;
  status_line out;
  out.status = code;
  if (rest.size() > 3) out.reason = std::string(trim(rest.substr(3)));
  return out;
}

std::optional<std::uint64_t> parse_u64(std::string_view v) {
  v = trim(v);
  if (v.empty()) return std::nullopt;
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return n;
}

std::optional<content_range> parse_content_range(std::string_view v) {
  v = trim(v);
  if (!v.starts_with("bytes ")) return std::nullopt;
  v.remove_prefix(6);
  auto dash = v.find('-');
  auto slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  auto first = parse_u64(v.substr(0, dash));
  auto last = parse_u64(v.substr(dash + 1, slash - dash - 1));
  if (!first || !last || *last < *first) return std::nullopt;
  content_range r{*first, *last, std::nullopt};
  std::string_view total = trim(v.substr(slash + 1));
  if (total != "*") {
    auto t = parse_u64(total);
    if (!t || *t <= *last) return std::nullopt;
    r.total = *t;
  }
  return r;
}

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view v) {
  v = trim(v);
  if (auto secs = parse_u64(v)) {
    // Clamp before converting so an absurd value cannot overflow.
    return std::chrono::milliseconds(std::min<std::uint64_t>(*secs, 86'400) * 1000);
  }
  std::string date(v);
  time_t when = curl_getdate(date.c_str(), nullptr);
  if (when < 0) return std::nullopt;
  time_t now = std::time(nullptr);
  if (when <= now) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(std::min<std::int64_t>(when - now, 86'400) * 1000);
}

std::string format_duration(std::chrono::milliseconds d) {
  auto ms = d.count();
  if (ms < 1000) return std::to_string(ms) + "ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  std::string s = std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100);
  if (ms % 100 != 0) s += std::to_string(ms % 100 / 10);
  return s + "s";
}

errc map_curl_code(CURLcode code) noexcept {
  switch (code) {
    case CURLE_OK:
      return errc::ok;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
      return errc::unavailable;
    case CURLE_OPERATION_TIMEDOUT:
      return errc::timeout;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
      return errc::io_error;
    case CURLE_URL_MALFORMAT:
    case CURLE_BAD_FUNCTION_ARGUMENT:
    case CURLE_UNKNOWN_OPTION:
      return errc::invalid_argument;
    case CURLE_FILESIZE_EXCEEDED:
      return errc::too_large;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      return errc::unauthorized;
    case CURLE_ABORTED_BY_CALLBACK:
      return errc::cancelled;
    case CURLE_OUT_OF_MEMORY:
    case CURLE_FAILED_INIT:
      return errc::internal;
    default:
      return errc::protocol_error;
  }
}

bool is_retryable(CURLcode code) noexcept {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace shoal::http::detail
