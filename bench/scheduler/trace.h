#pragma once
// The simulation's input (part 2 of scheduler_bench): the parameters of the simulated cluster and
// the generated trace of jobs (catalog of images and datasets, shapes, run times, arrivals), all
// from one seed. docs/scheduler-bench.md lists the generator's assumptions.
//
// Values only: a trace is made once and read by every policy's simulation.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/scheduler/util.h"
#include "common/digest.h"
#include "scheduler/config.h"

namespace shoal::scheduler_bench {

// How a placed job's missing bytes arrive (docs/scheduler-bench.md, "Fetch models").
enum class fetch_model {
  // Shoal's own: each node fetches at peer_bw from peers and upstream_bw from upstream, on its
  // own, whatever else is fetching at the time (no contention anywhere).
  independent,
  // Every node has one NIC of node_bw, and the upstream is one source of upstream_bw: transfers
  // queue first-come first-served at the upstream (one at a time, at min(upstream_bw, node_bw))
  // and at the receiving node's NIC (a node's fetches run one after another).
  source_queue,
};

struct sim_params {
  std::size_t nodes = 500;
  std::uint32_t gpus_per_node = 8;
  std::size_t jobs = 20'000;  // about six days of arrivals: caches reach a steady state
  std::size_t images = 200;
  std::size_t base_images = 12;
  std::size_t datasets = 120;
  double cache_bytes = 2 * TiB;    // per node (the catalog is ~20 TiB)
  double peer_bw = 1 * GiB;        // bytes/s from another node (P2P over the cluster network)
  double upstream_bw = 128 * MiB;  // bytes/s from the upstream registry / object store
  fetch_model model = fetch_model::independent;
  double node_bw = 1 * GiB;               // source_queue: bytes/s into one node (its NIC)
  double source_upstream_bw = 128 * MiB;  // source_queue: bytes/s of the one shared upstream
  double load = 0.85;                     // offered GPU load (ignoring fetch time)
  double zipf_s = 1.1;
  double dataset_share = 0.7;  // jobs that read a dataset
  // Shoal's placement.packing_seconds_per_gpu (not part of the trace: the scheduler's setting,
  // --packing on the command line; the scheduler's default unless set).
  double shoal_packing_seconds_per_gpu = scheduler::default_packing_seconds_per_gpu;
};

struct sim_object {
  digest id;
  std::uint64_t size = 0;
};

struct sim_job {
  double arrival = 0, duration = 0;
  std::uint32_t k = 1, g = 1;
  std::uint32_t image = 0;
  int dataset = -1;
  std::vector<std::uint32_t> objects;  // distinct: image layers, then dataset shards
};

struct trace {
  std::vector<sim_object> objects;
  std::vector<std::vector<std::uint32_t>> image_objects, dataset_objects;
  std::vector<std::uint64_t> image_bytes, dataset_bytes;
  std::vector<sim_job> jobs;
};

// The same trace for the same parameters and seed, on every machine.
[[nodiscard]] trace make_trace(const sim_params& p, std::uint64_t seed);

}  // namespace shoal::scheduler_bench
