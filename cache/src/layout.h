#pragma once
// The on-disk layout under the cache root and small POSIX helpers around it. The layout holds an
// open fd for every directory it names (256 shard directories included) so that hot paths use
// openat/renameat/unlinkat and fsync without re-resolving paths.
//
// Lifecycle: created once by core::open, immutable afterwards; read from any thread.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache::detail {

class layout {
 public:
  static constexpr std::size_t shard_count = 256;

  layout() = default;
  layout(layout&&) noexcept;
  layout& operator=(layout&&) noexcept;
  layout(const layout&) = delete;
  layout& operator=(const layout&) = delete;
  ~layout();

  // mkdir -p of every directory (0755) and open fds on them.
  [[nodiscard]] static result<layout> create(const std::string& root);

  [[nodiscard]] const std::string& root() const noexcept { return root_; }
  // <root>/objects/sha256: the parent of the shard directories.
  [[nodiscard]] const std::string& objects_dir() const noexcept { return objects_; }
  // <root>/objects: object_path(d) == pack_dir() + "/" + relative_object_path(d).
  [[nodiscard]] const std::string& pack_dir() const noexcept { return pack_dir_; }
  [[nodiscard]] const std::string& tmp_dir() const noexcept { return tmp_; }
  [[nodiscard]] const std::string& quarantine_dir() const noexcept { return quarantine_; }
  [[nodiscard]] const std::string& index_dir() const noexcept { return index_; }

  [[nodiscard]] int shard_fd(std::uint8_t shard) const noexcept { return shard_fds_[shard]; }
  [[nodiscard]] int shard_fd(const digest& d) const noexcept { return shard_fds_[d.bytes()[0]]; }
  [[nodiscard]] int objects_fd() const noexcept { return objects_fd_; }
  [[nodiscard]] int tmp_fd() const noexcept { return tmp_fd_; }
  [[nodiscard]] int quarantine_fd() const noexcept { return quarantine_fd_; }

  [[nodiscard]] std::string shard_path(std::uint8_t shard) const;
  [[nodiscard]] std::string shard_path(const digest& d) const { return shard_path(d.bytes()[0]); }
  [[nodiscard]] std::string object_path(const digest& d) const;
  // "sha256/<hh>/<64hex>": the layout below pack_dir(), which the pack metainfo format mirrors.
  [[nodiscard]] static std::string relative_object_path(const digest& d);

 private:
  void close_all() noexcept;

  std::string root_, pack_dir_, objects_, tmp_, quarantine_, index_;
  int objects_fd_ = -1, tmp_fd_ = -1, quarantine_fd_ = -1;
  std::array<int, shard_count> shard_fds_ = [] {
    std::array<int, shard_count> a{};
    a.fill(-1);
    return a;
  }();
};

// Two lowercase hex characters of a shard number ("0a").
[[nodiscard]] std::string shard_name(std::uint8_t shard);
// A random 16-hex-character suffix for temp file names.
[[nodiscard]] std::string random_suffix();
// fsync/fdatasync with EINTR handling and an error that names `what`.
[[nodiscard]] status fsync_fd(int fd, std::string_view what);
[[nodiscard]] status fdatasync_fd(int fd, std::string_view what);
// mkdir -p; ok if it already exists as a directory.
[[nodiscard]] status make_dirs(const std::string& path);
// renameat that fails with EEXIST instead of replacing an existing `to` (renameat2 with
// RENAME_NOREPLACE; link and unlink where the filesystem lacks it). Returns 0, or -1 with errno.
[[nodiscard]] int rename_noreplace(int from_dir, const std::string& from, int to_dir,
                                   const std::string& to) noexcept;
// Closes fd if >= 0, ignoring errors (used on error paths and in destructors).
void close_quietly(int fd) noexcept;
// Opens `name` (relative to dirfd) read-only with O_NOATIME, since the cache keeps its own access
// time and the kernel's would cost a metadata write per read; where O_NOATIME is refused (EPERM:
// not the file's owner) it opens without. Returns the fd, or -1 with errno set.
[[nodiscard]] int open_read_noatime(int dirfd, const char* name) noexcept;

// Seals (store::link_sealed): an object linked into a dataset view carries FS_IMMUTABLE_FL, so
// nobody without CAP_LINUX_IMMUTABLE (root in a pod included) can write, truncate, chmod, rename
// or unlink it, nor write through a descriptor opened earlier.
[[nodiscard]] bool is_sealed(int fd) noexcept;
// Sets or clears the seal; 0, or -1 with errno (EPERM: no CAP_LINUX_IMMUTABLE; ENOTTY or
// EOPNOTSUPP: the filesystem has no such flag).
[[nodiscard]] int set_sealed(int fd, bool on) noexcept;
// unlinkat and renameat for files that may be sealed: on EPERM from a sealed file the seal is
// lifted for the call, and put back when another link (a view) still holds the inode. Returns 0,
// or -1 with errno.
[[nodiscard]] int unlinkat_sealed(int dirfd, const char* name) noexcept;
[[nodiscard]] int renameat_sealed(int from_dir, const char* from, int to_dir,
                                  const char* to) noexcept;

}  // namespace shoal::cache::detail
