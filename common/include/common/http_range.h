#pragma once
// Parsing of the HTTP Range request header (RFC 9110 §14) for byte ranges of a representation of
// known size.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::http {

struct byte_range {
  std::uint64_t first = 0;  // inclusive
  std::uint64_t last = 0;   // inclusive
  [[nodiscard]] std::uint64_t length() const noexcept { return last - first + 1; }
};

enum class range_kind {
  none,           // no Range header: send the whole representation (200)
  single,         // exactly one satisfiable range: 206 with Content-Range
  multi,          // two or more satisfiable ranges: 206 multipart/byteranges (`ranges`)
  unsatisfiable,  // syntactically valid, but no range overlaps the representation: 416
  ignored,        // not a byte range we serve (bad syntax, other unit, too many ranges): send 200
};

// At most this many ranges in one request (stargz-style lazy readers ask for a few); more are
// answered with the whole representation.
inline constexpr std::size_t max_ranges = 64;

struct range_spec {
  range_kind kind = range_kind::none;
  byte_range range;                // single
  std::vector<byte_range> ranges;  // multi: in the order asked, clamped to the representation
};

// Interprets `header` (the Range field value, empty when absent) against a representation of
// `size` bytes. Syntax errors anywhere in the set are ignored as the RFC requires ("a server MAY
// ignore the Range header field"); a valid range that starts at or past the end is unsatisfiable
// and left out of a set (the set is unsatisfiable when none is left). A set of one satisfiable
// range is `single`. Sets of more than max_ranges ranges, and sets whose satisfiable ranges add up
// to more than the representation (overlaps: RFC 9110 §14.3 lets a server refuse to repeat
// bytes), are ignored.
[[nodiscard]] range_spec parse_range(std::string_view header, std::uint64_t size);

// A 206 multipart/byteranges answer (RFC 9110 §14.6): each part's header (boundary, the
// representation's Content-Type, Content-Range) before its bytes, and the closing boundary.
struct multipart_body {
  std::string content_type;  // "multipart/byteranges; boundary=..."
  std::vector<std::string> heads;
  std::vector<byte_range> ranges;
  std::string tail;
  [[nodiscard]] std::uint64_t length() const noexcept;
};
// Lays out `ranges` of a representation of `size` bytes and type `type` with a fresh random
// boundary.
[[nodiscard]] multipart_body make_multipart(const std::vector<byte_range>& ranges,
                                            std::uint64_t size, std::string_view type);

// "bytes 0-99/1000"
[[nodiscard]] std::string content_range(const byte_range& r, std::uint64_t size);
// "bytes */1000" (for 416 answers)
[[nodiscard]] std::string unsatisfied_range(std::uint64_t size);

}  // namespace shoal::http
