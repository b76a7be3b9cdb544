#pragma once
// Helpers the registry-proxy unit tests share.

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace shoal::proxy::testing_util {

// A fresh directory under the system's temporary one, removed with everything in it.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "shoal-proxy-test") {
    std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path = ::mkdtemp(t.data());
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

// n pseudo-random bytes, the same for the same seed.
inline std::string bytes(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

}  // namespace shoal::proxy::testing_util
