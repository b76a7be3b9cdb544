#include "scheduler/extender.h"

#include <algorithm>
#include <set>

#include "common/checkpoint.h"
#include "common/heartbeat.h"
#include "common/log.h"
#include "common/oci.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// Appends `s` as a JSON string, byte for byte as dump() writes it. Node names are plain ASCII,
// which is copied as is; anything else (quotes, control bytes, UTF-8) goes through nlohmann.
// Answers list all 5,000 nodes, and building a json value per node cost more than the rest of
// the decision (issue #5).
void append_json_string(std::string& out, const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += dump(json(s));
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

json filter_error(const std::string& msg) {
  return {{"Nodes", nullptr},
          {"NodeNames", nullptr},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", json::object()},
          {"Error", msg}};
}

}  // namespace

result<pod_info> parse_pod(const json& pod) {
  if (!pod.is_object()) return fail(errc::invalid_argument, "Pod must be a v1.Pod object");
  pod_info p;
  if (const json* md = member(pod, "metadata")) {
    if (const json* l = member(*md, "labels"); l && l->is_object()) {
      if (auto it = l->find(std::string(label_job)); it != l->end()) {
        if (it->is_string() && checkpoint::valid_job(it->get_ref<const std::string&>()))
          p.job = it->get<std::string>();
        else
          p.warnings.push_back(std::string(label_job) + " must be a job name");
      }
    }
    if (const json* n = member(*md, "name"); n && n->is_string())
      p.name = n->get<std::string>().substr(0, 253);
    if (const json* n = member(*md, "namespace"); n && n->is_string())
      p.ns = n->get<std::string>().substr(0, 253);
    if (const json* a = member(*md, "annotations"); a && a->is_object()) {
      auto get = [&](std::string_view key) -> std::optional<std::string> {
        auto it = a->find(std::string(key));
        if (it == a->end() || !it->is_string()) return std::nullopt;
        return it->get<std::string>();
      };
      if (auto ds = get(annotation_datasets)) {
        std::string_view rest = *ds;
        while (!rest.empty()) {
          auto comma = rest.find(',');
          std::string item = trim(rest.substr(0, comma));
          rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
          if (item.empty()) continue;
          if (!valid_dataset_ref(item)) {
            p.warnings.push_back(std::string(annotation_datasets) + ": \"" + item.substr(0, 100) +
                                 "\" is not name@version");
          } else if (p.datasets.size() < 64) {
            p.datasets.push_back(item);
          }
        }
      }
      if (auto m = get(annotation_placement)) {
        std::string mode = trim(*m);
        if (mode == "soft" || mode == "hard")
          p.mode = mode;
        else
          p.warnings.push_back(std::string(annotation_placement) + " must be soft or hard");
      }
      if (auto t = get(annotation_max_missing)) {
        p.max_missing = parse_threshold(*t);
        if (!p.max_missing)
          p.warnings.push_back(std::string(annotation_max_missing) + " must be like 10% or 2GiB");
      }
    }
  }
  std::set<std::string> seen;
  if (const json* spec = member(pod, "spec")) {
    for (const char* list : {"initContainers", "containers"}) {
      const json* cs = member(*spec, list);
      if (!cs) continue;
      if (!cs->is_array()) {
        p.warnings.push_back(std::string("spec.") + list + " is not a list");
        continue;
      }
      for (const auto& c : *cs) {
        const json* img = member(c, "image");
        if (!img || !img->is_string() || img->get_ref<const std::string&>().empty()) continue;
        const auto& text = img->get_ref<const std::string&>();
        auto ref = oci::parse_image_ref(text);
        if (!ref) {
          p.warnings.push_back(ref.error().message);
          continue;
        }
        if (seen.insert(ref->str()).second && p.images.size() < 64) p.images.push_back(text);
      }
    }
  }
  return p;
}

result<extender_args> parse_extender_args(std::string_view body, std::size_t max_nodes) {
  if (heartbeat::json_too_deep(body))
    return fail(errc::invalid_argument, "ExtenderArgs nests too deep");
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::invalid_argument, "ExtenderArgs is not a JSON object");
  extender_args a;
  const json* pod = member(j, "Pod");
  if (!pod) return fail(errc::invalid_argument, "ExtenderArgs has no Pod");
  auto p = parse_pod(*pod);
  if (!p) return fail(p.error());
  a.pod = std::move(*p);
  const json* names = member(j, "NodeNames");
  const json* nodes = member(j, "Nodes");
  if (names) {
    if (!names->is_array())
      return fail(errc::invalid_argument, "NodeNames must be a list of strings");
    if (names->size() > max_nodes)
      return fail(errc::too_large,
                  "NodeNames has more than " + std::to_string(max_nodes) + " entries");
    for (const auto& n : *names) {
      if (!n.is_string())
        return fail(errc::invalid_argument, "NodeNames must be a list of strings");
      a.names.push_back(n.get<std::string>());
    }
    a.names_form = true;
  } else if (nodes) {
    if (!nodes->is_object())
      return fail(errc::invalid_argument, "Nodes must be a v1.NodeList object");
    const json* items = member(*nodes, "items");
    a.node_items = json::array();
    if (items) {
      if (!items->is_array()) return fail(errc::invalid_argument, "Nodes.items must be a list");
      if (items->size() > max_nodes)
        return fail(errc::too_large,
                    "Nodes.items has more than " + std::to_string(max_nodes) + " entries");
      std::size_t i = 0;
      for (const auto& n : *items) {
        const json* md = member(n, "metadata");
        const json* name = md ? member(*md, "name") : nullptr;
        if (!name || !name->is_string()) {
          return fail(errc::invalid_argument,
                      "Nodes.items[" + std::to_string(i) + "].metadata.name is missing");
        }
        a.names.push_back(name->get<std::string>());
        a.node_items.push_back(n);
        ++i;
      }
    }
    if (const json* md = member(*nodes, "metadata")) a.node_list_meta = *md;
    a.names_form = false;
  } else {
    return fail(errc::invalid_argument, "ExtenderArgs has neither NodeNames nor Nodes");
  }
  return a;
}

extender::extender(placer& p, extender_options o, metrics::registry& reg)
    : placer_(p),
      opts_(std::move(o)),
      requests_(
          reg.counter("shoal_scheduler_extender_requests_total",
                      "kube-scheduler extender calls by verb and result (ok, bad_request, error).",
                      {"verb", "result"})),
      latency_(reg.histogram(
          "shoal_scheduler_placement_duration_seconds",
          "Time to answer a placement question, by API (place, filter, prioritize, prewarm).",
          {"api"}, metrics::default_buckets())) {
  for (const char* verb : {"filter", "prioritize"}) {
    for (const char* result : {"ok", "bad_request", "error"}) (void)requests_.with({verb, result});
  }
}

std::vector<extender::verdict> extender::evaluate(const extender_args& a,
                                                  std::vector<std::string>& errors) {
  job_spec job;
  job.images = a.pod.images;
  job.datasets = a.pod.datasets;
  job.candidates = a.names;
  auto& idx = placer_.index();
  auto nodes_only = idx.view({});
  auto platforms = platforms_of(nodes_only, job);
  auto objs = placer_.resolve(job, platforms, opts_.resolve_timeout, false);
  job_objects empty;
  if (!objs) {
    errors.push_back(objs.error().message);
    objs = empty;
  }
  for (const auto& [plat, list] : objs->errors) {
    for (const auto& e : list) errors.push_back(plat + ": " + e);
  }
  std::vector<digest> all;
  for (const auto& [plat, list] : objs->by_platform) {
    for (const auto& o : list) all.push_back(o.id);
  }
  auto view = idx.view(all);
  auto evals =
      evaluate_nodes(view, *objs, job, placer_.model(), placer_.network(), {},
                     {.require_validation = false, .strict_resolution = false, .rank = false});
  // Each requested name is found in the view (sorted by name) and its evaluation by the view
  // index, instead of through a map of every node name per request.
  std::vector<const node_eval*> by_index(view.nodes.size(), nullptr);
  for (const auto& e : evals) by_index[e.index] = &e;
  auto at = index_of_names(view.nodes, a.names);
  std::vector<verdict> out;
  out.reserve(a.names.size());
  for (std::size_t k = 0; k < a.names.size(); ++k) {
    verdict v;
    v.node = a.names[k];
    if (at[k] != no_node) {
      const node_eval* e = by_index[at[k]];
      v.known = true;
      v.healthy = view.nodes[at[k]].healthy;
      v.cost = e->cost;
      v.score = v.healthy ? extender_score(v.cost, placer_.model()) : 0;
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string extender::preferred_for(const pod_info& pod) const {
  if (pod.job.empty() || !preferred_) return "";
  return preferred_(pod.job).value_or("");
}

http::response extender::filter(std::string_view body) {
  metrics::scoped_timer t(latency_.with({"filter"}));
  if (body.size() > opts_.max_request_bytes) {
    requests_.with({"filter", "bad_request"}).inc();
    return http::response::json(
        413, dump(filter_error("request larger than " + std::to_string(opts_.max_request_bytes) +
                               " bytes")));
  }
  auto a = parse_extender_args(body);
  if (!a) {
    requests_.with({"filter", "bad_request"}).inc();
    return http::response::json(a.error().is(errc::too_large) ? 413 : 400,
                                dump(filter_error(a.error().message)));
  }
  std::string mode = a->pod.mode.empty() ? opts_.mode : a->pod.mode;
  threshold limit = a->pod.max_missing.value_or(opts_.max_missing);
  std::vector<std::size_t> kept;  // indexes into a->names, in request order
  json failed = json::object();
  std::string err;
  auto keep = [&](std::size_t i) { kept.push_back(i); };
  if (mode != "hard") {
    for (std::size_t i = 0; i < a->names.size(); ++i) keep(i);
  } else {
    std::vector<std::string> errors;
    auto verdicts = evaluate(*a, errors);
    if (!errors.empty()) {
      err = "shoal: cannot check the pod's data: " + errors.front();
    } else {
      const std::string preferred = preferred_for(a->pod);
      for (std::size_t i = 0; i < verdicts.size(); ++i) {
        const auto& v = verdicts[i];
        if ((v.cost.bytes_total == 0 || v.node == preferred) && v.known && v.healthy) {
          keep(i);
        } else if (!v.known) {
          failed[v.node] = "shoal: no heartbeat from this node's peerd";
        } else if (!v.healthy) {
          failed[v.node] = "shoal: this node's peerd is unhealthy";
        } else if (limit.exceeded(v.cost)) {
          failed[v.node] = "shoal: node lacks " + std::to_string(v.cost.missing()) + " of " +
                           std::to_string(v.cost.bytes_total) + " bytes (hard placement allows " +
                           limit.str() + ")";
        } else {
          keep(i);
        }
      }
    }
  }
  std::string text;
  if (!err.empty()) {
    text = dump(filter_error(err));
  } else if (a->names_form) {
    // The same bytes dump() gives for the ExtenderFilterResult object (keys sorted), written
    // directly: NodeNames holds every passing node.
    text.reserve(32 + kept.size() * 16);
    text += R"({"Error":"","FailedAndUnresolvableNodes":)";
    text += dump(failed);
    text += R"(,"FailedNodes":{},"NodeNames":[)";
    for (std::size_t k = 0; k < kept.size(); ++k) {
      if (k > 0) text += ',';
      append_json_string(text, a->names[kept[k]]);
    }
    text += R"(],"Nodes":null})";
  } else {
    json passed_items = json::array();
    for (auto i : kept) passed_items.push_back(a->node_items[i]);
    json list = a->node_list_meta.is_null() ? json::object() : a->node_list_meta;
    json out = {{"Nodes", json{{"metadata", list}, {"items", passed_items}}},
                {"NodeNames", nullptr},
                {"FailedNodes", json::object()},
                {"FailedAndUnresolvableNodes", failed},
                {"Error", ""}};
    text = dump(out);
  }
  requests_.with({"filter", err.empty() ? "ok" : "error"}).inc();
  log::debug("extender filter", log::kv("pod", a->pod.ns + "/" + a->pod.name),
             log::kv("mode", mode), log::kv("nodes", a->names.size()),
             log::kv("failed", failed.size()), log::kv("error", err));
  return http::response::json(200, std::move(text));
}

http::response extender::prioritize(std::string_view body) {
  metrics::scoped_timer t(latency_.with({"prioritize"}));
  if (body.size() > opts_.max_request_bytes) {
    requests_.with({"prioritize", "bad_request"}).inc();
    return http::response::json(
        413, dump(json{{"error", "request larger than " + std::to_string(opts_.max_request_bytes) +
                                     " bytes"}}));
  }
  auto a = parse_extender_args(body);
  if (!a) {
    requests_.with({"prioritize", "bad_request"}).inc();
    return http::response::json(a.error().is(errc::too_large) ? 413 : 400,
                                dump(json{{"error", a.error().message}}));
  }
  std::vector<std::string> errors;
  auto verdicts = evaluate(*a, errors);
  if (auto preferred = preferred_for(a->pod); !preferred.empty()) {
    // A failover replacement comes first (jobs.h): 10 for it, at most 9 for the others.
    for (auto& v : verdicts)
      v.score = v.node == preferred && v.known && v.healthy ? 10 : std::min(v.score, 9);
  }
  // HostPriorityList, written directly: the bytes dump() gives for
  // [{"Host": name, "Score": n}, ...] (keys sorted) without a json object per node.
  std::string text;
  text.reserve(2 + verdicts.size() * 32);
  text += '[';
  for (std::size_t k = 0; k < verdicts.size(); ++k) {
    if (k > 0) text += ',';
    text += R"({"Host":)";
    append_json_string(text, verdicts[k].node);
    text += R"(,"Score":)";
    text += std::to_string(verdicts[k].score);
    text += '}';
  }
  text += ']';
  requests_.with({"prioritize", "ok"}).inc();
  if (!errors.empty()) {
    log::info("extender prioritize without some images",
              log::kv("pod", a->pod.ns + "/" + a->pod.name), log::kv("error", errors.front()));
  }
  return http::response::json(200, std::move(text));
}

}  // namespace shoal::scheduler
