#include "scheduler/api.h"

#include <openssl/rand.h>

#include <set>

#include "common/heartbeat.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/json_text.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

json datasets_json(const node_summary& n) {
  json out = json::array();
  for (const auto& p : n.datasets) {
    out.push_back({{"dataset", p.dataset},
                   {"bytes", p.bytes},
                   {"total", p.total},
                   {"share", p.share()},
                   {"view", p.view}});
  }
  return out;
}

json parse_doc(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? json() : j;
}

constexpr std::size_t max_api_body = 1u << 20;

// The request body as a JSON object, or the error response.
result<json> body_object(const http::request& req) {
  if (req.body.size() > max_api_body)
    return fail(errc::too_large, "request body larger than 1 MiB");
  if (heartbeat::json_too_deep(req.body))
    return fail(errc::invalid_argument, "request body nests too deep");
  auto j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::invalid_argument, "request body must be a JSON object");
  return j;
}

unsigned status_of(const error& e) {
  if (e.is(errc::too_large)) return 413;
  if (e.is(errc::not_found)) return 404;
  if (e.is(errc::busy)) return 429;
  if (e.is(errc::timeout)) return 504;
  if (e.is(errc::invalid_argument) || e.is(errc::invalid_digest) ||
      e.code.category() == digest_category())
    return 400;
  return 502;
}

std::string route_label(std::string_view path) {
  for (std::string_view p :
       {"/v1/heartbeat", "/v1/nodes", "/v1/objects", "/v1/images", "/v1/datasets", "/v1/place",
        "/v1/prewarm", "/v1/extender/filter", "/v1/extender/prioritize", "/announce", "/v1/events",
        "/v1/checkpoints", "/v1/jobs", "/v1/origins"}) {
    if (path.rfind(p, 0) == 0) return std::string(p);
  }
  return "other";
}

}  // namespace

http::response json_error(unsigned status, std::string_view msg) {
  return http::response::json(status, json_text(json{{"error", std::string(msg)}}));
}

std::string random_id(std::string_view prefix) {
  unsigned char b[6];
  if (RAND_bytes(b, sizeof b) != 1) {
    auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    for (std::size_t i = 0; i < sizeof b; ++i) b[i] = static_cast<unsigned char>(t >> (8 * i));
  }
  return std::string(prefix) + to_hex(std::span<const std::uint8_t>(b, sizeof b));
}

api::api(api_deps d)
    : d_(d),
      auth_(d.token, d.reg),
      heartbeats_(
          &d.reg.counter("shoal_scheduler_heartbeats_total", "Heartbeats accepted.").with({})),
      heartbeat_bytes_(&d.reg
                            .counter("shoal_scheduler_heartbeat_bytes_total",
                                     "Bytes of the heartbeats accepted (their JSON bodies).")
                            .with({})),
      bad_heartbeats_(
          &d.reg.counter("shoal_scheduler_bad_heartbeats_total", "Heartbeats refused as malformed.")
               .with({})),
      resyncs_(d.reg.counter(
          "shoal_scheduler_resyncs_total",
          "Heartbeat deltas refused with a resync request, by reason (unknown_node, epoch, gap, "
          "moved).",
          {"reason"})),
      latency_(d.reg.histogram(
          "shoal_scheduler_placement_duration_seconds",
          "Time to answer a placement question, by API (place, filter, prioritize, prewarm).",
          {"api"}, metrics::default_buckets())),
      requests_(d.reg.counter("shoal_scheduler_api_requests_total",
                              "REST requests answered, by route and status.", {"route", "code"})),
      origins_(std::chrono::duration_cast<std::chrono::milliseconds>(
                   d.cfg.tracker.origin_members_ttl.get()),
               d.shared) {
  // Every series exists from the start, so dashboards and alerts see zeros rather than gaps.
  for (const char* a : {"place", "filter", "prioritize", "prewarm", "images"})
    (void)latency_.with({a});
  for (const char* r : {"unknown_node", "epoch", "gap", "moved"}) (void)resyncs_.with({r});
}

bool api::heavy(const http::request& req) {
  std::string_view p = req.path;
  // /v1/nodes: every node's JSON (tens of ms at 5,000 nodes, more with their documents).
  return p == "/v1/place" || p == "/v1/nodes" || p.rfind("/v1/images/", 0) == 0 ||
         p.rfind("/v1/datasets/", 0) == 0 || p.rfind("/v1/extender/", 0) == 0 ||
         (p == "/v1/prewarm" && req.method == http::verb::post) || p == "/v1/checkpoints" ||
         p.rfind("/v1/checkpoints/", 0) == 0 || p == "/v1/origins";  // origins: a Redis call
}

bool api::is_heartbeat(const http::request& req) { return req.path == "/v1/heartbeat"; }

http::response api::serve(const http::request& req) {
  std::string_view path = req.path;
  auto finish = [&](http::response r) {
    requests_.with({route_label(path), std::to_string(r.status)}).inc();
    return r;
  };
  auto need = [&](http::verb v) {
    return req.method == v || (v == http::verb::get && req.method == http::verb::head);
  };
  if (path == "/announce") return d_.trk.handle(req);  // authorize_announce decides
  if (auto refused = auth_.check(req)) return finish(std::move(*refused));
  if (path == "/v1/heartbeat") {
    if (!need(http::verb::post)) return finish(json_error(405, "use POST"));
    return finish(on_heartbeat(req));
  }
  if (path == "/v1/extender/filter" || path == "/v1/extender/prioritize") {
    if (!need(http::verb::post)) return finish(json_error(405, "use POST"));
    return finish(path == "/v1/extender/filter" ? d_.ext.filter(req.body)
                                                : d_.ext.prioritize(req.body));
  }
  if (path == "/v1/place") {
    if (!need(http::verb::post)) return finish(json_error(405, "use POST"));
    return finish(on_place(req));
  }
  if (path == "/v1/prewarm" && req.method == http::verb::post)
    return finish(on_prewarm_create(req));
  if (path == "/v1/prewarm" || path.rfind("/v1/prewarm/", 0) == 0) {
    if (!need(http::verb::get)) return finish(json_error(405, "use GET"));
    return finish(on_prewarm_get(path.substr(std::string_view("/v1/prewarm").size())));
  }
  if (path == "/v1/jobs" || path.rfind("/v1/jobs/", 0) == 0) return finish(on_jobs(req));
  if (path == "/v1/origins") return finish(on_origins(req));
  if (path == "/v1/events") {
    if (!need(http::verb::get)) return finish(json_error(405, "use GET"));
    return finish(on_events(req));
  }
  if (path == "/v1/checkpoints" || path.rfind("/v1/checkpoints/", 0) == 0)
    return finish(on_checkpoints(req));
  for (auto [prefix, fn] : std::initializer_list<std::pair<std::string_view, int>>{
           {"/v1/nodes", 0}, {"/v1/objects/", 1}, {"/v1/images/", 2}, {"/v1/datasets/", 3}}) {
    if (path.rfind(prefix, 0) != 0) continue;
    if (!need(http::verb::get)) return finish(json_error(405, "use GET"));
    auto rest_raw = path.substr(prefix.size());
    auto rest = http::percent_decode(rest_raw, false);
    if (!rest) return finish(json_error(400, "malformed percent-encoding in the path"));
    switch (fn) {
      case 0:
        return finish(on_nodes(req, *rest));
      case 1:
        return finish(on_object(*rest));
      case 2:
        return finish(on_image(req, *rest));
      default:
        return finish(on_dataset(*rest));
    }
  }
  return finish(json_error(404, "no such endpoint"));
}

json api::node_json(const node_summary& n, const std::map<std::string, std::uint32_t>& reserved,
                    bool documents) const {
  node_view nv;
  nv.name = n.name;
  nv.netsetup = n.netsetup;
  nv.netsetup_rev = n.netsetup_rev;
  auto verdict = d_.place.network().verdict(nv);
  json gpus = json::array();
  std::uint32_t total = 0;
  for (const auto& g : n.gpus) {
    gpus.push_back({{"model", g.model}, {"count", g.count}});
    total += g.count;
  }
  auto r = reserved.find(n.name);
  // The failure detector's verdict (failures.h); a node heard for the first time within the last
  // second has none yet and shows what the index says.
  std::optional<node_verdict> fv = d_.failures ? d_.failures->verdict(n.name) : std::nullopt;
  if (!fv) fv = node_verdict{n.healthy ? node_state::healthy : node_state::unhealthy};
  json state = {{"state", to_string(fv->state)},
                {"cause", to_string(fv->cause)},
                {"detail", fv->detail},
                {"since_s", std::round(fv->since_s * 10) / 10}};
  return {{"node", n.name},
          {"labels", n.labels},
          {"platform", n.platform},
          {"ip", n.ip},
          {"bt_port", n.bt_port},
          {"http_port", n.http_port},
          {"healthy", n.healthy},
          {"state", std::move(state)},
          {"leaving", n.leaving},
          {"health", n.health},
          {"health_reasons", n.health_reasons},
          {"datasets", datasets_json(n)},
          {"last_seen_s", std::round(n.last_seen_s * 100) / 100},
          {"objects", n.objects},
          {"bytes_held", n.bytes_held},
          {"cache_used", n.cache_used},
          {"cache_capacity", n.cache_capacity},
          {"gpus", std::move(gpus)},
          {"gpus_total", total},
          {"gpus_reserved", r == reserved.end() ? 0u : r->second},
          {"network", {{"validation", to_string(verdict.state)}, {"detail", verdict.detail}}},
          {"rdma", !documents || n.rdma.empty() ? json() : parse_doc(n.rdma)},
          {"netsetup", !documents || n.netsetup.empty() ? json() : parse_doc(n.netsetup.str())},
          {"seq", n.seq},
          {"synced", n.synced},
          {"schema", n.schema}};
}

// The list leaves the nodes' rdma and netsetup documents out (null) unless ?documents=1: an H100
// node's netsetup document is some 22 KB, 110 MB of JSON at 5,000 nodes. One node has them.
http::response api::on_nodes(const http::request& req, std::string_view rest) {
  auto reserved = d_.place.reserved();
  if (rest.empty() || rest == "/") {
    const auto docs = req.query_param("documents").value_or("0");
    if (docs != "0" && docs != "1") return json_error(400, "documents must be 0 or 1");
    json out = json::array();
    for (const auto& n : d_.index.nodes()) out.push_back(node_json(n, reserved, docs == "1"));
    return http::response::json(200, json_text(out));
  }
  if (rest.front() != '/') return json_error(404, "no such endpoint");
  rest.remove_prefix(1);
  auto n = d_.index.node(rest);
  if (!n) return json_error(404, "unknown node " + std::string(rest.substr(0, 253)));
  return http::response::json(200, json_text(node_json(*n, reserved)));
}

http::response api::on_object(std::string_view rest) {
  auto d = digest::parse(rest);
  if (!d) return json_error(400, d.error().message);
  auto o = d_.index.object(*d);
  if (!o) return json_error(404, "no node holds " + d->str());
  json holders = json::array();
  std::size_t healthy = 0;
  for (const auto& h : o->holders) {
    holders.push_back(
        {{"node", h.node}, {"healthy", h.healthy}, {"zone", h.zone}, {"rack", h.rack}});
    healthy += h.healthy;
  }
  json out = {{"digest", d->str()},
              {"size", o->ref.size},
              {"info_hash", o->info_hash},
              {"kind", o->kind},
              {"holders", std::move(holders)},
              {"holder_count", o->holders.size()},
              {"healthy_holders", healthy}};
  return http::response::json(200, json_text(out));
}

json api::holders_json(std::span<const object_ref> objects, const std::string& platform) const {
  std::uint64_t total = 0;
  for (const auto& o : objects) total += o.size;
  json nodes = json::array();
  for (const auto& n : d_.index.nodes()) {
    if (!platform.empty() && n.platform != platform) continue;
    auto h = d_.index.held(n.name, objects);
    nodes.push_back(
        {{"node", n.name},
         {"healthy", n.healthy},
         {"objects_present", h.count},
         {"bytes_present", h.bytes},
         {"fraction", total ? static_cast<double>(h.bytes) / static_cast<double>(total) : 1.0}});
  }
  return nodes;
}

http::response api::on_image(const http::request& req, std::string_view rest) {
  metrics::scoped_timer t(latency_.with({"images"}));
  auto ref = oci::parse_image_ref(rest);
  if (!ref) return json_error(400, ref.error().message);
  std::string platform = req.query_param("platform").value_or(d_.cfg.resolver.default_platform);
  if (platform.empty() || platform.size() > 64 || platform.find('/') == std::string::npos) {
    return json_error(400, "platform must be os/arch[/variant]");
  }
  auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.placement.resolve_timeout.get());
  auto r = d_.res.resolve_many({{std::string(rest), platform}}, wait);
  if (!r[0]) return json_error(status_of(r[0].error()), r[0].error().message);
  json objs = json::array();
  for (const auto& o : r[0]->objects) objs.push_back({{"digest", o.id.str()}, {"size", o.size}});
  json out = {{"ref", r[0]->ref},
              {"platform", platform},
              {"manifest", r[0]->manifest.str()},
              {"index", r[0]->index ? json(r[0]->index->str()) : json()},
              {"objects", std::move(objs)},
              {"bytes", r[0]->bytes()},
              {"nodes", holders_json(r[0]->objects, platform)}};
  return http::response::json(200, json_text(out));
}

http::response api::on_dataset(std::string_view rest) {
  if (!valid_dataset_ref(rest)) return json_error(400, "datasets are named name@version");
  auto objs = d_.datasets.lookup(std::string(rest));
  if (!objs) return json_error(status_of(objs.error()), objs.error().message);
  json list = json::array();
  std::uint64_t bytes = 0;
  for (const auto& o : *objs) {
    list.push_back({{"digest", o.id.str()}, {"size", o.size}});
    bytes += o.size;
  }
  // What each node reports of the dataset itself (bytes present, share, view ready).
  json presence = json::array();
  for (const auto& n : d_.index.nodes()) {
    for (const auto& p : n.datasets) {
      if (p.dataset != rest) continue;
      presence.push_back({{"node", n.name},
                          {"bytes", p.bytes},
                          {"total", p.total},
                          {"share", p.share()},
                          {"view", p.view},
                          {"healthy", n.healthy}});
    }
  }
  json out = {{"dataset", std::string(rest)},
              {"objects", std::move(list)},
              {"bytes", bytes},
              {"nodes", holders_json(*objs, "")},
              {"presence", std::move(presence)}};
  return http::response::json(200, json_text(out));
}

http::response api::on_place(const http::request& req) {
  metrics::scoped_timer t(latency_.with({"place"}));
  auto body = body_object(req);
  if (!body) return json_error(status_of(body.error()), body.error().message);
  auto job = parse_job(*body);
  if (!job) return json_error(400, job.error().message);
  bool dry_run = false;
  std::uint32_t standby = 0;
  if (auto it = body->find("dry_run"); it != body->end()) {
    if (!it->is_boolean()) return json_error(400, "dry_run must be true or false");
    dry_run = it->get<bool>();
  }
  if (auto it = body->find("standby"); it != body->end()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 1024)
      return json_error(400, "standby must be 0..1024");
    standby = static_cast<std::uint32_t>(it->get<std::uint64_t>());
  }
  auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.placement.resolve_timeout.get());
  // Other replicas' reservations in the log, counted before this one reserves.
  if (d_.shared != nullptr && !dry_run) d_.shared->catch_up();
  auto r = d_.place.place(*job, standby, !dry_run, wait);
  if (!r) return json_error(status_of(r.error()), r.error().message);
  auto out = to_json(r->p, r->view, *job, d_.place.network());
  if (d_.jobs && !dry_run && r->p.feasible)
    d_.jobs->record(*job, r->p.chosen, r->p.standby, r->p.segment, standby, "place");
  log::info("placed", log::kv("feasible", r->p.feasible), log::kv("nodes", job->nodes),
            log::kv("gpus", job->gpus),
            log::kv("chosen", r->p.chosen.empty() ? std::string() : r->p.chosen.front()),
            log::kv("segment", r->p.segment), log::kv("reason", r->p.reason));
  return http::response::json(200, json_text(out));
}

namespace {

// What a prewarm asks for, checked: the images and datasets given at top level, and the standby
// count for a job.
struct prewarm_request {
  job_spec spec;
  std::uint32_t standby = 0;
};

// Checks the prewarm body's fields: only known ones, exactly one kind of target, valid images,
// datasets and standby.
std::expected<prewarm_request, http::response> parse_prewarm(const json& b) {
  static const std::set<std::string> known = {"images",   "datasets", "nodes",
                                              "selector", "job",      "standby"};
  for (const auto& [k, v] : b.items()) {
    if (!known.count(k))
      return std::unexpected(json_error(400, "unknown prewarm field \"" + k.substr(0, 64) + "\""));
  }
  int targets = (b.contains("nodes") ? 1 : 0) + (b.contains("selector") ? 1 : 0) +
                (b.contains("job") ? 1 : 0);
  if (targets != 1)
    return std::unexpected(
        json_error(400, "a prewarm needs exactly one of nodes, selector and job"));
  // The images and datasets: top level, else the job's.
  json what = json::object();
  for (const char* k : {"images", "datasets"}) {
    if (b.contains(k)) what[k] = b[k];
  }
  auto spec = parse_job(what);
  if (!spec) return std::unexpected(json_error(400, spec.error().message));
  prewarm_request out{std::move(*spec)};
  if (auto it = b.find("standby"); it != b.end()) {
    if (!it->is_number_unsigned() || it->get<std::uint64_t>() > 64)
      return std::unexpected(json_error(400, "standby must be 0..64"));
    out.standby = static_cast<std::uint32_t>(it->get<std::uint64_t>());
  }
  return out;
}

// What the prewarm list shows of the request: images, datasets and the targets as asked.
json prewarm_summary(const json& b, const job_spec& spec, std::uint32_t standby) {
  json summary = {{"images", spec.images}, {"datasets", spec.datasets}};
  if (b.contains("nodes")) summary["nodes"] = b["nodes"];
  if (b.contains("selector")) summary["selector"] = b["selector"];
  if (b.contains("job")) {
    summary["job"] = b["job"];
    summary["standby"] = standby;
  }
  return summary;
}

}  // namespace

api::or_response<std::vector<planned_node>> api::named_targets(const json& nodes) const {
  if (!nodes.is_array() || nodes.empty() || nodes.size() > 10000)
    return std::unexpected(json_error(400, "nodes must be a non-empty list of node names"));
  std::vector<planned_node> planned;
  std::set<std::string> seen;
  std::vector<std::string> unknown;
  for (const auto& n : nodes) {
    if (!n.is_string() || !heartbeat::valid_node_name(n.get_ref<const std::string&>())) {
      return std::unexpected(json_error(400, "nodes must be a list of node names"));
    }
    const auto& name = n.get_ref<const std::string&>();
    if (!seen.insert(name).second) continue;
    if (!d_.index.node(name)) unknown.push_back(name);
    planned.push_back({name, "target", {}});
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
    return std::unexpected(json_error(404, "unknown node(s): " + list));
  }
  return planned;
}

api::or_response<std::vector<planned_node>> api::selector_targets(const json& selector) const {
  if (!selector.is_object() || selector.empty() || selector.size() > 32)
    return std::unexpected(json_error(400, "selector must be a non-empty object of labels"));
  std::vector<planned_node> planned;
  for (const auto& n : d_.index.nodes()) {
    if (!n.healthy) continue;
    bool match = true;
    for (const auto& [k, v] : selector.items()) {
      auto l = n.labels.find(k);
      match = match && v.is_string() && l != n.labels.end() && l->second == v.get<std::string>();
    }
    if (match) planned.push_back({n.name, "target", {}});
  }
  if (planned.empty())
    return std::unexpected(json_error(404, "the selector matches no healthy node"));
  return planned;
}

api::or_response<api::prewarm_targets> api::job_targets(const json& job_doc, job_spec& spec,
                                                        std::uint32_t standby,
                                                        std::chrono::milliseconds wait) {
  auto job = parse_job(job_doc);
  if (!job) return std::unexpected(json_error(400, "job: " + job.error().message));
  if (spec.images.empty() && spec.datasets.empty()) {
    spec.images = job->images;
    spec.datasets = job->datasets;
  }
  auto placed = d_.place.place(*job, standby, false, wait);
  if (!placed)
    return std::unexpected(json_error(status_of(placed.error()), placed.error().message));
  prewarm_targets out;
  out.job_answer = to_json(placed->p, placed->view, *job, d_.place.network());
  if (!placed->p.feasible) {
    return std::unexpected(http::response::json(
        409, json_text(json{{"error", "the job cannot be placed: " + placed->p.reason},
                            {"placement", out.job_answer}})));
  }
  for (const auto& n : placed->p.chosen) out.planned.push_back({n, "primary", {}});
  for (const auto& n : placed->p.standby) out.planned.push_back({n, "standby", {}});
  out.platform_override = job->platform;
  if (!job->id.empty()) {
    out.job = *job;
    if (job->images.empty() && job->datasets.empty()) {  // the job's data: the prewarm's
      out.job->images = spec.images;
      out.job->datasets = spec.datasets;
    }
    out.members = placed->p.chosen;
    out.standbys = placed->p.standby;
    out.segment = placed->p.segment;
  }
  return out;
}

api::or_response<api::prewarm_targets> api::prewarm_targets_of(const json& b, job_spec& spec,
                                                               std::uint32_t standby,
                                                               std::chrono::milliseconds wait) {
  if (auto it = b.find("nodes"); it != b.end()) {
    auto planned = named_targets(*it);
    if (!planned) return std::unexpected(std::move(planned.error()));
    return prewarm_targets{std::move(*planned), {}, {}};
  }
  if (auto it = b.find("selector"); it != b.end()) {
    auto planned = selector_targets(*it);
    if (!planned) return std::unexpected(std::move(planned.error()));
    return prewarm_targets{std::move(*planned), {}, {}};
  }
  return job_targets(b["job"], spec, standby, wait);
}

api::or_response<api::prewarm_sources> api::resolve_prewarm(
    const std::vector<planned_node>& planned, const job_spec& spec,
    const std::string& platform_override, std::chrono::milliseconds wait) {
  // Resolve every image for every platform among the targets.
  prewarm_sources out;
  std::set<std::string> platforms;
  for (const auto& p : planned) {
    auto n = d_.index.node(p.node);
    std::string plat = !platform_override.empty() ? platform_override
                       : n                        ? n->platform
                                                  : d_.cfg.resolver.default_platform;
    out.platform_of[p.node] = plat;
    platforms.insert(plat);
  }
  auto objs = d_.place.resolve(spec, {platforms.begin(), platforms.end()}, wait, true);
  if (!objs) return std::unexpected(json_error(status_of(objs.error()), objs.error().message));
  for (const auto& [plat, errs] : objs->errors) {
    if (!errs.empty())
      return std::unexpected(json_error(502, "cannot resolve for " + plat + ": " + errs.front()));
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& plat : platforms) {
    for (const auto& img : spec.images) pairs.emplace_back(img, plat);
  }
  // Cached by now: resolve() above fetched them.
  auto resolved = d_.res.resolve_many(pairs, wait);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    if (!resolved[i]) return std::unexpected(json_error(502, resolved[i].error().message));
    out.images.insert_or_assign(pairs[i], std::move(*resolved[i]));
  }
  for (const auto& ds : spec.datasets) {
    auto o = d_.datasets.lookup(ds);
    if (!o) return std::unexpected(json_error(status_of(o.error()), o.error().message));
    out.dataset_objs.push_back(*o);
  }
  return out;
}

void api::add_prewarm_orders(std::vector<planned_node>& planned, const job_spec& spec,
                             const prewarm_sources& src, const std::string& id) const {
  std::uint64_t pin = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(d_.cfg.prewarm.pin_for.get()).count());
  for (auto& p : planned) {
    const auto& plat = src.platform_of.at(p.node);
    for (std::size_t k = 0; k < spec.images.size(); ++k) {
      const auto& img = src.images.at({spec.images[k], plat});
      p.orders.push_back(image_order(id, k, img, plat, pin));
    }
    for (std::size_t k = 0; k < spec.datasets.size(); ++k) {
      p.orders.push_back(dataset_order(id, k, spec.datasets[k], src.dataset_objs[k], plat, pin));
    }
  }
}

http::response api::on_prewarm_create(const http::request& req) {
  metrics::scoped_timer t(latency_.with({"prewarm"}));
  auto body = body_object(req);
  if (!body) return json_error(status_of(body.error()), body.error().message);
  const json& b = *body;
  auto request = parse_prewarm(b);
  if (!request) return std::move(request.error());
  auto keyed = idempotent_prewarm_id(req);
  if (!keyed) return std::move(keyed.error());
  // A request sent again with its key: the prewarm it made, as it is now.
  auto replay = [this](const std::string& id) -> std::optional<http::response> {
    auto st = d_.prewarm.progress(id);
    if (!st) return std::nullopt;
    (*st)["status_url"] = "/v1/prewarm/" + id;
    auto r = http::response::json(200, json_text(*st));
    r.headers.set("Idempotent-Replayed", "true");
    return r;
  };
  if (!keyed->empty()) {
    if (auto r = replay(*keyed)) return std::move(*r);
  }
  job_spec& spec = request->spec;
  auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.placement.resolve_timeout.get());
  auto targets = prewarm_targets_of(b, spec, request->standby, wait);
  if (!targets) return std::move(targets.error());
  if (spec.images.empty() && spec.datasets.empty())
    return json_error(400, "nothing to prewarm: no images or datasets");
  auto sources = resolve_prewarm(targets->planned, spec, targets->platform_override, wait);
  if (!sources) return std::move(sources.error());
  std::string id = keyed->empty() ? random_id("pw-") : *keyed;
  add_prewarm_orders(targets->planned, spec, *sources, id);
  auto summary = prewarm_summary(b, spec, request->standby);
  if (auto s = d_.prewarm.create(id, std::move(targets->planned), summary); !s) {
    // The same key sent twice at once: the other request made it.
    if (!keyed->empty() && s.error().is(errc::already_exists)) {
      if (auto r = replay(id)) return std::move(*r);
    }
    return json_error(status_of(s.error()), s.error().message);
  }
  if (d_.jobs && targets->job) {
    d_.jobs->record(*targets->job, std::move(targets->members), std::move(targets->standbys),
                    std::move(targets->segment), request->standby, "prewarm", id);
  }
  auto st = d_.prewarm.progress(id);
  json out = st ? *st : json::object();
  out["status_url"] = "/v1/prewarm/" + id;
  if (!targets->job_answer.is_null()) out["placement"] = std::move(targets->job_answer);
  return http::response::json(202, json_text(out));
}

}  // namespace shoal::scheduler
