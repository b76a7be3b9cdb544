#include "bench/scheduler/scale.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <iostream>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "bench/scheduler/util.h"
#include "common/heartbeat.h"
#include "common/metrics.h"
#include "common/sha256.h"
#include "scheduler/cost.h"
#include "scheduler/dataset_catalog.h"
#include "scheduler/extender.h"
#include "scheduler/index.h"
#include "scheduler/network.h"
#include "scheduler/placement.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler_bench {

using namespace shoal::scheduler;
using nlohmann::json;

namespace {

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

// Datasets by name@version, in memory (the placer calls it inline).
using memory_datasets = static_datasets;

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

// The heartbeat generator's view of one node (what it holds, by object number).
struct gen_node {
  std::vector<std::uint32_t> held;
  std::uint64_t seq = 1;
  heartbeat::message base;  // inventory without objects
};

bool holds(const gen_node& g, std::uint32_t o) {
  return std::find(g.held.begin(), g.held.end(), o) != g.held.end();
}

// The heartbeats of the steady state, as peerd would send them: a random node's delta of a few
// objects (3 added, 2 removed), or its full list one time in `full_every`. Single-threaded.
struct heartbeat_gen {
  const scale_params& p;
  rng_t& r;
  const zipf& pop;
  const std::vector<digest>& ids;
  const std::vector<std::uint64_t>& sizes;
  std::vector<gen_node>& gen;
  std::size_t fulls = 0, deltas = 0;

  heartbeat::message message_of(gen_node& g, bool full) const {
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
  }

  // The next heartbeat's payload (encoded: peerd's work, not the scheduler's).
  std::string next() {
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
      if (holds(g, o) || std::find(removed.begin(), removed.end(), o) != removed.end()) continue;
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
    return heartbeat::encode(m);
  }
};

// The scheduler's side of one heartbeat, as its handler does it: decode, apply, encode the reply.
// Counts what must never happen in a run (a malformed payload, a resync).
struct ingest_counts {
  std::size_t bad = 0, resyncs = 0;
  std::uint64_t reply_bytes = 0;
};
// Returns whether it was a full list.
bool ingest(cluster_index& idx, const std::string& text, const std::string& epoch,
            ingest_counts& c) {
  auto m = heartbeat::decode(text);
  if (!m) {
    ++c.bad;
    return false;
  }
  auto out = idx.apply(*m, "10.0.0.1");
  if (out.resync) ++c.resyncs;
  heartbeat::reply rep;
  rep.epoch = epoch;
  rep.ack_seq = m->seq;
  rep.resync = out.resync;
  c.reply_bytes += heartbeat::encode(rep).size();
  return m->full;
}

json spread(const std::vector<double>& ms) {
  return {{"count", ms.size()},
          {"p50", round3(percentile(ms, 50))},
          {"p99", round3(percentile(ms, 99))},
          {"max", round3(percentile(ms, 100))}};
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The heartbeats that flow while decisions are timed: `payloads` applied in order from their own
// thread, paced at `rate` per second (each at its due time; one that is late goes at once, so the
// thread catches up when it can), until `stop` or the end of the list.
struct feed_result {
  std::size_t applied = 0;
  ingest_counts counts;
  double seconds = 0, cpu_s = 0, max_lag_ms = 0;
  bool ran_out = false;
  std::vector<double> full_ms, delta_ms;  // each heartbeat: decode, apply, reply
};
feed_result feed(cluster_index& idx, const std::vector<std::string>& payloads, double rate,
                 const std::atomic<bool>& stop, const std::string& epoch) {
  feed_result fr;
  const double cpu0 = thread_cpu_s();
  const auto t0 = steady::now();
  fr.ran_out = true;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const auto due = t0 + std::chrono::duration_cast<steady::duration>(
                              std::chrono::duration<double>(static_cast<double>(i) / rate));
    if (steady::now() < due) std::this_thread::sleep_until(due);
    if (stop.load(std::memory_order_relaxed)) {
      fr.ran_out = false;
      break;
    }
    fr.max_lag_ms = std::max(fr.max_lag_ms, ms_since(due));
    const auto t = steady::now();
    const bool full = ingest(idx, payloads[i], epoch, fr.counts);
    (full ? fr.full_ms : fr.delta_ms).push_back(ms_since(t));
    ++fr.applied;
  }
  fr.seconds = ms_since(t0) / 1000.0;
  fr.cpu_s = thread_cpu_s() - cpu0;
  return fr;
}

}  // namespace

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
  index_options io;
  io.max_nodes = std::max(io.max_nodes, p.nodes);  // the 20,000-node point
  cluster_index idx(io, "bench-epoch", frozen_clock());
  const std::string epoch = idx.epoch();

  // Holdings: object j is on node j % nodes (so all `objects` are in the index), and the rest of
  // each node's list comes from a Zipf popularity (popular objects are on thousands of nodes).
  std::vector<gen_node> gen(p.nodes);
  for (std::size_t j = 0; j < p.objects; ++j)
    gen[j % p.nodes].held.push_back(static_cast<std::uint32_t>(j));
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
  heartbeat_gen hgen{p, r, pop, ids, sizes, gen};
  auto message_of = [&](gen_node& g, bool full) { return hgen.message_of(g, full); };

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
  std::size_t done = 0;
  std::uint64_t payload_bytes = 0;
  ingest_counts alone;
  double hb_ms = 0, decode_ms = 0;
  std::size_t decoded_ok = 0;
  while (done < p.heartbeats) {
    std::size_t batch = std::min<std::size_t>(2000, p.heartbeats - done);
    std::vector<std::string> payloads;
    payloads.reserve(batch);
    for (std::size_t b = 0; b < batch; ++b) {
      payloads.push_back(hgen.next());
      payload_bytes += payloads.back().size();
    }
    // How much of a heartbeat is its decoding (done outside the index's lock): the same
    // payloads decoded alone first.
    auto t0 = steady::now();
    for (const auto& text : payloads) decoded_ok += heartbeat::decode(text) ? 1 : 0;
    decode_ms += ms_since(t0);
    t0 = steady::now();
    for (const auto& text : payloads) ingest(idx, text, epoch, alone);
    hb_ms += ms_since(t0);
    done += batch;
  }
  const std::size_t fulls = hgen.fulls, deltas = hgen.deltas;
  bad += alone.bad;
  resyncs += alone.resyncs;
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
      auto o = static_cast<std::uint32_t>(r.uniform() < 0.5 ? pop.sample(r) : r.below(p.objects));
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
  // Scores that are all zero mean the extender saw no holdings (an empty index, a resolver that
  // failed): every timing below would then measure a no-op.
  if (ok && nonzero_scores == 0) {
    std::cerr << "scheduler_bench: every prioritize score in the warm-up was 0\n";
    ok = false;
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
  std::size_t sink = 0, decision_errors = 0;
  // One filter + prioritize per decision, cycling through the pods' bodies. A decision that did
  // not answer 200 twice is counted and fails the run: its time is not a decision's.
  auto decide = [&](const auto& bodies, std::vector<double>& out_ms, std::size_t n) {
    for (std::size_t d = 0; d < n; ++d) {
      const auto& body = bodies[d % bodies.size()];
      auto t0 = steady::now();
      auto f = ext.filter(body);
      auto pr = ext.prioritize(body);
      out_ms.push_back(ms_since(t0));
      if (f.status != 200 || pr.status != 200) ++decision_errors;
      sink += f.status + pr.status;
    }
  };
  // Idle first (nothing else running), to compare with the same decisions under heartbeats.
  std::vector<double> idle_ms;
  auto t_idle = steady::now();
  decide(soft_bodies, idle_ms, std::min<std::size_t>(p.decisions, 200));
  const double idle_s = ms_since(t_idle) / 1000.0;

  // Then the timed decisions, soft and hard, while heartbeats flow at heartbeat_rate from another
  // thread. Its payloads are made beforehand (peerd's encoding is not the scheduler's work), as
  // many as the decisions should need (from the idle run, with a wide margin); the JSON says
  // whether they lasted (ran_out).
  const double per_decision_s =
      idle_ms.empty() ? 0.01 : idle_s / static_cast<double>(idle_ms.size());
  const auto pool = static_cast<std::size_t>(std::min(
      300'000.0, p.heartbeat_rate * (per_decision_s * static_cast<double>(p.decisions) * 8 + 2)));
  std::vector<std::string> flow;
  flow.reserve(pool);
  for (std::size_t k = 0; k < pool; ++k) flow.push_back(hgen.next());
  std::atomic<bool> stop{false};
  feed_result fed;
  std::thread feeder([&] { fed = feed(idx, flow, p.heartbeat_rate, stop, epoch); });
  const double dec_cpu0 = thread_cpu_s();
  auto t_dec = steady::now();
  decide(soft_bodies, soft_ms, p.decisions);
  double decisions_wall_s = ms_since(t_dec) / 1000.0;
  const double soft_cpu_s = thread_cpu_s() - dec_cpu0;
  decide(hard_bodies, hard_ms, p.decisions);
  const double window_s = ms_since(t_dec) / 1000.0;
  const double dec_cpu_s = thread_cpu_s() - dec_cpu0;
  stop = true;
  feeder.join();
  flow = {};
  bad += fed.counts.bad;
  resyncs += fed.counts.resyncs;
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
    t0 = steady::now();
    auto nodes_only = idx.view({});
    b_nodes_view.push_back(ms_since(t0));
    const auto& jo = direct_objs[d % direct_objs.size()];
    std::vector<digest> all;
    for (const auto& o : jo.by_platform.begin()->second) all.push_back(o.id);
    t0 = steady::now();
    auto view = idx.view(all);
    b_view.push_back(ms_since(t0));
    std::vector<std::string> errors;
    t0 = steady::now();
    auto verdicts = ext.evaluate(*a, errors);
    b_eval.push_back(ms_since(t0));
    sink += verdicts.size();
    t0 = steady::now();
    auto pr = ext.prioritize(body);
    b_score.push_back(ms_since(t0));
    sink += pr.status;
  }
  auto rs = res.stats();

  // Where the timed decisions' scores came from (scores.h): kept job states that followed the
  // index, or states built for the decision. Read from the extender's own metrics.
  std::map<std::string, double> kept;
  {
    const std::string text = reg.expose();
    const std::string family = "shoal_scheduler_extender_kept_scores_total{result=\"";
    for (std::size_t at = text.find(family); at != std::string::npos;
         at = text.find(family, at + 1)) {
      const std::size_t from = at + family.size(), quote = text.find('"', from);
      const std::size_t value = text.find(' ', quote);
      if (quote == std::string::npos || value == std::string::npos) break;
      kept[text.substr(from, quote - from)] = std::atof(text.c_str() + value + 1);
    }
  }
  // A job seen for the first time: a fresh extender (no kept lists or job states; the resolver
  // is warm) answers one soft decision per pod, idle. Its state is built from the index's holder
  // lists, as every decision was before states were kept.
  std::vector<double> cold_ms;
  {
    metrics::registry cold_reg;
    extender cold(pl, extender_options{}, cold_reg);
    for (const auto& body : soft_bodies) {
      auto t0 = steady::now();
      auto f = cold.filter(body);
      auto pr = cold.prioritize(body);
      cold_ms.push_back(ms_since(t0));
      if (f.status != 200 || pr.status != 200) ++decision_errors;
    }
  }

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
  if (decision_errors > 0) {
    std::cerr << "scheduler_bench: " << decision_errors << " timed decisions did not answer 200\n";
    ok = false;
  }

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
        {"seconds", round3(hb_ms / 1000.0)},
        {"decode_seconds", round3(decode_ms / 1000.0)},
        {"decoded", decoded_ok}}},
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
        {"decisions_not_200", decision_errors},
        {"hard_filter_kept", hard_kept},
        {"kept_scores", kept},
        {"first_decision_of_a_job",
         {{"pods", cold_ms.size()},
          {"p50_ms", round3(percentile(cold_ms, 50))},
          {"p99_ms", round3(percentile(cold_ms, 99))},
          {"max_ms",
           round3(cold_ms.empty() ? 0 : *std::max_element(cold_ms.begin(), cold_ms.end()))}}},
        {"hard_filter_errors_of_50", hard_errors},
        {"resolver", {{"hits", rs.hits}, {"fetches", rs.fetches}, {"errors", rs.errors}}},
        {"breakdown_mean_ms",
         {{"parse_extender_args", round3(mean(b_parse))},
          {"index_view_nodes_only", round3(mean(b_nodes_view))},
          {"index_view_job", round3(mean(b_view))},
          {"extender_evaluate", round3(mean(b_eval))},
          {"prioritize_whole", round3(mean(b_score))}}}}},
      {"heartbeats_concurrent", true},
      {"concurrent",
       {{"heartbeat_rate_target", p.heartbeat_rate},
        {"heartbeats_applied", fed.applied},
        {"heartbeats_prepared", pool},
        {"ran_out", fed.ran_out},
        {"seconds", round3(fed.seconds)},
        {"heartbeats_s",
         std::round(fed.seconds > 0 ? static_cast<double>(fed.applied) / fed.seconds : 0)},
        {"max_lag_ms", round3(fed.max_lag_ms)},
        // How long the heartbeats took (a full list holds the index's exclusive lock only for
        // what it changes: cluster_index::plan_full).
        {"heartbeat_ms", {{"full", spread(fed.full_ms)}, {"delta", spread(fed.delta_ms)}}},
        {"heartbeat_thread_cpu_s", round3(fed.cpu_s)},
        {"decision_thread_cpu_s", round3(dec_cpu_s)},
        {"soft_decisions_cpu_s", round3(soft_cpu_s)},
        {"decisions_window_s", round3(window_s)},
        {"cpu_util", round3(window_s > 0 ? (fed.cpu_s + dec_cpu_s) / window_s : 0)}}},
      {"heartbeats_s_concurrent",
       std::round(fed.seconds > 0 ? static_cast<double>(fed.applied) / fed.seconds : 0)},
      {"p50_ms_idle", round3(percentile(idle_ms, 50))},
      {"p99_ms_idle", round3(percentile(idle_ms, 99))},
      {"p50_ms", round3(percentile(soft_ms, 50))},
      {"p99_ms", round3(percentile(soft_ms, 99))},
      {"p99_ms_raw", percentile(soft_ms, 99)},
      {"decisions_s",
       std::round(decisions_wall_s > 0 ? static_cast<double>(p.decisions) / decisions_wall_s : 0)},
      {"decision_cpu_ms",
       round3(p.decisions ? soft_cpu_s / static_cast<double>(p.decisions) * 1000.0 : 0)},
      {"rss_after_mib", std::round(proc_status_mib("VmRSS"))},
      {"rss_before_mib", std::round(rss_before)},
  };
  if (bad > 0 || resyncs > 0) ok = false;
  return out;
}

}  // namespace shoal::scheduler_bench
