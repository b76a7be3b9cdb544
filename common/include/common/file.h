#pragma once
// Durable whole-file replacement for the small files the daemons keep beside the cache (dataset
// records, manifests, pack torrents): readers see the old file or the new one, never a torn
// write, and once write_atomic() returns success the new file survives a power loss.
//
// Blocking disk work: call it from worker threads, never from an event loop.

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/error.h"

namespace shoal {

// What a watcher compares to see that a file changed on disk: its identity (device, inode) and
// last change (size, mtime, ctime; symlinks followed), or the errno of its stat(). An atomic
// rename and Kubernetes' Secret symlink swap both give a new stamp. An empty path gives the
// default stamp. Used by the TLS context, the swarm's certificate and the scheduler's token file.
struct file_stamp {
  int err = 0;
  std::uint64_t dev = 0, ino = 0, size = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  friend bool operator==(const file_stamp&, const file_stamp&) = default;
};
[[nodiscard]] file_stamp stamp_of(const std::string& path);

// Whether any of `stamps` changed (mtime or ctime, which a rename sets) less than `within` ago by
// the wall clock. A certificate and a key replaced one after the other do not match for a moment;
// the TLS reloaders wait this long before they call such a pair a failure.
[[nodiscard]] bool changed_within(std::span<const file_stamp> stamps, std::chrono::seconds within);
inline constexpr std::chrono::seconds key_rotation_settle{2};

// Writes `data` to a temporary file beside `path` (same directory, unique name), fsyncs it,
// renames it over `path` and fsyncs the directory. Every failure says which step failed on which
// path, with errno_error()'s code and text ("fsync /d/x.json.tmp.12.3: Input/output error"; a
// full disk is errc::no_space). On failure the temporary file is removed and `path` keeps its
// previous content, except after a failed directory fsync: the new content is then in place but
// not known to be durable.
[[nodiscard]] status write_atomic(const std::string& path, std::string_view data);

// The same with the sync call injected (tests count and fail syncs). `sync` is called first on
// the temporary file's fd, then on the directory's fd.
[[nodiscard]] status write_atomic_for_test(const std::string& path, std::string_view data,
                                           int (*sync)(int));

// Writes all of `data` at fd's current offset (retrying short writes and EINTR); errors name
// `what`.
[[nodiscard]] status write_all(int fd, std::string_view data, const std::string& what);

// Copies `size` bytes from the current offset of `in` to that of `out`: copy_file_range (in the
// kernel), else read and write. errc::size_mismatch when `in` ends early; errors name `what`.
[[nodiscard]] status copy_bytes(int in, int out, std::uint64_t size, const std::string& what);

}  // namespace shoal
