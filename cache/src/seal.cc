// Dataset views as sealed hard links (store::link_sealed, store::unlink_sealed): a view file
// shares its object's inode, which carries FS_IMMUTABLE_FL while the view exists, so a write
// through the view (root in a training pod ignores 0444) cannot change what the cache holds and
// seeds (security review F19) and no byte is copied.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/fd.h"
#include "common/file.h"
#include "common/log.h"
#include "core.h"

namespace shoal::cache::detail {

namespace {

bool same_inode(const struct stat& a, const struct stat& b) {
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

}  // namespace

status core::link_sealed(const digest& id, const std::string& dst) {
  std::string hex = id.hex();
  std::lock_guard sl(seal_mu_);
  {
    std::lock_guard lk(mu_);
    if (!table_.contains(id) || removing_.contains(id))
      return fail(errc::not_found, "link " + id.str() + ": not in the cache");
  }
  unique_fd fd(open_read_noatime(layout_.shard_fd(id), hex.c_str()));
  if (!fd) return fail_errno(errno, "open " + layout_.object_path(id));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno(errno, "stat " + layout_.object_path(id));
  // One view per inode: a second view that shared it would be exposed when the seal is lifted
  // to unlink the first. A link made by anything else (an older view) is not ours to seal.
  if (is_sealed(fd.get()) || st.st_nlink != 1) {
    return fail(errc::busy, "object " + id.str() + " is already linked elsewhere (" +
                                std::to_string(st.st_nlink) + " links)");
  }
  if (::linkat(layout_.shard_fd(id), hex.c_str(), AT_FDCWD, dst.c_str(), 0) != 0)
    return fail_errno(errno, "link " + layout_.object_path(id) + " to " + dst);
  if (set_sealed(fd.get(), true) != 0) {
    int err = errno;
    ::unlink(dst.c_str());
    return fail_errno(err, "seal " + dst + " (FS_IOC_SETFLAGS immutable)");
  }
  return {};
}

status core::unlink_sealed(const std::string& path, const digest& id) {
  std::lock_guard sl(seal_mu_);
  unique_fd vfd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!vfd || !is_sealed(vfd.get())) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail_errno(errno, "remove " + path);
    return {};
  }
  std::string hex = id.hex();
  int shard = layout_.shard_fd(id);
  struct stat vst {
  }, ost{};
  if (::fstat(vfd.get(), &vst) != 0) return fail_errno(errno, "stat " + path);
  bool shared =
      ::fstatat(shard, hex.c_str(), &ost, AT_SYMLINK_NOFOLLOW) == 0 && same_inode(vst, ost);
  // The object's own inode, copied while the seal still holds (nothing can have changed it).
  std::string tmp;
  if (shared) {
    tmp = hex + ".unseal." + random_suffix() + ".part";
    unique_fd out(
        ::openat(layout_.tmp_fd(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!out) return fail_errno(errno, "create " + layout_.tmp_dir() + "/" + tmp);
    auto s = copy_bytes(vfd.get(), out.get(), static_cast<std::uint64_t>(vst.st_size),
                        "copy of " + id.str() + " for the cache");
    if (s) s = fdatasync_fd(out.get(), "fdatasync " + tmp);
    if (s && ::fchmod(out.get(), 0444) != 0) s = fail_errno(errno, "fchmod " + tmp);
    if (!s) {
      ::unlinkat(layout_.tmp_fd(), tmp.c_str(), 0);
      return fail(s.error().wrap("unlink view file " + path));
    }
  }
  if (set_sealed(vfd.get(), false) != 0) {
    int err = errno;
    if (!tmp.empty()) ::unlinkat(layout_.tmp_fd(), tmp.c_str(), 0);
    return fail_errno(err, "unseal " + path);
  }
  if (shared) {
    // Under mu_: no eviction or quarantine can take the object between the check and the rename.
    std::lock_guard lk(mu_);
    bool still = table_.contains(id) && !removing_.contains(id) &&
                 ::fstatat(shard, hex.c_str(), &ost, AT_SYMLINK_NOFOLLOW) == 0 &&
                 same_inode(vst, ost);
    if (!still || ::renameat(layout_.tmp_fd(), tmp.c_str(), shard, hex.c_str()) != 0) {
      if (still) {
        log::warn("cache: could not give a viewed object its own inode; it stays shared",
                  log::kv("digest", id.short_str()), log::kv("errno", errno));
      }
      ::unlinkat(layout_.tmp_fd(), tmp.c_str(), 0);
    }
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fail_errno(errno, "remove " + path);
  return {};
}

}  // namespace shoal::cache::detail
