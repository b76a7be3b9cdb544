#pragma once
// The placement policies the simulation compares (scheduler_bench part 2): Shoal's real
// scheduler_lib, and kube-scheduler's ImageLocality, NodeResourcesFit LeastAllocated and
// MostAllocated, and ImageLocality summed with each of the two. docs/scheduler-bench.md states
// what each one models and where it is kinder than the real kube-scheduler.
//
// A policy only chooses nodes; the simulator does all the bookkeeping (caches, GPUs, bytes,
// delays). Each policy is owned by run_sim and used by one simulation on one thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/scheduler/sim_cluster.h"
#include "bench/scheduler/trace.h"
#include "bench/scheduler/util.h"
#include "scheduler/cost.h"
#include "scheduler/index.h"
#include "scheduler/network.h"

namespace shoal::scheduler_bench {

// A placement policy: K distinct nodes with at least G free GPUs, best first. Called only when
// such nodes exist.
class policy {
 public:
  virtual ~policy() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual bool wants_changes() const { return false; }
  [[nodiscard]] virtual std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) = 0;
};

// Top K feasible nodes by score; ties broken at random, as kube-scheduler's selectHost does.
[[nodiscard]] std::vector<std::size_t> top_k(const sim_cluster& c, const sim_job& j,
                                             const std::vector<std::int64_t>& score, rng_t& r);

// kube-scheduler's ImageLocality (pkg/scheduler/framework/plugins/imagelocality): for each of the
// pod's images on the node (kubelet lists an image when all of it is there), add
// int64(size × nodes_with_image / total_nodes); clamp the sum into [23 MiB, 1000 MiB × number of
// containers]; score = 100 × (sum − min) / (max − min), integer division. With `datasets`, each
// dataset is scored as one more image (not kube-scheduler: a generous baseline that sees data).
class image_locality final : public policy {
 public:
  image_locality(const trace& t, std::uint64_t seed, bool datasets)
      : t_(t), r_(seed), datasets_(datasets) {}
  std::string name() const override {
    return datasets_ ? "imagelocality_datasets" : "imagelocality";
  }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }

  // ImageLocality's 0..100 per node.
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const;

 private:
  const trace& t_;
  rng_t r_;
  bool datasets_;
};

// kube-scheduler's NodeResourcesFit on GPUs. LeastAllocated (its default, spreading):
// (free − requested) × 100 / capacity. MostAllocated (the bin-packing strategy):
// (used + requested) × 100 / capacity. The top K nodes win, ties at random.
enum class allocation { least, most };

class gpu_allocation final : public policy {
 public:
  gpu_allocation(allocation a, std::uint32_t capacity, std::uint64_t seed)
      : a_(a), capacity_(capacity), r_(seed) {}
  std::string name() const override {
    return a_ == allocation::least ? "least_allocated" : "most_allocated";
  }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const;

 private:
  allocation a_;
  std::uint32_t capacity_;
  rng_t r_;
};

// ImageLocality plus NodeResourcesFit on GPUs, their scores summed with weights 1 each, ties at
// random. With LeastAllocated this is kube-scheduler's default profile as far as data and GPUs
// go; with MostAllocated it is kube-scheduler configured to pack GPUs, the closest it comes to
// Shoal's packing (extra, not its default profile).
class kube_profile final : public policy {
 public:
  kube_profile(const trace& t, allocation a, std::uint32_t capacity, std::uint64_t seed)
      : il_(t, seed, false), fit_(a, capacity, seed), r_(seed) {}
  std::string name() const override { return "imagelocality_plus_" + fit_.name(); }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override;

 private:
  image_locality il_;
  gpu_allocation fit_;
  rng_t r_;
};

// Shoal: a cluster_index fed by delta heartbeats from the simulated caches, and the scheduler's
// own evaluate_nodes + choose on its view (GPUs in use passed as reservations, as the placer
// does). The cost model is configured with the simulation's bandwidths: an operator sets
// peer and upstream bandwidths in scheduler.yaml the same way. Packing is the scheduler's default
// unless sim_params says otherwise (--packing).
class shoal_policy final : public policy {
 public:
  shoal_policy(const sim_params& p, const trace& t);
  std::string name() const override { return "shoal"; }
  bool wants_changes() const override { return true; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override;
  [[nodiscard]] std::uint64_t heartbeats() const { return heartbeats_; }
  [[nodiscard]] std::uint64_t resyncs() const { return resyncs_; }

 private:
  // One delta heartbeat per node whose cache changed.
  void sync(sim_cluster& c);
  // One node's heartbeat with its identity, GPUs and cache size (objects added by the caller).
  [[nodiscard]] heartbeat::message node_message(std::size_t n, std::uint64_t seq, bool full) const;

  const sim_params& p_;
  const trace& t_;
  scheduler::cluster_index idx_;
  scheduler::cost_model model_;
  scheduler::document_network_model net_;
  std::vector<std::uint64_t> seq_;
  std::unordered_map<std::string, std::size_t> index_of_;
  std::uint64_t heartbeats_ = 0, resyncs_ = 0;
};

}  // namespace shoal::scheduler_bench
