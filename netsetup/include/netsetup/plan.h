#pragma once
// Plan: the ordered changes that bring a node from what discovery found to the policy, each with
// the reason it is needed. Apply: runs them in order, idempotently (an op whose target state is
// already in place is skipped), verifies each by reading the state back, stops at the first
// failure, and appends what it changed to a JSON-lines journal.

#include <chrono>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "netsetup/command_runner.h"
#include "netsetup/inventory.h"
#include "netsetup/policy.h"
#include "netsetup/sysfs.h"

namespace shoal::netsetup {

// How an op's effect is read back, both to skip ops already in place and to verify after.
struct verify_spec {
  enum class kind : std::uint8_t {
    file_int,       // `path` holds the integer `expect`
    file_text,      // `path` holds `text`
    traffic_class,  // `path` (mlx5 tc/<port>/traffic_class) ends with the number `expect`
    link_up,        // IFF_UP in /sys/class/net/<netdev>/flags
    pfc,            // `dcb -j pfc show`: PFC on priority `expect` only
    dscp_map,       // `dcb -j app show`: each (dscp, prio) in `dscp` is the only entry for its dscp
    trust,          // `dcb -j apptrust show` order is exactly `text`
    pause_off,      // `ethtool -a`: RX and TX pause off
  };
  kind k = kind::file_int;
  std::string netdev;
  std::string path;
  std::int64_t expect = 0;
  std::string text;
  std::vector<std::pair<int, int>> dscp;
};

struct plan_op {
  enum class kind : std::uint8_t { write, command };
  kind k = kind::write;
  std::string subject;            // what the op acts on: "ens1f0", "mlx5_0 port 1", a PF BDF
  std::string what;               // "set MTU 9000"
  std::string why;                // "MTU is 1500; the policy wants 9000 on every RDMA netdev"
  std::string before;             // the state discovery saw
  std::string path;               // write: the kernel path
  std::string value;              // write: the value
  std::vector<std::string> argv;  // command
  verify_spec verify;
  bool disruptive = false;  // destroys state in use (resetting VFs)
};

struct plan {
  std::string node;
  std::vector<plan_op> ops;
  // What the policy asks for but apply cannot do here (no DCB support, a firmware VF limit, an
  // interface that does not exist, QoS of a VF owned by the host).
  std::vector<std::string> problems;
};

// The netdevs the policy manages on this node: policy.interfaces, or every rail NIC's netdev.
[[nodiscard]] std::vector<std::string> managed_netdevs(const node_inventory& inv,
                                                       const policy& pol);

[[nodiscard]] plan make_plan(const node_inventory& inv, const policy& pol);
[[nodiscard]] nlohmann::json to_json(const plan& p);
// One op in one line: "ens1f0: set MTU 9000 (MTU is 1500; ...)".
[[nodiscard]] std::string describe_op(const plan_op& op);

struct op_outcome {
  enum class state : std::uint8_t { changed, already, would_change, failed };
  const plan_op* op = nullptr;
  state s = state::changed;
  std::string after;    // the state read back
  std::string message;  // failure reason
};

struct apply_options {
  bool dry_run = false;
  // Ops marked disruptive (removing VFs that may be in use) fail unless this is set.
  bool allow_disruptive = false;
  std::string journal_path;  // JSON lines, appended; empty = no journal
  std::chrono::milliseconds tool_timeout{10000};
  std::function<void(const op_outcome&)> progress;  // called after each op, on this thread
};

struct apply_report {
  std::vector<op_outcome> outcomes;
  bool ok = true;
  std::string failure;  // the failing op's message
  int changed = 0;
};

// Runs on the calling thread. Errors are only for the journal (cannot be opened or written);
// a failing op is reported in apply_report (ok = false) after the journal records it.
[[nodiscard]] result<apply_report> apply(const plan& p, const sysfs& fs, command_runner& runner,
                                         const apply_options& opts);

// Reads the state `v` describes; true when it is in place. `actual` receives what was read.
[[nodiscard]] result<bool> check_state(const verify_spec& v, const sysfs& fs,
                                       command_runner& runner, std::chrono::milliseconds timeout,
                                       std::string& actual);

}  // namespace shoal::netsetup
