#include "bench/scheduler/netsetup_pass.h"

#include <iostream>

#include "bench/scheduler/util.h"
#include "netsetup/inventory.h"
#include "scheduler/failures.h"
#include "scheduler/index.h"
#include "scheduler/network.h"
#include "scheduler/placement.h"
#include "topologies.h"

namespace shoal::scheduler_bench {

using namespace shoal::scheduler;
using json = nlohmann::json;

namespace {

// The address every node of the pass heartbeats from.
std::string node_ip(std::size_t i) {
  return "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
}

// Node i's heartbeat without its document: its name, labels and GPUs, one seq.
heartbeat::message node_message(std::size_t i, std::uint64_t seq, bool full) {
  heartbeat::message m;
  m.node = "node-" + std::to_string(i);
  m.epoch = "epoch-bench";
  m.full = full;
  m.seq = seq;
  m.bt_port = 6881;
  m.labels = {{"zone", "z1"}, {"rack", "r" + std::to_string(i / 40)}, {"fabric", "f1"}};
  m.gpus = {heartbeat::gpu_group{"H100", 8}};
  return m;
}

// One delta heartbeat from every node as the scheduler takes it (decode, then the index's apply),
// each node's document in it or said unchanged: microseconds per heartbeat and its bytes.
json heartbeat_cost(cluster_index& idx, std::size_t nodes, const std::string& doc,
                    std::uint64_t seq, bool unchanged, bool& ok) {
  std::vector<std::string> bodies;
  bodies.reserve(nodes);
  for (std::size_t i = 0; i < nodes; ++i) {
    auto m = node_message(i, seq, false);
    if (unchanged)
      m.netsetup_unchanged = true;
    else
      m.netsetup = doc;
    bodies.push_back(heartbeat::encode(m));
  }
  auto t0 = steady::now();
  for (std::size_t i = 0; i < nodes; ++i) {
    auto m = heartbeat::decode(bodies[i]);
    if (!m || idx.apply(*m, node_ip(i)).resync) ok = false;
  }
  const double us = ms_since(t0) * 1000 / static_cast<double>(nodes);
  return {{"bytes", bodies[0].size()}, {"us", round3(us)}};
}

}  // namespace

json run_netsetup_pass(std::size_t nodes, bool& ok) {
  // One converged H100 node's document for every node: the cost of a verdict does not depend on
  // whose it is, and every node's document is a version of its own in the index.
  auto fx = netsetup::testing::h100(netsetup::testing::node_state::converged, 0);
  const std::string doc = netsetup::to_json(fx.discover()).dump();
  index_options io;
  cluster_index idx(io, "epoch-bench");
  for (std::size_t i = 0; i < nodes; ++i) {
    auto m = node_message(i, 1, true);
    m.netsetup = doc;
    if (idx.apply(m, node_ip(i)).refused) {
      ok = false;
      return {{"error", "the index refused a node"}};
    }
  }
  netsetup::policy pol;
  netsetup_network_model plain(pol);
  cached_network_model cached(std::make_unique<netsetup_network_model>(pol));
  failover_options fo;

  // The failure detector's pass as the daemon runs it (app::maintenance): liveness(), then every
  // node judged; the first pass judges every version, the next ones find them kept.
  failure_detector fd(fo, netsetup_failures(cached));
  std::vector<double> pass_ms;
  for (int i = 0; i < 4; ++i) {
    auto t0 = steady::now();
    (void)fd.evaluate(idx.liveness());
    pass_ms.push_back(ms_since(t0));
  }
  // The same before: every node's document judged again.
  failure_detector before(fo, netsetup_failures(plain));
  auto t0 = steady::now();
  (void)before.evaluate(idx.liveness());
  const double before_ms = ms_since(t0);
  const std::size_t failing = fd.failed_nodes() + before.failed_nodes();

  // A heartbeat of every node: the document sent again (as peerd did), then said unchanged.
  auto hb_doc = heartbeat_cost(idx, nodes, doc, 2, false, ok);
  auto hb_kept = heartbeat_cost(idx, nodes, doc, 3, true, ok);
  if (auto n1 = idx.node("node-1"); !n1 || n1->netsetup.str() != doc) ok = false;

  // A placement's evaluation of every node (no objects: the network verdict is what differs).
  job_spec job;
  job.nodes = 1;
  job.gpus = 8;
  job_objects none;
  auto cost = cost_model::from(cost_config{});
  auto view = idx.view({});
  auto eval_ms = [&](const network_model& net) {
    auto t = steady::now();
    auto evals = evaluate_nodes(view, none, job, cost, net, {}, {});
    if (evals.size() != nodes) ok = false;
    return ms_since(t);
  };
  const double place_plain_ms = eval_ms(plain);
  const double place_cached_ms = eval_ms(cached);  // kept by the passes above
  // The node snapshot placement reads is built again when a node's health (labels, document)
  // changes: one node turns degraded, then the next view builds it, every node's document in it.
  auto flip = node_message(0, 4, true);
  flip.netsetup = doc;
  flip.health = "degraded";
  flip.health_reasons = {"bench"};
  (void)idx.apply(flip, node_ip(0));
  t0 = steady::now();
  auto rebuilt = idx.view({});
  const double snapshot_ms = ms_since(t0);
  if (rebuilt.nodes.size() != nodes) ok = false;
  if (failing != 0) {
    std::cerr << "scheduler_bench: netsetup: " << failing << " converged nodes judged failed\n";
    ok = false;
  }
  return {
      {"nodes", nodes},
      {"document_bytes", doc.size()},
      {"failure_pass_ms_first", round3(pass_ms[0])},
      {"failure_pass_ms_kept", round3(std::min({pass_ms[1], pass_ms[2], pass_ms[3]}))},
      {"failure_pass_ms_before", round3(before_ms)},
      {"verdicts_judged", cached.judged()},
      {"evaluate_nodes_ms_kept", round3(place_cached_ms)},
      {"evaluate_nodes_ms_before", round3(place_plain_ms)},
      {"snapshot_rebuild_ms", round3(snapshot_ms)},
      {"heartbeat_bytes_with_document", hb_doc["bytes"]},
      {"heartbeat_us_with_document", hb_doc["us"]},
      {"heartbeat_bytes_unchanged", hb_kept["bytes"]},
      {"heartbeat_us_unchanged", hb_kept["us"]},
  };
}

}  // namespace shoal::scheduler_bench
