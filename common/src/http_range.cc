#include "common/http_range.h"

#include <charconv>
#include <cstdio>
#include <limits>
#include <random>

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

namespace {

enum class one { ok, unsatisfiable, bad };

// One byte-range-spec or suffix-range of a set.
one parse_one(std::string_view spec, std::uint64_t size, byte_range& out) {
  auto dash = spec.find('-');
  if (dash == std::string_view::npos) return one::bad;
  std::string_view a = trim(spec.substr(0, dash));
  std::string_view b = trim(spec.substr(dash + 1));
  if (a.empty()) {
    // Suffix range: the last N bytes.
    std::uint64_t n = 0;
    if (!parse_u64(b, n)) return one::bad;
    if (n == 0 || size == 0) return one::unsatisfiable;
    if (n > size) n = size;
    out = {size - n, size - 1};
    return one::ok;
  }
  std::uint64_t first = 0;
  if (!parse_u64(a, first)) return one::bad;
  std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
  if (!b.empty() && !parse_u64(b, last)) return one::bad;
  if (last < first) return one::bad;  // invalid syntax per RFC 9110 §14.1.1: ignore
  if (first >= size) return one::unsatisfiable;
  if (last >= size) last = size - 1;
  out = {first, last};
  return one::ok;
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
  std::vector<byte_range> ok;
  std::size_t specs = 0;
  std::uint64_t total = 0;
  for (std::size_t pos = 0; pos <= set.size();) {
    std::size_t comma = set.find(',', pos);
    if (comma == std::string_view::npos) comma = set.size();
    std::string_view spec = trim(set.substr(pos, comma - pos));
    pos = comma + 1;
    if (spec.empty()) continue;  // empty list elements are allowed (RFC 9110 §5.6.1)
    if (++specs > max_ranges) return out;
    byte_range r;
    switch (parse_one(spec, size, r)) {
      case one::bad:
        return out;
      case one::unsatisfiable:
        continue;
      case one::ok:
        total += r.length();
        if (total > size) return out;  // overlapping ranges: the whole representation instead
        ok.push_back(r);
    }
  }
  if (specs == 0) return out;
  if (ok.empty()) {
    out.kind = range_kind::unsatisfiable;
  } else if (ok.size() == 1) {
    out.kind = range_kind::single;
    out.range = ok[0];
  } else {
    out.kind = range_kind::multi;
    out.ranges = std::move(ok);
  }
  return out;
}

std::string content_range(const byte_range& r, std::uint64_t size) {
  return "bytes " + std::to_string(r.first) + "-" + std::to_string(r.last) + "/" +
         std::to_string(size);
}

std::uint64_t multipart_body::length() const noexcept {
  std::uint64_t n = tail.size();
  for (std::size_t i = 0; i < heads.size(); ++i) n += heads[i].size() + ranges[i].length();
  return n;
}

multipart_body make_multipart(const std::vector<byte_range>& ranges, std::uint64_t size,
                              std::string_view type) {
  // 128 random bits: a body that happens to contain the delimiter line is not a concern.
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char b[40];
  std::snprintf(b, sizeof b, "shoal-%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  const std::string boundary(b);
  multipart_body m;
  m.content_type = "multipart/byteranges; boundary=" + boundary;
  const std::string part_type(type.empty() ? std::string_view("application/octet-stream") : type);
  for (const byte_range& r : ranges) {
    m.heads.push_back((m.heads.empty() ? "--" : "\r\n--") + boundary + "\r\nContent-Type: " +
                      part_type + "\r\nContent-Range: " + content_range(r, size) + "\r\n\r\n");
    m.ranges.push_back(r);
  }
  m.tail = "\r\n--" + boundary + "--\r\n";
  return m;
}

std::string unsatisfied_range(std::uint64_t size) { return "bytes */" + std::to_string(size); }

}  // namespace shoal::http
