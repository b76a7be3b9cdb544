#pragma once
// The node's own health checks, reported with every heartbeat (common/heartbeat.h `health`,
// `health_reasons`): the operator's hook, a command or a file, e.g. a GPU health check. The
// scheduler's failure detector takes a node whose health is `failing` for failed (cause
// `reported`), whatever its heartbeats (scheduler/include/scheduler/failures.h).
//
//   node.health_command  argv run every node.health_interval (no shell), at most
//                        node.health_timeout (then killed): exit 0 is ok, exit 1 degraded,
//                        any other exit, a signal or the timeout failing; the first line of its
//                        output (bounded, made printable) is the reason.
//   node.health_file     a file another agent writes: its first line is "ok", "degraded[: why]"
//                        or "failing[: why]"; missing, unreadable, anything else, or older than
//                        node.health_file_max_age is degraded (the agent may be dead, the node
//                        may not be).
// Both may be set; the worse verdict wins. Neither: always ok.
//
// Lifecycle: start() runs the checks on a thread of their own (a command can take seconds; never
// on the event loop); stop() or the destructor ends it. Threading: current() is thread-safe.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "peerd/config.h"

namespace shoal::peerd {

struct health_verdict {
  std::string state = "ok";  // ok | degraded | failing
  std::vector<std::string> reasons;
};

// One run of `argv` (bounded by `timeout`): its verdict.
[[nodiscard]] health_verdict run_health_command(const std::vector<std::string>& argv,
                                                std::chrono::milliseconds timeout);
// The verdict a health file gives now.
[[nodiscard]] health_verdict read_health_file(const std::string& path,
                                              std::chrono::seconds max_age);
// `a` made the worse of a and b (reasons of both kept).
void merge_health(health_verdict& a, const health_verdict& b);

class health_monitor {
 public:
  explicit health_monitor(const node_config& cfg) : cfg_(cfg) {}
  ~health_monitor() { stop(); }
  health_monitor(const health_monitor&) = delete;
  health_monitor& operator=(const health_monitor&) = delete;

  // Runs the first check before returning (so the first heartbeat carries it), then a thread.
  // No-op when neither hook is configured.
  void start();
  void stop();
  [[nodiscard]] health_verdict current() const;

 private:
  void check_once();
  const node_config& cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  health_verdict now_;
  std::thread thread_;
};

}  // namespace shoal::peerd
