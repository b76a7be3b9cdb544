#include "bench/scheduler/trace.h"

#include <algorithm>
#include <string>

namespace shoal::scheduler_bench {

trace make_trace(const sim_params& p, std::uint64_t seed) {
  rng_t r(seed);
  trace t;
  auto add_object = [&](double lo, double hi) {
    auto n = static_cast<std::uint32_t>(t.objects.size());
    auto size = static_cast<std::uint64_t>(r.log_uniform(lo, hi));
    t.objects.push_back({object_digest("sim", n), size});
    return n;
  };
  // Base images (CUDA + framework) shared by many images: 2–4 layers of 100 MiB–4 GiB.
  std::vector<std::vector<std::uint32_t>> bases(p.base_images);
  for (auto& b : bases) {
    auto n = 2 + r.below(3);
    for (std::uint64_t i = 0; i < n; ++i) b.push_back(add_object(100 * MiB, 4 * GiB));
  }
  for (std::size_t i = 0; i < p.images; ++i) {
    auto layers = bases[r.below(p.base_images)];
    auto own = 2 + r.below(7);
    for (std::uint64_t k = 0; k < own; ++k) layers.push_back(add_object(100 * MiB, 8 * GiB));
    t.image_objects.push_back(std::move(layers));
  }
  for (std::size_t i = 0; i < p.datasets; ++i) {
    std::vector<std::uint32_t> shards;
    auto n = 1 + r.below(8);
    for (std::uint64_t k = 0; k < n; ++k) shards.push_back(add_object(1 * GiB, 200 * GiB));
    t.dataset_objects.push_back(std::move(shards));
  }
  auto bytes_of = [&](const std::vector<std::uint32_t>& l) {
    std::uint64_t b = 0;
    for (auto o : l) b += t.objects[o].size;
    return b;
  };
  for (const auto& l : t.image_objects) t.image_bytes.push_back(bytes_of(l));
  for (const auto& l : t.dataset_objects) t.dataset_bytes.push_back(bytes_of(l));

  zipf img_pop(p.images, p.zipf_s), ds_pop(p.datasets, p.zipf_s);
  double gpu_seconds = 0;
  for (std::size_t i = 0; i < p.jobs; ++i) {
    sim_job j;
    j.image = static_cast<std::uint32_t>(img_pop.sample(r));
    if (r.uniform() < p.dataset_share) j.dataset = static_cast<int>(ds_pop.sample(r));
    double u = r.uniform();
    if (u < 0.55) {
      j.k = 1;
      j.g = std::min<std::uint32_t>(p.gpus_per_node, 1u << r.below(4));
    } else {
      j.k = u < 0.75 ? 2 : u < 0.9 ? 4 : 8;
      j.k = std::min<std::uint32_t>(j.k, static_cast<std::uint32_t>(p.nodes));
      j.g = p.gpus_per_node;
    }
    j.duration = r.log_uniform(600, 6 * 3600);
    j.objects = t.image_objects[j.image];
    if (j.dataset >= 0) {
      const auto& d = t.dataset_objects[static_cast<std::size_t>(j.dataset)];
      j.objects.insert(j.objects.end(), d.begin(), d.end());
    }
    gpu_seconds += j.duration * j.k * j.g;
    t.jobs.push_back(std::move(j));
  }
  // Poisson arrivals at the rate that offers `load` of the cluster's GPUs.
  double gap = gpu_seconds / (p.load * static_cast<double>(p.nodes * p.gpus_per_node) *
                              static_cast<double>(p.jobs));
  double now = 0;
  for (auto& j : t.jobs) {
    now += r.exponential(gap);
    j.arrival = now;
  }
  return t;
}

// The simulated cluster: free GPUs and an LRU cache of bounded size per node. Objects a running
// job uses are pinned (a container's image and mounted data cannot be evicted under it); when

}  // namespace shoal::scheduler_bench
