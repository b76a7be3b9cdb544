#include "common/http_range.h"

#include <charconv>
#include <limits>

namespace shoal::http {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Parses a non-empty run of digits; rejects signs, spaces and overflow.
bool parse_u64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

}  // namespace

range_spec parse_range(std::string_view header, std::uint64_t size) {
  range_spec out;
  header = trim(header);
  if (header.empty()) return out;
  out.kind = range_kind::ignored;
  auto eq = header.find('=');
  if (eq == std::string_view::npos) return out;
  if (!iequals(trim(header.substr(0, eq)), "bytes")) return out;
  std::string_view set = trim(header.substr(eq + 1));
  if (set.empty()) return out;
  if (set.find(',') != std::string_view::npos) {
    // Several ranges: we answer with the whole representation. Still reject garbage silently.
    return out;
  }
  auto dash = set.find('-');
  if (dash == std::string_view::npos) return out;
  std::string_view a = trim(set.substr(0, dash));
  std::string_view b = trim(set.substr(dash + 1));
  if (a.empty()) {
    // Suffix range: the last N bytes.
    std::uint64_t n = 0;
    if (!parse_u64(b, n)) return out;
    if (n == 0 || size == 0) {
      out.kind = range_kind::unsatisfiable;
      return out;
    }
    if (n > size) n = size;
    out.kind = range_kind::single;
    out.range = {size - n, size - 1};
    return out;
  }
  std::uint64_t first = 0;
  if (!parse_u64(a, first)) return out;
  std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
  if (!b.empty() && !parse_u64(b, last)) return out;
  if (last < first) return out;  // invalid syntax per RFC 9110 §14.1.1: ignore
  if (first >= size) {
    out.kind = range_kind::unsatisfiable;
    return out;
  }
  if (last >= size) last = size - 1;
  out.kind = range_kind::single;
  out.range = {first, last};
  return out;
}

std::string content_range(const byte_range& r, std::uint64_t size) {
  return "bytes " + std::to_string(r.first) + "-" + std::to_string(r.last) + "/" +
         std::to_string(size);
}

std::string unsatisfied_range(std::uint64_t size) { return "bytes */" + std::to_string(size); }

}  // namespace shoal::http
