#include "scheduler/extender.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>

#include "common/log.h"
#include "common/json_text.h"
#include "extender_json.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

using detail::append_json_string;

json filter_error(const std::string& msg) {
  return {{"Nodes", nullptr},
          {"NodeNames", nullptr},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", json::object()},
          {"Error", msg}};
}

}  // namespace

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
          {"api"}, metrics::default_buckets())),
      kept_(reg.counter("shoal_scheduler_extender_kept_scores_total",
                        "Where an extender decision's scores came from, per platform: a kept job "
                        "state that followed the index's change log (caught_up), one built now "
                        "(built, rebuilt: the kept one could not follow), or a full evaluation "
                        "(full: none can be kept for these nodes).",
                        {"result"})),
      scores_(opts_.kept_jobs) {
  for (const char* verb : {"filter", "prioritize"}) {
    for (const char* result : {"ok", "bad_request", "error"}) (void)requests_.with({verb, result});
  }
  for (const char* result : {"caught_up", "built", "rebuilt", "full"}) (void)kept_.with({result});
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
  auto& idx = placer_.index();
  // Each requested name is found once in the view (sorted by name: a merge walk), and from then
  // on a node is its index: platforms and costs come from small integers (node_classes), and only
  // the requested nodes are evaluated (evaluate_nodes() would build a node_eval of strings for
  // every node the index knows).
  auto nodes_only = idx.view({});
  const auto& names = a.node_names();
  auto at = index_of_names(nodes_only.nodes, names);
  auto platforms = requested_platforms(nodes_only.nodes, names.empty(), at);
  auto objs = resolve_pod(a.pod, platforms, errors);
  std::vector<digest> all;
  for (const auto& [plat, list] : objs.by_platform) {
    for (const auto& o : list) all.push_back(o.id);
  }
  auto view = idx.view(all);
  // A heartbeat may have changed the node list between the two views.
  if (view.nodes.begin() != nodes_only.nodes.begin()) at = index_of_names(view.nodes, names);
  return score_requested(view, objs, names, at, placer_.model());
}

job_objects extender::resolve_pod(const pod_info& pod, const std::vector<std::string>& platforms,
                                  std::vector<std::string>& errors) {
  // job.candidates stays empty: resolution reads only the images and datasets, and copying
  // 5,000 names per request was a tenth of a decision.
  job_spec job;
  job.images = pod.images;
  job.datasets = pod.datasets;
  auto objs = placer_.resolve(job, platforms, opts_.resolve_timeout, false);
  if (!objs) {
    errors.push_back(objs.error().message);
    return {};
  }
  for (const auto& [plat, list] : objs->errors) {
    for (const auto& e : list) errors.push_back(plat + ": " + e);
  }
  return std::move(*objs);
}

bool extender::evaluate_kept(const extender_args& a, std::vector<std::string>& errors,
                             kept_answers& out, bool costs, bool states) {
  auto& idx = placer_.index();
  auto nodes_only = idx.view({});
  const auto& names = a.node_names();
  // Where each name is and which platforms they have, kept with a kept list.
  std::shared_ptr<const listed_names::positions> pos;
  if (a.listed) pos = a.listed->positions_for(nodes_only.nodes);
  if (!pos) {
    auto p = std::make_shared<listed_names::positions>();
    p->list = nodes_only.nodes.classes();
    p->at = index_of_names(nodes_only.nodes, names);
    p->platforms = requested_platforms(nodes_only.nodes, names.empty(), p->at);
    if (a.listed && nodes_only.nodes.classes()) a.listed->keep(p);
    pos = std::move(p);
  }
  std::vector<std::string> errs;
  auto objs = resolve_pod(a.pod, pos->platforms, errs);
  auto cls = classes_of(nodes_only.nodes);
  const auto& at = pos->at;
  const std::size_t n = names.size();
  out.score.assign(n, 0);
  if (costs) out.cost.assign(n, node_cost{});
  if (states) {
    out.state.assign(n, 0);
    for (std::size_t k = 0; k < n; ++k) {
      const auto i = at[k];
      if (i != no_node) out.state[k] = static_cast<std::uint8_t>(1 | (cls->healthy[i] ? 2 : 0));
    }
  }
  // One kept state per platform with objects; the names of other platforms cost nothing.
  const bool one_platform = cls->platforms.size() == 1;
  for (std::uint32_t p = 0; p < cls->platforms.size(); ++p) {
    auto it = objs.by_platform.find(cls->platforms[p]);
    if (it == objs.by_platform.end() || it->second.empty()) continue;
    bool same_list = true;
    auto how = scores_.with(idx, it->first, it->second, placer_.model(), [&](const job_scores& st) {
      // The state follows the index's current list; the positions above are from the list
      // taken first. A node came or went between the two: evaluate in full (rare).
      if (!st.on(nodes_only.nodes)) {
        same_list = false;
        return;
      }
      for (std::size_t k = 0; k < n; ++k) {
        const auto i = at[k];
        if (i == no_node || (!one_platform && cls->platform[i] != p)) continue;
        out.score[k] = static_cast<std::uint8_t>(st.score(i));
        if (costs) out.cost[k] = st.cost(i);
      }
    });
    if (how == score_cache::outcome::none || !same_list) {
      kept_.with({"full"}).inc();
      return false;
    }
    kept_
        .with({how == score_cache::outcome::caught_up ? "caught_up"
               : how == score_cache::outcome::built   ? "built"
                                                      : "rebuilt"})
        .inc();
  }
  errors.insert(errors.end(), errs.begin(), errs.end());
  return true;
}

std::string extender::preferred_for(const pod_info& pod) const {
  if (pod.job.empty() || !preferred_) return "";
  return preferred_(pod.job).value_or("");
}

extender::kept_answers extender::answers(const extender_args& a, std::vector<std::string>& errors,
                                         bool costs, bool states) {
  kept_answers got;
  if (evaluate_kept(a, errors, got, costs, states)) return got;
  auto verdicts = evaluate(a, errors);
  got.score.assign(verdicts.size(), 0);
  got.state.assign(verdicts.size(), 0);
  if (costs) got.cost.assign(verdicts.size(), node_cost{});
  for (std::size_t k = 0; k < verdicts.size(); ++k) {
    got.score[k] = static_cast<std::uint8_t>(verdicts[k].score);
    got.state[k] =
        static_cast<std::uint8_t>((verdicts[k].known ? 1 : 0) | (verdicts[k].healthy ? 2 : 0));
    if (costs) got.cost[k] = verdicts[k].cost;
  }
  return got;
}

std::string extender::judge_hard(const extender_args& a, const threshold& limit,
                                 std::vector<std::size_t>& kept, json& failed) {
  const auto& names = a.node_names();
  std::vector<std::string> errors;
  const auto got = answers(a, errors, true);
  if (!errors.empty()) return "shoal: cannot check the pod's data: " + errors.front();
  const std::string preferred = preferred_for(a.pod);
  for (std::size_t k = 0; k < names.size(); ++k) {
    const std::string& node = names[k];
    const bool known = got.state[k] & 1, healthy = got.state[k] & 2;
    const node_cost& cost = got.cost[k];
    if ((cost.bytes_total == 0 || node == preferred) && known && healthy) {
      kept.push_back(k);
    } else if (!known) {
      failed[node] = "shoal: no heartbeat from this node's peerd";
    } else if (!healthy) {
      failed[node] = "shoal: this node's peerd is unhealthy";
    } else if (limit.exceeded(cost)) {
      failed[node] = "shoal: node lacks " + std::to_string(cost.missing()) + " of " +
                     std::to_string(cost.bytes_total) + " bytes (hard placement allows " +
                     limit.str() + ")";
    } else {
      kept.push_back(k);
    }
  }
  return "";
}

http::response extender::filter(std::string_view body) {
  metrics::scoped_timer t(latency_.with({"filter"}));
  if (body.size() > opts_.max_request_bytes) {
    requests_.with({"filter", "bad_request"}).inc();
    return http::response::json(
        413, json_text(filter_error("request larger than " +
                                    std::to_string(opts_.max_request_bytes) + " bytes")));
  }
  auto a = parse_extender_args(body, 100'000, &names_);
  if (!a) {
    requests_.with({"filter", "bad_request"}).inc();
    return http::response::json(a.error().is(errc::too_large) ? 413 : 400,
                                json_text(filter_error(a.error().message)));
  }
  const auto& names = a->node_names();
  std::string mode = a->pod.mode.empty() ? opts_.mode : a->pod.mode;
  threshold limit = a->pod.max_missing.value_or(opts_.max_missing);
  std::vector<std::size_t> kept;  // indexes into names, in request order
  bool all_kept = false;
  json failed = json::object();
  std::string err;
  if (mode != "hard") {
    all_kept = true;
  } else {
    err = judge_hard(*a, limit, kept, failed);
  }
  std::string text;
  if (!err.empty()) {
    text = json_text(filter_error(err));
  } else if (a->names_form) {
    // The same members json_text() gives for the ExtenderFilterResult object (keys sorted), written
    // directly: NodeNames holds every passing node (a kept list's own bytes when all pass).
    text.reserve(96 + (a->listed ? a->listed->raw.size() : names.size() * 16));
    text += R"({"Error":"","FailedAndUnresolvableNodes":)";
    text += json_text(failed);
    text += R"(,"FailedNodes":{},"NodeNames":)";
    if (all_kept && a->listed) {
      text += a->listed->raw;
    } else {
      text += '[';
      const std::size_t count = all_kept ? names.size() : kept.size();
      for (std::size_t k = 0; k < count; ++k) {
        if (k > 0) text += ',';
        append_json_string(text, names[all_kept ? k : kept[k]]);
      }
      text += ']';
    }
    text += R"(,"Nodes":null})";
  } else {
    json passed_items = json::array();
    if (all_kept) {
      passed_items = a->node_items;
    } else {
      for (auto i : kept) passed_items.push_back(a->node_items[i]);
    }
    json list = a->node_list_meta.is_null() ? json::object() : a->node_list_meta;
    json out = {{"Nodes", json{{"metadata", list}, {"items", passed_items}}},
                {"NodeNames", nullptr},
                {"FailedNodes", json::object()},
                {"FailedAndUnresolvableNodes", failed},
                {"Error", ""}};
    text = json_text(out);
  }
  requests_.with({"filter", err.empty() ? "ok" : "error"}).inc();
  log::debug("extender filter", log::kv("pod", a->pod.ns + "/" + a->pod.name),
             log::kv("mode", mode), log::kv("nodes", names.size()),
             log::kv("failed", failed.size()), log::kv("error", err));
  return http::response::json(200, std::move(text));
}

http::response extender::prioritize(std::string_view body) {
  metrics::scoped_timer t(latency_.with({"prioritize"}));
  if (body.size() > opts_.max_request_bytes) {
    requests_.with({"prioritize", "bad_request"}).inc();
    return http::response::json(
        413, json_text(json{{"error", "request larger than " +
                                          std::to_string(opts_.max_request_bytes) + " bytes"}}));
  }
  auto a = parse_extender_args(body, 100'000, &names_);
  if (!a) {
    requests_.with({"prioritize", "bad_request"}).inc();
    return http::response::json(a.error().is(errc::too_large) ? 413 : 400,
                                json_text(json{{"error", a.error().message}}));
  }
  const auto& names = a->node_names();
  std::vector<std::string> errors;
  const std::string preferred = preferred_for(a->pod);
  auto got = answers(*a, errors, false, !preferred.empty());
  auto& score = got.score;
  if (!preferred.empty()) {
    // A failover replacement comes first (jobs.h): 10 for it, at most 9 for the others.
    for (std::size_t k = 0; k < names.size(); ++k) {
      score[k] =
          names[k] == preferred && got.state[k] == 3 ? 10 : std::min<std::uint8_t>(score[k], 9);
    }
  }
  // HostPriorityList, written directly: the bytes json_text() gives for
  // [{"Host": name, "Score": n}, ...] (keys sorted) without a json object per node. A kept list
  // has the answer ready with a two-byte slot per score: one copy, then the scores put in.
  std::string text;
  if (const listed_names* l = a->listed.get()) {
    text = l->answer;
    char* w = text.data();
    for (std::size_t k = 0; k < names.size(); ++k) {
      char* at = w + l->slot[k];
      at[0] = score[k] >= 10 ? '1' : ' ';
      at[1] = score[k] >= 10 ? '0' : static_cast<char>('0' + score[k]);
    }
  } else {
    text.reserve(2 + names.size() * 32);
    text += '[';
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (k > 0) text += ',';
      text += R"({"Host":)";
      append_json_string(text, names[k]);
      text += R"(,"Score":)";
      text +=
          score[k] >= 10 ? std::string_view("10") : std::string_view(&"0123456789"[score[k]], 1);
      text += '}';
    }
    text += ']';
  }
  requests_.with({"prioritize", "ok"}).inc();
  if (!errors.empty()) {
    log::info("extender prioritize without some images",
              log::kv("pod", a->pod.ns + "/" + a->pod.name), log::kv("error", errors.front()));
  }
  return http::response::json(200, std::move(text));
}

}  // namespace shoal::scheduler
