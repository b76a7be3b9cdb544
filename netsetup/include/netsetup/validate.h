#pragma once
// Validation: named checks with a severity and a message, on one node's discovery document and
// across the documents of the nodes a job would span. The scheduler gangs a multi-node job only
// onto nodes whose per-node checks pass and whose cross-node checks pass together.
//
// Per node (one result per managed netdev, RDMA port, PF or GPU):
//   link.up  link.mtu  qos.trust  qos.dscp_map  qos.pfc  qos.global_pause  ecn.enabled
//   roce.gid  roce.default_tos  sriov.vfs_available  topology.gpu_nic  pcie.link
// Across nodes:
//   cluster.mtu  cluster.qos  cluster.priority  cluster.gid  cluster.rails

#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "netsetup/inventory.h"
#include "netsetup/policy.h"

namespace shoal::netsetup {

enum class severity : std::uint8_t { error, warning };
enum class check_status : std::uint8_t { pass, fail, skip };

struct check_result {
  std::string name;  // "qos.pfc"
  severity sev = severity::error;
  check_status status = check_status::pass;
  std::string node;
  std::string subject;  // "ens1f0", "mlx5_0 port 1", "0000:17:00.0", "cluster"
  std::string message;
};

[[nodiscard]] std::vector<check_result> validate_node(const node_inventory& inv, const policy& pol);
[[nodiscard]] std::vector<check_result> validate_cluster(std::span<const node_inventory> nodes,
                                                         const policy& pol);
// No check of severity error failed.
[[nodiscard]] bool passed(const std::vector<check_result>& results);
[[nodiscard]] nlohmann::json to_json(const std::vector<check_result>& results);
[[nodiscard]] std::string_view to_string(severity s);
[[nodiscard]] std::string_view to_string(check_status s);

}  // namespace shoal::netsetup
