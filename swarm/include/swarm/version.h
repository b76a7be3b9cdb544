#pragma once
// The libtorrent the swarm links, for --version and shoal_build_info (common/version.h).

#include "common/version.h"

namespace shoal::swarm {

// {"libtorrent", "2.0.8"}: the version of the library loaded at run time, without its tag.
[[nodiscard]] version::library libtorrent_version();

}  // namespace shoal::swarm
