#pragma once
// The simulated cluster of scheduler_bench's part 2: per node, free GPUs and a bounded LRU cache;
// the fetch model (peer or upstream) that every policy's placements go through.
//
// Lifecycle: one per policy's simulation, owned by simulate(). Single-threaded.

#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "bench/scheduler/trace.h"

namespace shoal::scheduler_bench {

// The simulated cluster: free GPUs and an LRU cache of bounded size per node. Objects a running
// job uses are pinned (a container's image and mounted data cannot be evicted under it); when
// everything is pinned, the cache overflows (counted) rather than failing the job.
class sim_cluster {
 public:
  struct fetch_result {
    double local = 0, peer = 0, upstream = 0;  // bytes
  };

  sim_cluster(const sim_params& p, const trace& t, bool track_changes)
      : p_(p),
        t_(t),
        track_(track_changes),
        nodes_(p.nodes),
        holders_(t.objects.size(), 0),
        changes_(p.nodes) {
    for (auto& n : nodes_) n.free = p.gpus_per_node;
    by_free_.assign(p.gpus_per_node + 1, 0);
    by_free_[p.gpus_per_node] = p.nodes;
  }

  [[nodiscard]] std::size_t size() const { return nodes_.size(); }
  [[nodiscard]] std::uint32_t free_gpus(std::size_t n) const { return nodes_[n].free; }
  [[nodiscard]] bool holds(std::size_t n, std::uint32_t o) const {
    return nodes_[n].cache.count(o) > 0;
  }
  [[nodiscard]] std::uint32_t holders(std::uint32_t o) const { return holders_[o]; }
  // At least k nodes with g GPUs free.
  [[nodiscard]] bool fits(std::uint32_t k, std::uint32_t g) const {
    std::size_t n = 0;
    for (std::uint32_t f = g; f < by_free_.size(); ++f) n += by_free_[f];
    return n >= k;
  }
  void take_gpus(std::size_t n, std::int64_t delta) {
    auto& node = nodes_[n];
    --by_free_[node.free];
    node.free = static_cast<std::uint32_t>(static_cast<std::int64_t>(node.free) + delta);
    ++by_free_[node.free];
  }

  // Brings the objects onto node n and pins them. A missing object comes from a peer when some
  // node holds it (the nodes of a gang fetched before this one included: P2P fans it out), else
  // from upstream.
  fetch_result fetch(std::size_t n, const std::vector<std::uint32_t>& objects);
  void unpin(std::size_t n, const std::vector<std::uint32_t>& objects);
  // Net changes per node since the last call (object → held now), for heartbeats.
  std::vector<std::unordered_map<std::uint32_t, bool>> take_changes();
  [[nodiscard]] std::uint64_t evictions() const { return evictions_; }
  [[nodiscard]] std::uint64_t overflows() const { return overflows_; }

 private:
  struct entry {
    std::list<std::uint32_t>::iterator pos;
    std::uint32_t pins = 0;
  };
  struct node {
    std::uint32_t free = 0;
    double used = 0;
    std::list<std::uint32_t> lru;  // front: most recently used
    std::unordered_map<std::uint32_t, entry> cache;
  };
  const sim_params& p_;
  const trace& t_;
  bool track_;
  std::vector<node> nodes_;
  std::vector<std::uint32_t> holders_;
  std::vector<std::size_t> by_free_;  // nodes by free GPUs
  std::vector<std::unordered_map<std::uint32_t, bool>> changes_;
  std::uint64_t evictions_ = 0, overflows_ = 0;
};

}  // namespace shoal::scheduler_bench
