#include "bench/scheduler/sim_cluster.h"

namespace shoal::scheduler_bench {

sim_cluster::fetch_result sim_cluster::fetch(std::size_t n,
                                             const std::vector<std::uint32_t>& objects) {
  fetch_result r;
  auto& node = nodes_[n];
  for (auto o : objects) {
    auto sz = static_cast<double>(t_.objects[o].size);
    auto it = node.cache.find(o);
    if (it != node.cache.end()) {
      node.lru.splice(node.lru.begin(), node.lru, it->second.pos);
      ++it->second.pins;
      r.local += sz;
      continue;
    }
    (holders_[o] > 0 ? r.peer : r.upstream) += sz;
    node.lru.push_front(o);
    node.cache[o] = {node.lru.begin(), 1};
    node.used += sz;
    ++holders_[o];
    if (track_) changes_[n][o] = true;
  }
  // Evict least recently used unpinned objects.
  for (auto it = node.lru.end(); node.used > p_.cache_bytes && it != node.lru.begin();) {
    --it;
    auto c = node.cache.find(*it);
    if (c->second.pins > 0) continue;
    auto o = *it;
    node.used -= static_cast<double>(t_.objects[o].size);
    --holders_[o];
    if (track_) changes_[n][o] = false;
    node.cache.erase(c);
    it = node.lru.erase(it);
    ++evictions_;
  }
  if (node.used > p_.cache_bytes) ++overflows_;
  return r;
}

void sim_cluster::unpin(std::size_t n, const std::vector<std::uint32_t>& objects) {
  auto& node = nodes_[n];
  for (auto o : objects) {
    auto it = node.cache.find(o);
    if (it != node.cache.end() && it->second.pins > 0) --it->second.pins;
  }
}

std::vector<std::unordered_map<std::uint32_t, bool>> sim_cluster::take_changes() {
  std::vector<std::unordered_map<std::uint32_t, bool>> out(nodes_.size());
  out.swap(changes_);
  return out;
}

}  // namespace shoal::scheduler_bench
