#include "peerd/mirror_setup.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/fd.h"
#include "common/file.h"
#include "common/oci.h"
#include "common/sha256.h"
#include "common/json_text.h"

namespace shoal::peerd::mirror_setup {
namespace {

constexpr std::string_view dropin_name = "50-shoal.conf";
constexpr unsigned written_mode = 0644;

std::string sha_hex(std::string_view bytes) { return sha256_of(bytes).hex(); }

std::string parent_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string trim_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// A TOML basic string: the paths and hosts written here never hold control characters.
std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---- files ------------------------------------------------------------------------------------

// A target as found: absent, or a regular file's bytes, mode and owner.
struct file_state {
  bool exists = false;
  std::string bytes;
  unsigned mode = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

result<file_state> read_file(const std::string& path) {
  file_state st;
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) {
    if (errno == ENOENT) return st;
    if (errno == ELOOP) return fail(errc::invalid_argument, path + " is a symbolic link");
    return fail_errno(errno, "open " + path);
  }
  struct stat sb {};
  if (::fstat(fd.get(), &sb) != 0) return fail_errno(errno, "stat " + path);
  if (!S_ISREG(sb.st_mode)) return fail(errc::invalid_argument, path + " is not a regular file");
  st.exists = true;
  st.mode = sb.st_mode & 07777;
  st.uid = sb.st_uid;
  st.gid = sb.st_gid;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(errno, "read " + path);
    if (n == 0) break;
    st.bytes.append(buf, static_cast<std::size_t>(n));
  }
  return st;
}

// Writes `bytes` with `mode` (and the owner, when it differs from ours) to a temporary file
// beside `path`, fsyncs it and renames it over `path`.
status write_file(const std::string& path, std::string_view bytes, unsigned mode, uid_t uid,
                  gid_t gid) {
  const std::string tmp = parent_of(path) + "/.shoal-mirror." + std::to_string(::getpid()) + ".tmp";
  unique_fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return fail_errno(errno, "create " + tmp);
  auto bail = [&](int err, const std::string& what) {
    ::unlink(tmp.c_str());
    return fail_errno(err, what);
  };
  if (auto w = write_all(fd.get(), bytes, "write " + tmp); !w) {
    ::unlink(tmp.c_str());
    return w;
  }
  if ((uid != ::geteuid() || gid != ::getegid()) && ::fchown(fd.get(), uid, gid) != 0)
    return bail(errno, "chown " + tmp);
  if (::fchmod(fd.get(), mode) != 0) return bail(errno, "chmod " + tmp);
  if (::fsync(fd.get()) != 0) return bail(errno, "fsync " + tmp);
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) return bail(errno, "rename " + tmp + " " + path);
  unique_fd dir(::open(parent_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir) ::fsync(dir.get());
  return {};
}

status put_back(const std::string& path, const file_state& was) {
  if (was.exists) return write_file(path, was.bytes, was.mode, was.uid, was.gid);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail_errno(errno, "unlink " + path);
  return {};
}

// ---- the undo journal -------------------------------------------------------------------------

// Steps done so far with their inverses; rollback() runs them newest first.
class journal {
 public:
  explicit journal(const sink& out) : out_(out) {}
  void done(std::string what, std::function<status()> undo) {
    steps_.push_back({std::move(what), std::move(undo)});
  }
  // Undoes every step and returns `e` (with the undo failures appended, if any).
  error rollback(error e) {
    std::string failed;
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
      if (auto st = it->undo(); st) {
        out_("undone: " + it->what);
      } else {
        failed += "; undo of \"" + it->what + "\" failed: " + st.error().message;
      }
    }
    steps_.clear();
    e.message += failed.empty() ? " (every step done before was undone)" : failed;
    return e;
  }

 private:
  struct step {
    std::string what;
    std::function<status()> undo;
  };
  const sink& out_;
  std::vector<step> steps_;
};

// mkdir -p; every directory it made is journaled (removed again on rollback) and appended to
// `created`.
status make_dirs(const std::string& dir, journal& j, std::vector<std::string>& created) {
  struct stat sb {};
  if (::stat(dir.c_str(), &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) return {};
    return fail(errc::invalid_argument, dir + " exists and is not a directory");
  }
  if (errno != ENOENT) return fail_errno(errno, "stat " + dir);
  if (dir != "/" && dir != ".") {
    if (auto st = make_dirs(parent_of(dir), j, created); !st) return st;
  }
  if (::mkdir(dir.c_str(), 0755) != 0) return fail_errno(errno, "mkdir " + dir);
  created.push_back(dir);
  j.done("mkdir " + dir, [dir]() -> status {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return fail_errno(errno, "rmdir " + dir);
    return {};
  });
  return {};
}

// One run at a time per backup dir (an init container and an operator could race): an
// exclusive flock on the backup dir's parent, which leaves nothing behind. No lock when that
// parent does not exist yet (nothing can have been installed there).
result<unique_fd> lock_backup_parent(const options& o) {
  const std::string dir = parent_of(trim_slashes(o.backup_dir));
  unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return fd;
    return fail_errno(errno, "open " + dir);
  }
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return fail(errc::busy, "another `shoal-peerd mirror` run holds the lock on " + dir +
                                  "; run again once it has finished");
    return fail_errno(errno, "flock " + dir);
  }
  return fd;
}

// ---- the manifest -----------------------------------------------------------------------------

// One file install wrote, with what it replaced.
struct entry {
  std::string path;
  std::string backup;  // empty: there was no file
  std::string original_sha256;
  unsigned original_mode = 0;
  uid_t original_uid = 0;
  gid_t original_gid = 0;
  std::string written_sha256;
};

struct manifest {
  bool exists = false;
  std::string bytes;  // as read, for rollback
  std::vector<entry> entries;
  std::vector<std::string> created_dirs;
  entry* find(const std::string& path) {
    for (auto& e : entries)
      if (e.path == path) return &e;
    return nullptr;
  }
};

std::string manifest_path(const options& o) {
  return trim_slashes(o.backup_dir) + "/manifest.json";
}

result<manifest> load_manifest(const options& o) {
  const std::string path = manifest_path(o);
  auto f = read_file(path);
  if (!f) return fail(f.error().wrap("manifest"));
  manifest m;
  if (!f->exists) return m;
  m.exists = true;
  m.bytes = f->bytes;
  auto j = nlohmann::json::parse(f->bytes, nullptr, false);
  auto bad = [&](const std::string& why) {
    return fail(errc::invalid_argument,
                "manifest " + path + " " + why + "; restore it or move it away to start afresh");
  };
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != 1 || !j.contains("entries") ||
      !j["entries"].is_array())
    return bad("is not a shoal-peerd mirror manifest (version 1)");
  for (const auto& x : j["entries"]) {
    if (!x.is_object() || !x.contains("path") || !x["path"].is_string())
      return bad("has an entry without a path");
    entry e;
    e.path = x["path"].get<std::string>();
    e.backup = x.value("backup", "");
    e.original_sha256 = x.value("original_sha256", "");
    e.original_mode =
        static_cast<unsigned>(std::strtoul(x.value("original_mode", "0").c_str(), nullptr, 8));
    e.original_uid = x.value("original_uid", 0u);
    e.original_gid = x.value("original_gid", 0u);
    e.written_sha256 = x.value("written_sha256", "");
    m.entries.push_back(std::move(e));
  }
  if (j.contains("created_dirs") && j["created_dirs"].is_array()) {
    for (const auto& d : j["created_dirs"])
      if (d.is_string()) m.created_dirs.push_back(d.get<std::string>());
  }
  return m;
}

std::string render_manifest(const manifest& m) {
  nlohmann::json j = {{"version", 1}, {"written_by", "shoal-peerd mirror install"}};
  j["entries"] = nlohmann::json::array();
  for (const auto& e : m.entries) {
    nlohmann::json x = {{"path", e.path}, {"written_sha256", e.written_sha256}};
    if (!e.backup.empty()) {
      x["backup"] = e.backup;
      x["original_sha256"] = e.original_sha256;
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", e.original_mode);
      x["original_mode"] = mode;
      x["original_uid"] = e.original_uid;
      x["original_gid"] = e.original_gid;
    }
    j["entries"].push_back(std::move(x));
  }
  j["created_dirs"] = m.created_dirs;
  return json_text(j, 2) + "\n";
}

// Replaces the manifest with `next` (or removes it when `next` has no entry), journaled.
status save_manifest(const options& o, const manifest& old, const manifest& next, journal& j) {
  const std::string path = manifest_path(o);
  if (next.entries.empty()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail_errno(errno, "unlink " + path);
  } else if (auto st = write_file(path, render_manifest(next), 0600, ::geteuid(), ::getegid());
             !st) {
    return st;
  }
  file_state was{.exists = old.exists, .bytes = old.bytes, .mode = 0600};
  was.uid = ::geteuid();
  was.gid = ::getegid();
  j.done("manifest " + path, [path, was] { return put_back(path, was); });
  return {};
}

// A backup path not used by anything yet: <backup_dir>/<rel>, else with .1, .2, ...
std::string free_backup_path(const options& o, const std::string& rel, manifest& m) {
  const std::string base = trim_slashes(o.backup_dir) + "/" + rel;
  for (int i = 0;; ++i) {
    std::string p = i == 0 ? base : base + "." + std::to_string(i);
    struct stat sb {};
    bool taken =
        ::lstat(p.c_str(), &sb) == 0 || std::any_of(m.entries.begin(), m.entries.end(),
                                                    [&](const entry& e) { return e.backup == p; });
    if (!taken) return p;
  }
}

// Puts the original of `e` back in place of `cur` (what install wrote, or nothing), journaled.
status restore(const entry& e, const file_state& cur, journal& j, const sink& out) {
  if (!e.backup.empty()) {
    auto b = read_file(e.backup);
    if (!b) return fail(b.error());
    if (!b->exists || sha_hex(b->bytes) != e.original_sha256)
      return fail(errc::not_found, "backup " + e.backup + " of " + e.path +
                                       (b->exists ? " changed since install" : " is missing"));
    if (auto st = write_file(e.path, b->bytes, e.original_mode, e.original_uid, e.original_gid);
        !st)
      return fail(st.error().wrap("restore " + e.path));
    out("restored " + e.path + " from " + e.backup);
  } else if (cur.exists) {
    if (::unlink(e.path.c_str()) != 0) return fail_errno(errno, "unlink " + e.path);
    out("removed " + e.path);
  }
  j.done("restore " + e.path, [p = e.path, cur] { return put_back(p, cur); });
  return {};
}

// Best effort after a commit: backups no longer needed, directories install made (deepest
// first, only when empty).
void clean_up(const std::vector<std::string>& backups, std::vector<std::string> dirs,
              const sink& out) {
  for (const auto& b : backups) {
    if (::unlink(b.c_str()) != 0 && errno != ENOENT)
      out("warning: could not remove backup " + b + ": " + std::strerror(errno));
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& d : dirs) {
    if (::rmdir(d.c_str()) == 0) out("removed directory " + d);
  }
}

// A file install (re)writes: its plan, what is there now, and whether that is an original.
struct write_step {
  const planned_file* f;
  file_state cur;
  bool back_up;
};

// Install's changes in order: directories, backups, the manifest (`next`, naming every file
// before any of them changes, so a crash leaves it right), then the targets. Journaled.
status apply_writes(const options& o, const manifest& old, manifest& next,
                    const std::vector<write_step>& writes, journal& j, const sink& out) {
  const std::string backup_dir = trim_slashes(o.backup_dir);
  // Directories first, so the manifest can name every one this run makes.
  if (auto st = make_dirs(backup_dir, j, next.created_dirs); !st) return st;
  for (const auto& w : writes) {
    if (auto st = make_dirs(parent_of(w.f->path), j, next.created_dirs); !st) return st;
    if (!w.back_up) continue;
    if (auto st = make_dirs(parent_of(next.find(w.f->path)->backup), j, next.created_dirs); !st)
      return st;
  }
  for (const auto& w : writes) {
    if (!w.back_up) continue;
    const entry& e = *next.find(w.f->path);
    if (auto st = write_file(e.backup, w.cur.bytes, w.cur.mode, w.cur.uid, w.cur.gid); !st)
      return fail(st.error().wrap("back up " + e.path));
    out("backed up " + e.path + " to " + e.backup);
    j.done("back up " + e.path, [b = e.backup]() -> status {
      if (::unlink(b.c_str()) != 0) return fail_errno(errno, "unlink " + b);
      return {};
    });
  }
  // The manifest names every file before any of them changes (a crash leaves it right).
  if (auto st = save_manifest(o, old, next, j); !st) return st;
  for (const auto& w : writes) {
    if (auto st = write_file(w.f->path, w.f->content, written_mode, ::geteuid(), ::getegid()); !st)
      return fail(st.error().wrap("write " + w.f->path));
    out("wrote " + w.f->path);
    j.done("write " + w.f->path, [p = w.f->path, was = w.cur] { return put_back(p, was); });
  }
  return {};
}

}  // namespace

// ---- rendering ----------------------------------------------------------------------------------

result<std::string> mirror_url(const peerd_config& cfg) {
  const std::string& l = cfg.http.listen;
  auto colon = l.rfind(':');
  if (colon == std::string::npos || colon + 1 == l.size())
    return fail(errc::config_error, "http.listen " + l + " has no port");
  std::string host = l.substr(0, colon);
  const std::string port = l.substr(colon + 1);
  if (host.empty() || host == "0.0.0.0" || host == "*") host = "127.0.0.1";
  if (host == "::" || host == "[::]") host = "[::1]";
  return "http://" + host + ":" + port;
}

std::string hosts_toml(std::string_view host, std::string_view server,
                       std::string_view mirror_url) {
  std::string out;
  out += "# Written by `shoal-peerd mirror install`: pulls from " +
         (host == "_default" ? std::string("any registry without its own directory here")
                             : std::string(host)) +
         "\n# go through Shoal's peerd on this node first";
  out += server.empty() ? ", then to the registry itself.\n"
                        : ", then to `server` when peerd does not answer.\n";
  out += "# `shoal-peerd mirror uninstall` puts back the file this one replaced.\n";
  if (!server.empty()) out += "server = " + toml_quote(server) + "\n";
  out += "\n[host." + toml_quote(mirror_url) + "]\n";
  out += "  capabilities = [\"pull\", \"resolve\"]\n";
  return out;
}

std::string registries_conf(const std::vector<mirror_registry_config>& registries,
                            std::string_view mirror_host_port, std::vector<std::string>* skipped) {
  std::string out =
      "# Written by `shoal-peerd mirror install`: CRI-O and podman pull these registries through\n"
      "# Shoal's peerd on this node first (containers-registries.conf(5), version 2).\n"
      "# `shoal-peerd mirror uninstall` puts back the file this one replaced.\n";
  for (const auto& r : registries) {
    const std::string prefix = r.prefix.empty() ? r.host : r.prefix;
    if (!oci::valid_name(prefix)) {
      if (skipped != nullptr) skipped->push_back(r.host);
      continue;
    }
    out += "\n[[registry]]\nlocation = " + toml_quote(r.host) + "\n";
    if (r.server.starts_with("http://")) out += "insecure = true\n";
    out += "\n[[registry.mirror]]\nlocation = " +
           toml_quote(std::string(mirror_host_port) + "/" + prefix) + "\ninsecure = true\n";
  }
  return out;
}

result<std::vector<planned_file>> plan(const peerd_config& cfg, const options& o, const sink& out) {
  auto url = mirror_url(cfg);
  if (!url) return fail(url.error());
  std::vector<planned_file> files;
  if (o.containerd) {
    const std::string certs = trim_slashes(o.certs_dir);
    for (const auto& r : cfg.mirror.registries) {
      const std::string server = r.server.empty() ? "https://" + r.host : r.server;
      files.push_back({certs + "/" + r.host + "/hosts.toml", "certs.d/" + r.host + "/hosts.toml",
                       hosts_toml(r.host, server, *url)});
    }
    files.push_back({certs + "/_default/hosts.toml", "certs.d/_default/hosts.toml",
                     hosts_toml("_default", "", *url)});
  }
  if (o.crio) {
    const std::string dir = trim_slashes(o.registries_conf_d);
    struct stat sb {};
    if (::stat(parent_of(dir).c_str(), &sb) != 0) {
      out("skipped " + dir + "/" + std::string(dropin_name) + ": " + parent_of(dir) +
          " does not exist (no CRI-O, podman or skopeo configuration here)");
    } else {
      std::vector<std::string> skipped;
      std::string text = registries_conf(cfg.mirror.registries,
                                         url->substr(std::string_view("http://").size()), &skipped);
      for (const auto& h : skipped) {
        out("left " + h + " out of " + std::string(dropin_name) +
            ": a host:port is no path prefix; set mirror.registries[].prefix to its "
            "registry-proxy upstreams[].prefix");
      }
      files.push_back({dir + "/" + std::string(dropin_name),
                       "registries.conf.d/" + std::string(dropin_name), std::move(text)});
    }
  }
  return files;
}

// ---- install and uninstall --------------------------------------------------------------------

status install(const std::vector<planned_file>& files, const options& o, const sink& out) {
  auto lock = lock_backup_parent(o);
  if (!lock) return fail(lock.error().wrap("install"));
  auto loaded = load_manifest(o);
  if (!loaded) return fail(loaded.error().wrap("install"));
  const manifest& old = *loaded;
  manifest next = old;
  next.exists = true;
  // Decide first, touch nothing: every target is read (an unreadable one stops us here).
  std::vector<write_step> writes;
  for (const auto& f : files) {
    auto cur = read_file(f.path);
    if (!cur) return fail(cur.error().wrap("install"));
    const std::string want = sha_hex(f.content);
    const std::string have = cur->exists ? sha_hex(cur->bytes) : "";
    if (entry* e = next.find(f.path)) {
      if (cur->exists && have == e->written_sha256 && have == want) {
        out("unchanged " + f.path);
        continue;
      }
      if (cur->exists && have != e->written_sha256 && have != e->original_sha256) {
        out("kept " + f.path + ": edited since shoal-peerd wrote it (uninstall keeps it too)");
        continue;
      }
      e->written_sha256 = want;
      writes.push_back({&f, std::move(*cur), false});
      continue;
    }
    entry e{.path = f.path, .written_sha256 = want};
    if (cur->exists) {
      e.backup = free_backup_path(o, f.backup_rel, next);
      e.original_sha256 = have;
      e.original_mode = cur->mode;
      e.original_uid = cur->uid;
      e.original_gid = cur->gid;
    }
    next.entries.push_back(std::move(e));
    const bool back_up = cur->exists;
    writes.push_back({&f, std::move(*cur), back_up});
  }
  // Entries of a registry no longer configured get their originals back (unless edited).
  std::vector<std::pair<entry, file_state>> obsolete;
  for (const auto& e : old.entries) {
    if (std::any_of(files.begin(), files.end(), [&](auto& f) { return f.path == e.path; }))
      continue;
    auto cur = read_file(e.path);
    if (!cur) return fail(cur.error().wrap("install"));
    const std::string have = cur->exists ? sha_hex(cur->bytes) : "";
    if (cur->exists && have != e.written_sha256 && have != e.original_sha256) {
      out("kept " + e.path + ": no longer configured, but edited since shoal-peerd wrote it");
      continue;
    }
    obsolete.emplace_back(e, std::move(*cur));
  }
  if (writes.empty() && obsolete.empty()) return {};

  journal j(out);
  auto run = [&]() -> status {
    if (auto st = apply_writes(o, old, next, writes, j, out); !st) return st;
    if (obsolete.empty()) return {};
    for (const auto& [e, cur] : obsolete) {
      if (auto st = restore(e, cur, j, out); !st) return st;
    }
    manifest final_m = next;
    std::erase_if(final_m.entries, [&](const entry& e) {
      return std::any_of(obsolete.begin(), obsolete.end(),
                         [&](auto& x) { return x.first.path == e.path; });
    });
    return save_manifest(o, next, final_m, j);
  };
  if (auto st = run(); !st) return fail(j.rollback(st.error().wrap("install")));
  std::vector<std::string> old_backups;
  for (const auto& [e, cur] : obsolete)
    if (!e.backup.empty()) old_backups.push_back(e.backup);
  clean_up(old_backups, {}, out);
  out("recorded in " + manifest_path(o));
  return {};
}

status uninstall(const options& o, const sink& out) {
  auto lock = lock_backup_parent(o);
  if (!lock) return fail(lock.error().wrap("uninstall"));
  auto loaded = load_manifest(o);
  if (!loaded) return fail(loaded.error().wrap("uninstall"));
  const manifest& m = *loaded;
  if (!m.exists) {
    out("nothing to undo: no manifest at " + manifest_path(o));
    return {};
  }
  // Decide first: read every target and check every backup before anything changes.
  std::vector<std::pair<const entry*, file_state>> restores;
  manifest kept = m;
  kept.entries.clear();
  std::vector<std::string> done_backups;
  for (const auto& e : m.entries) {
    auto cur = read_file(e.path);
    if (!cur) return fail(cur.error().wrap("uninstall"));
    const std::string have = cur->exists ? sha_hex(cur->bytes) : "";
    if (cur->exists && have != e.written_sha256) {
      if (!e.backup.empty() && have == e.original_sha256) {
        out("unchanged " + e.path + ": already holds its original");
        done_backups.push_back(e.backup);
      } else {
        // Only an entry with an original to give back stays in the manifest.
        if (e.backup.empty()) {
          out("kept " + e.path + ": edited since shoal-peerd wrote it (there was no file before)");
        } else {
          out("kept " + e.path + ": edited since shoal-peerd wrote it; its original is " +
              e.backup);
          kept.entries.push_back(e);
        }
      }
      continue;
    }
    if (!e.backup.empty()) {
      auto b = read_file(e.backup);
      if (!b) return fail(b.error().wrap("uninstall"));
      if (!b->exists || sha_hex(b->bytes) != e.original_sha256)
        return fail(errc::not_found, "uninstall: backup " + e.backup + " of " + e.path +
                                         (b->exists ? " changed since install" : " is missing") +
                                         "; nothing was changed");
      done_backups.push_back(e.backup);
    }
    restores.emplace_back(&e, std::move(*cur));
  }
  journal j(out);
  auto run = [&]() -> status {
    for (const auto& [e, cur] : restores) {
      if (auto st = restore(*e, cur, j, out); !st) return st;
    }
    return save_manifest(o, m, kept, j);
  };
  if (auto st = run(); !st) return fail(j.rollback(st.error().wrap("uninstall")));
  // Directories install made go when empty (those holding a kept file or backup stay).
  clean_up(done_backups, m.created_dirs, out);
  if (kept.entries.empty()) {
    out("removed manifest " + manifest_path(o));
  } else {
    out("manifest " + manifest_path(o) + " keeps the edited files' originals");
  }
  return {};
}

}  // namespace shoal::peerd::mirror_setup
