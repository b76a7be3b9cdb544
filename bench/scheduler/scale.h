#pragma once
// Part 1 of scheduler_bench, "scale": how fast the real extender answers kube-scheduler
// (filter + prioritize over 5,000 nodes with 200,000 objects in the index) and how many heartbeats
// per second the index ingests. docs/scheduler-bench.md describes what is measured.
//
// The decisions are timed while heartbeats flow at `heartbeat_rate` from a second thread (the
// index's lock shared between them as in the daemon); the resolver has its own pool, which the
// extender uses as the daemon does.

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace shoal::scheduler_bench {

struct scale_params {
  std::size_t nodes = 5000;
  std::size_t objects = 200'000;
  std::size_t held_per_node = 400;  // 2M holdings at 5,000 nodes
  std::size_t pods = 32;            // distinct pods cycled through (each 50 objects)
  std::size_t decisions = 1000;
  std::size_t heartbeats = 50'000;
  std::size_t full_every = 100;  // one heartbeat in this many is a full resync
  // Heartbeats per second applied from another thread while the decisions are timed.
  double heartbeat_rate = 10'000;
};

// Runs the scale part; `ok` turns false when something a run must never do happened (a refused
// heartbeat, a malformed answer). Returns the numbers for the JSON report.
[[nodiscard]] nlohmann::json run_scale(const scale_params& p, std::uint64_t seed, bool& ok);

}  // namespace shoal::scheduler_bench
