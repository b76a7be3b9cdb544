#pragma once
// The scheduler's HTTP routes (JSON, versioned under /v1; docs/scheduler.md has examples):
//
//   POST /v1/heartbeat                 peerd's heartbeat (common/heartbeat.h); the reply carries
//                                      the epoch, resync and prewarm orders
//   GET  /v1/nodes, /v1/nodes/<name>   inventory, health, cache, GPUs, network
//   GET  /v1/objects/<digest>          holders of one object
//   GET  /v1/images/<ref>[?platform=]  resolution, and how much of it each node holds
//   GET  /v1/datasets/<name@version>   the same for a dataset (issue #7: "unknown dataset")
//   POST /v1/place                     place a job: chosen nodes, and every node explained
//   POST /v1/prewarm                   prewarm on nodes / a selector / a job's nodes + standby
//   GET  /v1/prewarm, /v1/prewarm/<id> progress
//   POST /v1/extender/filter|prioritize  kube-scheduler extender (extender.h)
//   GET  /announce                     the BitTorrent tracker
//
// A router apart from the listener, so tests drive it without sockets: serve() answers any
// route and may block (resolution); the app runs heavy() routes on its worker pool and
// heartbeats on their own pool, the rest on the io threads. Thread-safe.

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/http_server.h"
#include "common/metrics.h"
#include "config.h"
#include "extender.h"
#include "index.h"
#include "placement.h"
#include "prewarm.h"
#include "resolver.h"
#include "tracker.h"

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
  http::response on_nodes(std::string_view rest);
  http::response on_object(std::string_view rest);
  http::response on_image(const http::request& req, std::string_view rest);
  http::response on_dataset(std::string_view rest);
  http::response on_place(const http::request& req);
  http::response on_prewarm_create(const http::request& req);
  http::response on_prewarm_get(std::string_view rest);
  nlohmann::json node_json(const node_summary& n,
                           const std::map<std::string, std::uint32_t>& reserved) const;
  nlohmann::json holders_json(std::span<const object_ref> objects,
                              const std::string& platform) const;

  api_deps d_;
  metrics::counter* heartbeats_;
  metrics::counter* bad_heartbeats_;
  metrics::counter_family& resyncs_;
  metrics::histogram_family& latency_;
  metrics::counter_family& requests_;
};

// {"error": msg} with the status.
[[nodiscard]] http::response json_error(unsigned status, std::string_view msg);
// A random lower-case hex id with a prefix ("pw-1a2b3c4d5e6f").
[[nodiscard]] std::string random_id(std::string_view prefix);

}  // namespace shoal::scheduler
