#pragma once
// The RocksDB the cache's index links, for --version and shoal_build_info (common/version.h).

#include "common/version.h"

namespace shoal::cache {

// {"rocksdb", "7.8.3"}: the library's own version string.
[[nodiscard]] version::library rocksdb_version();

}  // namespace shoal::cache
