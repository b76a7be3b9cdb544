#pragma once
// Placement: which nodes should run a job of K nodes × G GPUs using some images and datasets.
//
// 1. The job's images are resolved for every platform among the nodes (registry-proxy), its
//    datasets looked up (issue #7 seam); shared objects count once per node.
// 2. Every node is evaluated: eligibility (healthy, selector, GPUs free = capacity − reserved,
//    the job's images exist for its platform, network validation not failed — or passed when
//    required) and the cost model's time-to-ready (cost.h).
// 3. Eligible nodes are ranked by rank seconds = time-to-ready + packing term (GPU bin-packing:
//    `packing_seconds_per_gpu` × the GPUs the node would have left free), then health, missing
//    bytes, and a rendezvous hash of (node, the job's largest object) so that equal nodes are
//    chosen the same way for the same data. One node (K = 1): the best ranked. A gang (K > 1):
//    all-or-nothing inside one fabric segment (node label `fabric`), among nodes with consistent
//    network settings; the segment whose K best nodes have the lowest (max, then sum) rank
//    seconds wins. Standby nodes are the next best of the same segment.
// 4. Unless dry_run, the chosen nodes' GPUs are reserved for `reservation_ttl`, so back-to-back
//    placements do not pick the same free GPUs (kube-scheduler, through the extender, accounts
//    GPUs itself and reserves nothing here).
//
// The evaluation and the choice are pure functions (tested directly); `placer` adds resolution
// and reservations. Threading: `placer` is thread-safe; its calls block on resolution.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/cost.h"
#include "scheduler/index.h"
#include "scheduler/network.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler {

struct job_spec {
  std::string id;  // the job's name (checkpoint::valid_job); "" for an anonymous job (jobs.h)
  std::vector<std::string> images;
  std::vector<std::string> datasets;            // "name@version"
  std::uint32_t nodes = 1;                      // K
  std::uint32_t gpus = 0;                       // G, per node
  std::map<std::string, std::string> selector;  // heartbeat labels that must match
  std::vector<std::string> exclude;             // node names never chosen
  std::vector<std::string> candidates;          // when not empty: only these
  std::optional<bool> require_network_validation;
  std::string platform;  // overrides every node's platform when set
};
// Strict parse of the REST job object; errors name the field.
[[nodiscard]] result<job_spec> parse_job(const nlohmann::json& j);
// The job object parse_job() reads back (GET /v1/jobs, the shared log).
[[nodiscard]] nlohmann::json spec_json(const job_spec& s);

// The job's objects per platform, and per platform what could not be resolved.
struct job_objects {
  std::map<std::string, std::vector<object_ref>> by_platform;
  std::map<std::string, std::vector<std::string>> errors;  // platform → "ref: why"
};

struct node_eval {
  std::uint32_t index = 0;  // into cluster_view::nodes
  std::string name;
  std::string platform;
  bool eligible = false;
  std::vector<std::string> reasons;  // why not eligible
  node_cost cost;
  std::string health;
  std::uint32_t gpus_capacity = 0, gpus_reserved = 0;
  network_verdict net;
  // The packing term: packing_seconds_per_gpu × the GPUs this node would have left free after the
  // job (0 for a job of no GPUs and for ineligible nodes).
  double packing_seconds = 0;
  double rank_seconds = 0;    // cost.seconds + packing_seconds: what the ranking sorts on
  std::uint64_t tie_key = 0;  // equal nodes: lower first (rendezvous hash; 0: by name)
  int rank = 0;               // 1-based among eligible nodes (0: not eligible)
  [[nodiscard]] std::uint32_t gpus_free() const {
    return gpus_capacity > gpus_reserved ? gpus_capacity - gpus_reserved : 0;
  }
};

struct placement {
  bool feasible = false;
  std::string reason;                // when not feasible
  std::vector<std::string> chosen;   // best first
  std::vector<std::string> standby;  // next best, same segment
  std::string segment;               // fabric of a gang ("" for one node)
  std::vector<node_eval> nodes;      // eligible first, by rank; then the others by name
  job_objects objects;
  std::string reservation;  // reservation id ("" when none)
  double reserved_for_s = 0;
};

struct evaluate_options {
  bool require_validation = false;
  // false (the extender): images that could not be resolved are left out of the cost instead of
  // making the nodes of that platform ineligible.
  bool strict_resolution = true;
  // false (the extender): the evaluations stay in view order (by name) with rank 0; it needs only
  // the costs, and ranking 5,000 nodes is a tenth of its time.
  bool rank = true;
  // placement.packing_seconds_per_gpu (config.h): seconds one GPU left free is worth.
  double packing_seconds_per_gpu = default_packing_seconds_per_gpu;
};

// Evaluates every node of the view (GPU reservations by node name) and ranks the eligible ones
// (unless o.rank is false) by rank seconds, then `ok` health, fewer missing bytes, tie key, name.
[[nodiscard]] std::vector<node_eval> evaluate_nodes(
    const cluster_view& v, const job_objects& objs, const job_spec& job, const cost_model& m,
    const network_model& net, const std::map<std::string, std::uint32_t>& reserved,
    const evaluate_options& o);
// Chooses K nodes (a gang inside one segment when K > 1) and `standby` more.
[[nodiscard]] placement choose(std::vector<node_eval> evals, const cluster_view& v,
                               const job_spec& job, std::uint32_t standby,
                               const network_model& net);

// JSON of a placement answer (docs/scheduler.md shows one).
[[nodiscard]] nlohmann::json to_json(const placement& p, const cluster_view& v, const job_spec& job,
                                     const network_model& net);
[[nodiscard]] nlohmann::json to_json(const node_eval& e);

struct placer_options {
  cost_model cost;
  bool require_network_validation = false;
  std::chrono::milliseconds reservation_ttl{120'000};
  double packing_seconds_per_gpu = default_packing_seconds_per_gpu;
};

class placer {
 public:
  using clock = std::chrono::steady_clock;
  placer(cluster_index& idx, resolver& res, dataset_catalog& ds, const network_model& net,
         placer_options o, std::function<clock::time_point()> now = clock::now);
  placer(const placer&) = delete;
  placer& operator=(const placer&) = delete;

  // Resolves the job for the platforms that matter, evaluates and chooses. Errors: bad images
  // (invalid references) and unknown datasets; an unresolvable image is an answer (feasible =
  // false, with the reasons), not an error.
  struct result_t {
    placement p;
    cluster_view view;
  };
  [[nodiscard]] result<result_t> place(const job_spec& job, std::uint32_t standby, bool reserve,
                                       std::chrono::milliseconds wait);
  // Resolution only: the job's objects for these platforms (strict: a bad reference or an unknown
  // dataset is an error; per-platform failures go to `errors`).
  [[nodiscard]] result<job_objects> resolve(const job_spec& job,
                                            const std::vector<std::string>& platforms,
                                            std::chrono::milliseconds wait, bool strict_datasets);
  // GPUs reserved per node now (expired reservations pruned).
  [[nodiscard]] std::map<std::string, std::uint32_t> reserved();
  // Replicas sharing state (shared_state.h): each reservation made here is told to the sharer
  // (which logs it), and the others' are added with add_reservation(). Set before serving.
  using reservation_sharer =
      std::function<void(const std::string& id, const std::vector<std::string>& nodes,
                         std::uint32_t gpus, std::chrono::milliseconds ttl)>;
  void set_reservation_sharer(reservation_sharer fn, std::string id_prefix) {
    sharer_ = std::move(fn);
    reservation_prefix_ = std::move(id_prefix);
  }
  void add_reservation(const std::string& id, const std::vector<std::string>& nodes,
                       std::uint32_t gpus, std::chrono::milliseconds ttl);

  [[nodiscard]] const cost_model& model() const { return opts_.cost; }
  [[nodiscard]] const placer_options& options() const { return opts_; }
  [[nodiscard]] const network_model& network() const { return net_; }
  [[nodiscard]] cluster_index& index() { return idx_; }

 private:
  struct reservation {
    std::string id;
    std::uint32_t gpus = 0;
    clock::time_point until;
  };
  cluster_index& idx_;
  resolver& res_;
  dataset_catalog& ds_;
  const network_model& net_;
  placer_options opts_;
  std::function<clock::time_point()> now_;
  // Held by a reserving place() from its look at the reservations to its own: two at once would
  // both find the same GPUs free. (Between replicas that race stays; shared_state.h.)
  std::mutex reserve_mu_;
  std::mutex mu_;
  std::map<std::string, std::vector<reservation>> reservations_;
  std::uint64_t next_reservation_ = 1;
  std::string reservation_prefix_;  // random per process: ids differ between replicas
  reservation_sharer sharer_;
};

// For each name, its index in `nodes` (sorted by name), or no_node. A merge walk when the names
// are sorted, else a binary search each; no set of names is built, since the extender names
// every node (5,000) in every request.
inline constexpr std::uint32_t no_node = ~std::uint32_t{0};
[[nodiscard]] std::vector<std::uint32_t> index_of_names(const node_list& nodes,
                                                        const std::vector<std::string>& names);

// Platforms of the nodes in a view (or the job's override), sorted and unique.
[[nodiscard]] std::vector<std::string> platforms_of(const cluster_view& v, const job_spec& job);

}  // namespace shoal::scheduler
