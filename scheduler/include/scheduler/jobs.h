#pragma once
// Jobs known to the scheduler, and what happens to them when a member node fails.
//
// A job is known once it is placed (POST /v1/place, not a dry run) or prewarmed (POST /v1/prewarm
// with a `job`) with an `id`: its spec, its members (the chosen nodes, best first), its standbys
// (the next-ranked nodes of the same fabric segment), the segment, and when it was learned. Jobs
// are bounded (jobs.max_jobs, and max_jobs_bytes of specs and node names: the least recently
// updated go) and expire (jobs.ttl after the last update, unless pods of it still run).
//
// Jobs are also learned from their pods: each node's peerd lists the pods running there through
// containerd's CRI and reports those with the label shoal.io/job in its heartbeats
// (common/heartbeat.h `pods`; peerd/include/peerd/cri.h). observe_pods() makes every node where a
// job's pods run a member of it (its pod_nodes); a job known only this way is recorded with source
// "pods", its spec empty but for `nodes` (how many nodes its pods run on: a gang when more than
// one) and its segment the first such node's fabric. When a node's pods of a job are gone (the
// job ended or moved) the node stops being a member it became this way, and a pods-only job with
// no pod left is forgotten. A node that dies keeps its last report: its jobs fail over.
//
// The replacement decision. When the failure detector (failures.h) calls a node `failed`, every
// job with that node as a member gets a decision, made on a worker thread, never while the
// detector's view is stale (the node waits in `pending` until the view is fresh again, and is
// dropped if it recovered meanwhile). Candidates are every node placement finds eligible for one
// more member of the job (healthy in the index, selector, not excluded, not a member already,
// GPUs free, network validation not failed — or passed when required; placement.h), that the
// detector also calls `healthy`. They are preferred, in this order:
//   1. in the fabric segment of the job's surviving members (its recorded segment when none
//      survive). For a gang (nodes > 1) this is a requirement: when no candidate is in that
//      segment the decision names no replacement and says why ("no healthy standby in fabric
//      segment X; ...");
//   2. the job's standbys before other nodes;
//   3. the most bytes held of the job's images, datasets and newest checkpoint (placement's cost
//      evaluation, with the checkpoint's objects added to the job's);
//   4. placement's rank (rank seconds, health, tie key).
// The replacement becomes a member in the failed node's place. The job's standbys are then topped
// up to the count it was placed with, from the next candidates of the segment (a consumed or
// failed standby is replaced), and each new standby — and the replacement, when it lacks some of
// it — is prewarmed (prewarm.h) with the job's images, datasets and newest checkpoint. A standby
// that fails is replaced the same way, without a decision. Each decision is kept (GET
// /v1/jobs/<id>/failover shows the newest), logged, an event "failover" in the detector's log (GET
// /v1/events) and counted (shoal_scheduler_failovers_total,
// shoal_scheduler_failover_no_replacement_total). For jobs.failover_preference_ttl after it, while
// the replacement is still a member, the extender prefers the replacement for pods labelled
// shoal.io/job: <id> (preferred_node()).
//
// Checkpoints. The checkpoint catalog is not a dependency: the newest checkpoint of a job comes
// from an injected function (set_latest_checkpoint), and the catalog tells the registry of each
// registration through on_checkpoint() (or the std::function listener()), which prewarms the new
// checkpoint onto the job's standbys so they hold it before it is needed.
//
// Lifecycle: owned by the app; on_node_events() and expire() run on the maintenance pass,
// decide_pending() on a worker thread. Threading: thread-safe. Lock order: the registry's own
// mutex before the detector's, the index's and prewarm's; decisions run one at a time.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/digest.h"
#include "common/heartbeat.h"
#include "common/metrics.h"
#include "scheduler/dataset_catalog.h"
#include "scheduler/failures.h"
#include "scheduler/index.h"
#include "scheduler/placement.h"
#include "scheduler/prewarm.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler {

struct jobs_options {
  std::size_t max_jobs = 10'000;
  std::chrono::milliseconds ttl{std::chrono::hours(7 * 24)};
  std::chrono::milliseconds failover_preference_ttl{30 * 60'000};
  std::chrono::seconds checkpoint_pin{std::chrono::hours(7 * 24)};
  std::chrono::seconds prewarm_pin{3600};  // images and datasets on new standbys (prewarm.pin_for)
  std::string checkpoint_views_dir = "/var/lib/shoal/peerd/checkpoints/views";
  std::chrono::milliseconds resolve_timeout{3000};
  std::size_t max_candidates_shown = 8;  // in a decision
};

// What all known jobs may hold in memory at most (specs, node names), whatever jobs.max_jobs
// says: a placement body is up to 1 MiB, and plain mode without a token lets anyone place.
inline constexpr std::size_t max_jobs_bytes = 256u << 20;

// A checkpoint's objects: (digest, size).
using checkpoint_objects = std::vector<std::pair<digest, std::uint64_t>>;
// The newest checkpoint of a job: its key "J@N" and objects; nullopt when it has none.
using latest_checkpoint_fn =
    std::function<std::optional<std::pair<std::string, checkpoint_objects>>(const std::string&)>;
// What the checkpoint catalog calls after a registration (job, key "J@N", objects).
using checkpoint_listener =
    std::function<void(const std::string&, const std::string&, checkpoint_objects)>;

struct bytes_held {
  std::uint64_t held = 0, total = 0;
};

// A node weighed for a job's replacement or standby, as the decision shows it.
struct failover_candidate {
  std::string node;
  std::string role;  // standby | other
  std::string segment;
  bool eligible = false;
  std::vector<std::string> reasons;  // why not
  std::uint64_t bytes_present = 0, bytes_total = 0;
};

struct failover_decision {
  std::string job;
  std::string failed_node, failed_cause, failed_detail;
  std::string time;  // UTC, RFC 3339
  std::chrono::steady_clock::time_point at;
  std::string replacement;                     // "" when none
  std::string replacement_role;                // standby | other
  std::string reason;                          // why there is none
  std::string segment;                         // the job's fabric segment ("" when it has none)
  std::vector<std::string> members, standbys;  // the job's, after the decision
  std::vector<std::string> new_standbys;       // chosen to top the standbys up
  std::string prewarm;  // warming the replacement (when it lacks bytes) and them ("" when none)
  bytes_held image, datasets, checkpoint;      // on the replacement
  std::string checkpoint_key;                  // the checkpoint to resume from ("" when none)
  bool checkpoint_complete = false;            // the replacement holds all of its bytes
  std::vector<failover_candidate> candidates;  // the standbys, then the best others
};

struct job_record {
  std::string id;
  job_spec spec;
  std::uint32_t standby_wanted = 0;  // the `standby` it was placed or prewarmed with
  std::vector<std::string> members, standbys;
  std::string segment;
  std::string source;            // place | prewarm
  std::string prewarm;           // the prewarm that warmed it last ("" when none)
  std::string checkpoint;        // the newest checkpoint on_checkpoint() saw ("" when none)
  std::string created, updated;  // UTC, RFC 3339
  std::chrono::steady_clock::time_point created_at, updated_at;
  std::vector<std::string> pod_nodes;         // nodes reporting pods of it (observe_pods), sorted
  std::optional<failover_decision> failover;  // the newest decision
  std::size_t bytes = 0;                      // about what it holds in memory (max_jobs_bytes)
};

struct job_registry_deps {
  cluster_index& index;
  placer& place;
  resolver& res;
  dataset_catalog& datasets;
  prewarm_manager& prewarm;
  failure_detector& failures;
  metrics::registry& reg;
};

class job_registry {
 public:
  using clock = std::chrono::steady_clock;
  job_registry(job_registry_deps d, jobs_options o,
               std::function<clock::time_point()> now = clock::now);
  job_registry(const job_registry&) = delete;
  job_registry& operator=(const job_registry&) = delete;

  // ---- What the API learns (spec.id must be set; anonymous jobs are not recorded)
  // Records or updates the job: members best first, standbys ranked next.
  void record(const job_spec& spec, std::vector<std::string> members,
              std::vector<std::string> standbys, std::string segment, std::uint32_t standby_wanted,
              std::string source, std::string prewarm = "");
  // False when the job is not known.
  bool forget(const std::string& id);
  // What `node` (fabric segment `fabric`) reports running (every heartbeat that carries `pods`;
  // see above). Cheap when nothing changed.
  void observe_pods(const std::string& node, const std::string& fabric,
                    const std::vector<heartbeat::job_pod>& pods);
  // Forgets jobs not updated for jobs.ttl.
  void expire();

  // ---- Reads
  [[nodiscard]] std::optional<job_record> get(const std::string& id) const;
  [[nodiscard]] std::vector<job_record> list() const;  // by id
  [[nodiscard]] std::size_t size() const;
  // The replacement of the job's newest decision, while it is preferred (see above).
  [[nodiscard]] std::optional<std::string> preferred_node(std::string_view job) const;
  // The verdict of the failure detector for `node` ("unknown" before its first evaluation).
  [[nodiscard]] std::optional<node_verdict> verdict(std::string_view node) const;
  [[nodiscard]] const jobs_options& options() const { return opts_; }
  [[nodiscard]] clock::time_point now() const { return now_(); }

  // ---- Failover
  // From the maintenance pass, with evaluate()'s events: remembers the nodes found failed. True
  // when decide_pending() should run now (some are pending, the view is fresh, and no run is
  // scheduled yet); the caller then runs it on a worker thread.
  // `may_decide` false (a replica that does not hold the lease, shared_state.h): remembered, never
  // true; the holder decides, and this replica decides for what is still pending if it takes over
  // (a node already replaced is no longer a member: nothing is decided twice).
  [[nodiscard]] bool on_node_events(const std::vector<node_event>& events, bool may_decide = true);
  // Decides for every pending failed node that is still failed; returns the decisions made.
  // Blocks on resolution: worker threads only.
  std::vector<failover_decision> decide_pending();

  // ---- Between scheduler replicas (shared_state.h; jobs_shared.cc)
  // Called with a job's id after this replica changed it (recorded, forgotten, a decision, a
  // standby replaced); the sharer logs snapshot(id), or the job's removal when it has none. Not
  // called for what put()/erase() apply. Set before serving.
  void set_sharer(std::function<void(const std::string&)> fn);
  // The job's record as one JSON document; nullopt when unknown.
  [[nodiscard]] std::optional<std::string> snapshot(const std::string& id) const;
  // Another replica's snapshot replaces this one's record of the job (a decision new here is
  // added to the detector's events); a malformed document changes nothing.
  [[nodiscard]] status put(const std::string& snapshot);
  void erase(const std::string& id);

  // ---- Checkpoints
  // A new checkpoint of `job` ("J@N", its objects): prewarmed onto each of its standbys (pinned
  // jobs.checkpoint_pin_for). Unknown jobs and malformed keys are logged and ignored.
  void on_checkpoint(const std::string& job, const std::string& key, checkpoint_objects objects);
  // on_checkpoint as a function, for the checkpoint catalog.
  [[nodiscard]] checkpoint_listener listener();
  // Where the newest checkpoint of a job comes from (unset: no checkpoint is ever known).
  void set_latest_checkpoint(latest_checkpoint_fn fn);

 private:
  struct context;  // what one decision weighs (jobs.cc)
  // Every node that could join the job in place of `failed`, in the order of preference.
  [[nodiscard]] context weigh(const job_record& job, const std::string& failed);
  std::optional<failover_decision> decide(const std::string& id, const node_event& ev);
  void replace_standby(const std::string& id, const std::string& failed);
  // Picks standbys until the job has standby_wanted of them.
  [[nodiscard]] std::vector<std::string> top_up(const context& c, const job_record& job,
                                                const std::vector<std::string>& members,
                                                const std::vector<std::string>& standbys) const;
  // Prewarms images, datasets and the newest checkpoint onto the (node, role) targets; the
  // prewarm id or "".
  std::string warm(const job_record& job, const context& c,
                   const std::vector<std::pair<std::string, std::string>>& targets);
  void publish(const failover_decision& d);
  // Drops the least recently updated job beyond max_jobs. Caller holds mu_.
  void evict_locked();
  // r.bytes (and bytes_) after a change of r. Caller holds mu_.
  void account_locked(job_record& r);
  void shared(const std::string& id);  // tells the sharer, if any

  job_registry_deps d_;
  jobs_options opts_;
  std::function<clock::time_point()> now_;
  metrics::counter& failovers_;
  metrics::counter& no_replacement_;
  std::mutex decide_mu_;  // one decision at a time; taken before mu_
  mutable std::mutex mu_;
  std::map<std::string, job_record, std::less<>> jobs_;
  std::size_t bytes_ = 0;                      // approx_bytes() of every record
  std::map<std::string, node_event> pending_;  // failed nodes awaiting decisions
  // node → the jobs of its pods at its last report (observe_pods)
  std::map<std::string, std::set<std::string>, std::less<>> node_pod_jobs_;
  bool scheduled_ = false;  // decide_pending() is posted or running
  latest_checkpoint_fn latest_;
  std::function<void(const std::string&)> sharer_;
};

// JSON of a job (GET /v1/jobs/<id>): member and standby states from the detector.
[[nodiscard]] nlohmann::json to_json(const job_record& r, const job_registry& jobs);
// JSON of a decision (GET /v1/jobs/<id>/failover; docs/scheduler.md, "Failover").
[[nodiscard]] nlohmann::json to_json(const failover_decision& d, const job_registry& jobs);

}  // namespace shoal::scheduler
