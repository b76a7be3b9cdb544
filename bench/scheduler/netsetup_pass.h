#pragma once
// Part 1b of scheduler_bench, "netsetup": what judging every node's network costs when every
// node's heartbeat carries a netsetup discovery document (an 8-NIC H100 node's, from netsetup's
// own test topologies), as on a RoCE cluster: the failure detector's pass (once a second in the
// daemon) and a placement's evaluate_nodes, each with the verdicts kept per document version
// (cached_network_model, what the daemon runs) and judged afresh every time (as before
// 2026-12-07). docs/scheduler-bench.md describes it.

#include <cstddef>

#include <nlohmann/json.hpp>

namespace shoal::scheduler_bench {

[[nodiscard]] nlohmann::json run_netsetup_pass(std::size_t nodes, bool& ok);

}  // namespace shoal::scheduler_bench
