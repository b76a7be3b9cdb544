#pragma once
// Small text helpers shared by every component: URL escaping, trimming, and quoting untrusted
// input for error messages (bounded, non-printable bytes escaped).

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace shoal {

// RFC 3986 percent-encoding: unreserved characters (A-Z a-z 0-9 - _ . ~) stay, '/' stays when
// `keep_slash`, everything else becomes %XX (upper-case hex, as SigV4 wants).
[[nodiscard]] std::string url_escape(std::string_view s, bool keep_slash = false);
// Without leading and trailing spaces, tabs, CR and LF.
[[nodiscard]] std::string trim(std::string_view s);
// "\"text\"" with quotes, backslashes and non-printable bytes as \xHH, cut at `max` characters
// (then "..."): safe to put untrusted input (a path, a digest, a header) into a message.
[[nodiscard]] std::string quote_excerpt(std::string_view s, std::size_t max = 80);
// "2026-12-02T21:02:30Z": a time in UTC, RFC 3339, whole seconds.
[[nodiscard]] std::string utc_rfc3339(std::chrono::system_clock::time_point t);

}  // namespace shoal
