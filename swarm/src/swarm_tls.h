#pragma once
// Internal to the swarm library (swarm_tls.cc).

#include <string>

namespace shoal::swarm::detail {

// "host:port,host2:port2" with libtorrent's "s" (SSL) suffix on every entry.
[[nodiscard]] std::string ssl_listen(const std::string& listen);

}  // namespace shoal::swarm::detail
