#pragma once
// The kube-scheduler extender: the `filter` and `prioritize` verbs of
// k8s.io/kube-scheduler/extender/v1, with its exact JSON (Go field names, no json tags):
//
//   request  ExtenderArgs          {"Pod": v1.Pod, "Nodes": v1.NodeList | null,
//                                   "NodeNames": ["n1", ...] | null}
//   filter   ExtenderFilterResult  {"Nodes": v1.NodeList | null, "NodeNames": [...] | null,
//                                   "FailedNodes": {"n": "why"},
//                                   "FailedAndUnresolvableNodes": {"n": "why"}, "Error": ""}
//   prioritize HostPriorityList    [{"Host": "n1", "Score": 0..10}, ...]
//
// `NodeNames` comes when the extender is configured nodeCacheCapable (deploy/ does), the full
// `Nodes` list otherwise; the answer uses the same form. The pod's images are its init
// containers' and containers' images; its datasets the annotation `shoal.io/datasets`
// ("name@version,name@version"). Mode: `shoal.io/placement: soft|hard` on the pod, else the
// config. Soft: filter passes every node and prioritize scores each 0..10 by the share of the
// cold-start time the node saves (cost.h). Hard: filter also removes nodes missing more than
// `shoal.io/max-missing` (or the config's max_missing) as FailedAndUnresolvableNodes, since
// preempting pods cannot bring data to a node.
//
// Images not resolved within `resolve_timeout` are left out of the scores (kube-scheduler gives
// an extender 5 s by default); the resolution goes on and serves the next attempt. In hard mode
// an unresolved image makes filter answer `Error` (kube-scheduler skips an ignorable extender
// that errs, and retries the pod otherwise).
//
// Failover (jobs.h): a pod labelled `shoal.io/job: <id>` whose job has an open failover decision
// is steered to the replacement: filter keeps it (when known and healthy, whatever it lacks) and
// prioritize gives it 10 while every other node gets at most 9.
//
// Threading: thread-safe; calls block on resolution (worker threads).

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/http_server.h"
#include "common/metrics.h"
#include "scheduler/cost.h"
#include "scheduler/placement.h"
#include "scheduler/scores.h"

namespace shoal::scheduler {

inline constexpr std::string_view annotation_datasets = "shoal.io/datasets";
inline constexpr std::string_view annotation_placement = "shoal.io/placement";
inline constexpr std::string_view annotation_max_missing = "shoal.io/max-missing";
inline constexpr std::string_view label_job = "shoal.io/job";

struct pod_info {
  std::string name, ns;
  std::vector<std::string> images;  // init containers first, then containers; unique
  std::vector<std::string> datasets;
  std::string mode;  // "" (config), soft, hard
  std::optional<threshold> max_missing;
  std::string job;                    // label shoal.io/job (checkpoint::valid_job), "" when none
  std::vector<std::string> warnings;  // annotations or images we ignored, and why
};
// Reads what matters from a v1.Pod; unusable parts become warnings, a non-object pod an error.
[[nodiscard]] result<pod_info> parse_pod(const nlohmann::json& pod);

// A NodeNames list read before, kept by its bytes: kube-scheduler names the same nodes in
// request after request (every node, with percentageOfNodesToScore 100), so a request whose list
// is byte for byte a kept one skips reading it, and where each name is in the index's node list
// is kept with it. Immutable but for that position cache.
struct listed_names {
  std::string raw;                 // the array's bytes, '[' to ']'
  std::vector<std::string> names;  // in order
  // The HostPriorityList for these names with a two-byte slot for each score:
  // [{"Host":"<name>","Score":__},...]; a score below 10 goes in with a space before it.
  std::string answer;
  std::vector<std::uint32_t> slot;  // where name k's score goes in answer
  // Each name's position in one node list of the index, and the platforms of the healthy ones
  // (sorted): computed for the list current at the time, replaced when it changes.
  struct positions {
    std::weak_ptr<const node_classes> list;  // identity only
    std::vector<std::uint32_t> at;           // no_node for a name the list lacks
    std::vector<std::string> platforms;
  };
  [[nodiscard]] std::shared_ptr<const positions> positions_for(const node_list& nodes) const;
  void keep(std::shared_ptr<const positions> p) const;

 private:
  mutable std::mutex mu_;
  mutable std::shared_ptr<const positions> pos_;  // guarded by mu_
};

// The last few NodeNames lists (most recent first). Thread-safe.
class names_cache {
 public:
  static constexpr std::size_t capacity = 8;
  // Lists shorter than this are read each time (cheap, and not worth a slot).
  static constexpr std::size_t min_names = 64;
  // The kept list whose bytes `rest` starts with, or null.
  [[nodiscard]] std::shared_ptr<const listed_names> match(std::string_view rest) const;
  // Keeps a list just read (its array bytes and names); returns it.
  std::shared_ptr<const listed_names> add(std::string_view raw, std::vector<std::string> names);

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const listed_names>> lists_;  // guarded by mu_
};

struct extender_args {
  pod_info pod;
  bool names_form = true;  // NodeNames (nodeCacheCapable) vs Nodes
  // The requested names in request order: `names`, or `listed`'s when the list was kept.
  std::vector<std::string> names;
  std::shared_ptr<const listed_names> listed;
  nlohmann::json node_items;      // Nodes form: the items, to echo back
  nlohmann::json node_list_meta;  // Nodes form: the list's metadata
  [[nodiscard]] const std::vector<std::string>& node_names() const {
    return listed ? listed->names : names;
  }
};
// With a cache, a NodeNames list it holds is not read again and a long one read is kept there.
[[nodiscard]] result<extender_args> parse_extender_args(std::string_view body,
                                                        std::size_t max_nodes = 100'000,
                                                        names_cache* cache = nullptr);

struct extender_options {
  std::string mode = "soft";
  threshold max_missing;
  std::chrono::milliseconds resolve_timeout{2000};
  // Job states kept for decisions (scores.h), least recently used out: about 30 bytes per node
  // each (0.6 MB at 20,000 nodes).
  std::size_t kept_jobs = 64;
  std::size_t max_request_bytes = 32u << 20;
};

class extender {
 public:
  extender(placer& p, extender_options o, metrics::registry& reg);
  // POST bodies of the two verbs; always a JSON answer (400 on malformed input, 413 too large).
  [[nodiscard]] http::response filter(std::string_view body);
  [[nodiscard]] http::response prioritize(std::string_view body);

  struct verdict {
    std::string_view node;  // the request's name (into extender_args::names: valid while it is)
    bool known = false;     // the index has the node
    bool healthy = false;
    node_cost cost;
    int score = 0;
  };
  // The evaluation of every requested node from scratch (exposed for tests; the verbs use it
  // when kept scores cannot serve, see scores.h).
  [[nodiscard]] std::vector<verdict> evaluate(const extender_args& a,
                                              std::vector<std::string>& errors);
  // The same answers from kept job states (scores.h), per requested name k: its score, whether
  // the index knows it and whether it is healthy, and with `costs` the cost of each known healthy
  // node (others: bytes_total only). False when kept states cannot serve (racks spanning zones, a
  // node came or went meanwhile), having added nothing to `errors`: then evaluate() answers.
  struct kept_answers {
    std::vector<std::uint8_t> score;  // 0..10
    std::vector<std::uint8_t> state;  // bit 0: known, bit 1: healthy; with states only
    std::vector<node_cost> cost;      // with costs only
  };
  [[nodiscard]] bool evaluate_kept(const extender_args& a, std::vector<std::string>& errors,
                                   kept_answers& out, bool costs, bool states);

  // The node a job's pods should go to (a failover replacement), or nullopt; set once at wiring,
  // before requests (job_registry::preferred_node). Unset: no preference.
  using job_preference = std::function<std::optional<std::string>(std::string_view job)>;
  void set_job_preference(job_preference fn) { preferred_ = std::move(fn); }

 private:
  // The pod's images and datasets resolved for these platforms (within resolve_timeout); what
  // could not be resolved is left out and said in `errors`.
  [[nodiscard]] job_objects resolve_pod(const pod_info& pod,
                                        const std::vector<std::string>& platforms,
                                        std::vector<std::string>& errors);
  // The pod's job's preferred node, or "".
  [[nodiscard]] std::string preferred_for(const pod_info& pod) const;
  // evaluate_kept()'s answers, else the same from evaluate(): what both verbs read. Without
  // `states`, kept answers may leave `state` empty (prioritize reads it only for a failover
  // replacement; at 20,000 nodes it is a pass over every name).
  [[nodiscard]] kept_answers answers(const extender_args& a, std::vector<std::string>& errors,
                                     bool costs, bool states = true);
  // Hard mode's filter: the names that pass (indexes into a.node_names()) into `kept`, the
  // others with why into `failed`; or the error that stops the judgement.
  [[nodiscard]] std::string judge_hard(const extender_args& a, const threshold& limit,
                                       std::vector<std::size_t>& kept, nlohmann::json& failed);

  job_preference preferred_;
  placer& placer_;
  extender_options opts_;
  metrics::counter_family& requests_;
  metrics::histogram_family& latency_;
  metrics::counter_family& kept_;
  names_cache names_;
  score_cache scores_;
};

}  // namespace shoal::scheduler
