#pragma once
// Helpers shared by the fuzz harnesses: the input as text, checks of the properties every parser
// promises (errors are UTF-8 and bounded, accepted input survives a round trip), and a failed
// check that aborts so the driver keeps the input (driver.cc).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"

// Counted by the driver and printed at the end: how many inputs the parser under test accepted
// (a corpus or dictionary that never gets past the first check shows up as 0).
extern "C" void shoal_fuzz_accepted();

namespace shoal::fuzz {

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void check_failed(const char* what, std::string_view detail) {
  std::fprintf(stderr, "==fuzz== property violated: %s: %.*s\n", what,
               static_cast<int>(std::min<std::size_t>(detail.size(), 400)), detail.data());
  std::abort();
}

// Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF): what nlohmann's dump() accepts.
inline bool valid_utf8(std::string_view s) {
  static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;
    if (n == 4 || i + n >= s.size()) return false;
    std::uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
    for (std::size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// An error a daemon may log, put in a JSON answer or persist: UTF-8 and of bounded size.
inline void check_error(const error& e, const char* where, std::size_t max_bytes = 4096) {
  if (!valid_utf8(e.message)) check_failed(where, "error message is not UTF-8: " + e.message);
  if (e.message.size() > max_bytes) check_failed(where, "error message unbounded: " + e.message);
}

template <class T>
void check_result(const result<T>& r, const char* where, std::size_t max_bytes = 4096) {
  if (!r) check_error(r.error(), where, max_bytes);
}

inline void accepted() { shoal_fuzz_accepted(); }

}  // namespace shoal::fuzz
