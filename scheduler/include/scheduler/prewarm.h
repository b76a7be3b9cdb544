#pragma once
// Prewarm orders: bring images and datasets onto chosen nodes before a job needs them.
//
// A prewarm names its target nodes (by name, by a label selector over heartbeat labels, or as
// the nodes a job would be placed on plus N standby nodes ranked next) and, per node, one order
// per image or dataset with the objects resolved for that node's platform. Orders travel in the
// replies to the node's heartbeats (re-sent while the node does not report them, e.g. after a
// peerd restart); the node reports per order {state, bytes_done, bytes_total, error} in its next
// heartbeats. A node's part is
//   pending  its orders have not been reported by the node yet,
//   running  the node reported them queued or running (or done while the index lags),
//   done     the index shows the node holding every object (the index, not the report, decides),
//   failed   the node reported a failure, turned unhealthy (missed heartbeats: "node lost"),
//            was dropped, speaks heartbeat schema 1 (no orders), or the prewarm timed out.
// Terminal parts stay terminal. The prewarm is done when every part is done; for a job prewarm,
// when every failed primary can be replaced by a done standby (the answer lists the
// replacements); failed when all parts are terminal otherwise; running before that.
//
// Lifecycle: owned by the app; tick() runs every second. Threading: thread-safe (one mutex;
// lock order prewarm → index, never the reverse).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/heartbeat.h"
#include "scheduler/cost.h"
#include "scheduler/index.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler {

enum class part_state : std::uint8_t { pending, running, done, failed };
[[nodiscard]] std::string_view to_string(part_state s) noexcept;

// One node's share of a prewarm, as planned by the API.
struct planned_node {
  std::string node;
  std::string role = "target";  // target | primary | standby
  std::vector<heartbeat::prewarm_order> orders;
};

// A node's orders, built once for the API's prewarms and the job registry's standby upkeep
// (jobs.h). Ids: "<id>.<k>" for image number k, "<id>.d<k>" for dataset number k, "<id>.c" for a
// checkpoint ("<job>@<step>", its objects counted from the index like a dataset's).
[[nodiscard]] heartbeat::prewarm_order image_order(const std::string& id, std::size_t k,
                                                   const resolved_image& img,
                                                   const std::string& plat, std::uint64_t pin);
[[nodiscard]] heartbeat::prewarm_order dataset_order(const std::string& id, std::size_t k,
                                                     const std::string& dataset,
                                                     const std::vector<object_ref>& objects,
                                                     const std::string& plat, std::uint64_t pin);
[[nodiscard]] heartbeat::prewarm_order checkpoint_order(const std::string& id,
                                                        const std::string& key,
                                                        const std::vector<object_ref>& objects,
                                                        const std::string& plat, std::uint64_t pin);

struct prewarm_options {
  std::chrono::milliseconds timeout{30 * 60'000};
  std::chrono::milliseconds retention{3600'000};
  std::size_t max_prewarms = 1000;
};

struct prewarm_counts {
  // Orders (one per image or dataset per node) by state: pending, queued, running, done, failed.
  std::map<std::string, std::size_t> orders;
  std::size_t active = 0, finished = 0;
};

class prewarm_manager {
 public:
  using clock = std::chrono::steady_clock;
  prewarm_manager(cluster_index& idx, prewarm_options o,
                  std::function<clock::time_point()> now = clock::now);
  prewarm_manager(const prewarm_manager&) = delete;
  prewarm_manager& operator=(const prewarm_manager&) = delete;

  // Registers a prewarm; `id` must be unique (valid_order_id). Fails with errc::busy when
  // max_prewarms are active. With a sharer set (replicas sharing state, shared_state.h), the
  // prewarm goes through the shared log instead, and every replica registers it from there
  // (apply_create), so that any replica hands its orders out and reports its progress.
  [[nodiscard]] status create(const std::string& id, std::vector<planned_node> nodes,
                              nlohmann::json summary);
  // create() without the sharer: what every replica runs for a logged prewarm.
  [[nodiscard]] status apply_create(const std::string& id, std::vector<planned_node> nodes,
                                    nlohmann::json summary);
  using sharer = std::function<status(const std::string& id, const std::vector<planned_node>&,
                                      const nlohmann::json& summary)>;
  // Set once, before serving.
  void set_sharer(sharer fn) { sharer_ = std::move(fn); }
  // From the heartbeat path, after the index applied the same heartbeat: records the node's
  // reports and returns the orders to (re)send it.
  [[nodiscard]] std::vector<heartbeat::prewarm_order> on_heartbeat(
      const std::string& node, const std::vector<heartbeat::order_report>& reports, int schema);
  // Progress from the index, lost nodes, timeouts, retention.
  void tick();
  [[nodiscard]] std::optional<nlohmann::json> progress(const std::string& id);
  [[nodiscard]] nlohmann::json list();
  [[nodiscard]] prewarm_counts counts();

 private:
  struct order_track {
    heartbeat::prewarm_order order;
    std::vector<object_ref> objects;
    std::optional<heartbeat::order_report> report;
  };
  struct part {
    std::string node;
    std::string role;
    std::vector<order_track> orders;
    std::vector<object_ref> objects;  // every order's, without duplicates
    std::uint64_t bytes_total = 0;
    std::uint64_t bytes_present = 0;
    part_state state = part_state::pending;
    std::string error;
    bool reported = false;  // the node's last heartbeat reported every order
    int schema = 0;         // of the node's last heartbeat
  };
  struct record {
    std::string id;
    clock::time_point created;
    std::optional<clock::time_point> finished;
    std::vector<part> parts;
    nlohmann::json summary;
  };

  void update_part(record& r, part& p, clock::time_point now);
  [[nodiscard]] std::string overall(const record& r,
                                    std::map<std::string, std::string>* replacements) const;
  [[nodiscard]] nlohmann::json to_json(const record& r, clock::time_point now) const;

  cluster_index& idx_;
  prewarm_options opts_;
  sharer sharer_;
  std::function<clock::time_point()> now_;
  std::mutex mu_;
  std::map<std::string, record> records_;
};

}  // namespace shoal::scheduler
