// Scrub: rehash committed objects, least recently verified first, optionally throttled; an
// object whose bytes no longer match its digest is moved to quarantine/ and forgotten.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/log.h"
#include "common/sha256.h"
#include "core.h"

namespace shoal::cache::detail {

void core::quarantine(const digest& id, int fd) {
  std::string hex = id.hex();
  int shard = layout_.shard_fd(id);
  std::vector<victim> v;
  {
    std::lock_guard lk(mu_);
    if (!table_.contains(id)) return;
    // The object may have been evicted and committed again (good bytes, new inode) since the
    // scrub opened it; only the inode that failed is quarantined.
    struct stat a {
    }, b{};
    if (::fstat(fd, &a) != 0 || ::fstatat(shard, hex.c_str(), &b, AT_SYMLINK_NOFOLLOW) != 0 ||
        a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      return;
    }
    v.push_back(take_locked(id));
  }
  std::string qname = hex + "." + std::to_string(to_ms(now()));
  if (::renameat(shard, hex.c_str(), layout_.quarantine_fd(), qname.c_str()) != 0) {
    log::warn("cache: could not move a corrupt object to quarantine; deleting it",
              log::kv("digest", id.short_str()), log::kv("errno", errno));
    ::unlinkat(shard, hex.c_str(), 0);
  }
  log::error("cache: object failed verification and was quarantined", log::kv("digest", id.str()),
             log::kv("file", layout_.quarantine_dir() + "/" + qname));
  finish_removal(v, event_type::quarantined, evict_reason::none);
}

scrub_report core::scrub(std::uint64_t max_bytes, bool throttle, std::int64_t older_than_ms) {
  std::lock_guard sl(scrub_mu_);
  scrub_report rep;
  struct cand {
    std::int64_t last_scrub;
    digest id;
    std::uint64_t size;
  };
  std::vector<cand> cands;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, e] : table_) {
      if (e.last_scrub_ms < older_than_ms) cands.push_back(cand{e.last_scrub_ms, id, e.size});
    }
  }
  std::sort(cands.begin(), cands.end(), [](const cand& a, const cand& b) {
    return a.last_scrub != b.last_scrub ? a.last_scrub < b.last_scrub : a.id < b.id;
  });

  const std::uint64_t rate = opts_.scrub_bytes_per_sec;
  auto start = std::chrono::steady_clock::now();
  std::uint64_t throttled_bytes = 0;
  constexpr std::size_t chunk = 1 << 20;
  std::vector<char> buf(chunk);
  auto stopping = [this] {
    std::lock_guard lk(bg_mu_);
    return bg_stop_;
  };

  for (const cand& c : cands) {
    if (rep.bytes >= max_bytes || stopping()) break;
    std::string hex = c.id.hex();
    int shard = layout_.shard_fd(c.id);
    int fd = ::openat(shard, hex.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = ::openat(shard, hex.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ENOENT) {
        ++rep.errors;
        continue;
      }
      // The file vanished under a live row: forget the object.
      std::vector<victim> v;
      {
        std::lock_guard lk(mu_);
        auto it = table_.find(c.id);
        if (it == table_.end() || removing_.contains(c.id)) continue;
        v.push_back(take_locked(c.id));
      }
      log::error("cache: indexed object file is missing", log::kv("digest", c.id.str()));
      finish_removal(v, event_type::removed, evict_reason::none);
      ++rep.missing;
      ctr_.scrub_missing.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    sha256_hasher h;
    std::uint64_t done = 0;
    bool read_error = false, interrupted = false;
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), chunk);
      if (n < 0) {
        if (errno == EINTR) continue;
        read_error = true;
        break;
      }
      if (n == 0) break;
      h.update(buf.data(), static_cast<std::size_t>(n));
      done += static_cast<std::uint64_t>(n);
      if (throttle && rate > 0) {
        throttled_bytes += static_cast<std::uint64_t>(n);
        auto due = std::chrono::duration<double>(static_cast<double>(throttled_bytes) /
                                                 static_cast<double>(rate));
        auto elapsed = std::chrono::steady_clock::now() - start;
        if (due > elapsed) {
          auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(due - elapsed);
          if (!sleep_unless_stopped(wait)) {
            interrupted = true;
            break;
          }
        }
      }
    }
    // Drop the pages we read: a scrub must not push hot objects out of the page cache.
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (interrupted) {
      close_quietly(fd);
      break;
    }
    if (read_error) {
      log::warn("cache: scrub read failed", log::kv("digest", c.id.short_str()),
                log::kv("errno", errno));
      ++rep.errors;
      close_quietly(fd);
      continue;
    }
    rep.bytes += done;
    ctr_.scrubbed_bytes.fetch_add(done, std::memory_order_relaxed);
    if (done == c.size && h.finish() == c.id) {
      ++rep.objects;
      ctr_.scrubbed_objects.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard lk(mu_);
      if (auto it = table_.find(c.id); it != table_.end()) {
        it->second.last_scrub_ms = to_ms(now());
        if (!it->second.dirty) {
          it->second.dirty = true;
          dirty_.push_back(c.id);
        }
      }
    } else {
      ++rep.mismatches;
      ctr_.scrub_mismatches.fetch_add(1, std::memory_order_relaxed);
      quarantine(c.id, fd);
    }
    close_quietly(fd);
  }
  return rep;
}

void core::scrub_loop() {
  using namespace std::chrono;
  for (;;) {
    std::int64_t older = to_ms(now()) - duration_cast<milliseconds>(opts_.scrub_interval).count();
    scrub_report rep = scrub(UINT64_MAX, true, older);
    if (rep.objects + rep.mismatches + rep.missing + rep.errors > 0) {
      log::info("cache scrub pass", log::kv("objects", rep.objects), log::kv("bytes", rep.bytes),
                log::kv("mismatches", rep.mismatches), log::kv("missing", rep.missing),
                log::kv("errors", rep.errors));
    }
    auto pause = std::min<nanoseconds>(opts_.scrub_interval, seconds(60));
    if (rep.objects + rep.mismatches + rep.missing > 0) pause = seconds(1);
    if (!sleep_unless_stopped(pause)) return;
  }
}

}  // namespace shoal::cache::detail
