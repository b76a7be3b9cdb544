// scheduler_bench: how fast the scheduler answers kube-scheduler and ingests heartbeats at
// 5,000 nodes and 200,000 objects (part 1, "scale": scale.cc), and how good its placements are
// (part 2, "sim": sim.cc): a trace-driven simulation (trace.cc, sim_cluster.cc) that places the
// same jobs, on the same simulated caches, with Shoal's cost model (the real evaluate_nodes/choose
// on a cluster_index fed by heartbeats), kube-scheduler's ImageLocality and least-allocated
// (policies.cc). docs/scheduler-bench.md describes what is measured and the assumptions of the
// trace; bench/scheduler/run is the way to run it.
//
// One thread, except the resolver's pool: the extender path resolves images there, as the daemon
// does. Everything random comes from one seed, through generators written here (util.h), so a run
// is reproducible across standard libraries.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/scheduler/netsetup_pass.h"
#include "bench/scheduler/scale.h"
#include "bench/scheduler/sim.h"
#include "bench/scheduler/util.h"

namespace {

using namespace shoal::scheduler_bench;
using nlohmann::json;

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
  for (const char* k :
       {"p50_ms", "p99_ms", "decisions_s", "heartbeats_s", "rss_mib", "bytes_moved",
        "bytes_moved_vs_imagelocality", "p95_start_delay_s", "p95_start_delay_vs_imagelocality",
        "jobs_placed", "seed", "cpu_util", "cpu_s"}) {
    if (!j.contains(k)) {
      std::cerr << "scheduler_bench --check: key " << k << " missing\n";
      good = false;
    }
  }
  if (!good) return false;
  for (const char* pol :
       {"shoal", "imagelocality", "imagelocality_datasets", "least_allocated",
        "imagelocality_plus_least_allocated", "imagelocality_plus_most_allocated"}) {
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

// a / b rounded to 3 places (0 when b is 0), and unrounded for verdicts.
double raw_ratio(double a, double b) { return b > 0 ? a / b : 0; }
double ratio3(double a, double b) { return round3(raw_ratio(a, b)); }

int usage() {
  std::cerr << "usage: scheduler_bench [--quick] [--json FILE] [--check] [--verify FILE]\n"
               "                       [--seed N] [--jobs N] [--cache-gib N] [--decisions N]\n"
               "                       [--heartbeats N] [--part all|scale|sim] [--no-large]\n"
               "                       [--heartbeat-rate N]\n"
               "                       [--packing SECONDS_PER_GPU]\n"
               "                       [--source-upstream-mib-s N] [--node-mib-s N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, check = false, no_large = false;
  std::optional<double> heartbeat_rate;
  std::string part = "all";
  std::string json_path;
  std::uint64_t seed = 20261130;
  std::optional<std::size_t> jobs, decisions, heartbeats, cache_gib;
  std::optional<double> packing, node_mib_s, source_mib_s;
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
    } else if (a == "--no-large") {
      // Only the 5,000-node point of the scale part (no 20,000-node run, no p99_20k_vs_5k).
      no_large = true;
    } else if (a == "--heartbeat-rate" && i + 1 < argc) {
      char* end = nullptr;
      heartbeat_rate = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(*heartbeat_rate > 0 && *heartbeat_rate <= 1e6))
        return usage();
    } else if (a == "--verify" && i + 1 < argc) {
      return check_file(argv[i + 1]) ? 0 : 1;
    } else if (a == "--part" && i + 1 < argc) {
      part = argv[++i];
      if (part != "all" && part != "scale" && part != "sim") return usage();
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--packing" && i + 1 < argc) {
      // Shoal's placement.packing_seconds_per_gpu in the simulation, to show its trade-off.
      char* end = nullptr;
      packing = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(*packing >= 0 && *packing <= 3600)) return usage();
    } else if ((a == "--source-upstream-mib-s" || a == "--node-mib-s") && i + 1 < argc) {
      // The second fetch model's shared upstream and per-node NIC (sim.source_queue).
      char* end = nullptr;
      double v = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(v > 0 && v <= 1e6)) return usage();
      (a == "--node-mib-s" ? node_mib_s : source_mib_s) = v;
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
  if (packing) mp.shoal_packing_seconds_per_gpu = *packing;
  if (node_mib_s) mp.node_bw = *node_mib_s * MiB;
  if (source_mib_s) mp.source_upstream_bw = *source_mib_s * MiB;
  if (decisions) sp.decisions = std::max<std::size_t>(1, *decisions);
  if (heartbeats) sp.heartbeats = std::max<std::size_t>(1, *heartbeats);
  if (heartbeat_rate) sp.heartbeat_rate = *heartbeat_rate;

  auto t0 = steady::now();
  double cpu0 = cpu_seconds();
  bool ok = true;
  std::cerr << "scheduler_bench: scale (" << sp.nodes << " nodes, " << sp.objects
            << " objects)...\n";
  json scale = {{"p50_ms", 0.0}, {"p99_ms", 0.0}, {"decisions_s", 0.0}, {"heartbeats_s", 0.0}};
  if (part != "sim") scale = run_scale(sp, seed, ok);
  // The same at four times the nodes and five times the objects (20,000 × 1,000,000; --quick:
  // 800 × 20,000): how the decision's p99 grows with the cluster (p99_20k_vs_5k).
  json large = json::object();
  if (part != "sim" && !no_large) {
    scale_params lp = sp;
    lp.nodes = sp.nodes * 4;
    lp.objects = sp.objects * 5;
    lp.heartbeats = std::max<std::size_t>(1, sp.heartbeats / 2);
    // Half the decisions: each takes longer, and the heartbeats prepared for their window are
    // held in memory (at most 300,000 payloads, ~0.6 GB).
    lp.decisions = std::max<std::size_t>(1, sp.decisions / 2);
    std::cerr << "scheduler_bench: scale (" << lp.nodes << " nodes, " << lp.objects
              << " objects)...\n";
    large = run_scale(lp, seed, ok);
  }
  // Every node with a netsetup document: the failure detector's pass and a placement's
  // evaluation, verdicts kept and judged afresh (netsetup_pass.h).
  json netsetup = json::object();
  if (part != "sim") {
    std::cerr << "scheduler_bench: netsetup (" << sp.nodes << " nodes with documents)...\n";
    netsetup = run_netsetup_pass(sp.nodes, ok);
  }
  double rss = proc_status_mib("VmRSS");
  double scale_cpu = cpu_seconds() - cpu0, scale_wall = ms_since(t0) / 1000.0;
  std::cerr << "scheduler_bench: simulation (" << mp.nodes << " nodes, " << mp.jobs
            << " jobs, 6 policies)...\n";
  auto t1 = steady::now();
  double cpu1 = cpu_seconds();
  json sim = {{"bytes_moved", json::object()},       {"bytes_moved_vs_imagelocality", 0.0},
              {"p95_start_delay_s", json::object()}, {"p95_start_delay_vs_imagelocality", 0.0},
              {"jobs_placed", json::object()},       {"policies", json::object()}};
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
      {"heartbeats_concurrent", part != "sim"},
      {"heartbeats_s_concurrent", scale.value("heartbeats_s_concurrent", 0.0)},
      {"decisions_s_target", 300},
      {"p99_ms_large", large.value("p99_ms", 0.0)},
      {"p99_20k_vs_5k", ratio3(large.value("p99_ms_raw", 0.0), scale.value("p99_ms_raw", 0.0))},
      {"p99_20k_vs_5k_target", 1.3},
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
      {"scale_large", large},
      {"netsetup", netsetup},
      {"sim", sim},
      {"ok", ok},
  };
  {
    json v = json::object();
    if (part != "sim") {
      double p99 = scale.value("p99_ms_raw", out["p99_ms"].get<double>());
      v["p99_ms<=5"] = {{"value", p99}, {"met", p99 <= 5}};
      double ds = out["decisions_s"].get<double>();
      v["decisions_s>=300"] = {{"value", ds}, {"met", ds >= 300}};
      if (!large.empty()) {
        double r = raw_ratio(large.value("p99_ms_raw", 0.0), p99);
        v["p99_20k_vs_5k<=1.3"] = {{"value", r}, {"met", r <= 1.3}};
      }
      double hb = out["heartbeats_s"].get<double>();
      v["heartbeats_s>=10000"] = {{"value", hb}, {"met", hb >= 10000}};
    }
    if (part != "scale") {
      double b = sim["bytes_moved_vs_imagelocality_raw"].get<double>();
      double d = sim["p95_start_delay_vs_imagelocality_raw"].get<double>();
      double q = sim["source_queue"]["p95_start_delay_vs_imagelocality_raw"].get<double>();
      v["bytes_moved_vs_imagelocality<=0.5"] = {{"value", b}, {"met", b <= 0.5}};
      v["p95_start_delay_vs_imagelocality<=0.7"] = {{"value", d}, {"met", d <= 0.7}};
      v["source_queue.p95_start_delay_vs_imagelocality<=0.7"] = {{"value", q}, {"met", q <= 0.7}};
    }
    out["targets"] = v;
  }
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
  std::printf("  heartbeats ingested: %.0f/s alone (target >= 10000)   RSS %.0f MiB\n",
              out["heartbeats_s"].get<double>(), rss);
  if (part != "sim") {
    std::printf(
        "  decisions timed while heartbeats flowed from another thread at %.0f/s (target %.0f/s):"
        " %.0f decisions/s (target >= 300), idle p99 %.2f ms\n",
        scale["heartbeats_s_concurrent"].get<double>(), sp.heartbeat_rate,
        out["decisions_s"].get<double>(), scale["p99_ms_idle"].get<double>());
    const auto& first = scale["extender"]["first_decision_of_a_job"];
    std::printf(
        "  first decision of a job (its scores built from the holder lists, idle): p50 %.2f"
        " ms  p99 %.2f ms\n",
        first["p50_ms"].get<double>(), first["p99_ms"].get<double>());
  }
  if (!large.empty()) {
    const auto& first = large["extender"]["first_decision_of_a_job"];
    std::printf("  %zu nodes, first decision of a job: p50 %.2f ms  p99 %.2f ms\n", sp.nodes * 4,
                first["p50_ms"].get<double>(), first["p99_ms"].get<double>());
    std::printf(
        "  %zu nodes, %zu objects: p50 %.2f ms  p99 %.2f ms, heartbeats at %.0f/s;"
        " p99 vs %zu nodes %.3f (target <= 1.3)\n",
        sp.nodes * 4, sp.objects * 5, large["p50_ms"].get<double>(), large["p99_ms"].get<double>(),
        large["heartbeats_s_concurrent"].get<double>(), sp.nodes,
        out["p99_20k_vs_5k"].get<double>());
  }
  for (const auto& [name, r] : sim["policies"].items()) {
    std::printf("  %-24s placed %5d  moved %9.1f TiB  p95 start %9.0f s\n", name.c_str(),
                r["jobs_placed"].get<int>(), r["bytes_moved_tib"].get<double>(),
                r["p95_start_delay_s"].get<double>());
  }
  std::printf(
      "  bytes moved vs ImageLocality %.3f (target <= 0.5), p95 start delay vs "
      "ImageLocality %.3f (target <= 0.7)\n",
      sim["bytes_moved_vs_imagelocality"].get<double>(),
      sim["p95_start_delay_vs_imagelocality"].get<double>());
  if (sim.contains("source_queue")) {
    const auto& q = sim["source_queue"];
    std::printf(
        "  second fetch model (per-node NIC %.0f MiB/s, one upstream of %.0f MiB/s, FIFO "
        "queues): bytes moved vs ImageLocality %.3f, p95 start delay vs ImageLocality "
        "%.3f\n",
        q["node_mib_s"].get<double>(), q["upstream_mib_s"].get<double>(),
        q["bytes_moved_vs_imagelocality"].get<double>(),
        q["p95_start_delay_vs_imagelocality"].get<double>());
  }
  // Verdicts from the unrounded ratios (the JSON's are rounded to 3 places for reading).
  if (part != "scale") {
    auto verdict = [](const char* what, double v, double bound) {
      std::printf("  verdict %-52s %.6f <= %g: %s\n", what, v, bound,
                  v <= bound ? "met" : "MISSED");
    };
    verdict("bytes_moved_vs_imagelocality (Shoal's fetch model)",
            sim["bytes_moved_vs_imagelocality_raw"].get<double>(), 0.5);
    verdict("p95_start_delay_vs_imagelocality (Shoal's fetch model)",
            sim["p95_start_delay_vs_imagelocality_raw"].get<double>(), 0.7);
    verdict("p95_start_delay_vs_imagelocality (source_queue model)",
            sim["source_queue"]["p95_start_delay_vs_imagelocality_raw"].get<double>(), 0.7);
  }
  if (part != "sim") {
    double p99 = scale.value("p99_ms_raw", out["p99_ms"].get<double>());
    std::printf("  verdict %-52s %.6f <= 5: %s\n", "p99_ms", p99, p99 <= 5 ? "met" : "MISSED");
    double ds = out["decisions_s"].get<double>();
    std::printf("  verdict %-52s %.1f >= 300: %s\n", "decisions_s", ds,
                ds >= 300 ? "met" : "MISSED");
    if (!large.empty()) {
      double r = raw_ratio(large.value("p99_ms_raw", 0.0), p99);
      std::printf("  verdict %-52s %.6f <= 1.3: %s\n", "p99_20k_vs_5k", r,
                  r <= 1.3 ? "met" : "MISSED");
    }
    std::printf("  verdict %-52s %.1f >= 10000: %s\n", "heartbeats_s",
                out["heartbeats_s"].get<double>(),
                out["heartbeats_s"].get<double>() >= 10000 ? "met" : "MISSED");
  }
  if (!json_path.empty()) std::printf("  JSON: %s\n", json_path.c_str());
  if (check && !check_file(json_path)) return 1;
  return ok ? 0 : 1;
}
