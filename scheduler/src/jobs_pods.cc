// Jobs learned from the pods nodes report (jobs.h, observe_pods).
#include <algorithm>

#include "common/log.h"
#include "common/text.h"
#include "scheduler/jobs.h"

namespace shoal::scheduler {

void job_registry::observe_pods(const std::string& node, const std::string& fabric,
                                const std::vector<heartbeat::job_pod>& pods) {
  std::set<std::string> now_jobs;
  for (const auto& p : pods) now_jobs.insert(p.job);
  std::lock_guard lk(mu_);
  auto known = node_pod_jobs_.find(node);
  if (known == node_pod_jobs_.end() ? now_jobs.empty() : known->second == now_jobs) return;
  auto& before = node_pod_jobs_[node];
  const auto now = now_();
  const auto t = utc_rfc3339(std::chrono::system_clock::now());
  for (const auto& job : now_jobs) {
    if (before.count(job)) continue;
    auto [it, fresh] = jobs_.try_emplace(job);
    auto& r = it->second;
    if (fresh) {
      r.id = job;
      r.spec.id = job;
      r.spec.nodes = 0;
      r.source = "pods";
      r.segment = fabric;
      r.created = t;
      r.created_at = now;
    }
    if (std::find(r.pod_nodes.begin(), r.pod_nodes.end(), node) == r.pod_nodes.end()) {
      r.pod_nodes.insert(std::upper_bound(r.pod_nodes.begin(), r.pod_nodes.end(), node), node);
    }
    if (std::find(r.members.begin(), r.members.end(), node) == r.members.end())
      r.members.push_back(node);
    std::erase(r.standbys, node);
    if (r.source == "pods") {
      r.spec.nodes = static_cast<std::uint32_t>(r.pod_nodes.size());
      if (r.segment.empty()) r.segment = fabric;
    }
    r.updated = t;
    r.updated_at = now;
    account_locked(r);
    log::info("job runs on a node (its pods)", log::kv("job", job), log::kv("node", node),
              log::kv("source", r.source), log::kv("members", r.members.size()));
  }
  for (const auto& job : before) {
    if (now_jobs.count(job)) continue;
    auto it = jobs_.find(job);
    if (it == jobs_.end()) continue;
    auto& r = it->second;
    if (std::find(r.pod_nodes.begin(), r.pod_nodes.end(), node) == r.pod_nodes.end()) continue;
    std::erase(r.pod_nodes, node);
    std::erase(r.members, node);
    log::info("job's pods are gone from a node", log::kv("job", job), log::kv("node", node));
    if (r.source == "pods" && r.pod_nodes.empty()) {
      log::info("job forgotten: no pod of it runs any more", log::kv("job", job));
      bytes_ -= r.bytes;
      jobs_.erase(it);
      continue;
    }
    if (r.source == "pods") r.spec.nodes = static_cast<std::uint32_t>(r.pod_nodes.size());
    r.updated = t;
    r.updated_at = now;
    account_locked(r);
  }
  if (now_jobs.empty()) {
    node_pod_jobs_.erase(node);
  } else {
    before = std::move(now_jobs);
  }
  evict_locked();
}

}  // namespace shoal::scheduler
