#pragma once
// The scheduler's HTTP routes (JSON, versioned under /v1; docs/scheduler.md has examples), and
// who may call each with TLS on (authz.h; docs/security.md, "Who may call what (scheduler)"):
//
//   POST /v1/heartbeat                 node (its own name)  peerd's heartbeat (common/heartbeat.h);
//                                      the reply carries the epoch, resync and prewarm orders
//   GET  /v1/nodes, /v1/nodes/<name>   member   inventory, health, cache, GPUs, network
//   GET  /v1/objects/<digest>          member   holders of one object
//   GET  /v1/images/<ref>[?platform=]  member   resolution, and how much of it each node holds
//   GET  /v1/datasets/<name@version>   member   the same for a dataset
//   POST /v1/place                     operator place a job: chosen nodes, every node explained
//   POST /v1/prewarm                   operator prewarm on nodes / a selector / a job's nodes
//   GET  /v1/prewarm, /v1/prewarm/<id> member   progress
//   GET  /v1/jobs, /v1/jobs/<id>       member   jobs placed or prewarmed with an id (jobs.h)
//   GET  /v1/jobs/<id>/failover        member   the job's newest failover decision
//   DELETE /v1/jobs/<id>               operator forget a job
//   GET  /v1/events                    member   node failure and failover events
//   POST /v1/extender/filter|prioritize  kube-scheduler  the extender (extender.h)
//   POST /v1/checkpoints               node (the writer)  register a checkpoint (checkpoints.h)
//   GET  /v1/checkpoints[?job=J]       member   records, newest step first
//   GET  /v1/checkpoints/<J@N|J@latest|J>[/manifest]  member  a record (holders), its manifest
//   GET  /v1/checkpoints/<J@N>/groups/<g>  node  a group's torrent and, with TLS, a grant
//   DELETE /v1/checkpoints/<J@N>       operator forget a record
//   GET  /announce                     the tracker (authorize_announce)
//
// member: any cluster certificate with a role; operator: an operator certificate or the bearer
// token. serve() asks the authorizer before any route runs. In plain mode nothing is checked
// except place, prewarm and checkpoint deletes once a token file is configured.
//
// A router apart from the listener, so tests drive it without sockets: serve() answers any
// route and may block (resolution); the app runs heavy() routes on its worker pool and
// heartbeats on their own pool, the rest on the io threads. Thread-safe.

#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/http_server.h"
#include "common/metrics.h"
#include "scheduler/authz.h"
#include "scheduler/checkpoints.h"
#include "scheduler/config.h"
#include "scheduler/extender.h"
#include "scheduler/failures.h"
#include "scheduler/index.h"
#include "scheduler/jobs.h"
#include "scheduler/origins.h"
#include "scheduler/placement.h"
#include "scheduler/prewarm.h"
#include "scheduler/resolver.h"
#include "scheduler/shared_state.h"
#include "scheduler/tracker.h"

namespace shoal::scheduler {

struct api_deps {
  const scheduler_config& cfg;
  cluster_index& index;
  tracker& trk;
  placer& place;
  resolver& res;
  dataset_catalog& datasets;
  prewarm_manager& prewarm;
  extender& ext;
  metrics::registry& reg;
  // The operator bearer token (auth.operator_token_file); null: none is accepted.
  const operator_token* token = nullptr;
  // Node failure verdicts and events (failures.h); null: /v1/nodes shows no state, /v1/events 404.
  const failure_detector* failures = nullptr;
  // The checkpoint catalog (checkpoints.h); null: /v1/checkpoints 404. Grants for its swarms:
  // empty without TLS.
  checkpoint_catalog* checkpoints = nullptr;
  checkpoint_grant_fn checkpoint_grant_for;
  // Jobs and failover decisions (jobs.h); null: jobs are not recorded, /v1/jobs 404.
  job_registry* jobs = nullptr;
  // State shared with other replicas through Redis (shared_state.h); null: this scheduler alone.
  shared_state* shared = nullptr;
};

class api {
 public:
  explicit api(api_deps d);
  api(const api&) = delete;
  api& operator=(const api&) = delete;

  [[nodiscard]] http::response serve(const http::request& req);
  // Routes that may block on resolution or do heavy work.
  [[nodiscard]] static bool heavy(const http::request& req);
  [[nodiscard]] static bool is_heartbeat(const http::request& req);

 private:
  http::response on_heartbeat(const http::request& req);
  // The address the node is reached at: the connection's, or (plain mode with
  // tracker.trust_announced_ip) the one its heartbeat claims.
  std::string node_address(const http::request& req, const std::string& claimed) const;
  http::response on_nodes(const http::request& req, std::string_view rest);
  http::response on_events(const http::request& req);
  // /v1/checkpoints[/...] and its POST (api_checkpoints.cc).
  http::response on_checkpoints(const http::request& req);
  http::response on_checkpoint_register(const http::request& req);
  http::response on_object(std::string_view rest);
  http::response on_image(const http::request& req, std::string_view rest);
  http::response on_dataset(std::string_view rest);
  http::response on_place(const http::request& req);
  http::response on_prewarm_create(const http::request& req);
  http::response on_prewarm_get(std::string_view rest);
  http::response on_jobs(const http::request& req);  // api_jobs.cc
  // POST /v1/origins {"url": ...}: a registry-proxy replica announces itself and hears the
  // ring's members; GET lists them (origins.h).
  http::response on_origins(const http::request& req);

  // A step of a handler: its value, or the response that ends the request.
  template <class T>
  using or_response = std::expected<T, http::response>;
  // POST /v1/prewarm in steps: the targets (named nodes, a label selector, or a job's placement),
  // then what each target's platform resolves to, then the orders.
  struct prewarm_targets {
    std::vector<planned_node> planned;
    std::string platform_override;  // a job's platform, else each node's own
    nlohmann::json job_answer;      // a job's placement, for the answer; null otherwise
    // A job with an id and its placement, recorded once the prewarm exists (jobs.h).
    std::optional<job_spec> job;
    std::vector<std::string> members, standbys;
    std::string segment;
  };
  struct prewarm_sources {
    std::map<std::string, std::string> platform_of;  // target node → platform
    std::map<std::pair<std::string, std::string>, resolved_image> images;  // (image, platform)
    std::vector<std::vector<object_ref>> dataset_objs;  // one list per dataset, in spec order
  };
  // The targets the body names; a job's own images and datasets fill an empty spec.
  or_response<prewarm_targets> prewarm_targets_of(const nlohmann::json& b, job_spec& spec,
                                                  std::uint32_t standby,
                                                  std::chrono::milliseconds wait);
  // "nodes": known node names, duplicates dropped.
  or_response<std::vector<planned_node>> named_targets(const nlohmann::json& nodes) const;
  // "selector": every healthy node whose labels match.
  or_response<std::vector<planned_node>> selector_targets(const nlohmann::json& selector) const;
  // "job": the chosen and standby nodes of a placement that reserves no GPUs (409 when the job
  // cannot be placed).
  or_response<prewarm_targets> job_targets(const nlohmann::json& job_doc, job_spec& spec,
                                           std::uint32_t standby, std::chrono::milliseconds wait);
  // Each target's platform, and the images and datasets resolved for them; any failure ends it.
  or_response<prewarm_sources> resolve_prewarm(const std::vector<planned_node>& planned,
                                               const job_spec& spec,
                                               const std::string& platform_override,
                                               std::chrono::milliseconds wait);
  // One order per image and per dataset for every target, ids "<id>.<k>" and "<id>.d<k>".
  void add_prewarm_orders(std::vector<planned_node>& planned, const job_spec& spec,
                          const prewarm_sources& src, const std::string& id) const;

  nlohmann::json node_json(const node_summary& n,
                           const std::map<std::string, std::uint32_t>& reserved,
                           bool documents = true) const;
  nlohmann::json holders_json(std::span<const object_ref> objects,
                              const std::string& platform) const;

  api_deps d_;
  authorizer auth_;
  metrics::counter* heartbeats_;
  metrics::counter* heartbeat_bytes_;
  metrics::counter* bad_heartbeats_;
  metrics::counter_family& resyncs_;
  metrics::histogram_family& latency_;
  metrics::counter_family& requests_;
  origin_members origins_;
};

// {"error": msg} with the status.
[[nodiscard]] http::response json_error(unsigned status, std::string_view msg);
// The prewarm id a POST /v1/prewarm names with its Idempotency-Key header (api_prewarm.cc); empty
// without one; a 400 for a malformed key.
[[nodiscard]] std::expected<std::string, http::response> idempotent_prewarm_id(
    const http::request& req);
// A random lower-case hex id with a prefix ("pw-1a2b3c4d5e6f").
[[nodiscard]] std::string random_id(std::string_view prefix);

}  // namespace shoal::scheduler
