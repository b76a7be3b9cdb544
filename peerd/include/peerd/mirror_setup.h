#pragma once
// `shoal-peerd mirror install|uninstall`: points the node's container runtimes at this peerd and
// takes it back, leaving the node as it was.
//
// install writes, for every registry of peerd's `mirror.registries` and for `_default`,
// containerd's `<certs-dir>/<host>/hosts.toml` (peerd's loopback listener first, the registry's
// own `server` as the fallback when peerd does not answer) and one CRI-O/podman drop-in,
// `<registries-conf-d>/50-shoal.conf` (containers-registries.conf v2: a mirror per registry).
//
// Nothing is lost and nothing is left half-done:
//   - a file install replaces is first copied, bytes and mode, into the backup directory under
//     the same relative path (certs.d/<host>/hosts.toml, registries.conf.d/50-shoal.conf), and
//     a manifest (<backup-dir>/manifest.json) records every file with the sha256 of the
//     original and of what install wrote. The manifest is written before any target changes.
//   - every file is written to a temporary file beside it and renamed over it; when a step
//     fails, the steps already done are undone in reverse order and the error says which step
//     failed on which path and why (errno text).
//   - install again is idempotent: a file still holding what install wrote is left alone (never
//     backed up as if it were an original); a registry dropped from the config gets its
//     original back.
//   - uninstall restores each original byte for byte with its mode and owner (or removes the
//     file when there was none), but only where the file still holds what install wrote: a
//     file an operator edited since is kept and reported, and its original stays in the backup
//     directory. Then it removes the directories install created (when empty) and the manifest.
//
// Before writing, install checks that containerd's config (version 1, 2 or 3; `imports`
// followed) sets the CRI registry `config_path` to the certs dir; when it does not, it writes
// nothing and says exactly which TOML lines to put there (unless `check` is off).
//
// Blocking file work on the calling thread. One run at a time per backup dir: install and
// uninstall hold an exclusive flock on the backup dir's parent and fail (errc::busy) when
// another run holds it.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "peerd/config.h"

namespace shoal::peerd::mirror_setup {

// Where things are. Defaults are the standard paths of a Debian/Kubernetes node.
struct options {
  std::string certs_dir = "/etc/containerd/certs.d";
  std::string containerd_config = "/etc/containerd/config.toml";
  std::string backup_dir = "/var/lib/shoal/peerd/mirror-backup";
  std::string registries_conf_d = "/etc/containers/registries.conf.d";
  bool containerd = true;  // write certs.d/*/hosts.toml
  // Write the registries.conf.d drop-in; when registries_conf_d's parent (/etc/containers)
  // does not exist, install skips it (no CRI-O, podman or skopeo here) and says so.
  bool crio = true;
  bool check = true;  // check containerd's config_path first
};

// One line per action ("wrote /etc/containerd/certs.d/docker.io/hosts.toml", "backed up ...",
// "kept ... (edited since install)"), as it happens.
using sink = std::function<void(std::string_view line)>;

// A file install writes: its absolute path, its path below the backup dir and its content.
struct planned_file {
  std::string path;
  std::string backup_rel;
  std::string content;
};

// The URL containerd reaches peerd at: http://<http.listen>, a wildcard address
// (0.0.0.0, ::, empty) replaced by loopback.
[[nodiscard]] result<std::string> mirror_url(const peerd_config& cfg);

// certs.d/<host>/hosts.toml for one registry (`server` empty: no server line, as for _default).
[[nodiscard]] std::string hosts_toml(std::string_view host, std::string_view server,
                                     std::string_view mirror_url);

// The registries.conf.d drop-in; `skipped` receives registries that cannot be mirrored there
// (no usable path prefix).
[[nodiscard]] std::string registries_conf(const std::vector<mirror_registry_config>& registries,
                                          std::string_view mirror_host_port,
                                          std::vector<std::string>* skipped);

// Every file install writes for this config and these options (nothing is touched).
[[nodiscard]] result<std::vector<planned_file>> plan(const peerd_config& cfg, const options& o,
                                                     const sink& out);

// What containerd's config says about config_path.
struct config_path_check {
  bool ok = false;
  std::string message;  // ok: one line saying so; else what to change, several lines
};
// Checks `toml_path` (and the files its `imports` name). errors: the file exists but cannot be
// read or is not TOML (with the line). A missing file is a failed check, not an error.
[[nodiscard]] result<config_path_check> check_containerd_config(const std::string& toml_path,
                                                                const std::string& certs_dir);

// The install and uninstall transactions described at the top.
[[nodiscard]] status install(const std::vector<planned_file>& files, const options& o,
                             const sink& out);
[[nodiscard]] status uninstall(const options& o, const sink& out);

// `shoal-peerd mirror ...` (argv[0] is "mirror"): parses flags, prints lines to stdout and errors
// to stderr. Exit status: 0 done, 1 failed (nothing changed), 2 bad usage or config, 3
// containerd's config_path does not point at the certs dir (nothing changed).
[[nodiscard]] int run_cli(int argc, char** argv);

// A minimal TOML reader for the check: every key that has a value, as its full dotted path
// (quoted segments unquoted, array-of-tables entries marked "[]"), with the string value (or
// the raw text of a non-string) and its line. Exposed for tests.
struct toml_value {
  std::vector<std::string> path;
  std::string value;
  bool is_string = false;
  int line = 0;
};
[[nodiscard]] result<std::vector<toml_value>> parse_toml(std::string_view text);

}  // namespace shoal::peerd::mirror_setup
