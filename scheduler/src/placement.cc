#include "scheduler/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <span>
#include <string_view>

#include "common/checkpoint.h"
#include "common/oci.h"

namespace shoal::scheduler {

using nlohmann::json;

namespace {

status check_string_list(const json& j, const char* key, std::size_t max_items, std::size_t max_len,
                         std::vector<std::string>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array())
    return fail(errc::invalid_argument, std::string(key) + " must be a list of strings");
  if (it->size() > max_items) {
    return fail(errc::invalid_argument,
                std::string(key) + " has more than " + std::to_string(max_items) + " entries");
  }
  for (const auto& x : *it) {
    if (!x.is_string() || x.get_ref<const std::string&>().empty() ||
        x.get_ref<const std::string&>().size() > max_len) {
      return fail(errc::invalid_argument, std::string(key) +
                                              " entries must be non-empty strings of at most " +
                                              std::to_string(max_len) + " bytes");
    }
    out.push_back(x.get<std::string>());
  }
  return {};
}

status check_uint(const json& j, const char* key, std::uint32_t lo, std::uint32_t hi,
                  std::uint32_t& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_number_unsigned() || it->get<std::uint64_t>() < lo || it->get<std::uint64_t>() > hi) {
    return fail(errc::invalid_argument, std::string(key) + " must be an integer in " +
                                            std::to_string(lo) + ".." + std::to_string(hi));
  }
  out = static_cast<std::uint32_t>(it->get<std::uint64_t>());
  return {};
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

std::string tie_hex(std::uint64_t k) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(k));
  return buf;
}

// Tie keys: a rendezvous (highest-random-weight) hash of the node's name and the job's anchor
// object. FNV-1a and splitmix64's finalizer are written out, not std::hash, so the order is the
// same with every standard library.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The object that names "the job's data" for tie keys: the largest (a dataset shard or the
// biggest layer), the smallest digest among equals. 0 when the job has no objects.
std::uint64_t anchor_of(std::span<const object_ref> objects) {
  const object_ref* best = nullptr;
  for (const auto& o : objects) {
    if (!best || o.size > best->size || (o.size == best->size && o.id < best->id)) best = &o;
  }
  return best ? std::hash<digest>{}(best->id) | 1 : 0;
}

// Which nodes of the view are named in `names` (index_of_names without the positions).
std::vector<bool> mark_named(const node_list& nodes, const std::vector<std::string>& names) {
  std::vector<bool> out(nodes.size(), false);
  for (auto i : index_of_names(nodes, names)) {
    if (i != no_node) out[i] = true;
  }
  return out;
}

}  // namespace

result<job_spec> parse_job(const json& j) {
  if (!j.is_object()) return fail(errc::invalid_argument, "job must be a JSON object");
  static const std::set<std::string> known = {
      "images",   "datasets", "nodes",      "gpus",
      "selector", "exclude",  "candidates", "require_network_validation",
      "platform", "dry_run",  "standby",    "target",
      "id"};
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k))
      return fail(errc::invalid_argument, "unknown job field \"" + k.substr(0, 64) + "\"");
  }
  job_spec job;
  if (auto it = j.find("id"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || !checkpoint::valid_job(it->get_ref<const std::string&>()))
      return fail(errc::invalid_argument, "id must be a job name ([a-z0-9][a-z0-9._-]{0,127})");
    job.id = it->get<std::string>();
  }
  if (auto s = check_string_list(j, "images", 64, 512, job.images); !s) return fail(s.error());
  for (const auto& i : job.images) {
    auto r = oci::parse_image_ref(i);
    if (!r) return fail(r.error().wrap("images"));
  }
  if (auto s = check_string_list(j, "datasets", 64, 330, job.datasets); !s) return fail(s.error());
  for (const auto& d : job.datasets) {
    if (!valid_dataset_ref(d))
      return fail(errc::invalid_argument, "datasets: \"" + d + "\" is not name@version");
  }
  if (auto s = check_uint(j, "nodes", 1, 1024, job.nodes); !s) return fail(s.error());
  if (auto s = check_uint(j, "gpus", 0, 4096, job.gpus); !s) return fail(s.error());
  if (auto it = j.find("selector"); it != j.end() && !it->is_null()) {
    if (!it->is_object() || it->size() > 32) {
      return fail(errc::invalid_argument,
                  "selector must be an object of at most 32 label: value pairs");
    }
    for (const auto& [k, v] : it->items()) {
      if (!heartbeat::valid_label_key(k) || !v.is_string() ||
          v.get_ref<const std::string&>().size() > 256) {
        return fail(errc::invalid_argument,
                    "selector \"" + k.substr(0, 64) + "\" must be a label key with a string value");
      }
      job.selector[k] = v.get<std::string>();
    }
  }
  if (auto s = check_string_list(j, "exclude", 10000, 253, job.exclude); !s) return fail(s.error());
  if (auto s = check_string_list(j, "candidates", 100000, 253, job.candidates); !s)
    return fail(s.error());
  if (auto it = j.find("require_network_validation"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean())
      return fail(errc::invalid_argument, "require_network_validation must be true or false");
    job.require_network_validation = it->get<bool>();
  }
  if (auto it = j.find("platform"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || it->get_ref<const std::string&>().size() > 64 ||
        std::count(it->get_ref<const std::string&>().begin(),
                   it->get_ref<const std::string&>().end(), '/') < 1) {
      return fail(errc::invalid_argument, "platform must be \"os/arch[/variant]\"");
    }
    job.platform = it->get<std::string>();
  }
  return job;
}

json spec_json(const job_spec& s) {
  json out = {{"images", s.images}, {"datasets", s.datasets}, {"nodes", s.nodes}, {"gpus", s.gpus}};
  if (!s.id.empty()) out["id"] = s.id;
  if (!s.selector.empty()) out["selector"] = s.selector;
  if (!s.exclude.empty()) out["exclude"] = s.exclude;
  if (!s.candidates.empty()) out["candidates"] = s.candidates;
  if (s.require_network_validation)
    out["require_network_validation"] = *s.require_network_validation;
  if (!s.platform.empty()) out["platform"] = s.platform;
  return out;
}

std::vector<std::uint32_t> index_of_names(const node_list& nodes,
                                          const std::vector<std::string>& names) {
  std::vector<std::uint32_t> out(names.size(), no_node);
  auto less = [](const node_view& n, const std::string& x) { return n.name < x; };
  if (std::is_sorted(names.begin(), names.end())) {
    // One merge walk: kube-scheduler lists nodes in a stable order, usually sorted.
    const node_view* it = nodes.begin();
    for (std::size_t k = 0; k < names.size(); ++k) {
      while (it != nodes.end() && it->name < names[k]) ++it;
      if (it != nodes.end() && it->name == names[k])
        out[k] = static_cast<std::uint32_t>(it - nodes.begin());
    }
    return out;
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    auto it = std::lower_bound(nodes.begin(), nodes.end(), names[k], less);
    if (it != nodes.end() && it->name == names[k])
      out[k] = static_cast<std::uint32_t>(it - nodes.begin());
  }
  return out;
}

std::vector<std::string> platforms_of(const cluster_view& v, const job_spec& job) {
  if (!job.platform.empty()) return {job.platform};
  // By platform number (node_classes): no string per node.
  auto cls = classes_of(v.nodes);
  std::vector<bool> used(cls->platforms.size(), false);
  auto cand = mark_named(v.nodes, job.candidates);
  auto excl = mark_named(v.nodes, job.exclude);
  for (std::size_t i = 0; i < v.nodes.size(); ++i) {
    if (!v.nodes[i].healthy || excl[i] || (!job.candidates.empty() && !cand[i])) continue;
    used[cls->platform[i]] = true;
  }
  std::vector<std::string> out;
  for (std::size_t p = 0; p < used.size(); ++p) {
    if (used[p]) out.push_back(cls->platforms[p]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// One evaluator per platform, built on first use: the platform's object list and its tie anchor.
struct per_platform {
  std::unique_ptr<evaluator> ev;
  std::uint64_t anchor = 0;
};

// The evaluator of a platform, built from the job's objects for it (none when it resolved none).
per_platform& evaluator_for(std::map<std::string, per_platform>& by_platform,
                            const std::string& platform, const cluster_view& v,
                            const job_objects& objs, const cost_model& m) {
  static const std::vector<object_ref> none;
  auto& pp = by_platform[platform];
  if (!pp.ev) {
    auto it = objs.by_platform.find(platform);
    auto list = it == objs.by_platform.end() ? std::span<const object_ref>(none)
                                             : std::span<const object_ref>(it->second);
    pp.ev = std::make_unique<evaluator>(v, list, m);
    pp.anchor = anchor_of(list);
  }
  return pp;
}

// Every reason node n cannot take the job, in a fixed order: health, candidates, exclusion,
// labels, GPUs, network validation, resolution errors. e's GPUs and network are already set.
void add_reasons(node_eval& e, const node_view& n, bool candidate, bool excluded,
                 const job_objects& objs, const job_spec& job, bool require,
                 const evaluate_options& o) {
  if (!n.healthy) e.reasons.push_back("unhealthy (" + n.health + ")");
  if (!job.candidates.empty() && !candidate) e.reasons.push_back("not among the candidates");
  if (excluded) e.reasons.push_back("excluded");
  for (const auto& [k, want] : job.selector) {
    auto l = n.labels.find(k);
    if (l == n.labels.end() || l->second != want) {
      e.reasons.push_back("label " + k + "=" + want + " does not match (" +
                          (l == n.labels.end() ? std::string("absent") : l->second) + ")");
    }
  }
  if (job.gpus > e.gpus_free()) {
    e.reasons.push_back("needs " + std::to_string(job.gpus) + " GPUs, " +
                        std::to_string(e.gpus_free()) + " free (" +
                        std::to_string(e.gpus_capacity) + " capacity, " +
                        std::to_string(e.gpus_reserved) + " reserved)");
  }
  if (e.net.state == validation::failed)
    e.reasons.push_back("network validation failed: " + e.net.detail);
  else if (require && e.net.state != validation::passed) {
    e.reasons.push_back("network validation required, state " +
                        std::string(to_string(e.net.state)) + ": " + e.net.detail);
  }
  if (o.strict_resolution) {
    if (auto er = objs.errors.find(e.platform); er != objs.errors.end()) {
      for (const auto& msg : er->second) e.reasons.push_back(msg);
    }
  }
}

// The evaluations in rank order: eligible first, then by rank seconds, health, missing bytes,
// tie key and view index; eligible nodes get ranks 1, 2, ...
std::vector<node_eval> rank_evals(std::vector<node_eval> out) {
  // Sort compact keys rather than the node_evals themselves (each holds several strings and
  // vectors), then move every evaluation once into its place. Ties end on the view index, which
  // is name order (out[i] is node i of the view, sorted by name).
  struct sort_key {
    bool eligible;
    bool ok;  // health "ok" before degraded
    double seconds;
    std::uint64_t missing;
    std::uint64_t tie;
    std::uint32_t index;
  };
  std::vector<sort_key> keys;
  keys.reserve(out.size());
  for (std::uint32_t i = 0; i < out.size(); ++i) {
    const auto& e = out[i];
    keys.push_back({e.eligible, e.health == "ok", e.rank_seconds, e.cost.missing(), e.tie_key, i});
  }
  std::sort(keys.begin(), keys.end(), [](const sort_key& a, const sort_key& b) {
    if (a.eligible != b.eligible) return a.eligible;
    if (!a.eligible) return a.index < b.index;
    if (a.seconds != b.seconds) return a.seconds < b.seconds;
    if (a.ok != b.ok) return a.ok;
    if (a.missing != b.missing) return a.missing < b.missing;
    if (a.tie != b.tie) return a.tie < b.tie;
    return a.index < b.index;
  });
  std::vector<node_eval> sorted;
  sorted.reserve(out.size());
  int rank = 0;
  for (const auto& k : keys) {
    sorted.push_back(std::move(out[k.index]));
    if (sorted.back().eligible) sorted.back().rank = ++rank;
  }
  return sorted;
}

}  // namespace

std::vector<node_eval> evaluate_nodes(const cluster_view& v, const job_objects& objs,
                                      const job_spec& job, const cost_model& m,
                                      const network_model& net,
                                      const std::map<std::string, std::uint32_t>& reserved,
                                      const evaluate_options& o) {
  auto cand = mark_named(v.nodes, job.candidates);
  auto excl = mark_named(v.nodes, job.exclude);
  bool require = job.require_network_validation.value_or(o.require_validation);
  std::map<std::string, per_platform> by_platform;
  std::vector<node_eval> out;
  out.reserve(v.nodes.size());
  for (std::uint32_t i = 0; i < v.nodes.size(); ++i) {
    const auto& n = v.nodes[i];
    node_eval e;
    e.index = i;
    e.name = n.name;
    e.platform = job.platform.empty() ? n.platform : job.platform;
    e.health = n.health;
    e.gpus_capacity = n.gpus;
    if (auto r = reserved.find(n.name); r != reserved.end()) e.gpus_reserved = r->second;
    e.net = net.verdict(n);
    add_reasons(e, n, cand[i], excl[i], objs, job, require, o);
    auto& pp = evaluator_for(by_platform, e.platform, v, objs, m);
    e.cost = pp.ev->cost(i);
    e.eligible = e.reasons.empty();
    // Best fit: every GPU the job would leave idle on this node counts as packing_seconds_per_gpu
    // of waiting, so a partly used node that the job fills wins over a free node unless the free
    // one is ready that much sooner. Whole nodes stay free for gangs and 8-GPU jobs, as Volcano's
    // binpack and kube-scheduler's MostAllocated do.
    if (e.eligible && job.gpus > 0)
      e.packing_seconds = o.packing_seconds_per_gpu * (e.gpus_free() - job.gpus);
    e.rank_seconds = e.cost.seconds + e.packing_seconds;
    // Among equal nodes, the one whose hash with the job's data is lowest (rendezvous hashing):
    // placements of the same data that find no warm node land on the same nodes, so its copies
    // build up there instead of being scattered, and the next job that needs it finds it.
    // Without objects there is nothing to hash: name order.
    if (o.rank && pp.anchor != 0) e.tie_key = mix64(fnv1a(e.name) ^ pp.anchor);
    out.push_back(std::move(e));
  }
  if (!o.rank) return out;
  return rank_evals(std::move(out));
}

namespace {

using eval_ptrs = std::vector<const node_eval*>;

// A gang's eligible nodes by fabric segment; nodes without a fabric label are only counted.
struct fabric_split {
  std::map<std::string, eval_ptrs> by_fabric;
  std::size_t no_fabric = 0;
};

// Splits the eligible nodes (in rank order) by their fabric segment.
fabric_split split_by_fabric(const eval_ptrs& eligible, const cluster_view& v) {
  fabric_split out;
  for (const auto* e : eligible) {
    const auto& f = v.nodes[e->index].fabric;
    if (f.empty())
      ++out.no_fabric;
    else
      out.by_fabric[f].push_back(e);
  }
  return out;
}

// The groups of one segment that may share network settings: per settings key, the members with
// that key or none; the whole segment when no member reports a key.
std::vector<eval_ptrs> settings_groups(const eval_ptrs& members) {
  std::set<std::string> keys;
  for (const auto* e : members) {
    if (!e->net.settings_key.empty()) keys.insert(e->net.settings_key);
  }
  std::vector<eval_ptrs> groups;
  if (keys.empty()) {
    groups.push_back(members);
  } else {
    for (const auto& key : keys) {
      eval_ptrs g;
      for (const auto* e : members) {
        if (e->net.settings_key == key || e->net.settings_key.empty()) g.push_back(e);
      }
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

// The search for a gang: the best group so far and what to say if none fits.
struct gang_search {
  double max_s = 0, sum_s = 0;
  std::string fabric;
  eval_ptrs group;
  bool found = false;
  std::string largest;
  std::size_t largest_n = 0;
  std::string inconsistent;
};

// Weighs one group of a segment: its first k nodes, if network-consistent, replace the best
// gang when their (max, sum) rank seconds are lower.
void consider_group(gang_search& s, const std::string& fabric, const eval_ptrs& g, std::uint32_t k,
                    const cluster_view& v, const network_model& net) {
  if (g.size() > s.largest_n) {
    s.largest_n = g.size();
    s.largest = fabric;
  }
  if (g.size() < k) return;
  eval_ptrs picked(g.begin(), g.begin() + k);
  std::vector<const node_view*> views;
  for (const auto* e : picked) views.push_back(&v.nodes[e->index]);
  if (auto st = net.gang_consistent(views); !st) {
    s.inconsistent = fabric + ": " + st.error().message;
    return;
  }
  double mx = 0, sum = 0;
  for (const auto* e : picked) {
    mx = std::max(mx, e->rank_seconds);
    sum += e->rank_seconds;
  }
  if (!s.found || mx < s.max_s || (mx == s.max_s && sum < s.sum_s)) {
    s.found = true;
    s.max_s = mx;
    s.sum_s = sum;
    s.fabric = fabric;
    s.group = g;
  }
}

// Why no gang of k fits: the largest group, unlabelled nodes, the last inconsistency.
std::string no_gang_reason(const gang_search& s, std::uint32_t k, std::size_t no_fabric) {
  std::string reason = "no fabric segment has " + std::to_string(k) +
                       " eligible nodes with consistent network settings";
  if (s.largest_n > 0)
    reason += " (largest: " + s.largest + " with " + std::to_string(s.largest_n) + ")";
  if (no_fabric > 0)
    reason += "; " + std::to_string(no_fabric) + " eligible nodes have no fabric label";
  if (!s.inconsistent.empty()) reason += "; " + s.inconsistent;
  return reason;
}

// A single node: the best eligible one, the next ones as standby.
void choose_single(placement& p, const eval_ptrs& eligible, const cluster_view& v,
                   std::uint32_t standby) {
  p.feasible = true;
  p.chosen.push_back(eligible[0]->name);
  p.segment = v.nodes[eligible[0]->index].fabric;
  for (std::size_t i = 1; i < eligible.size() && p.standby.size() < standby; ++i) {
    p.standby.push_back(eligible[i]->name);
  }
}

// Gang: one fabric segment, consistent network settings, lowest (max, sum) rank seconds. The
// packing term is part of it, so a gang of fewer GPUs than a node has fills partly used nodes
// before it breaks free ones, as a single node does.
void choose_gang(placement& p, const eval_ptrs& eligible, const cluster_view& v, std::uint32_t k,
                 std::uint32_t standby, const network_model& net) {
  auto split = split_by_fabric(eligible, v);
  gang_search best;
  for (const auto& [fabric, members] : split.by_fabric) {
    for (const auto& g : settings_groups(members)) consider_group(best, fabric, g, k, v, net);
  }
  if (!best.found) {
    p.reason = no_gang_reason(best, k, split.no_fabric);
    return;
  }
  p.feasible = true;
  p.segment = best.fabric;
  for (std::size_t i = 0; i < best.group.size(); ++i) {
    if (i < k)
      p.chosen.push_back(best.group[i]->name);
    else if (p.standby.size() < standby)
      p.standby.push_back(best.group[i]->name);
  }
}

}  // namespace

placement choose(std::vector<node_eval> evals, const cluster_view& v, const job_spec& job,
                 std::uint32_t standby, const network_model& net) {
  placement p;
  eval_ptrs eligible;
  for (const auto& e : evals) {
    if (e.eligible) eligible.push_back(&e);
  }
  const std::uint32_t k = std::max<std::uint32_t>(1, job.nodes);
  if (eligible.size() < k) {
    p.reason = "needs " + std::to_string(k) + " eligible node" + (k > 1 ? "s" : "") + ", found " +
               std::to_string(eligible.size()) + " of " + std::to_string(evals.size()) + " known";
  } else if (k == 1) {
    choose_single(p, eligible, v, standby);
  } else {
    choose_gang(p, eligible, v, k, standby, net);
  }
  p.nodes = std::move(evals);
  return p;
}

json to_json(const node_eval& e) {
  json miss = json::object();
  for (std::size_t s = 1; s < source_count; ++s) {
    miss[std::string(to_string(static_cast<source>(s)))] = e.cost.by_source[s];
  }
  return {{"node", e.name},
          {"rank", e.rank},
          {"eligible", e.eligible},
          {"reasons", e.reasons},
          {"platform", e.platform},
          {"health", e.health},
          {"bytes_total", e.cost.bytes_total},
          {"bytes_present", e.cost.present()},
          {"bytes_missing", e.cost.missing()},
          {"missing_by_source", std::move(miss)},
          {"estimated_seconds", round3(e.cost.seconds)},
          {"packing_seconds", round3(e.packing_seconds)},
          {"rank_seconds", round3(e.rank_seconds)},
          {"tie_key", tie_hex(e.tie_key)},
          {"gpus",
           {{"capacity", e.gpus_capacity}, {"reserved", e.gpus_reserved}, {"free", e.gpus_free()}}},
          {"network", {{"validation", to_string(e.net.state)}, {"detail", e.net.detail}}}};
}

json to_json(const placement& p, const cluster_view& v, const job_spec& job,
             const network_model& net) {
  json out;
  out["feasible"] = p.feasible;
  if (!p.reason.empty()) out["reason"] = p.reason;
  out["chosen"] = p.chosen;
  out["standby"] = p.standby;
  out["segment"] = p.segment;
  json objs = json::object();
  for (const auto& [plat, list] : p.objects.by_platform) {
    std::uint64_t bytes = 0;
    for (const auto& o : list) bytes += o.size;
    objs[plat] = {{"count", list.size()}, {"bytes", bytes}};
  }
  out["objects"] = std::move(objs);
  out["errors"] = p.objects.errors;
  if (!p.reservation.empty()) {
    out["reservation"] = {
        {"id", p.reservation}, {"gpus_per_node", job.gpus}, {"seconds", p.reserved_for_s}};
  } else {
    out["reservation"] = nullptr;
  }
  std::set<std::string> chosen(p.chosen.begin(), p.chosen.end());
  std::set<std::string> standby(p.standby.begin(), p.standby.end());
  json nodes = json::array();
  for (const auto& e : p.nodes) {
    json n = to_json(e);
    n["gpus"]["requested"] = job.gpus;
    n["gpus"]["fit"] = job.gpus <= e.gpus_free();
    n["role"] = chosen.count(e.name) ? "chosen" : standby.count(e.name) ? "standby" : "";
    n["network_plan"] = chosen.count(e.name) || standby.count(e.name)
                            ? net.plan(v.nodes[e.index], job.gpus)
                            : json();
    nodes.push_back(std::move(n));
  }
  out["nodes"] = std::move(nodes);
  return out;
}

placer::placer(cluster_index& idx, resolver& res, dataset_catalog& ds, const network_model& net,
               placer_options o, std::function<clock::time_point()> now)
    : idx_(idx), res_(res), ds_(ds), net_(net), opts_(o), now_(std::move(now)) {}

std::map<std::string, std::uint32_t> placer::reserved() {
  auto now = now_();
  std::lock_guard lk(mu_);
  std::map<std::string, std::uint32_t> out;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const reservation& r) { return r.until <= now; }),
               list.end());
    if (list.empty()) {
      it = reservations_.erase(it);
      continue;
    }
    std::uint32_t sum = 0;
    for (const auto& r : list) sum += r.gpus;
    out[it->first] = sum;
    ++it;
  }
  return out;
}

result<job_objects> placer::resolve(const job_spec& job, const std::vector<std::string>& platforms,
                                    std::chrono::milliseconds wait, bool strict_datasets) {
  job_objects out;
  std::vector<object_ref> dataset_objects;
  std::vector<std::string> dataset_errors;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (const auto& d : job.datasets) {
    // The job's time limit holds for its datasets as for its images (resolve_many below).
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto r = ds_.lookup_within(d, std::max(left, std::chrono::milliseconds(0)));
    if (!r) {
      if (strict_datasets) return fail(r.error());
      dataset_errors.push_back(d + ": " + r.error().message);
      continue;
    }
    dataset_objects.insert(dataset_objects.end(), r->begin(), r->end());
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& plat : platforms) {
    for (const auto& img : job.images) pairs.emplace_back(img, plat);
  }
  auto results = res_.resolve_many(pairs, wait);
  std::map<std::string, std::vector<object_ref>> lists;
  for (const auto& plat : platforms) lists[plat];
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [img, plat] = pairs[i];
    if (!results[i]) {
      if (results[i].error().is(errc::invalid_argument)) return fail(results[i].error());
      out.errors[plat].push_back(img + ": " + results[i].error().message);
      continue;
    }
    auto& l = lists[plat];
    l.insert(l.end(), results[i]->objects.begin(), results[i]->objects.end());
  }
  for (auto& [plat, l] : lists) {
    l.insert(l.end(), dataset_objects.begin(), dataset_objects.end());
    out.by_platform[plat] = dedup(l);
    for (const auto& e : dataset_errors) out.errors[plat].push_back(e);
  }
  return out;
}

result<placer::result_t> placer::place(const job_spec& job, std::uint32_t standby, bool reserve,
                                       std::chrono::milliseconds wait) {
  auto nodes_only = idx_.view({});
  auto platforms = platforms_of(nodes_only, job);
  auto objs = resolve(job, platforms, wait, true);
  if (!objs) return fail(objs.error());
  std::vector<digest> all;
  for (const auto& [plat, list] : objs->by_platform) {
    for (const auto& o : list) all.push_back(o.id);
  }
  result_t out;
  std::unique_lock one_at_a_time(reserve_mu_, std::defer_lock);
  if (reserve && job.gpus > 0) one_at_a_time.lock();
  out.view = idx_.view(all);
  auto evals = evaluate_nodes(out.view, *objs, job, opts_.cost, net_, reserved(),
                              {.require_validation = opts_.require_network_validation,
                               .strict_resolution = true,
                               .packing_seconds_per_gpu = opts_.packing_seconds_per_gpu});
  out.p = choose(std::move(evals), out.view, job, standby, net_);
  out.p.objects = std::move(*objs);
  if (!out.p.feasible) {
    for (const auto& [plat, errs] : out.p.objects.errors) {
      if (!errs.empty()) {
        out.p.reason += "; cannot resolve for " + plat + ": " + errs.front();
        break;
      }
    }
  }
  if (reserve && out.p.feasible && job.gpus > 0) {
    {
      std::lock_guard lk(mu_);
      out.p.reservation = "rsv-" + reservation_prefix_ + std::to_string(next_reservation_++);
    }
    add_reservation(out.p.reservation, out.p.chosen, job.gpus, opts_.reservation_ttl);
    out.p.reserved_for_s = std::chrono::duration<double>(opts_.reservation_ttl).count();
    if (sharer_) sharer_(out.p.reservation, out.p.chosen, job.gpus, opts_.reservation_ttl);
  }
  return out;
}

void placer::add_reservation(const std::string& id, const std::vector<std::string>& nodes,
                             std::uint32_t gpus, std::chrono::milliseconds ttl) {
  auto until = now_() + ttl;
  std::lock_guard lk(mu_);
  for (const auto& n : nodes) reservations_[n].push_back({id, gpus, until});
}

}  // namespace shoal::scheduler
