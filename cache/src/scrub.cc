// Scrub: rehash committed objects, least recently verified first, optionally throttled; an
// object whose bytes no longer match its digest is moved to quarantine/ and forgotten.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>
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
  if (renameat_sealed(shard, hex.c_str(), layout_.quarantine_fd(), qname.c_str()) != 0) {
    log::warn("cache: could not move a corrupt object to quarantine; deleting it",
              log::kv("digest", id.short_str()), log::kv("errno", errno));
    (void)unlinkat_sealed(shard, hex.c_str());
  }
  log::error("cache: object failed verification and was quarantined", log::kv("digest", id.str()),
             log::kv("file", layout_.quarantine_dir() + "/" + qname));
  finish_removal(v, event_type::quarantined, evict_reason::none);
}

namespace {

// What hashing one object's file came to.
struct hash_outcome {
  std::uint64_t done = 0;    // bytes read and hashed
  bool read_error = false;   // a read failed (errno tells why)
  bool interrupted = false;  // the pause between chunks was cut short by stop()
};

// Paces a scrub pass to `rate` bytes per second from its start (0: as fast as the disk goes).
class pacer {
 public:
  explicit pacer(std::uint64_t rate) : rate_(rate), start_(std::chrono::steady_clock::now()) {}
  // How long to pause after `n` more bytes; nullopt when the pass is not ahead of its rate.
  std::optional<std::chrono::nanoseconds> pause_after(std::uint64_t n) {
    if (rate_ == 0) return std::nullopt;
    bytes_ += n;
    auto due =
        std::chrono::duration<double>(static_cast<double>(bytes_) / static_cast<double>(rate_));
    auto elapsed = std::chrono::steady_clock::now() - start_;
    if (due <= elapsed) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(due - elapsed);
  }

 private:
  const std::uint64_t rate_;
  const std::chrono::steady_clock::time_point start_;
  std::uint64_t bytes_ = 0;
};

// Reads fd to its end into `h` through `buf`; after each chunk `pause(n)` may sleep, and returns
// false to stop early.
template <class Pause>
hash_outcome hash_file(int fd, std::vector<char>& buf, sha256_hasher& h, Pause&& pause) {
  hash_outcome out;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      out.read_error = true;
      return out;
    }
    if (n == 0) return out;
    h.update(buf.data(), static_cast<std::size_t>(n));
    out.done += static_cast<std::uint64_t>(n);
    if (!pause(static_cast<std::uint64_t>(n))) {
      out.interrupted = true;
      return out;
    }
  }
}

}  // namespace

std::vector<core::scrub_candidate> core::scrub_candidates(std::int64_t older_than_ms) const {
  std::vector<scrub_candidate> cands;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, e] : table_) {
      if (e.last_scrub_ms < older_than_ms) {
        cands.push_back(scrub_candidate{e.last_scrub_ms, id, e.size});
      }
    }
  }
  std::sort(cands.begin(), cands.end(), [](const scrub_candidate& a, const scrub_candidate& b) {
    return a.last_scrub != b.last_scrub ? a.last_scrub < b.last_scrub : a.id < b.id;
  });
  return cands;
}

bool core::forget_vanished(const digest& id) {
  std::vector<victim> v;
  {
    std::lock_guard lk(mu_);
    auto it = table_.find(id);
    if (it == table_.end() || removing_.contains(id)) return false;
    v.push_back(take_locked(id));
  }
  log::error("cache: indexed object file is missing", log::kv("digest", id.str()));
  finish_removal(v, event_type::removed, evict_reason::none);
  ctr_.scrub_missing.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void core::mark_scrubbed(const digest& id) {
  ctr_.scrubbed_objects.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  if (auto it = table_.find(id); it != table_.end()) {
    it->second.last_scrub_ms = to_ms(now());
    if (!it->second.dirty) {
      it->second.dirty = true;
      dirty_.push_back(id);
    }
  }
}

scrub_report core::scrub(std::uint64_t max_bytes, bool throttle, std::int64_t older_than_ms) {
  std::lock_guard sl(scrub_mu_);
  scrub_report rep;
  std::vector<scrub_candidate> cands = scrub_candidates(older_than_ms);
  pacer pace(throttle ? opts_.scrub_bytes_per_sec : 0);
  std::vector<char> buf(1 << 20);
  auto stopping = [this] {
    std::lock_guard lk(bg_mu_);
    return bg_stop_;
  };
  auto pause = [&](std::uint64_t n) {
    auto wait = pace.pause_after(n);
    return !wait || sleep_unless_stopped(*wait);
  };

  for (const scrub_candidate& c : cands) {
    if (rep.bytes >= max_bytes || stopping()) break;
    int fd = open_read_noatime(layout_.shard_fd(c.id), c.id.hex().c_str());
    if (fd < 0) {
      if (errno != ENOENT) {
        ++rep.errors;
      } else if (forget_vanished(c.id)) {  // the file vanished under a live row
        ++rep.missing;
      }
      continue;
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    sha256_hasher h;
    hash_outcome out = hash_file(fd, buf, h, pause);
    // Drop the pages we read: a scrub must not push hot objects out of the page cache.
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (out.interrupted) {
      close_quietly(fd);
      break;
    }
    if (out.read_error) {
      log::warn("cache: scrub read failed", log::kv("digest", c.id.short_str()),
                log::kv("errno", errno));
      ++rep.errors;
      close_quietly(fd);
      continue;
    }
    rep.bytes += out.done;
    ctr_.scrubbed_bytes.fetch_add(out.done, std::memory_order_relaxed);
    if (out.done == c.size && h.finish() == c.id) {
      ++rep.objects;
      mark_scrubbed(c.id);
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
