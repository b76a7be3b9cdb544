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
#include "cost.h"
#include "index.h"
#include "network.h"

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

// kube-scheduler's NodeResourcesFit LeastAllocated on GPUs: (free − requested) × 100 / capacity.
class least_allocated final : public policy {
 public:
  least_allocated(std::uint32_t capacity, std::uint64_t seed) : capacity_(capacity), r_(seed) {}
  std::string name() const override { return "least_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const;

 private:
  std::uint32_t capacity_;
  rng_t r_;
};

// kube-scheduler's NodeResourcesFit MostAllocated on GPUs (the bin-packing strategy):
// (used + requested) × 100 / capacity.
class most_allocated final : public policy {
 public:
  most_allocated(std::uint32_t capacity, std::uint64_t seed) : capacity_(capacity), r_(seed) {}
  std::string name() const override { return "most_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const;

 private:
  std::uint32_t capacity_;
  rng_t r_;
};

// kube-scheduler's default profile as far as data and GPUs go: ImageLocality and LeastAllocated
// with their default weights (1 each) summed; ties at random.
class kube_default final : public policy {
 public:
  kube_default(const trace& t, std::uint32_t capacity, std::uint64_t seed)
      : il_(t, seed, false), la_(capacity, seed), r_(seed) {}
  std::string name() const override { return "imagelocality_plus_least_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override;

 private:
  image_locality il_;
  least_allocated la_;
  rng_t r_;
};

// ImageLocality and MostAllocated summed (weights 1 each): kube-scheduler configured to pack GPUs,
// the closest kube-scheduler comes to Shoal's packing (extra, not its default profile).
class kube_packing final : public policy {
 public:
  kube_packing(const trace& t, std::uint32_t capacity, std::uint64_t seed)
      : il_(t, seed, false), ma_(capacity, seed), r_(seed) {}
  std::string name() const override { return "imagelocality_plus_most_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override;

 private:
  image_locality il_;
  most_allocated ma_;
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
