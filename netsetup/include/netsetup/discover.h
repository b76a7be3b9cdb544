#pragma once
// Discovery: reads the node's GPUs, NICs, netdevs and RDMA devices from sysfs (under the given
// root) and the host QoS state from `dcb -j` / `ethtool -a` (through the runner).
//
// Strict about what it parses and lenient about what is absent: garbage in a file it needs
// (empty, "abc" for a number, a dangling link) is an error naming the path; an optional feature
// the node lacks (no ECN knobs, no dcb support, a tool that is not installed) leaves that part
// empty and adds a line to `warnings`.

#include <chrono>
#include <string>
#include <vector>

#include "common/error.h"
#include "netsetup/command_runner.h"
#include "netsetup/inventory.h"
#include "netsetup/sysfs.h"

namespace shoal::netsetup {

struct discover_options {
  std::string node_name;                   // empty: the host name
  std::vector<std::string> extra_netdevs;  // also describe these (e.g. a policy's interfaces)
  bool run_tools = true;                   // false: no dcb/ethtool, QoS left empty
  std::chrono::milliseconds tool_timeout{5000};
};

// Runs on the calling thread; blocks on sysfs reads and on the tools (each bounded by
// tool_timeout).
[[nodiscard]] result<node_inventory> discover(const sysfs& fs, command_runner& runner,
                                              const discover_options& opts);

// PCI function classification used by discovery (exposed for tests).
[[nodiscard]] bool is_gpu_class(std::uint32_t vendor, std::uint32_t class_code);
[[nodiscard]] bool is_nic_class(std::uint32_t class_code);
// The VF device id of a PF device id for NICs whose SR-IOV VFs have their own id, from the SR-IOV
// network operator's table (ConnectX-5/6/6 Dx/7); 0 when unknown.
[[nodiscard]] std::uint32_t vf_device_of(std::uint32_t vendor, std::uint32_t pf_device);
[[nodiscard]] bool is_known_vf_device(std::uint32_t vendor, std::uint32_t device);
// "0000:17:00.0"-shaped (domain:bus:device.function, lowercase hex).
[[nodiscard]] bool is_bdf(std::string_view s);

}  // namespace shoal::netsetup
