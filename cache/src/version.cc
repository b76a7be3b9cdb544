#include "cache/version.h"

#include <rocksdb/version.h>

namespace shoal::cache {

version::library rocksdb_version() { return {"rocksdb", rocksdb::GetRocksVersionAsString(true)}; }

}  // namespace shoal::cache
