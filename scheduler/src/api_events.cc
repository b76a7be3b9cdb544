// The scheduler API's node-event route (GET /v1/events), beside api.cc.
#include <cstdlib>

#include "scheduler/api.h"
#include "common/json_text.h"

namespace shoal::scheduler {

using nlohmann::json;

// GET /v1/events[?node=N][&limit=K]: node failure events, newest first (failures.h).
http::response api::on_events(const http::request& req) {
  if (!d_.failures) return json_error(404, "failure detection is not running");
  std::size_t limit = 100;
  if (auto l = req.query_param("limit")) {
    char* end = nullptr;
    unsigned long v = std::strtoul(l->c_str(), &end, 10);
    if (l->empty() || *end != '\0' || v == 0 || v > 10000)
      return json_error(400, "limit must be a number from 1 to 10000");
    limit = v;
  }
  std::string node = req.query_param("node").value_or("");
  if (node.size() > 253) return json_error(400, "node names have at most 253 characters");
  json out = json::array();
  for (const auto& e : d_.failures->events(node, limit)) {
    json ev = {{"time", e.time},
               {"node", e.node},
               {"event", e.event},
               {"cause", e.cause},
               {"detail", e.detail}};
    if (!e.job.empty()) ev["job"] = e.job;
    if (e.event == "failover")
      ev["replacement"] = e.replacement.empty() ? json() : json(e.replacement);
    out.push_back(std::move(ev));
  }
  return http::response::json(
      200, json_text(json{{"events", std::move(out)}, {"view_stale", d_.failures->view_stale()}}));
}

}  // namespace shoal::scheduler
