#include "common/version.h"

#include <openssl/crypto.h>

#include <boost/version.hpp>

#include "shoal_build_version.h"  // generated into the build tree by cmake/version.cmake

namespace shoal::version {

std::string_view shoal() { return SHOAL_BUILD_VERSION; }

std::vector<library> common_libraries() {
  return {
      {"openssl", OpenSSL_version(OPENSSL_VERSION_STRING)},
      {"boost", std::to_string(BOOST_VERSION / 100000) + "." +
                    std::to_string(BOOST_VERSION / 100 % 1000) + "." +
                    std::to_string(BOOST_VERSION % 100)},
  };
}

std::string text(std::string_view program, std::span<const library> libs) {
  std::string out = std::string(program) + " " + std::string(shoal()) + "\n";
  for (const auto& l : libs) out += "  " + l.name + " " + l.version + "\n";
  return out;
}

bool requested(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] != nullptr && std::string_view(argv[i]) == "--version") return true;
  }
  return false;
}

void register_build_info(metrics::registry& reg, std::span<const library> libs) {
  std::vector<std::string> names{"version"};
  std::vector<std::string> values{std::string(shoal())};
  for (const auto& l : libs) {
    names.push_back(l.name);
    values.push_back(l.version);
  }
  reg.gauge("shoal_build_info",
            "Always 1; the labels are this build's Shoal version and the versions of the "
            "libraries it links.",
            std::move(names))
      .with(values)
      .set(1);
}

}  // namespace shoal::version
