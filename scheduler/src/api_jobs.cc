// The scheduler API's job routes, beside api.cc, and the JSON of jobs and failover decisions
// (jobs.h; docs/scheduler.md, "Failover"):
//   GET    /v1/jobs                  {"jobs": [job...]}
//   GET    /v1/jobs/<id>             one job, its members' and standbys' states
//   GET    /v1/jobs/<id>/failover    the job's newest decision (404 "no failover for job X")
//   DELETE /v1/jobs/<id>             forget it (operator)
#include <cmath>

#include "common/checkpoint.h"
#include "common/json_text.h"
#include "scheduler/api.h"
#include "scheduler/jobs.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

double round1(double v) { return std::round(v * 10.0) / 10.0; }

json or_null(const std::string& s) { return s.empty() ? json() : json(s); }

// Each node with the failure detector's verdict ("unknown" before its first evaluation).
json node_states(const std::vector<std::string>& nodes, const job_registry& jobs) {
  json out = json::array();
  for (const auto& n : nodes) {
    auto v = jobs.verdict(n);
    json x = {{"node", n}, {"state", v ? std::string(to_string(v->state)) : "unknown"}};
    if (v && v->cause != failure_cause::none) x["cause"] = std::string(to_string(v->cause));
    if (v && !v->detail.empty()) x["detail"] = v->detail;
    out.push_back(std::move(x));
  }
  return out;
}

json held_json(const bytes_held& b) { return {{"held", b.held}, {"total", b.total}}; }

}  // namespace

json to_json(const job_record& r, const job_registry& jobs) {
  json spec = spec_json(r.spec);
  spec.erase("id");  // the job's own "id" says it
  const double age = std::chrono::duration<double>(jobs.now() - r.updated_at).count();
  const double ttl = std::chrono::duration<double>(jobs.options().ttl).count();
  json failover;
  if (r.failover) {
    failover = {{"time", r.failover->time},
                {"failed_node", r.failover->failed_node},
                {"replacement", or_null(r.failover->replacement)},
                {"url", "/v1/jobs/" + r.id + "/failover"}};
  }
  return {{"id", r.id},
          {"job", spec},
          {"source", r.source},
          {"segment", r.segment},
          {"members", node_states(r.members, jobs)},
          {"standbys", node_states(r.standbys, jobs)},
          {"standby_wanted", r.standby_wanted},
          {"pod_nodes", r.pod_nodes},
          {"prewarm", or_null(r.prewarm)},
          {"checkpoint", or_null(r.checkpoint)},
          {"created", r.created},
          {"updated", r.updated},
          {"expires_in_s", round1(std::max(0.0, ttl - age))},
          {"failover", std::move(failover)}};
}

json to_json(const failover_decision& d, const job_registry& jobs) {
  const auto& o = jobs.options();
  const double age = std::chrono::duration<double>(jobs.now() - d.at).count();
  const auto preferred = jobs.preferred_node(d.job);
  const bool prefers = !d.replacement.empty() && preferred && *preferred == d.replacement;
  json candidates = json::array();
  for (const auto& c : d.candidates) {
    candidates.push_back({{"node", c.node},
                          {"role", c.role},
                          {"segment", c.segment},
                          {"eligible", c.eligible},
                          {"reasons", c.reasons},
                          {"bytes_present", c.bytes_present},
                          {"bytes_total", c.bytes_total}});
  }
  json out = {
      {"job", d.job},
      {"time", d.time},
      {"age_s", round1(age)},
      {"failed", {{"node", d.failed_node}, {"cause", d.failed_cause}, {"detail", d.failed_detail}}},
      {"replacement", or_null(d.replacement)},
      {"replacement_role", or_null(d.replacement_role)},
      {"segment", d.segment},
      {"members", d.members},
      {"standbys", d.standbys},
      {"new_standbys", d.new_standbys},
      {"prewarm", or_null(d.prewarm)},
      {"candidates", std::move(candidates)}};
  if (d.replacement.empty()) {
    out["reason"] = d.reason;
    out["bytes_held"] = nullptr;
  } else {
    out["bytes_held"] = {{"image", held_json(d.image)},
                         {"datasets", held_json(d.datasets)},
                         {"checkpoint", held_json(d.checkpoint)}};
  }
  // The extender prefers the replacement for the job's pods while this lasts.
  out["extender_preference"] = {
      {"active", prefers},
      {"remaining_s",
       prefers ? round1(std::chrono::duration<double>(o.failover_preference_ttl).count() - age)
               : 0.0}};
  if (d.checkpoint_key.empty()) {
    out["checkpoint"] = nullptr;
    out["resume"] = nullptr;
  } else {
    out["checkpoint"] = {{"key", d.checkpoint_key},
                         {"complete", d.checkpoint_complete},
                         {"bytes_held", d.checkpoint.held},
                         {"bytes_total", d.checkpoint.total}};
    out["resume"] = {
        {"checkpoint", d.checkpoint_key},
        {"restore_command", "shoalctl checkpoint restore " + d.checkpoint_key + " <dir>"},
        {"path", o.checkpoint_views_dir + "/" + d.checkpoint_key}};
  }
  return out;
}

http::response api::on_jobs(const http::request& req) {
  if (!d_.jobs) return json_error(404, "jobs are not tracked");
  const bool get = req.method == http::verb::get || req.method == http::verb::head;
  std::string_view rest = std::string_view(req.path).substr(std::string_view("/v1/jobs").size());
  if (rest.empty() || rest == "/") {
    if (!get) return json_error(405, "use GET");
    json list = json::array();
    for (const auto& r : d_.jobs->list()) list.push_back(to_json(r, *d_.jobs));
    return http::response::json(200, json_text(json{{"jobs", std::move(list)}}));
  }
  rest.remove_prefix(1);
  bool failover = false;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    if (rest.substr(slash) != "/failover") return json_error(404, "no such endpoint");
    failover = true;
    rest = rest.substr(0, slash);
  }
  if (!checkpoint::valid_job(rest))
    return json_error(400, "job ids are [a-z0-9][a-z0-9._-]{0,127}");
  const std::string id(rest);
  if (req.method == http::verb::delete_ && !failover) {
    if (!d_.jobs->forget(id)) return json_error(404, "unknown job " + id);
    return http::response::json(200, json_text(json{{"deleted", id}}));
  }
  if (!get) return json_error(405, failover ? "use GET" : "use GET or DELETE");
  auto r = d_.jobs->get(id);
  if (!r) return json_error(404, "unknown job " + id);
  if (!failover) return http::response::json(200, json_text(to_json(*r, *d_.jobs)));
  if (!r->failover) return json_error(404, "no failover for job " + id);
  return http::response::json(200, json_text(to_json(*r->failover, *d_.jobs)));
}

}  // namespace shoal::scheduler
