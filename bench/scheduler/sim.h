#pragma once
// Part 2 of scheduler_bench, "sim": the same trace of jobs placed by each policy on its own
// simulated cluster, with the same queue and fetch model for all; the bytes moved and the start
// delays per policy, and Shoal's ratios to ImageLocality. docs/scheduler-bench.md describes the
// model.
//
// Single-threaded; deterministic for a seed (nothing depends on time but decision_ms).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scheduler/policies.h"
#include "bench/scheduler/trace.h"

namespace shoal::scheduler_bench {

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

// Runs the whole trace through one policy: arrivals, the queue (oldest first, every waiting job
// tried when GPUs are freed), fetches and completions.
[[nodiscard]] sim_result simulate(const trace& t, const sim_params& p, policy& pol);
[[nodiscard]] nlohmann::json to_json(const sim_result& r);
// The sim part: every policy over one trace; `ok` turns false when a policy failed.
[[nodiscard]] nlohmann::json run_sim(const sim_params& p, std::uint64_t seed, bool& ok);

}  // namespace shoal::scheduler_bench
