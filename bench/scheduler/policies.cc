#include "bench/scheduler/policies.h"

#include <algorithm>
#include <map>

#include "common/heartbeat.h"
#include "scheduler/placement.h"

namespace shoal::scheduler_bench {

using namespace shoal::scheduler;

std::vector<std::size_t> top_k(const sim_cluster& c, const sim_job& j,
                               const std::vector<std::int64_t>& score, rng_t& r) {
  struct cand {
    std::int64_t score;
    std::uint64_t tie;
    std::size_t node;
  };
  std::vector<cand> cs;
  for (std::size_t n = 0; n < c.size(); ++n) {
    if (c.free_gpus(n) >= j.g) cs.push_back({score[n], r.raw(), n});
  }
  std::sort(cs.begin(), cs.end(), [](const cand& a, const cand& b) {
    return a.score != b.score ? a.score > b.score : a.tie < b.tie;
  });
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < cs.size() && out.size() < j.k; ++i) out.push_back(cs[i].node);
  return out;
}

std::vector<std::int64_t> image_locality::scores(const sim_job& j, const sim_cluster& c) const {
  std::vector<std::pair<const std::vector<std::uint32_t>*, std::uint64_t>> items;
  items.push_back({&t_.image_objects[j.image], t_.image_bytes[j.image]});
  if (datasets_ && j.dataset >= 0) {
    auto d = static_cast<std::size_t>(j.dataset);
    items.push_back({&t_.dataset_objects[d], t_.dataset_bytes[d]});
  }
  const std::int64_t min_threshold = 23ll << 20;
  const std::int64_t max_threshold = (1000ll << 20) * static_cast<std::int64_t>(items.size());
  std::vector<std::vector<bool>> has(items.size(), std::vector<bool>(c.size()));
  std::vector<std::size_t> count(items.size(), 0);
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::size_t n = 0; n < c.size(); ++n) {
      bool all = true;
      for (auto o : *items[i].first) all = all && c.holds(n, o);
      has[i][n] = all;
      count[i] += all ? 1 : 0;
    }
  }
  std::vector<std::int64_t> score(c.size(), 0);
  for (std::size_t n = 0; n < c.size(); ++n) {
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!has[i][n]) continue;
      double spread = static_cast<double>(count[i]) / static_cast<double>(c.size());
      sum += static_cast<std::int64_t>(static_cast<double>(items[i].second) * spread);
    }
    sum = std::clamp(sum, min_threshold, max_threshold);
    score[n] = 100 * (sum - min_threshold) / (max_threshold - min_threshold);
  }
  return score;
}

std::vector<std::int64_t> gpu_allocation::scores(const sim_job& j, const sim_cluster& c) const {
  std::vector<std::int64_t> score(c.size(), 0);
  for (std::size_t n = 0; n < c.size(); ++n) {
    auto f = c.free_gpus(n);
    if (f < j.g) continue;
    auto left = a_ == allocation::least ? f - j.g : capacity_ - f + j.g;
    score[n] = static_cast<std::int64_t>(left) * 100 / capacity_;
  }
  return score;
}

std::vector<std::size_t> kube_profile::place(const sim_job& j, sim_cluster& c) {
  auto a = il_.scores(j, c);
  auto b = fit_.scores(j, c);
  for (std::size_t n = 0; n < a.size(); ++n) a[n] += b[n];
  return top_k(c, j, a, r_);
}

shoal_policy::shoal_policy(const sim_params& p, const trace& t)
    : p_(p), t_(t), idx_(index_options{}, "sim", frozen_clock()), seq_(p.nodes, 1) {
  cost_config cc;
  auto bw = [](double b) { return config::byte_size(static_cast<std::uint64_t>(b)); };
  cc.rack_bandwidth = cc.zone_bandwidth = cc.cluster_bandwidth = bw(p.peer_bw);
  cc.origin_bandwidth = cc.upstream_bandwidth = bw(p.upstream_bw);
  cc.node_ingress = bw(p.peer_bw);
  model_ = cost_model::from(cc);
  for (std::size_t n = 0; n < p.nodes; ++n) {
    auto m = node_message(n, 1, true);
    (void)idx_.apply(m, "10.1.0.1");
    index_of_[m.node] = n;
  }
}

heartbeat::message shoal_policy::node_message(std::size_t n, std::uint64_t seq, bool full) const {
  heartbeat::message m;
  m.node = node_name(n);
  m.labels = {{"fabric", "f0"}};
  m.ip = "10.1.0.1";
  m.bt_port = 6881;
  m.epoch = "sim";
  m.seq = seq;
  m.full = full;
  m.gpus = {{"H100", p_.gpus_per_node}};
  m.cache_capacity = static_cast<std::uint64_t>(p_.cache_bytes);
  return m;
}

std::vector<std::size_t> shoal_policy::place(const sim_job& j, sim_cluster& c) {
  sync(c);
  job_spec spec;
  spec.nodes = j.k;
  spec.gpus = j.g;
  job_objects objs;
  auto& list = objs.by_platform["linux/amd64"];
  std::vector<digest> ids;
  for (auto o : j.objects) {
    list.push_back({t_.objects[o].id, t_.objects[o].size});
    ids.push_back(t_.objects[o].id);
  }
  std::map<std::string, std::uint32_t> reserved;
  for (std::size_t n = 0; n < c.size(); ++n) {
    if (c.free_gpus(n) < p_.gpus_per_node)
      reserved[node_name(n)] = p_.gpus_per_node - c.free_gpus(n);
  }
  auto view = idx_.view(ids);
  auto evals = evaluate_nodes(view, objs, spec, model_, net_, reserved,
                              {.packing_seconds_per_gpu = p_.shoal_packing_seconds_per_gpu});
  auto placed = choose(std::move(evals), view, spec, 0, net_);
  std::vector<std::size_t> out;
  for (const auto& name : placed.chosen) out.push_back(index_of_.at(name));
  return out;
}

void shoal_policy::sync(sim_cluster& c) {
  auto changes = c.take_changes();
  for (std::size_t n = 0; n < changes.size(); ++n) {
    if (changes[n].empty()) continue;
    auto m = node_message(n, ++seq_[n], false);
    for (const auto& [o, held] : changes[n]) {
      if (held)
        m.objects.push_back(held_of(t_.objects[o].id, t_.objects[o].size));
      else
        m.removed.push_back(t_.objects[o].id);
    }
    auto out = idx_.apply(m, "10.1.0.1");
    ++heartbeats_;
    if (out.resync) ++resyncs_;
  }
}

}  // namespace shoal::scheduler_bench
