#include "scheduler/extender.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <span>

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
void append_json_string(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += dump(json(std::string(s)));
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

// A hand scanner for the top level of ExtenderArgs. kube-scheduler sends every node's name in
// NodeNames (5,000 short strings at 5,000 nodes), and building a json value for each cost more
// than the rest of a soft decision. The scanner reads that list itself and hands the Pod's bytes
// (and any other member's, only to check them) to nlohmann. It answers only what it is sure of:
// on anything unusual (an escaped key, a duplicate member, NodeNames not a list, a malformed
// byte) it gives up and the generic parse below answers, with its own errors.
class args_scanner {
 public:
  explicit args_scanner(std::string_view s) : s_(s) {}
  [[nodiscard]] std::size_t remaining() const noexcept { return s_.size() - i_; }
  [[nodiscard]] bool at_end() {
    ws();
    return i_ == s_.size();
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // The string token at the cursor, quotes included; `plain` when it is printable ASCII with no
  // escape (its bytes are then its value).
  bool string_token(std::string_view& tok, bool& plain) {
    ws();
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    const std::size_t start = i_++;
    plain = true;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        tok = s_.substr(start, i_ - start);
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        plain = false;
        i_ += 2;
        continue;
      }
      if (c >= 0x80) plain = false;
      ++i_;
    }
    return false;
  }
  // The bytes of the value at the cursor (any JSON; whoever reads them checks them).
  bool value_bytes(std::string_view& out) {
    ws();
    const std::size_t start = i_;
    int depth = 0;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '"') {
        std::string_view tok;
        bool plain = false;
        if (!string_token(tok, plain)) return false;
        if (depth == 0) break;
        continue;
      }
      if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) break;
        if (--depth == 0) {
          ++i_;
          break;
        }
      } else if (c == ',' && depth == 0) {
        break;
      }
      ++i_;
    }
    out = s_.substr(start, i_ - start);
    return depth == 0 && !out.empty();
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

// NodeNames' list at the cursor into `names`; false when it is not a list of strings or longer
// than max_nodes.
bool scan_names(args_scanner& sc, std::size_t max_nodes, std::vector<std::string>& names) {
  if (!sc.eat('[')) return false;
  if (sc.eat(']')) return true;
  // Room for every name at once: each takes at least 4 bytes ("a",), so the rest of the body
  // bounds the count (untouched capacity costs no page faults).
  names.reserve(std::min(max_nodes, sc.remaining() / 4 + 1));
  for (;;) {
    std::string_view tok;
    bool plain = false;
    if (!sc.string_token(tok, plain) || names.size() >= max_nodes) return false;
    if (plain) {
      names.emplace_back(tok.substr(1, tok.size() - 2));
    } else {
      auto j = json::parse(tok, nullptr, false);
      if (j.is_discarded() || !j.is_string()) return false;
      names.push_back(j.get<std::string>());
    }
    if (sc.eat(',')) continue;
    return sc.eat(']');
  }
}

// ExtenderArgs in the NodeNames form, or nullopt: then parse_extender_args' generic parse decides.
std::optional<extender_args> scan_extender_args(std::string_view body, std::size_t max_nodes) {
  args_scanner sc(body);
  if (!sc.eat('{') || sc.eat('}')) return std::nullopt;
  extender_args a;
  std::string_view pod;
  bool have_pod = false, have_names = false;
  do {
    std::string_view key;
    bool plain = false;
    if (!sc.string_token(key, plain) || !plain || !sc.eat(':')) return std::nullopt;
    key = key.substr(1, key.size() - 2);
    if (key == "NodeNames") {
      if (have_names || !scan_names(sc, max_nodes, a.names)) return std::nullopt;
      have_names = true;
      continue;
    }
    std::string_view text;
    if (!sc.value_bytes(text)) return std::nullopt;
    // Only these values reach nlohmann's recursive parser, so only they are checked for depth
    // (NodeNames, the bulk of the body, is flat by construction): too deep falls back to the
    // generic parse, which refuses it.
    if (heartbeat::json_too_deep(text)) return std::nullopt;
    if (key == "Pod") {
      if (have_pod) return std::nullopt;
      have_pod = true;
      pod = text;
    } else if (!json::accept(text)) {
      return std::nullopt;
    }
  } while (sc.eat(','));
  if (!sc.eat('}') || !sc.at_end() || !have_names || !have_pod) return std::nullopt;
  auto pj = json::parse(pod, nullptr, false);
  if (pj.is_discarded() || pj.is_null()) return std::nullopt;
  auto p = parse_pod(pj);
  if (!p) return std::nullopt;
  a.pod = std::move(*p);
  a.names_form = true;
  return a;
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
  if (auto fast = scan_extender_args(body, max_nodes)) return std::move(*fast);
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

namespace {

// platforms_of() for the requested nodes, from their positions in the view (all healthy nodes
// when none are named).
std::vector<std::string> requested_platforms(const node_list& nodes, bool all,
                                             const std::vector<std::uint32_t>& at) {
  auto cls = classes_of(nodes);
  std::vector<bool> used(cls->platforms.size(), false);
  auto consider = [&](std::uint32_t i) {
    if (i != no_node && nodes[i].healthy) used[cls->platform[i]] = true;
  };
  if (all) {
    for (std::uint32_t i = 0; i < nodes.size(); ++i) consider(i);
  } else {
    for (auto i : at) consider(i);
  }
  std::vector<std::string> out;
  for (std::size_t p = 0; p < used.size(); ++p) {
    if (used[p]) out.push_back(cls->platforms[p]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The verdict of each requested node (`at`: its position in the view, or no_node). One evaluator
// per platform among them, built on first use from the job's objects for that platform (none
// when it resolved none), as evaluate_nodes() does.
//
// A node that holds none of the job's objects fetches all of them, and its cost depends only on
// its platform and where it is (its rack, else its zone, else neither): nodes alike share one
// evaluation. Most nodes hold none of a job's objects, so only the holders are evaluated one by
// one (found from the objects' holder lists: O(holders), not a lookup per node).
std::vector<extender::verdict> score_requested(const cluster_view& view, const job_objects& objs,
                                               const std::vector<std::string>& names,
                                               const std::vector<std::uint32_t>& at,
                                               const cost_model& model) {
  auto cls = classes_of(view.nodes);
  static const std::vector<object_ref> none;
  std::vector<std::unique_ptr<evaluator>> by_platform(cls->platforms.size());
  auto evaluator_of = [&](std::uint32_t node) -> const evaluator& {
    auto& ev = by_platform[cls->platform[node]];
    if (!ev) {
      auto it = objs.by_platform.find(cls->platforms[cls->platform[node]]);
      auto list = it == objs.by_platform.end() ? std::span<const object_ref>(none)
                                               : std::span<const object_ref>(it->second);
      ev = std::make_unique<evaluator>(view, list, model);
    }
    return *ev;
  };
  // Where node i is, as an index into its platform's share of `alike`; npos when a rack spans
  // zones (a rack is named "zone/rack", so only labels holding '/' can do that): then the node
  // is evaluated alone.
  const std::size_t places = std::size_t{cls->racks} + cls->zones + 1;
  constexpr std::uint32_t unset = node_classes::npos - 1;
  std::vector<std::uint32_t> zone_of_rack(cls->racks, unset);
  auto place_of = [&](std::uint32_t i) -> std::size_t {
    const std::uint32_t r = cls->rack[i], z = cls->zone[i];
    if (r != node_classes::npos) {
      if (zone_of_rack[r] == unset) zone_of_rack[r] = z;
      return zone_of_rack[r] == z ? r : node_classes::npos;
    }
    if (z != node_classes::npos) return std::size_t{cls->racks} + z;
    return places - 1;
  };
  struct shared_cost {
    bool done = false;
    node_cost cost;
    int score = 0;
  };
  // extender_score() with its cold-start logarithm taken once per job size (every node of a
  // platform has the same bytes_total): the same arithmetic, so the same scores.
  double cold_bytes = -1, log_cold = 0, cold = 0;
  auto score_of = [&](const node_cost& c) {
    if (c.bytes_total == 0) return 0;
    if (static_cast<double>(c.bytes_total) != cold_bytes) {
      cold_bytes = static_cast<double>(c.bytes_total);
      cold = model.cold_seconds(c.bytes_total);
      log_cold = std::log1p(cold);
    }
    if (cold <= 0 || c.seconds <= 0) return 10;
    double s = 10.0 * (1.0 - std::log1p(c.seconds) / log_cold);
    return static_cast<int>(std::lround(std::clamp(s, 0.0, 10.0)));
  };
  std::vector<shared_cost> alike(places * cls->platforms.size());
  std::vector<extender::verdict> out(names.size());
  for (std::size_t k = 0; k < names.size(); ++k) {
    auto& v = out[k];
    v.node = names[k];
    const std::uint32_t i = at[k];
    if (i == no_node) continue;
    v.known = true;
    v.healthy = cls->healthy[i] != 0;
    // A node holding none of its platform's objects costs what its place costs (the evaluator
    // knows the holders: no second pass over them here).
    const evaluator& ev = evaluator_of(i);
    const std::size_t place = ev.holds_any(i) ? node_classes::npos : place_of(i);
    if (place == node_classes::npos) {
      v.cost = ev.cost(i);
      v.score = score_of(v.cost);
    } else {
      auto& c = alike[cls->platform[i] * places + place];
      if (!c.done) {
        c.cost = ev.cost(i);
        c.score = score_of(c.cost);
        c.done = true;
      }
      v.cost = c.cost;
      v.score = c.score;
    }
    if (!v.healthy) v.score = 0;
  }
  return out;
}

}  // namespace

std::vector<extender::verdict> extender::evaluate(const extender_args& a,
                                                  std::vector<std::string>& errors) {
  job_spec job;
  job.images = a.pod.images;
  job.datasets = a.pod.datasets;
  // job.candidates stays empty: resolution reads only the images and datasets, and copying
  // 5,000 names per request was a tenth of a decision.
  auto& idx = placer_.index();
  // Each requested name is found once in the view (sorted by name: a merge walk), and from then
  // on a node is its index: platforms and costs come from small integers (node_classes), and only
  // the requested nodes are evaluated (evaluate_nodes() would build a node_eval of strings for
  // every node the index knows).
  auto nodes_only = idx.view({});
  auto at = index_of_names(nodes_only.nodes, a.names);
  auto platforms = requested_platforms(nodes_only.nodes, a.names.empty(), at);
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
  // A heartbeat may have changed the node list between the two views.
  if (view.nodes.begin() != nodes_only.nodes.begin()) at = index_of_names(view.nodes, a.names);
  return score_requested(view, *objs, a.names, at, placer_.model());
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
          failed[std::string(v.node)] = "shoal: no heartbeat from this node's peerd";
        } else if (!v.healthy) {
          failed[std::string(v.node)] = "shoal: this node's peerd is unhealthy";
        } else if (limit.exceeded(v.cost)) {
          failed[std::string(v.node)] = "shoal: node lacks " + std::to_string(v.cost.missing()) +
                                        " of " + std::to_string(v.cost.bytes_total) +
                                        " bytes (hard placement allows " + limit.str() + ")";
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
