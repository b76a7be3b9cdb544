#pragma once
// A command_runner for tests that behaves like a node's dcb, ethtool, ip and cma_roce_tos:
// it records every call, answers `show` commands in the tools' real output formats (rendered by
// netsetup/tool_output.h, whose shapes come from iproute2 and ethtool), and applies `set`
// commands to its own DCB state or to the sysfs tree (MTU, link state, configfs ToS), so apply
// can verify by reading back. Failures can be injected per command prefix.
//
// Test-only; single-threaded.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "netsetup/command_runner.h"
#include "netsetup/tool_output.h"
#include "sysfs_tree.h"

namespace shoal::netsetup::testing {

class fake_tools final : public command_runner {
 public:
  // DCB state of one netdev; netdevs absent from `devs` answer "Operation not supported".
  struct dev_state {
    dcb_pfc pfc;
    dcb_app app;
    std::vector<std::string> trust;  // apptrust order
    dcb_ets ets;
    pause_state pause;
  };

  explicit fake_tools(sysfs_tree* tree) : tree_(tree) {}

  std::map<std::string, dev_state> devs;
  std::vector<std::vector<std::string>> calls;
  std::set<std::string> not_installed;   // tool names that "are not installed"
  std::map<std::string, int> fail_with;  // argv prefix (joined with spaces) → exit code
  std::set<std::string> no_effect;       // argv prefixes that exit 0 but change nothing

  // Calls that change state (anything but show / ethtool -a).
  [[nodiscard]] std::vector<std::string> mutating_calls() const;

  [[nodiscard]] result<command_result> run(const std::vector<std::string>& argv,
                                           std::chrono::milliseconds timeout) override;

 private:
  command_result dcb(const std::vector<std::string>& argv);
  command_result ethtool(const std::vector<std::string>& argv);
  command_result ip(const std::vector<std::string>& argv);
  command_result cma_roce_tos(const std::vector<std::string>& argv);

  sysfs_tree* tree_;
};

}  // namespace shoal::netsetup::testing
