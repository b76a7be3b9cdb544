#pragma once
// Every sysfs, procfs and configfs path netsetup reads or writes goes through one `sysfs` object
// rooted at a configurable directory ("/" on a node, a temp tree in tests). Paths given to it are
// absolute-looking kernel paths ("/sys/class/net/eth0/mtu"); the root is prefixed.
//
// Reads are bounded (64 KiB per file) and every failure names the full path: a missing file, an
// empty file, "abc" where a number belongs, a dangling or root-escaping symlink. Nothing here
// throws or aborts on what the kernel (or a broken fixture) hands back.
//
// A sysfs object is an immutable value (the root); all methods are safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace shoal::netsetup {

class sysfs {
 public:
  explicit sysfs(std::string root = "/");

  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  // The real path of a kernel path under the root: "/sys/x" → "<root>/sys/x".
  [[nodiscard]] std::string path(std::string_view kernel_path) const;

  [[nodiscard]] bool exists(std::string_view p) const;
  [[nodiscard]] bool is_dir(std::string_view p) const;

  // File content without trailing whitespace (sysfs ends values with "\n"). An empty file is
  // returned as "" here; the typed readers below refuse it.
  [[nodiscard]] result<std::string> read(std::string_view p) const;
  // nullopt when the file does not exist; other failures are errors.
  [[nodiscard]] result<std::optional<std::string>> read_optional(std::string_view p) const;
  // A decimal integer ("1500", "-1").
  [[nodiscard]] result<std::int64_t> read_int(std::string_view p) const;
  [[nodiscard]] result<std::optional<std::int64_t>> read_int_optional(std::string_view p) const;
  // A hexadecimal number with "0x" prefix as in PCI `vendor`, `device`, `class` ("0x15b3").
  [[nodiscard]] result<std::uint32_t> read_hex(std::string_view p) const;

  // Sorted entry names of a directory ("." and ".." excluded). Missing → errc::sysfs_missing.
  [[nodiscard]] result<std::vector<std::string>> list(std::string_view dir) const;
  // Same, but a missing directory is an empty list.
  [[nodiscard]] result<std::vector<std::string>> list_optional(std::string_view dir) const;
  // The kernel path a symlink (chain) resolves to, e.g. "/sys/bus/pci/devices/0000:17:00.0" →
  // "/sys/devices/pci0000:17/0000:17:00.0". A dangling link, a loop or a target outside the root
  // is an error naming the link.
  [[nodiscard]] result<std::string> resolve(std::string_view p) const;
  // The last component of a symlink's target ("driver" → "mlx5_core"); nullopt if no link.
  [[nodiscard]] result<std::optional<std::string>> link_basename(std::string_view p) const;

  // Writes `value` + "\n" to an existing file (sysfs attributes are never created by writing).
  [[nodiscard]] status write(std::string_view p, std::string_view value) const;

 private:
  std::string root_;  // without trailing slash; "" for "/"
};

// Parsers used by the readers, exposed for tests and fuzzing. `where` names the file in errors.
[[nodiscard]] result<std::int64_t> parse_int(std::string_view text, std::string_view where);
[[nodiscard]] result<std::uint32_t> parse_hex(std::string_view text, std::string_view where);
// PCIe link speed as the kernel prints it: "16.0 GT/s PCIe", "8 GT/s", "2.5 GT/s"; nullopt for
// "Unknown" (the kernel's word for a link it cannot read).
[[nodiscard]] result<std::optional<double>> parse_link_speed(std::string_view text,
                                                             std::string_view where);
// An RDMA port's tc/<port>/traffic_class: plain "106", or MLNX_OFED's "Global tclass=106", which
// may be followed by per-destination lines ("dst_ip=10.0.0.0/24,tclass=96") that are not the
// port's class. nullopt when none is set: MLNX_OFED prints nothing until one is written, and
// "Global tclass=-1" is the same. Anything else, or a class past 255, is garbage.
[[nodiscard]] result<std::optional<int>> parse_traffic_class(std::string_view text,
                                                             std::string_view where);
// A short, printable excerpt of untrusted text for error messages.
[[nodiscard]] std::string quote_excerpt(std::string_view text);

}  // namespace shoal::netsetup
