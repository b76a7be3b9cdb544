#pragma once
// What a binary says about its own build: Shoal's version (baked in at build time from git, see
// cmake/version.cmake) and the versions of the libraries it links. Every binary prints them for
// --version, and every daemon exposes them as the gauge
//   shoal_build_info{version="0.1.0-gabcdef0",openssl="3.0.19",boost="1.74.0",...} 1
// so a dashboard can tell which build each node runs.
//
// Each binary names its own libraries: common_libraries() covers what common links (OpenSSL,
// Boost); a daemon adds cache::rocksdb_version() and its libtorrent version itself, since only
// cache/ links RocksDB and only swarm/, peerd/ and registry-proxy/ touch libtorrent.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"

namespace shoal::version {

// One linked library: a short lower-case name (also the metric's label) and its version.
struct library {
  std::string name;
  std::string version;
};

// Shoal's version: "0.1.0-gabcdef0" (or "...-dirty" when built from a modified tree), a tag's
// `git describe` when one exists, or "0.1.0-unknown" when built outside a git checkout.
[[nodiscard]] std::string_view shoal();

// OpenSSL (the library loaded at run time) and Boost (the headers compiled against).
[[nodiscard]] std::vector<library> common_libraries();

// The --version text: "<program> <version>" and one indented "<library> <version>" line per
// library, newline-terminated.
[[nodiscard]] std::string text(std::string_view program, std::span<const library> libs);

// Whether the command line asks for the version (an argument "--version"): the daemons answer it
// before their config is parsed, since it needs no config.
[[nodiscard]] bool requested(int argc, const char* const* argv);

// Registers shoal_build_info{version=<shoal()>, <library>=<version>...} with the value 1.
void register_build_info(metrics::registry& reg, std::span<const library> libs);

}  // namespace shoal::version
