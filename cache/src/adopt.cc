// The core's adoption of files written by someone else (libtorrent, a dataset group's download):
// adopt_file verifies a file and moves it into objects/ without ever replacing what is there;
// adopt_staged does the same for a file finished in the staging directory and consumes it in
// every outcome, proving it even when another path committed the object first; debris found at
// an object path is set aside in quarantine/.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sha256.h"
#include "core.h"

namespace shoal::cache::detail {

namespace {

// Opens a file to adopt (read-only, not through a symlink) and stats it: its fd, or why not.
result<int> open_regular(const std::string& path, struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return fail_errno(errno, "adopt: open " + path);
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    close_quietly(fd);
    return fail_errno(err, "adopt: stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    close_quietly(fd);
    return fail(errc::invalid_argument, "adopt: " + path + " is not a regular file");
  }
  return fd;
}

// The caller's hash stands for a pass over the file: the file opened is the one it hashed, whole.
bool proven(const content_proof* proof, const struct stat& st) {
  return proof && proof->size == static_cast<std::uint64_t>(st.st_size) &&
         proof->dev == static_cast<std::uint64_t>(st.st_dev) &&
         proof->ino == static_cast<std::uint64_t>(st.st_ino);
}

}  // namespace

status core::adopt_file(const std::string& path, const digest& id, object_kind kind,
                        const content_proof* proof) {
  if (static_cast<std::size_t>(kind) >= object_kind_count) {
    return fail(errc::invalid_argument, "adopt " + path + ": invalid object kind");
  }
  if (closed()) return fail(errc::cancelled, "adopt " + path + ": cache is closed");
  struct stat st {};
  auto opened = open_regular(path, st);
  if (!opened) return std::unexpected(opened.error());
  int fd = *opened;
  auto size = static_cast<std::uint64_t>(st.st_size);
  std::string hex = id.hex();
  struct stat dst {};
  bool in_place = ::fstatat(layout_.shard_fd(id), hex.c_str(), &dst, AT_SYMLINK_NOFOLLOW) == 0 &&
                  dst.st_dev == st.st_dev && dst.st_ino == st.st_ino;
  if (!in_place && ::fstatat(layout_.shard_fd(id), ".", &dst, 0) == 0 && dst.st_dev != st.st_dev) {
    close_quietly(fd);
    return fail(errc::invalid_argument, "adopt: " + path + " is not on the cache's filesystem (" +
                                            layout_.root() + "); a rename cannot move it");
  }

  std::shared_ptr<inflight_object> in;
  {
    std::unique_lock lk(mu_);
    wait_not_removing(lk, id);
    if (table_.contains(id) || removing_.contains(id)) {
      close_quietly(fd);
      return fail(errc::already_exists, "adopt " + path + ": " + id.str() + " is already cached");
    }
    if (inflight_.contains(id)) {
      close_quietly(fd);
      return fail(errc::busy, "adopt " + path + ": a write of " + id.str() + " is in progress");
    }
    // The in-flight object owns the fd from here (followers read it once committed).
    in.reset(new inflight_object(id, kind, size, fd));
    inflight_.emplace(id, in);
  }
  if (auto r = reserve(size); !r) {
    count_no_space();
    abandon(in, {}, 0, r.error().wrap("adopt " + path), false);
    return std::unexpected(r.error().wrap("adopt " + path));
  }
  const bool by_caller = proven(proof, st);
  auto got = by_caller ? result<digest>(id) : sha256_fd(fd, 0, size);
  if (!got || *got != id) {
    error e = got ? error{errc::digest_mismatch, "adopt " + path + ": content hashes to " +
                                                     got->str() + ", expected " + id.str()}
                  : got.error().wrap("adopt " + path);
    // A bad file sitting at the object path would otherwise look like an object to a reader
    // that bypasses the index (libtorrent seeding); it goes.
    if (in_place && got.has_value()) (void)unlinkat_sealed(layout_.shard_fd(id), hex.c_str());
    abandon(in, {}, size, e, got.has_value());
    return std::unexpected(e);
  }
  if (auto s = fdatasync_fd(fd, "fdatasync " + path); !s) {
    abandon(in, {}, size, s.error(), false);
    return std::unexpected(s.error().wrap("adopt"));
  }
  if (::fchmod(fd, 0444) != 0) {
    error e = errno_error(errno, "adopt: fchmod " + path);
    abandon(in, {}, size, e, false);
    return std::unexpected(e);
  }
  auto info = install(in, install_source{AT_FDCWD, path, in_place, true}, size, size, true);
  if (!info) {
    abandon(in, {}, size, info.error(), false);
    return std::unexpected(info.error().wrap("adopt " + path));
  }
  if (by_caller) ctr_.adoptions_proven.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void core::set_aside_stray(const digest& id) {
  std::string hex = id.hex();
  std::string qname = hex + ".stray." + random_suffix();
  if (renameat_sealed(layout_.shard_fd(id), hex.c_str(), layout_.quarantine_fd(), qname.c_str()) !=
      0) {
    log::warn("cache: could not set aside a stray file at an object path",
              log::kv("digest", id.short_str()), log::kv("errno", errno));
    return;
  }
  log::warn("cache: a file without an index row was at an object path; set aside",
            log::kv("digest", id.str()), log::kv("file", layout_.quarantine_dir() + "/" + qname));
}

status core::verify_file(const std::string& path, const digest& id, const content_proof* proof) {
  struct stat st {};
  auto opened = open_regular(path, st);
  if (!opened) return std::unexpected(opened.error());
  int fd = *opened;
  if (proven(proof, st)) {
    close_quietly(fd);
    return {};
  }
  auto got = sha256_fd(fd, 0, static_cast<std::uint64_t>(st.st_size));
  close_quietly(fd);
  if (!got) return std::unexpected(got.error().wrap("adopt " + path));
  if (*got == id) return {};
  ctr_.mismatches.fetch_add(1, std::memory_order_relaxed);
  return fail(errc::digest_mismatch,
              "adopt " + path + ": content hashes to " + got->str() + ", expected " + id.str());
}

result<adopt_outcome> core::adopt_staged(const std::string& path, const digest& id,
                                         object_kind kind, const content_proof* proof) {
  auto drop = [&] { ::unlink(path.c_str()); };
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto st = adopt_file(path, id, kind, proof);
    if (st) return adopt_outcome::adopted;
    if (!st.error().is(errc::already_exists) && !st.error().is(errc::busy)) {
      drop();
      return std::unexpected(st.error());
    }
    // Another path committed the object, or is writing it: the staged copy still proves itself
    // (its bytes may have reached readers already), then goes; the committed object stays.
    if (auto v = verify_file(path, id, proof); !v) {
      drop();
      return std::unexpected(v.error());
    }
    if (st.error().is(errc::busy)) {
      // UINT64_MAX - 1: never "more bytes"; wakes when that write commits or fails.
      if (auto in = find_inflight(id)) (void)in->wait(UINT64_MAX - 1, std::chrono::seconds(30));
    }
    if (contains(id)) {
      drop();
      return adopt_outcome::already_present;
    }
  }
  drop();
  return fail(errc::busy, "adopt " + path + ": " + id.str() + " kept changing state; try again");
}

}  // namespace shoal::cache::detail
