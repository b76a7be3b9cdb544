#include "common/text.h"

#include <ctime>

namespace shoal {

std::string url_escape(std::string_view s, bool keep_slash) {
  static const char* hx = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hx[c >> 4];
      out += hx[c & 15];
    }
  }
  return out;
}

std::string trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return std::string(s);
}

std::string quote_excerpt(std::string_view s, std::size_t max) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char c : s) {
    if (++n > max) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '"' && c != '\\') {
      out += c;
    } else {
      static const char* hx = "0123456789abcdef";
      out += "\\x";
      out += hx[u >> 4];
      out += hx[u & 15];
    }
  }
  return out + "\"";
}

std::string utc_rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace shoal
