#pragma once
// Node failure detection: turns what the index knows of each node into a
// verdict — healthy, unhealthy (silent past unhealthy_after, or degraded), restarting, failed —
// with its cause, and records every change as an event.
//
//   failed       heartbeats stopped for failover.failed_after (60 s); or the node reported
//                health `failing` (peerd's own checks, a health hook); or its netsetup
//                validation failed; or it stopped cleanly and did not come back within
//                failover.restart_grace.
//   restarting   the node's last heartbeat said `leaving` (peerd stopping on SIGTERM: a restart or
//                a rolling update) and less than restart_grace has passed. Not a failure.
//
// No silence-based decision is made while the scheduler's own view is stale: during the first
// failed_after after it started (nodes have not all reported yet; with replicas sharing state,
// after the schedulers began serving: serving_since), or when more than
// failover.max_failed_fraction of the known nodes would go silent-failed at once (the scheduler
// is the one cut off, not the nodes). A node's own report (failing, netsetup) is fresh evidence
// and is acted on regardless.
//
// Lifecycle: owned by the app; evaluate() runs on the maintenance timer (once a second).
// Threading: thread-safe (one mutex); evaluate() and the readers may run on different threads.

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/index.h"
#include "scheduler/network.h"

namespace shoal::scheduler {

struct failover_options {
  std::chrono::milliseconds unhealthy_after{30'000};
  std::chrono::milliseconds failed_after{60'000};
  std::chrono::milliseconds restart_grace{120'000};
  double max_failed_fraction = 0.5;
  std::size_t max_events = 1000;
};

enum class node_state : std::uint8_t { healthy, unhealthy, restarting, failed };
[[nodiscard]] std::string_view to_string(node_state s) noexcept;

// Why a node failed, as a metric label.
enum class failure_cause : std::uint8_t { none, heartbeat, reported, netsetup, restart_grace };
[[nodiscard]] std::string_view to_string(failure_cause c) noexcept;

struct node_verdict {
  node_state state = node_state::healthy;
  failure_cause cause = failure_cause::none;
  std::string detail;  // the cause in words ("no heartbeat for 61 s (failed_after 60 s)")
  double since_s = 0;  // seconds in this state
};

struct node_event {
  std::string time;  // UTC, RFC 3339
  std::string node;
  std::string event;  // failed | restarting | recovered | view_stale | view_fresh | failover
  std::string cause;  // failure_cause for failed, else ""
  std::string detail;
  std::string job;          // failover: the job (jobs.h), else ""
  std::string replacement;  // failover: the node replacing `node` ("" when none)
};

class failure_detector {
 public:
  using clock = std::chrono::steady_clock;
  // `network_failure`: the node's netsetup validation failure in words, or nullopt (passed or
  // unknown). May be empty.
  failure_detector(failover_options opts,
                   std::function<std::optional<std::string>(const node_summary&)> network_failure,
                   std::function<clock::time_point()> now = clock::now);

  // One pass over every node the index knows; returns the events it produced (also kept).
  std::vector<node_event> evaluate(const std::vector<node_summary>& nodes);
  // Schedulers sharing state: nodes have had a replica to heartbeat to since `t` (and this one
  // loaded their last heartbeats from Redis), so silence is judged from then, not from this
  // replica's own start. Only ever moves the start earlier.
  void serving_since(clock::time_point t);

  // nullopt for a node not evaluated yet (heard for the first time within the last second).
  [[nodiscard]] std::optional<node_verdict> verdict(std::string_view node) const;
  // The newest events first, at most `limit`, only `node`'s when not empty.
  [[nodiscard]] std::vector<node_event> events(std::string_view node, std::size_t limit) const;
  // Keeps an event decided elsewhere (a failover decision, jobs.h) with the detector's own.
  void add_event(node_event e);
  [[nodiscard]] bool view_stale() const;
  [[nodiscard]] std::size_t failed_nodes() const;
  // Failures since start by cause (the metric).
  [[nodiscard]] std::map<failure_cause, std::uint64_t> failures() const;

 private:
  struct tracked {
    node_verdict v;
    clock::time_point since;
  };
  // The state `n` is in now, ignoring silence when `stale`.
  [[nodiscard]] node_verdict judge(const node_summary& n, bool stale) const;
  void record(std::vector<node_event>& out, std::string node, std::string event,
              failure_cause cause, std::string detail);

  failover_options opts_;
  std::function<std::optional<std::string>(const node_summary&)> network_failure_;
  std::function<clock::time_point()> now_;
  clock::time_point started_;
  mutable std::mutex mu_;
  std::map<std::string, tracked, std::less<>> nodes_;
  std::deque<node_event> events_;
  bool stale_ = true;
  std::map<failure_cause, std::uint64_t> failures_;
};

// The failure detector's `network_failure` as the daemon builds it: a node whose netsetup
// validation failed has failed (a misconfigured fabric is a node fault). It is asked for every
// node every second: `net` is the daemon's cached_network_model, which judges each version of a
// node's document once.
[[nodiscard]] std::function<std::optional<std::string>(const node_summary&)> netsetup_failures(
    const network_model& net);

}  // namespace shoal::scheduler
