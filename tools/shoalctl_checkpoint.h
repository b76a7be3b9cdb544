#pragma once
// `shoalctl checkpoint publish|restore|ls|rm` (docs/checkpoints.md).
//
// publish and restore talk to this node's peerd and present the token of peerd's
// checkpoints.token_file (--checkpoint-token-file, $SHOAL_CHECKPOINT_TOKEN_FILE, default
// /etc/shoal/checkpoint-token); ls asks the scheduler's catalog (--node: this node's publishes and
// restores); rm removes this node's view and pins (--cluster: the scheduler's record, operator).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "shoalctl_cli.h"

namespace shoal::tools::ctl {

struct checkpoint_options {
  std::string dir, job, ref, ranks, ranks_file;
  std::string token_file;
  std::uint64_t step = 0;
  bool wait = true, cluster = false, node = false;
  double timeout = 1800;
};

struct checkpoint_commands {
  CLI::App* publish = nullptr;
  CLI::App* restore = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* rm = nullptr;
};

checkpoint_commands add_checkpoint_commands(CLI::App& app, checkpoint_options& o);
// Runs the checkpoint command that was parsed; -1 when none was.
int run_checkpoint(const checkpoint_commands& c, const context& cx, const checkpoint_options& o);

}  // namespace shoal::tools::ctl
