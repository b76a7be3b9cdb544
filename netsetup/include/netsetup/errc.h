#pragma once
// Error codes of the netsetup component. They sit in their own category ("netsetup") so the
// scheduler and the CLI can tell a broken node (garbage in sysfs, a tool that failed) from a bad
// request (a malformed discovery document) without parsing messages.

#include <system_error>

namespace shoal::netsetup {

enum class errc {
  ok = 0,
  sysfs_missing,   // a required sysfs file, directory or link does not exist (or dangles)
  sysfs_garbage,   // a sysfs file exists but its content does not parse (empty, "abc", ...)
  sysfs_io,        // reading or writing a sysfs file failed for another reason
  command_failed,  // a tool (dcb, ethtool, ip) could not run, timed out or exited non-zero
  command_output,  // a tool ran but printed something we cannot parse
  bad_document,    // a discovery document or a peer's document is malformed
  bad_request,     // an API caller asked for something impossible (unknown GPU, empty policy)
};

const std::error_category& netsetup_category() noexcept;
inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), netsetup_category()};
}

}  // namespace shoal::netsetup

template <>
struct std::is_error_code_enum<shoal::netsetup::errc> : std::true_type {};
