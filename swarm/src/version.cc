#include "swarm/version.h"

#include <libtorrent/version.hpp>

#include <algorithm>

#include <string>

namespace shoal::swarm {

version::library libtorrent_version() {
  // lt::version() is "<major>.<minor>.<tiny>.<tag>"; the tag is 0 in every release.
  std::string v = lt::version();
  if (v.ends_with(".0") && std::count(v.begin(), v.end(), '.') == 3) v.resize(v.size() - 2);
  return {"libtorrent", v};
}

}  // namespace shoal::swarm
