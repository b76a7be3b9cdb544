#include "layout.h"

#include <fcntl.h>
#include <stdio.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <utility>

namespace shoal::cache::detail {

layout::layout(layout&& o) noexcept { *this = std::move(o); }

layout& layout::operator=(layout&& o) noexcept {
  if (this == &o) return *this;
  close_all();
  root_ = std::move(o.root_);
  pack_dir_ = std::move(o.pack_dir_);
  objects_ = std::move(o.objects_);
  tmp_ = std::move(o.tmp_);
  quarantine_ = std::move(o.quarantine_);
  index_ = std::move(o.index_);
  objects_fd_ = std::exchange(o.objects_fd_, -1);
  tmp_fd_ = std::exchange(o.tmp_fd_, -1);
  quarantine_fd_ = std::exchange(o.quarantine_fd_, -1);
  shard_fds_ = o.shard_fds_;
  o.shard_fds_.fill(-1);
  return *this;
}

layout::~layout() { close_all(); }

void layout::close_all() noexcept {
  close_quietly(objects_fd_);
  close_quietly(tmp_fd_);
  close_quietly(quarantine_fd_);
  objects_fd_ = tmp_fd_ = quarantine_fd_ = -1;
  for (int& fd : shard_fds_) {
    close_quietly(fd);
    fd = -1;
  }
}

namespace {

result<int> open_dir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail_errno(errno, "open directory " + path);
  return fd;
}

}  // namespace

result<layout> layout::create(const std::string& root) {
  layout l;
  l.root_ = root;
  while (l.root_.size() > 1 && l.root_.back() == '/') l.root_.pop_back();
  l.pack_dir_ = l.root_ + "/objects";
  l.objects_ = l.pack_dir_ + "/sha256";
  l.tmp_ = l.root_ + "/tmp";
  l.quarantine_ = l.root_ + "/quarantine";
  l.index_ = l.root_ + "/index";
  for (const std::string* dir : {&l.objects_, &l.tmp_, &l.quarantine_, &l.index_}) {
    if (auto st = make_dirs(*dir); !st) return std::unexpected(st.error());
  }
  auto ofd = open_dir(l.objects_);
  if (!ofd) return std::unexpected(ofd.error());
  l.objects_fd_ = *ofd;
  auto tfd = open_dir(l.tmp_);
  if (!tfd) return std::unexpected(tfd.error());
  l.tmp_fd_ = *tfd;
  auto qfd = open_dir(l.quarantine_);
  if (!qfd) return std::unexpected(qfd.error());
  l.quarantine_fd_ = *qfd;
  for (std::size_t i = 0; i < shard_count; ++i) {
    std::string name = shard_name(static_cast<std::uint8_t>(i));
    if (::mkdirat(l.objects_fd_, name.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail_errno(errno, "mkdir " + l.objects_ + "/" + name);
    }
    int fd = ::openat(l.objects_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fail_errno(errno, "open directory " + l.objects_ + "/" + name);
    l.shard_fds_[i] = fd;
  }
  // The shard directories themselves must survive a power loss before any object is renamed
  // into them; one fsync of their parent at open is enough.
  if (auto st = fsync_fd(l.objects_fd_, "fsync " + l.objects_); !st) {
    return std::unexpected(st.error());
  }
  return l;
}

std::string layout::shard_path(std::uint8_t shard) const {
  return objects_ + "/" + shard_name(shard);
}

std::string layout::object_path(const digest& d) const {
  return pack_dir_ + "/" + relative_object_path(d);
}

std::string layout::relative_object_path(const digest& d) {
  std::string hex = d.hex();
  return "sha256/" + hex.substr(0, 2) + "/" + hex;
}

std::string shard_name(std::uint8_t shard) {
  static const char* hx = "0123456789abcdef";
  return std::string{hx[shard >> 4], hx[shard & 15]};
}

std::string random_suffix() {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<std::uint64_t>(::getpid()) << 32)};
  static const char* hx = "0123456789abcdef";
  std::uint64_t v = rng();
  std::string s(16, '0');
  for (int i = 0; i < 16; ++i) s[static_cast<std::size_t>(i)] = hx[(v >> (4 * i)) & 15];
  return s;
}

status fsync_fd(int fd, std::string_view what) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return fail_errno(errno, what);
  }
  return {};
}

status fdatasync_fd(int fd, std::string_view what) {
  while (::fdatasync(fd) != 0) {
    if (errno != EINTR) return fail_errno(errno, what);
  }
  return {};
}

status make_dirs(const std::string& path) {
  if (path.empty()) return fail(errc::invalid_argument, "empty directory path");
  std::string cur;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail_errno(errno, "mkdir " + cur);
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail_errno(errno, "stat " + path);
  if (!S_ISDIR(st.st_mode)) return fail(errc::io_error, path + " exists and is not a directory");
  return {};
}

int rename_noreplace(int from_dir, const std::string& from, int to_dir,
                     const std::string& to) noexcept {
  if (::renameat2(from_dir, from.c_str(), to_dir, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -1;
  // The filesystem cannot rename without replacing: a hard link fails with EEXIST just the same.
  if (::linkat(from_dir, from.c_str(), to_dir, to.c_str(), 0) != 0) return -1;
  ::unlinkat(from_dir, from.c_str(), 0);
  return 0;
}

void close_quietly(int fd) noexcept {
  if (fd >= 0) ::close(fd);
}

int open_read_noatime(int dirfd, const char* name) noexcept {
  int fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC);
  return fd;
}

bool is_sealed(int fd) noexcept {
  int flags = 0;
  return ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL) != 0;
}

int set_sealed(int fd, bool on) noexcept {
  int flags = 0;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return -1;
  int want = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  if (want == flags) return 0;
  return ::ioctl(fd, FS_IOC_SETFLAGS, &want);
}

namespace {

// Runs op() (an unlinkat or renameat of the file `name` in dirfd) with the file's seal lifted
// when it failed with EPERM because of it; reseals the inode if it still has a link.
template <class Op>
int with_seal_lifted(int dirfd, const char* name, Op op) noexcept {
  if (op() == 0) return 0;
  if (errno != EPERM) return -1;
  int fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    errno = EPERM;
    return -1;
  }
  if (!is_sealed(fd) || set_sealed(fd, false) != 0) {
    close_quietly(fd);
    errno = EPERM;
    return -1;
  }
  int rc = op();
  int err = errno;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_nlink > 0) (void)set_sealed(fd, true);
  close_quietly(fd);
  errno = err;
  return rc;
}

}  // namespace

int unlinkat_sealed(int dirfd, const char* name) noexcept {
  return with_seal_lifted(dirfd, name, [&] { return ::unlinkat(dirfd, name, 0); });
}

int renameat_sealed(int from_dir, const char* from, int to_dir, const char* to) noexcept {
  return with_seal_lifted(from_dir, from, [&] { return ::renameat(from_dir, from, to_dir, to); });
}

}  // namespace shoal::cache::detail
