// write_atomic: temp file, fsync, rename, fsync of the directory; stamp_of (see common/file.h).
#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fd.h"

namespace shoal {

file_stamp stamp_of(const std::string& path) {
  file_stamp s;
  if (path.empty()) return s;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    s.err = errno;
    return s;
  }
  s.dev = static_cast<std::uint64_t>(st.st_dev);
  s.ino = static_cast<std::uint64_t>(st.st_ino);
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.mtime_ns = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  s.ctime_ns = std::int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
  return s;
}

bool changed_within(std::span<const file_stamp> stamps, std::chrono::seconds within) {
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  const std::int64_t limit = now - std::chrono::nanoseconds(within).count();
  return std::any_of(stamps.begin(), stamps.end(), [&](const file_stamp& s) {
    return s.err == 0 && std::max(s.mtime_ns, s.ctime_ns) > limit;
  });
}

namespace {

// A temp name no other live writer uses: the pid tells processes apart, the counter threads. A
// name left by a crashed process whose pid came back (PID 1 in a container) is overwritten.
std::string temp_name(const std::string& path) {
  static std::atomic<std::uint64_t> seq{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seq.fetch_add(1));
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

status sync_fd(int (*sync)(int), int fd, const std::string& what) {
  while (sync(fd) != 0) {
    if (errno != EINTR) return fail_errno(errno, what);
  }
  return {};
}

// Writes and syncs the temp file; removes it on failure.
status write_temp(const std::string& tmp, std::string_view data, int (*sync)(int)) {
  unique_fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return fail_errno(errno, "open " + tmp);
  status st = write_all(fd.get(), data, tmp);
  if (st) st = sync_fd(sync, fd.get(), "fsync " + tmp);
  if (st && ::close(fd.release()) != 0) st = fail_errno(errno, "close " + tmp);
  if (!st) ::unlink(tmp.c_str());
  return st;
}

}  // namespace

status write_atomic_for_test(const std::string& path, std::string_view data, int (*sync)(int)) {
  if (path.empty() || path.back() == '/')
    return fail(errc::invalid_argument, "write_atomic: not a file path: " + path);
  std::string dir = parent_dir(path);
  // The directory is opened first: a missing or unusable directory fails before anything is
  // written.
  unique_fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return fail_errno(errno, "open directory " + dir);
  std::string tmp = temp_name(path);
  if (auto st = write_temp(tmp, data, sync); !st) return st;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fail_errno(e, "rename " + tmp + " to " + path);
  }
  // Without this the rename itself may be lost in a crash, leaving the old file (or none).
  return sync_fd(sync, dfd.get(), "fsync directory " + dir);
}

status write_atomic(const std::string& path, std::string_view data) {
  return write_atomic_for_test(path, data, ::fsync);
}

status write_all(int fd, std::string_view data, const std::string& what) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "write " + what);
    }
    off += static_cast<std::size_t>(n);
  }
  return {};
}

status copy_bytes(int in, int out, std::uint64_t size, const std::string& what) {
  bool in_kernel = true;
  std::vector<char> buf;
  while (size > 0) {
    ssize_t n;
    if (in_kernel) {
      n = ::copy_file_range(in, nullptr, out, nullptr, static_cast<std::size_t>(size), 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        in_kernel = false;
        continue;
      }
    } else {
      if (buf.empty()) buf.resize(1u << 20);
      n = ::read(in, buf.data(),
                 static_cast<std::size_t>(std::min<std::uint64_t>(size, buf.size())));
      for (ssize_t w = 0, m; n > 0 && w < n; w += m) {
        m = ::write(out, buf.data() + w, static_cast<std::size_t>(n - w));
        if (m < 0 && errno == EINTR) m = 0;
        if (m < 0) return fail_errno(errno, "write " + what);
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(errno, "copy " + what);
    if (n == 0) return fail(errc::size_mismatch, what + ": the source ended early");
    size -= static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace shoal
