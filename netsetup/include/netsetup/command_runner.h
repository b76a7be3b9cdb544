#pragma once
// Runs the host tools netsetup needs (dcb, ethtool, ip, cma_roce_tos). Discovery and apply call
// tools only through this interface so tests can replace it with a recorder that returns canned
// output in the tools' real formats.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace shoal::netsetup {

// What a finished command printed and how it exited.
struct command_result {
  int exit_code = 0;  // 0..255 from exit(), or 128+N when killed by signal N
  std::string out;    // stdout, at most 1 MiB (the rest is dropped)
  std::string err;    // stderr, at most 64 KiB
};

// Interface: run argv[0] (looked up in PATH) with arguments, wait at most `timeout`.
// A tool that cannot start or does not finish in time is an error (errc::command_failed);
// a tool that exits non-zero is a command_result with that exit code (the caller decides).
// Implementations are used from one thread at a time unless they say otherwise.
class command_runner {
 public:
  virtual ~command_runner() = default;
  [[nodiscard]] virtual result<command_result> run(const std::vector<std::string>& argv,
                                                   std::chrono::milliseconds timeout) = 0;
};

// The real runner: posix_spawnp with stdin from /dev/null, stdout and stderr captured through
// pipes, SIGKILL at the deadline. Stateless; safe from several threads at once.
class process_runner final : public command_runner {
 public:
  [[nodiscard]] result<command_result> run(const std::vector<std::string>& argv,
                                           std::chrono::milliseconds timeout) override;
};

// "dcb -j pfc show dev eth0": argv joined with spaces for messages and logs.
[[nodiscard]] std::string join_argv(const std::vector<std::string>& argv);

}  // namespace shoal::netsetup
