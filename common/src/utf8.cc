#include "common/utf8.h"

#include <algorithm>

namespace shoal {

std::size_t utf8_sequence(std::string_view s) noexcept {
  if (s.empty()) return 0;
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  }
  return n;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool utf8_valid(std::string_view s) noexcept {
  while (!s.empty()) {
    std::size_t n = utf8_sequence(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

std::string utf8_safe(std::string_view s, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 3);
  std::size_t used = 0;
  while (!s.empty()) {
    std::size_t n = utf8_sequence(s);
    if (used + std::max<std::size_t>(n, 1) > max_bytes) {
      out += "...";
      break;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      n = 1;
    } else {
      out.append(s.substr(0, n));
    }
    used += n;
    s.remove_prefix(n);
  }
  return out;
}

}  // namespace shoal
