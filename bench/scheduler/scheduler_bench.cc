// scheduler_bench: how fast the scheduler answers kube-scheduler and ingests heartbeats at
// 5,000 nodes and 200,000 objects (part 1, "scale"), and how good its placements are (part 2,
// "sim"): a trace-driven simulation that places the same jobs, on the same simulated caches, with
// Shoal's cost model (the real evaluate_nodes/choose on a cluster_index fed by heartbeats),
// kube-scheduler's ImageLocality and least-allocated. docs/scheduler-bench.md describes what is
// measured and the assumptions of the trace; bench/scheduler/run is the way to run it.
//
// One thread, except the resolver's pool: the extender path resolves images there, as the daemon
// does. Everything random comes from one seed, through generators written here, so a run is
// reproducible across standard libraries.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/heartbeat.h"
#include "common/metrics.h"
#include "common/sha256.h"
#include "cost.h"
#include "extender.h"
#include "index.h"
#include "network.h"
#include "placement.h"
#include "resolver.h"

namespace {

using namespace shoal;
using namespace shoal::scheduler;
using nlohmann::json;
using steady = std::chrono::steady_clock;

constexpr double MiB = 1024.0 * 1024.0;
constexpr double GiB = 1024.0 * MiB;
constexpr double TiB = 1024.0 * GiB;

// ---------------------------------------------------------------------------------------------
// Small utilities.

// Deterministic randomness: std::mt19937_64 is specified bit for bit, the distributions of
// <random> are not, so the few distributions needed are written here.
class rng_t {
 public:
  explicit rng_t(std::uint64_t seed) : g_(seed) {}
  double uniform() { return static_cast<double>(g_() >> 11) * 0x1.0p-53; }
  // The modulo bias is below 2^-40 for the ranges used here.
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : g_() % n; }
  double log_uniform(double lo, double hi) { return lo * std::exp(uniform() * std::log(hi / lo)); }
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  std::uint64_t raw() { return g_(); }

 private:
  std::mt19937_64 g_;
};

// Zipf over ranks 0..n-1: P(k) proportional to 1/(k+1)^s. Immutable after construction.
class zipf {
 public:
  zipf(std::size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::size_t k = 0; k < n; ++k) {
      sum += 1.0 / std::pow(static_cast<double>(k + 1), s);
      cdf_[k] = sum;
    }
    for (auto& c : cdf_) c /= sum;
  }
  [[nodiscard]] std::size_t sample(rng_t& r) const {
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), r.uniform());
    return std::min<std::size_t>(static_cast<std::size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

// Nearest-rank percentile (p in 0..100).
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

// A value in MiB from /proc/self/status ("VmRSS", "VmHWM"); 0 when unreadable.
double proc_status_mib(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      return std::strtod(line.c_str() + key.size() + 1, nullptr) / 1024.0;  // kB
    }
  }
  return 0;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double ms_since(steady::time_point t) {
  return std::chrono::duration<double, std::milli>(steady::now() - t).count();
}

digest object_digest(std::string_view space, std::uint64_t i) {
  return sha256_of(std::string(space) + ":" + std::to_string(i));
}

heartbeat::held_object held_of(const digest& d, std::uint64_t size) {
  heartbeat::held_object h;
  h.id = d;
  h.size = size;
  h.info_hash = d.hex().substr(0, 40);
  return h;
}

// The index's clock stands still, so every node stays healthy however long a run takes: the
// benchmark times heartbeats, not their spacing.
std::function<steady::time_point()> frozen_clock() {
  auto t = steady::now();
  return [t] { return t; };
}

std::string node_name(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu-%05zu", i);
  return buf;
}

// registry-proxy in memory: image manifests by "registry/repository@digest". Filled before the
// resolver's threads start asking, read-only afterwards.
class memory_manifests final : public manifest_source {
 public:
  std::string put(const std::string& registry, const std::string& repo, const std::string& body) {
    auto d = sha256_of(body).str();
    bodies_[registry + "/" + repo + "@" + d] = body;
    return d;
  }
  result<manifest> get(const std::string& registry, const std::string& repository,
                       const std::string& reference) override {
    auto it = bodies_.find(registry + "/" + repository + "@" + reference);
    if (it == bodies_.end())
      return fail(errc::not_found, "manifest " + repository + "@" + reference + " not found");
    return manifest{"application/vnd.oci.image.manifest.v1+json", it->second};
  }

 private:
  std::map<std::string, std::string> bodies_;
};

// Datasets by name@version, in memory. Single-threaded use (the placer calls it inline).
class memory_datasets final : public dataset_catalog {
 public:
  std::map<std::string, std::vector<object_ref>> sets;
  result<std::vector<object_ref>> lookup(const std::string& name) override {
    auto it = sets.find(name);
    if (it == sets.end()) return fail(errc::not_found, "unknown dataset " + name);
    return it->second;
  }
};

std::string image_manifest(const object_ref& config, std::span<const object_ref> layers) {
  json j = {{"schemaVersion", 2},
            {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
            {"config",
             {{"mediaType", "application/vnd.oci.image.config.v1+json"},
              {"digest", config.id.str()},
              {"size", config.size}}}};
  j["layers"] = json::array();
  for (const auto& l : layers) {
    j["layers"].push_back({{"mediaType", "application/vnd.oci.image.layer.v1.tar+gzip"},
                           {"digest", l.id.str()},
                           {"size", l.size}});
  }
  return j.dump();
}

// A v1.Pod as kube-scheduler serializes it (trimmed of nothing that matters to the parse cost:
// metadata, two containers with resources, volumes, tolerations).
json make_pod(const std::string& name, const std::vector<std::string>& images,
              const std::string& dataset, bool hard) {
  json containers = json::array();
  int i = 0;
  for (const auto& img : images) {
    containers.push_back(
        {{"name", "c" + std::to_string(i++)},
         {"image", img},
         {"command", {"python", "-m", "train", "--config", "/etc/train.yaml"}},
         {"env", {{{"name", "NCCL_DEBUG"}, {"value", "WARN"}}}},
         {"resources",
          {{"limits", {{"cpu", "32"}, {"memory", "256Gi"}, {"nvidia.com/gpu", "8"}}},
           {"requests", {{"cpu", "32"}, {"memory", "256Gi"}, {"nvidia.com/gpu", "8"}}}}},
         {"volumeMounts",
          {{{"name", "kube-api-access-x7k2p"},
            {"readOnly", true},
            {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
         {"terminationMessagePath", "/dev/termination-log"},
         {"imagePullPolicy", "IfNotPresent"}});
  }
  json ann = {{std::string(annotation_datasets), dataset}};
  if (hard) {
    ann[std::string(annotation_placement)] = "hard";
    ann[std::string(annotation_max_missing)] = "100%";
  }
  return {{"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"uid", "5f1c3a52-9c1e-4d8e-a0f1-3b0d1f0b9e21"},
            {"resourceVersion", "884211"},
            {"labels", {{"app", "trainer"}}},
            {"annotations", ann}}},
          {"spec",
           {{"volumes",
             {{{"name", "kube-api-access-x7k2p"},
               {"projected", {{"sources", {{{"serviceAccountToken", {{"path", "token"}}}}}}}}}}},
            {"containers", containers},
            {"restartPolicy", "Never"},
            {"nodeSelector", {{"nvidia.com/gpu.present", "true"}}},
            {"schedulerName", "default-scheduler"},
            {"tolerations",
             {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}},
            {"priority", 0}}},
          {"status", {{"phase", "Pending"}, {"qosClass", "Guaranteed"}}}};
}

// ---------------------------------------------------------------------------------------------
// Part 1: scale.

struct scale_params {
  std::size_t nodes = 5000;
  std::size_t objects = 200'000;
  std::size_t held_per_node = 400;  // 2M holdings at 5,000 nodes
  std::size_t pods = 32;            // distinct pods cycled through (each 50 objects)
  std::size_t decisions = 200;
  std::size_t heartbeats = 50'000;
  std::size_t full_every = 100;  // one heartbeat in this many is a full resync
};

// The heartbeat generator's view of one node (what it holds, by object number).
struct gen_node {
  std::vector<std::uint32_t> held;
  std::uint64_t seq = 1;
  heartbeat::message base;  // inventory without objects
};

json run_scale(const scale_params& p, std::uint64_t seed, bool& ok) {
  rng_t r(seed ^ 0x5ca1e);
  zipf pop(p.objects, 0.9);
  double rss_before = proc_status_mib("VmRSS");
  std::vector<digest> ids(p.objects);
  std::vector<std::uint64_t> sizes(p.objects);
  for (std::size_t i = 0; i < p.objects; ++i) {
    ids[i] = object_digest("obj", i);
    sizes[i] = static_cast<std::uint64_t>(r.log_uniform(100 * MiB, 200 * GiB));
  }
  cluster_index idx(index_options{}, "bench-epoch", frozen_clock());
  const std::string epoch = idx.epoch();

  // Holdings: object j is on node j % nodes (so all `objects` are in the index), and the rest of
  // each node's list comes from a Zipf popularity (popular objects are on thousands of nodes).
  std::vector<gen_node> gen(p.nodes);
  for (std::size_t j = 0; j < p.objects; ++j)
    gen[j % p.nodes].held.push_back(static_cast<std::uint32_t>(j));
  auto holds = [](const gen_node& g, std::uint32_t o) {
    return std::find(g.held.begin(), g.held.end(), o) != g.held.end();
  };
  for (std::size_t i = 0; i < p.nodes; ++i) {
    auto& g = gen[i];
    for (std::size_t tries = 0; g.held.size() < p.held_per_node && tries < 20 * p.held_per_node;
         ++tries) {
      auto o = static_cast<std::uint32_t>(pop.sample(r));
      if (!holds(g, o)) g.held.push_back(o);
    }
    auto& m = g.base;
    m.node = node_name(i);
    m.labels = {{"zone", "z" + std::to_string(i % 4)},
                {"rack", "r" + std::to_string(i / 40)},
                {"fabric", "f" + std::to_string(i / 500)},
                {"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"},
                {"kubernetes.io/os", "linux"},
                {"kubernetes.io/arch", "amd64"}};
    m.ip = "10." + std::to_string(i / 65536) + "." + std::to_string(i / 256 % 256) + "." +
           std::to_string(i % 256);
    m.bt_port = 6881;
    m.http_port = 7001;
    m.epoch = epoch;
    m.cache_capacity = static_cast<std::uint64_t>(8 * TiB);
    m.gpus = {{"NVIDIA H100 80GB HBM3", 8}};
  }
  auto message_of = [&](gen_node& g, bool full) {
    heartbeat::message m = g.base;
    m.seq = g.seq;
    m.full = full;
    std::uint64_t used = 0;
    for (auto o : g.held) used += sizes[o];
    m.cache_used = used;
    if (full) {
      m.objects.reserve(g.held.size());
      for (auto o : g.held) m.objects.push_back(held_of(ids[o], sizes[o]));
    }
    return m;
  };

  // Initial load: every node's full list, through encode → decode → apply.
  std::size_t bad = 0, resyncs = 0;
  auto t_load = steady::now();
  for (auto& g : gen) {
    auto text = heartbeat::encode(message_of(g, true));
    auto m = heartbeat::decode(text);
    if (!m) {
      ++bad;
      continue;
    }
    (void)idx.apply(*m, "10.0.0.1");
  }
  double load_s = ms_since(t_load) / 1000.0;
  auto st_loaded = idx.stats();

  // Steady state: deltas of a few objects (3 added, 2 removed), and a full resync now and then.
  // Payloads are made in batches outside the timed region (peerd encodes them, not the
  // scheduler); the scheduler's side is timed: decode, apply, encode the reply.
  std::size_t fulls = 0, deltas = 0, done = 0;
  std::uint64_t reply_bytes = 0, payload_bytes = 0;
  double hb_ms = 0;
  while (done < p.heartbeats) {
    std::size_t batch = std::min<std::size_t>(2000, p.heartbeats - done);
    std::vector<std::string> payloads;
    payloads.reserve(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      auto& g = gen[r.below(p.nodes)];
      ++g.seq;
      bool full = r.below(p.full_every) == 0;
      std::vector<std::uint32_t> added, removed;
      for (int k = 0; k < 2 && !g.held.empty(); ++k) {
        auto at = r.below(g.held.size());
        removed.push_back(g.held[at]);
        g.held[at] = g.held.back();
        g.held.pop_back();
      }
      for (int k = 0, tries = 0; k < 3 && tries < 100; ++tries) {
        auto o = static_cast<std::uint32_t>(pop.sample(r));
        if (holds(g, o) || std::find(removed.begin(), removed.end(), o) != removed.end())
          continue;
        g.held.push_back(o);
        added.push_back(o);
        ++k;
      }
      auto m = message_of(g, full);
      if (!full) {
        for (auto o : added) m.objects.push_back(held_of(ids[o], sizes[o]));
        for (auto o : removed) m.removed.push_back(ids[o]);
      }
      (full ? fulls : deltas)++;
      payloads.push_back(heartbeat::encode(m));
      payload_bytes += payloads.back().size();
    }
    auto t0 = steady::now();
    for (const auto& text : payloads) {
      auto m = heartbeat::decode(text);
      if (!m) {
        ++bad;
        continue;
      }
      auto out = idx.apply(*m, "10.0.0.1");
      if (out.resync) ++resyncs;
      heartbeat::reply rep;
      rep.epoch = epoch;
      rep.ack_seq = m->seq;
      rep.resync = out.resync;
      reply_bytes += heartbeat::encode(rep).size();
    }
    hb_ms += ms_since(t0);
    done += batch;
  }
  auto st = idx.stats();
  double heartbeats_s = hb_ms > 0 ? static_cast<double>(done) / (hb_ms / 1000.0) : 0;

  // The extender: images and datasets behind an in-memory registry-proxy, pods of 50 distinct
  // objects (two images of a config and 19 layers, one dataset of 10 objects), half popular
  // objects (on many nodes), half from the long tail.
  memory_manifests src;
  memory_datasets ds;
  resolver res(src, resolver_options{});
  document_network_model net;
  placer_options po;
  po.cost = cost_model::from(cost_config{});
  placer pl(idx, res, ds, net, po, frozen_clock());
  metrics::registry reg;
  extender ext(pl, extender_options{}, reg);

  json names = json::array();
  for (std::size_t i = 0; i < p.nodes; ++i) names.push_back(node_name(i));
  std::vector<std::string> soft_bodies, hard_bodies;
  std::vector<job_objects> direct_objs;
  std::size_t objects_per_job = 0;
  for (std::size_t q = 0; q < p.pods; ++q) {
    std::vector<std::uint32_t> chosen;
    while (chosen.size() < 50) {
      auto o = static_cast<std::uint32_t>(r.uniform() < 0.5 ? pop.sample(r)
                                                             : r.below(p.objects));
      if (std::find(chosen.begin(), chosen.end(), o) == chosen.end()) chosen.push_back(o);
    }
    auto ref = [&](std::size_t k) { return object_ref{ids[chosen[k]], sizes[chosen[k]]}; };
    std::vector<std::string> images;
    std::vector<object_ref> all;
    for (std::size_t im = 0; im < 2; ++im) {
      std::vector<object_ref> layers;
      for (std::size_t k = 1; k < 20; ++k) layers.push_back(ref(im * 20 + k));
      std::string repo = "ml/train-" + std::to_string(q) + "-" + std::to_string(im);
      auto d = src.put("registry.example.com", repo, image_manifest(ref(im * 20), layers));
      images.push_back("registry.example.com/" + repo + "@" + d);
      all.push_back(ref(im * 20));
      all.insert(all.end(), layers.begin(), layers.end());
    }
    std::string dsname = "corpus-" + std::to_string(q) + "@v1";
    for (std::size_t k = 40; k < 50; ++k) ds.sets[dsname].push_back(ref(k));
    all.insert(all.end(), ds.sets[dsname].begin(), ds.sets[dsname].end());
    objects_per_job = dedup(all).size();
    job_objects jo;
    jo.by_platform["linux/amd64"] = dedup(all);
    direct_objs.push_back(std::move(jo));
    for (bool hard : {false, true}) {
      json args = {{"Pod", make_pod("trainer-" + std::to_string(q), images, dsname, hard)},
                   {"Nodes", nullptr},
                   {"NodeNames", names}};
      (hard ? hard_bodies : soft_bodies).push_back(args.dump());
    }
  }

  // Warm-up (the resolver fetches each manifest once) and a check that the answers are whole.
  std::size_t scored_nodes = 0, nonzero_scores = 0;
  for (const auto& body : soft_bodies) {
    auto resp = ext.prioritize(body);
    const auto* text = std::get_if<std::string>(&resp.body);
    auto j = text ? json::parse(*text, nullptr, false) : json();
    if (resp.status != 200 || !j.is_array() || j.size() != p.nodes) {
      std::cerr << "scheduler_bench: prioritize answered " << resp.status << " "
                << (text ? text->substr(0, 200) : std::string()) << "\n";
      ok = false;
      break;
    }
    scored_nodes = j.size();
    for (const auto& e : j) nonzero_scores += e.value("Score", 0) > 0 ? 1 : 0;
  }
  std::size_t hard_kept = 0;
  {
    auto resp = ext.filter(hard_bodies[0]);
    const auto* text = std::get_if<std::string>(&resp.body);
    auto j = text ? json::parse(*text, nullptr, false) : json();
    if (resp.status == 200 && j.is_object() && j["NodeNames"].is_array())
      hard_kept = j["NodeNames"].size();
  }

  std::vector<double> soft_ms, hard_ms, direct_ms;
  std::size_t sink = 0;
  auto t_dec = steady::now();
  for (std::size_t d = 0; d < p.decisions; ++d) {
    const auto& body = soft_bodies[d % soft_bodies.size()];
    auto t0 = steady::now();
    auto f = ext.filter(body);
    auto pr = ext.prioritize(body);
    soft_ms.push_back(ms_since(t0));
    sink += f.status + pr.status;
  }
  double decisions_wall_s = ms_since(t_dec) / 1000.0;
  for (std::size_t d = 0; d < p.decisions; ++d) {
    const auto& body = hard_bodies[d % hard_bodies.size()];
    auto t0 = steady::now();
    auto f = ext.filter(body);
    auto pr = ext.prioritize(body);
    hard_ms.push_back(ms_since(t0));
    sink += f.status + pr.status;
  }
  // Where the time of one prioritize goes, step by step as extender::evaluate does it.
  std::vector<double> b_parse, b_nodes_view, b_view, b_eval, b_score;
  std::size_t hard_errors = 0;
  for (std::size_t d = 0; d < std::min<std::size_t>(p.decisions, 50); ++d) {
    auto f = ext.filter(hard_bodies[d % hard_bodies.size()]);
    const auto* text = std::get_if<std::string>(&f.body);
    if (f.status != 200 || !text || text->find("\"Error\":\"\"") == std::string::npos)
      ++hard_errors;
    const auto& body = soft_bodies[d % soft_bodies.size()];
    auto t0 = steady::now();
    auto a = parse_extender_args(body);
    b_parse.push_back(ms_since(t0));
    if (!a) continue;
    job_spec spec;
    spec.candidates = a->names;
    t0 = steady::now();
    auto nodes_only = idx.view({});
    b_nodes_view.push_back(ms_since(t0));
    const auto& jo = direct_objs[d % direct_objs.size()];
    std::vector<digest> all;
    for (const auto& o : jo.by_platform.begin()->second) all.push_back(o.id);
    t0 = steady::now();
    auto view = idx.view(all);
    b_view.push_back(ms_since(t0));
    t0 = steady::now();
    auto evals = evaluate_nodes(view, jo, spec, po.cost, net, {},
                                {.require_validation = false, .strict_resolution = false});
    b_eval.push_back(ms_since(t0));
    t0 = steady::now();
    json answer = json::array();
    for (const auto& e : evals)
      answer.push_back({{"Host", e.name}, {"Score", extender_score(e.cost, po.cost)}});
    sink += answer.dump().size();
    b_score.push_back(ms_since(t0));
  }
  auto rs = res.stats();

  job_spec job;
  job.nodes = 1;
  job.gpus = 8;
  for (std::size_t d = 0; d < p.decisions; ++d) {
    const auto& jo = direct_objs[d % direct_objs.size()];
    auto t0 = steady::now();
    std::vector<digest> all;
    for (const auto& o : jo.by_platform.begin()->second) all.push_back(o.id);
    auto view = idx.view(all);
    auto evals = evaluate_nodes(view, jo, job, po.cost, net, {}, {});
    auto placed = choose(std::move(evals), view, job, 2, net);
    direct_ms.push_back(ms_since(t0));
    sink += placed.chosen.size();
  }
  if (sink == 0) ok = false;

  json out = {
      {"nodes", p.nodes},
      {"objects_generated", p.objects},
      {"objects_in_index_after_load", st_loaded.objects},
      {"objects_in_index", st.objects},
      {"holdings", st.holdings},
      {"objects_per_job", objects_per_job},
      {"load_full_heartbeats_s", round3(load_s)},
      {"heartbeats",
       {{"count", done},
        {"deltas", deltas},
        {"full_resyncs", fulls},
        {"objects_per_full", p.held_per_node},
        {"mean_payload_bytes", done ? payload_bytes / done : 0},
        {"refused_resync", resyncs},
        {"malformed", bad},
        {"seconds", round3(hb_ms / 1000.0)}}},
      {"heartbeats_s", std::round(heartbeats_s)},
      {"extender",
       {{"p50_ms_soft", round3(percentile(soft_ms, 50))},
        {"p99_ms_soft", round3(percentile(soft_ms, 99))},
        {"p50_ms_hard", round3(percentile(hard_ms, 50))},
        {"p99_ms_hard", round3(percentile(hard_ms, 99))},
        {"p50_ms_evaluate_choose", round3(percentile(direct_ms, 50))},
        {"p99_ms_evaluate_choose", round3(percentile(direct_ms, 99))},
        {"decisions", p.decisions},
        {"request_bytes", soft_bodies.empty() ? 0 : soft_bodies[0].size()},
        {"scored_nodes", scored_nodes},
        {"nonzero_scores_in_warmup", nonzero_scores},
        {"hard_filter_kept", hard_kept},
        {"hard_filter_errors_of_50", hard_errors},
        {"resolver", {{"hits", rs.hits}, {"fetches", rs.fetches}, {"errors", rs.errors}}},
        {"breakdown_mean_ms",
         {{"parse_extender_args", round3(mean(b_parse))},
          {"index_view_nodes_only", round3(mean(b_nodes_view))},
          {"index_view_job", round3(mean(b_view))},
          {"evaluate_nodes_with_candidates", round3(mean(b_eval))},
          {"score_and_serialize", round3(mean(b_score))}}}}},
      {"p50_ms", round3(percentile(soft_ms, 50))},
      {"p99_ms", round3(percentile(soft_ms, 99))},
      {"decisions_s",
       std::round(decisions_wall_s > 0 ? static_cast<double>(p.decisions) / decisions_wall_s : 0)},
      {"rss_after_mib", std::round(proc_status_mib("VmRSS"))},
      {"rss_before_mib", std::round(rss_before)},
  };
  if (bad > 0 || resyncs > 0) ok = false;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Part 2: placement quality by simulation.

struct sim_params {
  std::size_t nodes = 500;
  std::uint32_t gpus_per_node = 8;
  std::size_t jobs = 20'000;  // about six days of arrivals: caches reach a steady state
  std::size_t images = 200;
  std::size_t base_images = 12;
  std::size_t datasets = 120;
  double cache_bytes = 2 * TiB;  // per node (the catalog is ~20 TiB)
  double peer_bw = 1 * GiB;      // bytes/s from another node (P2P over the cluster network)
  double upstream_bw = 128 * MiB;  // bytes/s from the upstream registry / object store
  double load = 0.85;            // offered GPU load (ignoring fetch time)
  double zipf_s = 1.1;
  double dataset_share = 0.7;  // jobs that read a dataset
};

struct sim_object {
  digest id;
  std::uint64_t size = 0;
};

struct sim_job {
  double arrival = 0, duration = 0;
  std::uint32_t k = 1, g = 1;
  std::uint32_t image = 0;
  int dataset = -1;
  std::vector<std::uint32_t> objects;  // distinct: image layers, then dataset shards
};

struct trace {
  std::vector<sim_object> objects;
  std::vector<std::vector<std::uint32_t>> image_objects, dataset_objects;
  std::vector<std::uint64_t> image_bytes, dataset_bytes;
  std::vector<sim_job> jobs;
};

trace make_trace(const sim_params& p, std::uint64_t seed) {
  rng_t r(seed);
  trace t;
  auto add_object = [&](double lo, double hi) {
    auto n = static_cast<std::uint32_t>(t.objects.size());
    auto size = static_cast<std::uint64_t>(r.log_uniform(lo, hi));
    t.objects.push_back({object_digest("sim", n), size});
    return n;
  };
  // Base images (CUDA + framework) shared by many images: 2–4 layers of 100 MiB–4 GiB.
  std::vector<std::vector<std::uint32_t>> bases(p.base_images);
  for (auto& b : bases) {
    auto n = 2 + r.below(3);
    for (std::uint64_t i = 0; i < n; ++i) b.push_back(add_object(100 * MiB, 4 * GiB));
  }
  for (std::size_t i = 0; i < p.images; ++i) {
    auto layers = bases[r.below(p.base_images)];
    auto own = 2 + r.below(7);
    for (std::uint64_t k = 0; k < own; ++k) layers.push_back(add_object(100 * MiB, 8 * GiB));
    t.image_objects.push_back(std::move(layers));
  }
  for (std::size_t i = 0; i < p.datasets; ++i) {
    std::vector<std::uint32_t> shards;
    auto n = 1 + r.below(8);
    for (std::uint64_t k = 0; k < n; ++k) shards.push_back(add_object(1 * GiB, 200 * GiB));
    t.dataset_objects.push_back(std::move(shards));
  }
  auto bytes_of = [&](const std::vector<std::uint32_t>& l) {
    std::uint64_t b = 0;
    for (auto o : l) b += t.objects[o].size;
    return b;
  };
  for (const auto& l : t.image_objects) t.image_bytes.push_back(bytes_of(l));
  for (const auto& l : t.dataset_objects) t.dataset_bytes.push_back(bytes_of(l));

  zipf img_pop(p.images, p.zipf_s), ds_pop(p.datasets, p.zipf_s);
  double gpu_seconds = 0;
  for (std::size_t i = 0; i < p.jobs; ++i) {
    sim_job j;
    j.image = static_cast<std::uint32_t>(img_pop.sample(r));
    if (r.uniform() < p.dataset_share) j.dataset = static_cast<int>(ds_pop.sample(r));
    double u = r.uniform();
    if (u < 0.55) {
      j.k = 1;
      j.g = std::min<std::uint32_t>(p.gpus_per_node, 1u << r.below(4));
    } else {
      j.k = u < 0.75 ? 2 : u < 0.9 ? 4 : 8;
      j.k = std::min<std::uint32_t>(j.k, static_cast<std::uint32_t>(p.nodes));
      j.g = p.gpus_per_node;
    }
    j.duration = r.log_uniform(600, 6 * 3600);
    j.objects = t.image_objects[j.image];
    if (j.dataset >= 0) {
      const auto& d = t.dataset_objects[static_cast<std::size_t>(j.dataset)];
      j.objects.insert(j.objects.end(), d.begin(), d.end());
    }
    gpu_seconds += j.duration * j.k * j.g;
    t.jobs.push_back(std::move(j));
  }
  // Poisson arrivals at the rate that offers `load` of the cluster's GPUs.
  double gap = gpu_seconds /
               (p.load * static_cast<double>(p.nodes * p.gpus_per_node) *
                static_cast<double>(p.jobs));
  double now = 0;
  for (auto& j : t.jobs) {
    now += r.exponential(gap);
    j.arrival = now;
  }
  return t;
}

// The simulated cluster: free GPUs and an LRU cache of bounded size per node. Objects a running
// job uses are pinned (a container's image and mounted data cannot be evicted under it); when
// everything is pinned, the cache overflows (counted) rather than failing the job.
class sim_cluster {
 public:
  struct fetch_result {
    double local = 0, peer = 0, upstream = 0;  // bytes
  };

  sim_cluster(const sim_params& p, const trace& t, bool track_changes)
      : p_(p), t_(t), track_(track_changes), nodes_(p.nodes), holders_(t.objects.size(), 0),
        changes_(p.nodes) {
    for (auto& n : nodes_) n.free = p.gpus_per_node;
    by_free_.assign(p.gpus_per_node + 1, 0);
    by_free_[p.gpus_per_node] = p.nodes;
  }

  [[nodiscard]] std::size_t size() const { return nodes_.size(); }
  [[nodiscard]] std::uint32_t free_gpus(std::size_t n) const { return nodes_[n].free; }
  [[nodiscard]] bool holds(std::size_t n, std::uint32_t o) const {
    return nodes_[n].cache.count(o) > 0;
  }
  [[nodiscard]] std::uint32_t holders(std::uint32_t o) const { return holders_[o]; }
  // At least k nodes with g GPUs free.
  [[nodiscard]] bool fits(std::uint32_t k, std::uint32_t g) const {
    std::size_t n = 0;
    for (std::uint32_t f = g; f < by_free_.size(); ++f) n += by_free_[f];
    return n >= k;
  }
  void take_gpus(std::size_t n, std::int64_t delta) {
    auto& node = nodes_[n];
    --by_free_[node.free];
    node.free = static_cast<std::uint32_t>(static_cast<std::int64_t>(node.free) + delta);
    ++by_free_[node.free];
  }

  // Brings the objects onto node n and pins them. A missing object comes from a peer when some
  // node holds it (the nodes of a gang fetched before this one included: P2P fans it out), else
  // from upstream.
  fetch_result fetch(std::size_t n, const std::vector<std::uint32_t>& objects) {
    fetch_result r;
    auto& node = nodes_[n];
    for (auto o : objects) {
      auto sz = static_cast<double>(t_.objects[o].size);
      auto it = node.cache.find(o);
      if (it != node.cache.end()) {
        node.lru.splice(node.lru.begin(), node.lru, it->second.pos);
        ++it->second.pins;
        r.local += sz;
        continue;
      }
      (holders_[o] > 0 ? r.peer : r.upstream) += sz;
      node.lru.push_front(o);
      node.cache[o] = {node.lru.begin(), 1};
      node.used += sz;
      ++holders_[o];
      if (track_) changes_[n][o] = true;
    }
    // Evict least recently used unpinned objects.
    for (auto it = node.lru.end(); node.used > p_.cache_bytes && it != node.lru.begin();) {
      --it;
      auto c = node.cache.find(*it);
      if (c->second.pins > 0) continue;
      auto o = *it;
      node.used -= static_cast<double>(t_.objects[o].size);
      --holders_[o];
      if (track_) changes_[n][o] = false;
      node.cache.erase(c);
      it = node.lru.erase(it);
      ++evictions_;
    }
    if (node.used > p_.cache_bytes) ++overflows_;
    return r;
  }
  void unpin(std::size_t n, const std::vector<std::uint32_t>& objects) {
    auto& node = nodes_[n];
    for (auto o : objects) {
      auto it = node.cache.find(o);
      if (it != node.cache.end() && it->second.pins > 0) --it->second.pins;
    }
  }
  // Net changes per node since the last call (object → held now), for heartbeats.
  std::vector<std::unordered_map<std::uint32_t, bool>> take_changes() {
    std::vector<std::unordered_map<std::uint32_t, bool>> out(nodes_.size());
    out.swap(changes_);
    return out;
  }
  [[nodiscard]] std::uint64_t evictions() const { return evictions_; }
  [[nodiscard]] std::uint64_t overflows() const { return overflows_; }

 private:
  struct entry {
    std::list<std::uint32_t>::iterator pos;
    std::uint32_t pins = 0;
  };
  struct node {
    std::uint32_t free = 0;
    double used = 0;
    std::list<std::uint32_t> lru;  // front: most recently used
    std::unordered_map<std::uint32_t, entry> cache;
  };
  const sim_params& p_;
  const trace& t_;
  bool track_;
  std::vector<node> nodes_;
  std::vector<std::uint32_t> holders_;
  std::vector<std::size_t> by_free_;  // nodes by free GPUs
  std::vector<std::unordered_map<std::uint32_t, bool>> changes_;
  std::uint64_t evictions_ = 0, overflows_ = 0;
};

// A placement policy: K distinct nodes with at least G free GPUs, best first. Called only when
// such nodes exist.
class policy {
 public:
  virtual ~policy() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual bool wants_changes() const { return false; }
  [[nodiscard]] virtual std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) = 0;
};

// Top K feasible nodes by score; ties broken at random, as kube-scheduler's selectHost does.
std::vector<std::size_t> top_k(const sim_cluster& c, const sim_job& j,
                               const std::vector<std::int64_t>& score, rng_t& r) {
  struct cand {
    std::int64_t score;
    std::uint64_t tie;
    std::size_t node;
  };
  std::vector<cand> cs;
  for (std::size_t n = 0; n < c.size(); ++n) {
    if (c.free_gpus(n) >= j.g) cs.push_back({score[n], r.raw(), n});
  }
  std::sort(cs.begin(), cs.end(), [](const cand& a, const cand& b) {
    return a.score != b.score ? a.score > b.score : a.tie < b.tie;
  });
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < cs.size() && out.size() < j.k; ++i) out.push_back(cs[i].node);
  return out;
}

// kube-scheduler's ImageLocality (pkg/scheduler/framework/plugins/imagelocality): for each of the
// pod's images on the node (kubelet lists an image when all of it is there), add
// int64(size × nodes_with_image / total_nodes); clamp the sum into [23 MiB, 1000 MiB × number of
// containers]; score = 100 × (sum − min) / (max − min), integer division. With `datasets`, each
// dataset is scored as one more image (not kube-scheduler: a generous baseline that sees data).
class image_locality final : public policy {
 public:
  image_locality(const trace& t, std::uint64_t seed, bool datasets)
      : t_(t), r_(seed), datasets_(datasets) {}
  std::string name() const override {
    return datasets_ ? "imagelocality_datasets" : "imagelocality";
  }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }

  // ImageLocality's 0..100 per node.
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const {
    std::vector<std::pair<const std::vector<std::uint32_t>*, std::uint64_t>> items;
    items.push_back({&t_.image_objects[j.image], t_.image_bytes[j.image]});
    if (datasets_ && j.dataset >= 0) {
      auto d = static_cast<std::size_t>(j.dataset);
      items.push_back({&t_.dataset_objects[d], t_.dataset_bytes[d]});
    }
    const std::int64_t min_threshold = 23ll << 20;
    const std::int64_t max_threshold = (1000ll << 20) * static_cast<std::int64_t>(items.size());
    std::vector<std::vector<bool>> has(items.size(), std::vector<bool>(c.size()));
    std::vector<std::size_t> count(items.size(), 0);
    for (std::size_t i = 0; i < items.size(); ++i) {
      for (std::size_t n = 0; n < c.size(); ++n) {
        bool all = true;
        for (auto o : *items[i].first) all = all && c.holds(n, o);
        has[i][n] = all;
        count[i] += all ? 1 : 0;
      }
    }
    std::vector<std::int64_t> score(c.size(), 0);
    for (std::size_t n = 0; n < c.size(); ++n) {
      std::int64_t sum = 0;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!has[i][n]) continue;
        double spread = static_cast<double>(count[i]) / static_cast<double>(c.size());
        sum += static_cast<std::int64_t>(static_cast<double>(items[i].second) * spread);
      }
      sum = std::clamp(sum, min_threshold, max_threshold);
      score[n] = 100 * (sum - min_threshold) / (max_threshold - min_threshold);
    }
    return score;
  }

 private:
  const trace& t_;
  rng_t r_;
  bool datasets_;
};

// kube-scheduler's NodeResourcesFit LeastAllocated on GPUs: (free − requested) × 100 / capacity.
class least_allocated final : public policy {
 public:
  least_allocated(std::uint32_t capacity, std::uint64_t seed) : capacity_(capacity), r_(seed) {}
  std::string name() const override { return "least_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    return top_k(c, j, scores(j, c), r_);
  }
  [[nodiscard]] std::vector<std::int64_t> scores(const sim_job& j, const sim_cluster& c) const {
    std::vector<std::int64_t> score(c.size(), 0);
    for (std::size_t n = 0; n < c.size(); ++n) {
      auto f = c.free_gpus(n);
      score[n] = f >= j.g ? static_cast<std::int64_t>(f - j.g) * 100 / capacity_ : 0;
    }
    return score;
  }

 private:
  std::uint32_t capacity_;
  rng_t r_;
};

// kube-scheduler's default profile as far as data and GPUs go: ImageLocality and LeastAllocated
// with their default weights (1 each) summed; ties at random.
class kube_default final : public policy {
 public:
  kube_default(const trace& t, std::uint32_t capacity, std::uint64_t seed)
      : il_(t, seed, false), la_(capacity, seed), r_(seed) {}
  std::string name() const override { return "imagelocality_plus_least_allocated"; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    auto a = il_.scores(j, c);
    auto b = la_.scores(j, c);
    for (std::size_t n = 0; n < a.size(); ++n) a[n] += b[n];
    return top_k(c, j, a, r_);
  }

 private:
  image_locality il_;
  least_allocated la_;
  rng_t r_;
};

// Shoal: a cluster_index fed by delta heartbeats from the simulated caches, and the scheduler's
// own evaluate_nodes + choose on its view (GPUs in use passed as reservations, as the placer
// does). The cost model is configured with the simulation's bandwidths: an operator sets
// peer and upstream bandwidths in scheduler.yaml the same way.
class shoal_policy final : public policy {
 public:
  shoal_policy(const sim_params& p, const trace& t)
      : p_(p), t_(t), idx_(index_options{}, "sim", frozen_clock()), seq_(p.nodes, 1) {
    cost_config cc;
    auto bw = [](double b) { return config::byte_size(static_cast<std::uint64_t>(b)); };
    cc.rack_bandwidth = cc.zone_bandwidth = cc.cluster_bandwidth = bw(p.peer_bw);
    cc.origin_bandwidth = cc.upstream_bandwidth = bw(p.upstream_bw);
    cc.node_ingress = bw(p.peer_bw);
    model_ = cost_model::from(cc);
    for (std::size_t n = 0; n < p.nodes; ++n) {
      heartbeat::message m;
      m.node = node_name(n);
      m.labels = {{"fabric", "f0"}};
      m.ip = "10.1.0.1";
      m.bt_port = 6881;
      m.epoch = "sim";
      m.seq = 1;
      m.full = true;
      m.gpus = {{"H100", p.gpus_per_node}};
      m.cache_capacity = static_cast<std::uint64_t>(p.cache_bytes);
      (void)idx_.apply(m, "10.1.0.1");
      index_of_[m.node] = n;
    }
  }
  std::string name() const override { return "shoal"; }
  bool wants_changes() const override { return true; }
  std::vector<std::size_t> place(const sim_job& j, sim_cluster& c) override {
    sync(c);
    job_spec spec;
    spec.nodes = j.k;
    spec.gpus = j.g;
    job_objects objs;
    auto& list = objs.by_platform["linux/amd64"];
    std::vector<digest> ids;
    for (auto o : j.objects) {
      list.push_back({t_.objects[o].id, t_.objects[o].size});
      ids.push_back(t_.objects[o].id);
    }
    std::map<std::string, std::uint32_t> reserved;
    for (std::size_t n = 0; n < c.size(); ++n) {
      if (c.free_gpus(n) < p_.gpus_per_node)
        reserved[node_name(n)] = p_.gpus_per_node - c.free_gpus(n);
    }
    auto view = idx_.view(ids);
    auto evals = evaluate_nodes(view, objs, spec, model_, net_, reserved, {});
    auto placed = choose(std::move(evals), view, spec, 0, net_);
    std::vector<std::size_t> out;
    for (const auto& name : placed.chosen) out.push_back(index_of_.at(name));
    return out;
  }
  [[nodiscard]] std::uint64_t heartbeats() const { return heartbeats_; }
  [[nodiscard]] std::uint64_t resyncs() const { return resyncs_; }

 private:
  // One delta heartbeat per node whose cache changed.
  void sync(sim_cluster& c) {
    auto changes = c.take_changes();
    for (std::size_t n = 0; n < changes.size(); ++n) {
      if (changes[n].empty()) continue;
      heartbeat::message m;
      m.node = node_name(n);
      m.labels = {{"fabric", "f0"}};
      m.ip = "10.1.0.1";
      m.bt_port = 6881;
      m.epoch = "sim";
      m.seq = ++seq_[n];
      m.full = false;
      m.gpus = {{"H100", p_.gpus_per_node}};
      m.cache_capacity = static_cast<std::uint64_t>(p_.cache_bytes);
      for (const auto& [o, held] : changes[n]) {
        if (held)
          m.objects.push_back(held_of(t_.objects[o].id, t_.objects[o].size));
        else
          m.removed.push_back(t_.objects[o].id);
      }
      auto out = idx_.apply(m, "10.1.0.1");
      ++heartbeats_;
      if (out.resync) ++resyncs_;
    }
  }

  const sim_params& p_;
  const trace& t_;
  cluster_index idx_;
  cost_model model_;
  document_network_model net_;
  std::vector<std::uint64_t> seq_;
  std::unordered_map<std::string, std::size_t> index_of_;
  std::uint64_t heartbeats_ = 0, resyncs_ = 0;
};

struct sim_result {
  std::string policy;
  double bytes_moved = 0, bytes_peer = 0, bytes_upstream = 0, bytes_local = 0;
  std::size_t jobs_placed = 0;
  std::vector<double> start_delay, queue_wait, fetch, decision_ms;
  std::vector<double> start_delay_no_upstream;  // jobs that fetched nothing from upstream
  std::size_t jobs_with_upstream = 0;
  std::vector<bool> gang;  // per placed job, in start_delay's order: K > 1
  std::uint64_t evictions = 0, overflows = 0;
  double makespan_s = 0;
  std::string error;
};

sim_result simulate(const trace& t, const sim_params& p, policy& pol) {
  sim_result res;
  res.policy = pol.name();
  sim_cluster c(p, t, pol.wants_changes());
  struct running {
    double end;
    std::size_t job;
    std::vector<std::size_t> nodes;
    bool operator>(const running& o) const { return end != o.end ? end > o.end : job > o.job; }
  };
  std::priority_queue<running, std::vector<running>, std::greater<>> active;
  std::list<std::size_t> waiting;  // arrival order
  std::size_t next = 0;
  const double inf = std::numeric_limits<double>::infinity();
  auto try_place = [&](std::list<std::size_t>::iterator it, double now) {
    const auto& j = t.jobs[*it];
    if (!c.fits(j.k, j.g)) return false;
    auto t0 = steady::now();
    auto nodes = pol.place(j, c);
    res.decision_ms.push_back(ms_since(t0));
    std::vector<bool> seen(c.size(), false);
    bool valid = nodes.size() == j.k;
    for (auto n : nodes) {
      valid = valid && n < c.size() && !seen[n] && c.free_gpus(n) >= j.g;
      if (n < c.size()) seen[n] = true;
    }
    if (!valid) {
      res.error = pol.name() + " returned an invalid placement for job " + std::to_string(*it);
      return false;
    }
    double fetch_s = 0, upstream = 0;
    for (auto n : nodes) {
      auto f = c.fetch(n, j.objects);
      fetch_s = std::max(fetch_s, f.peer / p.peer_bw + f.upstream / p.upstream_bw);
      res.bytes_local += f.local;
      res.bytes_peer += f.peer;
      res.bytes_upstream += f.upstream;
      upstream += f.upstream;
      c.take_gpus(n, -static_cast<std::int64_t>(j.g));
    }
    res.queue_wait.push_back(now - j.arrival);
    res.fetch.push_back(fetch_s);
    res.start_delay.push_back(now - j.arrival + fetch_s);
    res.gang.push_back(j.k > 1);
    if (upstream > 0)
      ++res.jobs_with_upstream;
    else
      res.start_delay_no_upstream.push_back(now - j.arrival + fetch_s);
    ++res.jobs_placed;
    active.push({now + fetch_s + j.duration, *it, std::move(nodes)});
    return true;
  };
  while (res.error.empty() && (next < t.jobs.size() || !active.empty())) {
    double ta = next < t.jobs.size() ? t.jobs[next].arrival : inf;
    double tf = active.empty() ? inf : active.top().end;
    double now = std::min(ta, tf);
    if (tf <= ta) {
      auto done = active.top();
      active.pop();
      for (auto n : done.nodes) {
        c.unpin(n, t.jobs[done.job].objects);
        c.take_gpus(n, t.jobs[done.job].g);
      }
      res.makespan_s = std::max(res.makespan_s, now);
      // GPUs were freed: every waiting job may fit now, oldest first.
      for (auto it = waiting.begin(); it != waiting.end() && res.error.empty();) {
        if (try_place(it, now))
          it = waiting.erase(it);
        else
          ++it;
      }
    } else {
      waiting.push_back(next++);
      // Nothing was freed, so only the newcomer can fit.
      auto it = std::prev(waiting.end());
      if (try_place(it, now)) waiting.erase(it);
    }
  }
  if (res.error.empty() && !waiting.empty())
    res.error = std::to_string(waiting.size()) + " jobs never fit the cluster";
  res.bytes_moved = res.bytes_peer + res.bytes_upstream;
  res.evictions = c.evictions();
  res.overflows = c.overflows();
  return res;
}

json to_json(const sim_result& r) {
  // Which jobs make the tail: the share of gangs among the 5% slowest starts, and p95 by shape.
  std::vector<double> single, gangs;
  for (std::size_t i = 0; i < r.start_delay.size(); ++i)
    (r.gang[i] ? gangs : single).push_back(r.start_delay[i]);
  double p95 = percentile(r.start_delay, 95);
  std::size_t tail = 0, tail_gangs = 0;
  for (std::size_t i = 0; i < r.start_delay.size(); ++i) {
    if (r.start_delay[i] < p95) continue;
    ++tail;
    tail_gangs += r.gang[i] ? 1 : 0;
  }
  return {{"jobs_placed", r.jobs_placed},
          {"p95_start_delay_s_single_node", round3(percentile(single, 95))},
          {"p95_start_delay_s_gangs", round3(percentile(gangs, 95))},
          {"gang_share_of_slowest_5pct",
           round3(tail ? static_cast<double>(tail_gangs) / static_cast<double>(tail) : 0)},
          {"bytes_moved", r.bytes_moved},
          {"bytes_moved_tib", round3(r.bytes_moved / TiB)},
          {"bytes_from_peers", r.bytes_peer},
          {"bytes_from_upstream", r.bytes_upstream},
          {"bytes_already_local", r.bytes_local},
          {"p50_start_delay_s", round3(percentile(r.start_delay, 50))},
          {"p95_start_delay_s", round3(percentile(r.start_delay, 95))},
          {"mean_start_delay_s", round3(mean(r.start_delay))},
          {"jobs_with_upstream_fetch", r.jobs_with_upstream},
          {"p95_start_delay_s_jobs_without_upstream",
           round3(percentile(r.start_delay_no_upstream, 95))},
          {"p95_fetch_s", round3(percentile(r.fetch, 95))},
          {"mean_fetch_s", round3(mean(r.fetch))},
          {"p95_queue_wait_s", round3(percentile(r.queue_wait, 95))},
          {"mean_queue_wait_s", round3(mean(r.queue_wait))},
          {"decision_ms_p50", round3(percentile(r.decision_ms, 50))},
          {"decision_ms_p99", round3(percentile(r.decision_ms, 99))},
          {"evictions", r.evictions},
          {"cache_overflows", r.overflows},
          {"makespan_h", round3(r.makespan_s / 3600.0)},
          {"error", r.error}};
}

json run_sim(const sim_params& p, std::uint64_t seed, bool& ok) {
  auto t = make_trace(p, seed);
  double catalog = 0;
  for (const auto& o : t.objects) catalog += static_cast<double>(o.size);
  std::size_t with_ds = 0, gangs = 0;
  for (const auto& j : t.jobs) {
    with_ds += j.dataset >= 0 ? 1 : 0;
    gangs += j.k > 1 ? 1 : 0;
  }
  shoal_policy shoal(p, t);
  image_locality il(t, seed ^ 0x11, false);
  image_locality ild(t, seed ^ 0x22, true);
  least_allocated la(p.gpus_per_node, seed ^ 0x33);
  kube_default kd(t, p.gpus_per_node, seed ^ 0x44);
  std::vector<policy*> pols = {&shoal, &il, &ild, &la, &kd};
  json per = json::object();
  std::map<std::string, sim_result> results;
  for (auto* pol : pols) {
    auto r = simulate(t, p, *pol);
    if (!r.error.empty() || r.jobs_placed == 0) {
      std::cerr << "scheduler_bench: simulation of " << r.policy << ": "
                << (r.error.empty() ? "placed no job" : r.error) << "\n";
      ok = false;
    }
    per[r.policy] = to_json(r);
    results[r.policy] = std::move(r);
  }
  if (shoal.resyncs() > 0) ok = false;
  auto ratio = [](double a, double b) { return b > 0 ? round3(a / b) : 0.0; };
  const auto& sh = results["shoal"];
  const auto& im = results["imagelocality"];
  const auto& imd = results["imagelocality_datasets"];
  json bytes = json::object(), p95 = json::object(), placed = json::object();
  for (const auto& [name, r] : results) {
    bytes[name] = r.bytes_moved;
    p95[name] = round3(percentile(r.start_delay, 95));
    placed[name] = r.jobs_placed;
  }
  return {
      {"trace",
       {{"seed", seed},
        {"nodes", p.nodes},
        {"gpus_per_node", p.gpus_per_node},
        {"jobs", p.jobs},
        {"jobs_with_dataset", with_ds},
        {"gang_jobs", gangs},
        {"images", p.images},
        {"base_images", p.base_images},
        {"datasets", p.datasets},
        {"objects", t.objects.size()},
        {"catalog_tib", round3(catalog / TiB)},
        {"cache_per_node_tib", round3(p.cache_bytes / TiB)},
        {"peer_mib_s", p.peer_bw / MiB},
        {"upstream_mib_s", p.upstream_bw / MiB},
        {"offered_load", p.load},
        {"zipf_s", p.zipf_s},
        {"arrival_span_h", round3(t.jobs.empty() ? 0 : t.jobs.back().arrival / 3600.0)}}},
      {"policies", per},
      {"shoal_heartbeats", shoal.heartbeats()},
      {"bytes_moved", bytes},
      {"p95_start_delay_s", p95},
      {"jobs_placed", placed},
      {"bytes_moved_vs_imagelocality", ratio(sh.bytes_moved, im.bytes_moved)},
      {"p95_start_delay_vs_imagelocality",
       ratio(percentile(sh.start_delay, 95), percentile(im.start_delay, 95))},
      {"bytes_moved_vs_imagelocality_datasets", ratio(sh.bytes_moved, imd.bytes_moved)},
      {"p95_start_delay_vs_imagelocality_datasets",
       ratio(percentile(sh.start_delay, 95), percentile(imd.start_delay, 95))},
  };
}

// ---------------------------------------------------------------------------------------------

bool check_json(const std::string& path);

// The keys a run must produce; --check verifies them in the file written. A file of the wrong
// shape is an answer ("no"), not a crash.
bool check_file(const std::string& path) {
  try {
    return check_json(path);
  } catch (const json::exception& e) {
    std::cerr << "scheduler_bench --check: " << path << " has the wrong shape: " << e.what()
              << "\n";
    return false;
  }
}

bool check_json(const std::string& path) {
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    std::cerr << "scheduler_bench --check: " << path << " is not a JSON object\n";
    return false;
  }
  bool good = true;
  for (const char* k : {"p50_ms", "p99_ms", "decisions_s", "heartbeats_s", "rss_mib", "bytes_moved",
                        "bytes_moved_vs_imagelocality", "p95_start_delay_s",
                        "p95_start_delay_vs_imagelocality", "jobs_placed", "seed", "cpu_util",
                        "cpu_s"}) {
    if (!j.contains(k)) {
      std::cerr << "scheduler_bench --check: key " << k << " missing\n";
      good = false;
    }
  }
  if (!good) return false;
  for (const char* pol : {"shoal", "imagelocality", "imagelocality_datasets", "least_allocated",
                          "imagelocality_plus_least_allocated"}) {
    auto placed = j["jobs_placed"].value(pol, 0);
    if (placed <= 0) {
      std::cerr << "scheduler_bench --check: policy " << pol << " placed no job\n";
      good = false;
    }
    if (!j["bytes_moved"].contains(pol) || !j["bytes_moved"][pol].is_number()) good = false;
  }
  for (const char* k : {"p99_ms", "heartbeats_s", "decisions_s", "rss_mib"}) {
    if (!j[k].is_number() || j[k].get<double>() <= 0) {
      std::cerr << "scheduler_bench --check: " << k << " is not a positive number\n";
      good = false;
    }
  }
  return good;
}

int usage() {
  std::cerr << "usage: scheduler_bench [--quick] [--json FILE] [--check] [--verify FILE]\n"
               "                       [--seed N] [--jobs N] [--cache-gib N] [--decisions N]\n"
               "                       [--heartbeats N] [--part all|scale|sim]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, check = false;
  std::string part = "all";
  std::string json_path;
  std::uint64_t seed = 20261130;
  std::optional<std::size_t> jobs, decisions, heartbeats, cache_gib;
  auto number = [&](int& i) -> std::optional<std::uint64_t> {
    if (i + 1 >= argc) return std::nullopt;
    char* end = nullptr;
    auto v = std::strtoull(argv[++i], &end, 10);
    if (end == argv[i] || *end != '\0') return std::nullopt;
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--check") {
      check = true;
    } else if (a == "--verify" && i + 1 < argc) {
      return check_file(argv[i + 1]) ? 0 : 1;
    } else if (a == "--part" && i + 1 < argc) {
      part = argv[++i];
      if (part != "all" && part != "scale" && part != "sim") return usage();
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--seed" || a == "--jobs" || a == "--decisions" || a == "--heartbeats" ||
               a == "--cache-gib") {
      auto v = number(i);
      if (!v) return usage();
      if (a == "--seed") seed = *v;
      if (a == "--jobs") jobs = *v;
      if (a == "--decisions") decisions = *v;
      if (a == "--heartbeats") heartbeats = *v;
      if (a == "--cache-gib") cache_gib = *v;
    } else {
      return usage();
    }
  }
  if (check && json_path.empty()) {
    std::cerr << "scheduler_bench: --check needs --json FILE\n";
    return 2;
  }
  scale_params sp;
  sim_params mp;
  if (quick) {
    sp.nodes = 200;
    sp.objects = 4000;
    sp.held_per_node = 60;
    sp.pods = 4;
    sp.decisions = 20;
    sp.heartbeats = 2000;
    mp.nodes = 40;
    mp.jobs = 300;
    mp.images = 30;
    mp.base_images = 4;
    mp.datasets = 20;
    mp.cache_bytes = 1 * TiB;
  }
  if (jobs) mp.jobs = std::max<std::size_t>(1, *jobs);
  if (cache_gib) mp.cache_bytes = static_cast<double>(std::max<std::size_t>(1, *cache_gib)) * GiB;
  if (decisions) sp.decisions = std::max<std::size_t>(1, *decisions);
  if (heartbeats) sp.heartbeats = std::max<std::size_t>(1, *heartbeats);

  auto t0 = steady::now();
  double cpu0 = cpu_seconds();
  bool ok = true;
  std::cerr << "scheduler_bench: scale (" << sp.nodes << " nodes, " << sp.objects
            << " objects)...\n";
  json scale = {{"p50_ms", 0.0}, {"p99_ms", 0.0}, {"decisions_s", 0.0}, {"heartbeats_s", 0.0}};
  if (part != "sim") scale = run_scale(sp, seed, ok);
  double rss = proc_status_mib("VmRSS");
  double scale_cpu = cpu_seconds() - cpu0, scale_wall = ms_since(t0) / 1000.0;
  std::cerr << "scheduler_bench: simulation (" << mp.nodes << " nodes, " << mp.jobs
            << " jobs, 5 policies)...\n";
  auto t1 = steady::now();
  double cpu1 = cpu_seconds();
  json sim = {{"bytes_moved", json::object()},
              {"bytes_moved_vs_imagelocality", 0.0},
              {"p95_start_delay_s", json::object()},
              {"p95_start_delay_vs_imagelocality", 0.0},
              {"jobs_placed", json::object()},
              {"policies", json::object()}};
  if (part != "scale") sim = run_sim(mp, seed, ok);
  double sim_cpu = cpu_seconds() - cpu1, sim_wall = ms_since(t1) / 1000.0;
  double wall = ms_since(t0) / 1000.0, cpu = cpu_seconds() - cpu0;

  json out = {
      {"benchmark", "scheduler"},
      {"quick", quick},
      {"seed", seed},
      {"p50_ms", scale["p50_ms"]},
      {"p99_ms", scale["p99_ms"]},
      {"p99_ms_target", 5},
      {"decisions_s", scale["decisions_s"]},
      {"heartbeats_s", scale["heartbeats_s"]},
      {"heartbeats_s_target", 10000},
      {"rss_mib", std::round(rss)},
      {"hwm_mib", std::round(proc_status_mib("VmHWM"))},
      {"bytes_moved", sim["bytes_moved"]},
      {"bytes_moved_vs_imagelocality", sim["bytes_moved_vs_imagelocality"]},
      {"bytes_moved_vs_imagelocality_target", 0.5},
      {"p95_start_delay_s", sim["p95_start_delay_s"]},
      {"p95_start_delay_vs_imagelocality", sim["p95_start_delay_vs_imagelocality"]},
      {"p95_start_delay_vs_imagelocality_target", 0.7},
      {"jobs_placed", sim["jobs_placed"]},
      {"cpu_s", round3(cpu)},
      {"wall_s", round3(wall)},
      {"cpu_util", round3(wall > 0 ? cpu / wall : 0)},
      {"scale_cpu_s", round3(scale_cpu)},
      {"scale_wall_s", round3(scale_wall)},
      {"sim_cpu_s", round3(sim_cpu)},
      {"sim_wall_s", round3(sim_wall)},
      {"scale", scale},
      {"sim", sim},
      {"ok", ok},
  };
  std::string text = out.dump(2);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << text << "\n";
    if (!f) {
      std::cerr << "scheduler_bench: cannot write " << json_path << "\n";
      return 1;
    }
  }
  std::printf("scheduler_bench%s seed %llu: %.1f s wall, %.1f CPU s\n", quick ? " (quick)" : "",
              static_cast<unsigned long long>(seed), wall, cpu);
  std::printf("  extender filter+prioritize, %zu nodes: p50 %.2f ms  p99 %.2f ms (target <= 5)\n",
              sp.nodes, out["p50_ms"].get<double>(), out["p99_ms"].get<double>());
  std::printf("  heartbeats ingested: %.0f/s (target >= 10000)   RSS %.0f MiB\n",
              out["heartbeats_s"].get<double>(), rss);
  for (const auto& [name, r] : sim["policies"].items()) {
    std::printf("  %-24s placed %5d  moved %9.1f TiB  p95 start %9.0f s\n", name.c_str(),
                r["jobs_placed"].get<int>(), r["bytes_moved_tib"].get<double>(),
                r["p95_start_delay_s"].get<double>());
  }
  std::printf("  bytes moved vs ImageLocality %.3f (target <= 0.5), p95 start delay vs "
              "ImageLocality %.3f (target <= 0.7)\n",
              sim["bytes_moved_vs_imagelocality"].get<double>(),
              sim["p95_start_delay_vs_imagelocality"].get<double>());
  if (!json_path.empty()) std::printf("  JSON: %s\n", json_path.c_str());
  if (check && !check_file(json_path)) return 1;
  return ok ? 0 : 1;
}
