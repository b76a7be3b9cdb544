// Private helpers of the origin protocol (origin_text.h).

#include "origin_text.h"

namespace shoal::origin::detail {

std::optional<std::uint64_t> parse_count(std::string_view v) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::uint64_t out = 0;
  for (char c : v) out = out * 10 + static_cast<std::uint64_t>(c - '0');
  return out;
}

namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlongs, no
// surrogates, nothing past U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t n = utf8_sequence(s.substr(i));
    std::size_t add = n == 0 ? 1 : n;
    if (out.size() + add > max) return out + "...";
    auto c = static_cast<unsigned char>(s[i]);
    if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7f))) {
      out += '?';
    } else {
      out.append(s.substr(i, n));
    }
    i += add;
  }
  return out;
}

}  // namespace shoal::origin::detail
