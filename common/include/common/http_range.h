#pragma once
// Parsing of the HTTP Range request header (RFC 9110 §14) for byte ranges of a representation of
// known size.

#include <cstdint>
#include <string>
#include <string_view>

namespace shoal::http {

struct byte_range {
  std::uint64_t first = 0;  // inclusive
  std::uint64_t last = 0;   // inclusive
  [[nodiscard]] std::uint64_t length() const noexcept { return last - first + 1; }
};

enum class range_kind {
  none,           // no Range header: send the whole representation (200)
  single,         // exactly one satisfiable range: 206 with Content-Range
  unsatisfiable,  // syntactically valid, but no range overlaps the representation: 416
  ignored,        // not a byte range we serve (bad syntax, other unit, several ranges): send 200
};

struct range_spec {
  range_kind kind = range_kind::none;
  byte_range range;
};

// Interprets `header` (the Range field value, empty when absent) against a representation of
// `size` bytes. Multi-range requests are answered with the whole body (kind == ignored), which RFC
// 9110 allows. Syntax errors are ignored as the RFC requires ("a server MAY ignore the Range
// header field"); a valid range that starts at or past the end is unsatisfiable.
[[nodiscard]] range_spec parse_range(std::string_view header, std::uint64_t size);

// "bytes 0-99/1000"
[[nodiscard]] std::string content_range(const byte_range& r, std::uint64_t size);
// "bytes */1000" (for 416 answers)
[[nodiscard]] std::string unsatisfied_range(std::uint64_t size);

}  // namespace shoal::http
