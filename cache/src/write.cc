// The core's side of the write path: begin_write (present, follower or writer), capacity
// reservations, install (commit into objects/ and the index) and abandon (a failed write).
// Adoption of files written by someone else is in adopt.cc, the in-flight state in inflight.cc,
// the writer in writer.cc.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/sha256.h"
#include "core.h"

namespace shoal::cache::detail {

void core::wait_not_removing(std::unique_lock<std::mutex>& lk, const digest& id) {
  // Removal of one object is an unlink and a small index write; 10 s is a generous bound that
  // only a wedged disk would reach, and then the caller gets on with a busy error instead.
  removing_cv_.wait_for(lk, std::chrono::seconds(10), [&] { return !removing_.contains(id); });
}

result<write_ticket> core::begin_write(const digest& id, std::optional<std::uint64_t> expected,
                                       object_kind kind) {
  if (static_cast<std::size_t>(kind) >= object_kind_count) {
    return fail(errc::invalid_argument, "begin_write " + id.str() + ": invalid object kind");
  }
  bool retried_space = false;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (closed()) return fail(errc::cancelled, "begin_write " + id.str() + ": cache is closed");
    std::unique_lock lk(mu_);
    wait_not_removing(lk, id);
    if (removing_.contains(id)) {
      return fail(errc::busy, "begin_write " + id.str() + ": object is still being removed");
    }
    if (table_.contains(id)) {
      lk.unlock();
      auto r = open_read(id);
      if (r) {
        write_ticket t;
        t.role = write_role::present;
        t.reader.emplace(std::move(*r));
        return t;
      }
      if (r.error().is(errc::not_found)) continue;  // evicted meanwhile: look again
      return std::unexpected(r.error());
    }
    if (auto it = inflight_.find(id); it != inflight_.end()) {
      ctr_.coalesced.fetch_add(1, std::memory_order_relaxed);
      write_ticket t;
      t.role = write_role::follower;
      t.inflight = it->second;
      return t;
    }
    // The temp file is created under the lock so that a follower never sees an in-flight object
    // without its fd. It is one openat; the lock is not held across any data I/O.
    std::string tmp = id.hex() + "." + random_suffix() + ".part";
    int fd = ::openat(layout_.tmp_fd(), tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      int err = errno;
      lk.unlock();
      if ((err == ENOSPC || err == EDQUOT) && !retried_space) {
        retried_space = true;
        make_room(expected.value_or(0));
        continue;
      }
      if (err == ENOSPC || err == EDQUOT) count_no_space();
      return fail_errno(err,
                        "begin_write " + id.str() + ": create " + layout_.tmp_dir() + "/" + tmp);
    }
    std::shared_ptr<inflight_object> in(new inflight_object(id, kind, expected, fd));
    inflight_.emplace(id, in);
    lk.unlock();

    std::unique_ptr<object_writer> w(new object_writer(shared_from_this(), in, tmp));
    if (expected && *expected > 0) {
      if (auto st = w->ensure_reserved(*expected); !st) {
        count_no_space();
        return std::unexpected(w->fail(st.error().wrap("begin_write " + id.str())));
      }
      // Allocate the blocks now: a full disk shows up here, before any byte is streamed, and the
      // file is laid out contiguously. KEEP_SIZE leaves the visible size at what was written.
      bool retried = false;
      for (;;) {
        if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(*expected)) == 0) break;
        int err = errno;
        if (err == EINTR) continue;
        if (err == EOPNOTSUPP || err == ENOSYS) break;  // the filesystem cannot; writes will tell
        if ((err == ENOSPC || err == EDQUOT) && !retried) {
          retried = true;
          make_room(*expected);
          continue;
        }
        if (err == ENOSPC || err == EDQUOT) {
          count_no_space();
          return std::unexpected(w->fail(
              error{errc::no_space, "begin_write " + id.str() + ": no room for " +
                                        std::to_string(*expected) + " bytes even after evicting (" +
                                        std::strerror(err) + ")"}));
        }
        return std::unexpected(
            w->fail(errno_error(err, "begin_write " + id.str() + ": fallocate")));
      }
    }
    write_ticket t;
    t.role = write_role::writer;
    t.inflight = in;
    t.writer = std::move(w);
    return t;
  }
  return fail(errc::busy, "begin_write " + id.str() + ": object kept changing state; try again");
}

status core::reserve(std::uint64_t bytes, bool may_evict) {
  std::uint64_t cap = capacity();
  if (usage() + bytes > cap && !may_evict) {
    return fail(errc::no_space, "no room to reserve " + std::to_string(bytes) + " bytes ahead");
  }
  if (usage() + bytes > cap) {
    auto pinned_bytes = [&] {
      std::uint64_t n = 0;
      std::int64_t now_ms = to_ms(now());
      std::lock_guard lk(mu_);
      for (const auto& [id, v] : pins_) {
        if (!pinned_locked(id, now_ms)) continue;
        if (auto it = table_.find(id); it != table_.end()) n += it->second.size;
      }
      return n;
    };
    auto full = [&](std::uint64_t pinned, const char* evicted) {
      return fail(errc::no_space, "cache full: need " + std::to_string(bytes) +
                                      " more bytes; capacity " + std::to_string(cap) + ", used " +
                                      std::to_string(usage()) + " (" + std::to_string(pinned) +
                                      " pinned, " + std::to_string(reserved_bytes_.load()) +
                                      " in flight)" + evicted);
    };
    // What eviction cannot free (pinned objects, writes in flight): when the write cannot fit
    // beside it, fail before evicting anything. Emptying the cache first changed nothing but
    // made the node fetch everything again (a layer larger than the cache, pulled again and
    // again).
    if (auto pinned = pinned_bytes(); pinned + reserved_bytes_.load() + bytes > cap)
      return full(pinned, "; nothing evicted, since that could not make room");
    std::uint64_t target = std::min(low_bytes(), cap - bytes);
    evict_pass(target, INT64_MIN, evict_reason::watermark);
    if (usage() + bytes > cap) return full(pinned_bytes(), "");
  }
  reserved_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (usage() > high_bytes()) wake_maintenance();
  return {};
}

void core::unreserve(std::uint64_t bytes) noexcept {
  reserved_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

result<object_info> core::install(const std::shared_ptr<inflight_object>& in,
                                  const install_source& src, std::uint64_t size,
                                  std::uint64_t reserved, bool adopted) {
  const digest& id = in->id();
  std::string hex = id.hex();
  int shard = layout_.shard_fd(id);
  if (!src.in_place) {
    bool retried = false, set_aside = false;
    for (;;) {
      int rc = src.no_replace ? rename_noreplace(src.dirfd, src.name, shard, hex)
                              : ::renameat(src.dirfd, src.name.c_str(), shard, hex.c_str());
      if (rc == 0) break;
      int err = errno;
      if ((err == ENOSPC || err == EDQUOT) && !retried) {
        retried = true;
        make_room(4096);
        continue;
      }
      if ((err == EEXIST || err == EPERM) && !set_aside) {
        // A file at the object path without a row (this write holds the digest's in-flight slot,
        // so nothing committed it): debris, set aside in quarantine/, never written over. EPERM:
        // it is sealed (an evicted object a dataset view still links, its row lost in a crash).
        set_aside = true;
        set_aside_stray(id);
        continue;
      }
      if (err == ENOSPC || err == EDQUOT) count_no_space();
      return fail_errno(err, "commit " + id.str() + ": rename into " + layout_.shard_path(id));
    }
  }
  // Nothing below may leave the file in objects/ without a row, except a crash (which start-up
  // reconciliation repairs by re-verifying the orphan). The file goes back where it came from:
  // an adopted file is the caller's (store.h: "on failure the file is left where it was"), which
  // it may keep for a resumable retry; a writer's temporary file is removed by abandon().
  auto undo = [&] {
    if (src.in_place) return;
    if (::renameat(shard, hex.c_str(), src.dirfd, src.name.c_str()) != 0)
      ::unlinkat(shard, hex.c_str(), 0);
  };
  if (auto st = fsync_fd(shard, "fsync " + layout_.shard_path(id)); !st) {
    undo();
    return std::unexpected(st.error().wrap("commit " + id.str()));
  }
  std::int64_t now_ms = to_ms(now());
  object_row row{size, in->kind(), now_ms, now_ms, now_ms, 0};
  status put = index_->put(object_key(id), encode(row), true);
  if (!put && put.error().is(errc::no_space)) {
    make_room(1 << 20);
    (void)index_->resume();
    put = index_->put(object_key(id), encode(row), true);
    if (!put && put.error().is(errc::no_space)) count_no_space();
  }
  if (!put) {
    undo();
    return std::unexpected(put.error().wrap("commit " + id.str()));
  }
  entry e;
  e.size = size;
  e.kind = in->kind();
  e.created_ms = e.last_access_ms = e.last_scrub_ms = now_ms;
  object_info info;
  {
    std::lock_guard lk(mu_);
    insert_locked(id, std::move(e));
    if (auto it = inflight_.find(id); it != inflight_.end() && it->second == in)
      inflight_.erase(it);
    info = info_locked(id, table_.at(id), now_ms);
  }
  unreserve(reserved);
  in->finish_committed(size);
  (adopted ? ctr_.adoptions : ctr_.commits).fetch_add(1, std::memory_order_relaxed);
  publish(event{event_type::committed, id, size, in->kind(), evict_reason::none});
  if (usage() > high_bytes()) wake_maintenance();
  return info;
}

void core::abandon(const std::shared_ptr<inflight_object>& in, const std::string& tmp_name,
                   std::uint64_t reserved, const error& e, bool mismatch) {
  if (!tmp_name.empty()) ::unlinkat(layout_.tmp_fd(), tmp_name.c_str(), 0);
  unreserve(reserved);
  {
    std::lock_guard lk(mu_);
    if (auto it = inflight_.find(in->id()); it != inflight_.end() && it->second == in) {
      inflight_.erase(it);
    }
  }
  in->finish_failed(e);
  (mismatch ? ctr_.mismatches : ctr_.aborted).fetch_add(1, std::memory_order_relaxed);
  log::warn("cache write failed", log::kv("digest", in->id().short_str()),
            log::kv("error", e.to_string()));
}

}  // namespace shoal::cache::detail