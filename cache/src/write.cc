// The write path: in-flight state shared with followers, the writer, commit (install) and
// failure (abandon), capacity reservation, and adoption of files written by someone else.

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

namespace shoal::cache {

// ---------------------------------------------------------------------------------------------
// inflight_object

inflight_object::~inflight_object() { detail::close_quietly(fd_); }

progress inflight_object::snapshot() const {
  std::lock_guard lk(mu_);
  progress p;
  p.state = state();
  p.available = available();
  p.verified = verified_.load() || p.state == write_state::committed;
  if (p.state == write_state::failed) p.err = error_;
  return p;
}

void inflight_object::fire(std::vector<waiter>& ready, const progress& p) {
  for (auto& w : ready) {
    try {
      w.cb(p);
    } catch (const std::exception& e) {
      log::error("cache progress callback threw", log::kv("error", e.what()));
    } catch (...) {
      log::error("cache progress callback threw a non-exception");
    }
  }
}

void inflight_object::wait_for(std::uint64_t offset, callback cb) {
  std::vector<waiter> ready;
  progress p;
  {
    std::lock_guard lk(mu_);
    waiters_.push_back(waiter{offset, std::move(cb), false});
    // Publish the waiter before re-reading `available_` (both seq_cst): either advance() sees
    // has_waiters_ or we see its new value, so no wake-up is lost.
    has_waiters_.store(true);
    std::uint64_t avail = available_.load();
    write_state st = state_.load();
    if (st == write_state::writing && avail <= offset) return;
    p.state = st;
    p.available = avail;
    p.verified = verified_.load() || st == write_state::committed;
    if (st == write_state::failed) p.err = error_;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (st != write_state::writing || (!it->on_verified && it->offset < avail)) {
        ready.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (waiters_.empty()) has_waiters_.store(false);
  }
  fire(ready, p);
}

progress inflight_object::wait(std::uint64_t offset, std::chrono::milliseconds timeout) const {
  struct slot {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    progress p;
  };
  auto s = std::make_shared<slot>();
  // wait_for only mutates waiter bookkeeping (guarded by mu_), never the object's identity.
  const_cast<inflight_object*>(this)->wait_for(offset, [s](const progress& p) {
    std::lock_guard lk(s->m);
    s->done = true;
    s->p = p;
    s->cv.notify_all();
  });
  std::unique_lock lk(s->m);
  if (s->cv.wait_for(lk, timeout, [&] { return s->done; })) return s->p;
  lk.unlock();
  return snapshot();
}

void inflight_object::wait_verified(callback cb) {
  progress p;
  {
    std::lock_guard lk(mu_);
    p.state = state_.load();
    p.available = available_.load();
    p.verified = verified_.load() || p.state == write_state::committed;
    if (p.state == write_state::writing && !p.verified) {
      waiters_.push_back(waiter{UINT64_MAX, std::move(cb), true});
      has_waiters_.store(true);
      return;
    }
    if (p.state == write_state::failed) p.err = error_;
  }
  std::vector<waiter> one;
  one.push_back(waiter{UINT64_MAX, std::move(cb), true});
  fire(one, p);
}

void inflight_object::mark_verified() {
  std::vector<waiter> ready;
  progress p;
  {
    std::lock_guard lk(mu_);
    verified_.store(true);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->on_verified) {
        ready.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (waiters_.empty()) has_waiters_.store(false);
    p = progress{write_state::writing, available_.load(), std::nullopt, true};
  }
  if (!ready.empty()) fire(ready, p);
}

void inflight_object::advance(std::uint64_t n) {
  available_.store(n);
  if (!has_waiters_.load()) return;
  std::vector<waiter> ready;
  {
    std::lock_guard lk(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (!it->on_verified && it->offset < n) {
        ready.push_back(std::move(*it));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (waiters_.empty()) has_waiters_.store(false);
  }
  if (!ready.empty()) fire(ready, progress{write_state::writing, n, std::nullopt, verified_.load()});
}

void inflight_object::finish_committed(std::uint64_t size) {
  std::vector<waiter> ready;
  {
    std::lock_guard lk(mu_);
    available_.store(size);
    state_.store(write_state::committed);
    ready.swap(waiters_);
    has_waiters_.store(false);
  }
  fire(ready, progress{write_state::committed, size, std::nullopt, true});
}

void inflight_object::finish_failed(error e) {
  std::vector<waiter> ready;
  progress p;
  {
    std::lock_guard lk(mu_);
    error_ = e;
    state_.store(write_state::failed);
    ready.swap(waiters_);
    has_waiters_.store(false);
    p = progress{write_state::failed, available_.load(), std::move(e), false};
  }
  fire(ready, p);
}

result<std::size_t> inflight_object::pread(std::uint64_t offset, std::span<std::byte> out) const {
  auto failed = [this]() -> std::unexpected<error> {
    std::lock_guard lk(mu_);
    return std::unexpected(error_ ? error_->wrap("write of " + id_.str() + " failed")
                                  : error{errc::internal, "write failed"});
  };
  if (state() == write_state::failed) return failed();
  std::uint64_t avail = available();
  if (offset >= avail || out.empty()) return 0;
  if (fd_ < 0) return fail(errc::unavailable, id_.str() + " is not readable until committed");
  std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), avail - offset));
  std::size_t done = 0;
  while (done < want) {
    ssize_t n = ::pread(fd_, out.data() + done, want - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "pread in-flight " + id_.str());
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  // The write may have failed while we read: those bytes must not be used.
  if (state() == write_state::failed) return failed();
  return done;
}

// ---------------------------------------------------------------------------------------------
// object_writer

namespace {

// Writes below this size are not worth a hand-off to the pool.
constexpr std::size_t parallel_threshold = 128 << 10;
// Ask the kernel to start writing back every this many bytes.
constexpr std::uint64_t writeback_step = 8 << 20;

struct io_outcome {
  std::size_t done = 0;  // bytes written
  int err = 0;           // errno of the call that stopped short; 0 when all were written
};

io_outcome write_fully(int fd, std::span<const std::byte> data, std::uint64_t offset) {
  io_outcome out;
  while (out.done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + out.done, data.size() - out.done,
                         static_cast<off_t>(offset + out.done));
    if (n < 0) {
      if (errno == EINTR) continue;
      out.err = errno;
      return out;
    }
    out.done += static_cast<std::size_t>(n);
  }
  return out;
}

}  // namespace

object_writer::object_writer(std::shared_ptr<detail::core> core,
                             std::shared_ptr<inflight_object> inflight, std::string tmp_name)
    : core_(std::move(core)), inflight_(std::move(inflight)), tmp_name_(std::move(tmp_name)) {}

object_writer::~object_writer() {
  if (!done_) abort("writer released without commit");
}

const digest& object_writer::id() const noexcept { return inflight_->id(); }

error object_writer::fail(error e) {
  if (done_) return e;
  done_ = true;
  bool mismatch = e.is(errc::digest_mismatch) || e.is(errc::size_mismatch);
  core_->abandon(inflight_, tmp_name_, reserved_, e, mismatch);
  reserved_ = 0;
  // A finished writer needs the store no more; letting go means a handle kept around by the
  // caller does not keep the store's index open after the store itself is closed.
  core_.reset();
  return e;
}

void object_writer::abort(std::string_view reason) {
  if (done_) return;
  (void)fail(error{errc::cancelled, "write of " + id().str() + " aborted: " + std::string(reason)});
}

status object_writer::write(std::span<const std::byte> data) {
  return write_bytes(contiguous_, data);
}

status object_writer::write(std::string_view data) {
  return write_bytes(
      contiguous_,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size()));
}

status object_writer::write_at(std::uint64_t offset, std::span<const std::byte> data) {
  return write_bytes(offset, data);
}

status object_writer::ensure_reserved(std::uint64_t end) {
  if (end <= reserved_) return {};
  // Without an expected size, reserve ahead in 4 MiB steps so that a stream of small writes does
  // not consult the capacity on every call.
  // The step ahead is taken only if it fits without evicting anything.
  if (!inflight_->expected_size()) {
    std::uint64_t ahead = std::max<std::uint64_t>(end, reserved_ + (4ull << 20));
    if (core_->reserve(ahead - reserved_, false)) {
      reserved_ = ahead;
      return {};
    }
  }
  if (auto st = core_->reserve(end - reserved_); !st) return st;
  reserved_ = end;
  return {};
}

status object_writer::hash_from_file(std::uint64_t from, std::uint64_t to) {
  std::vector<char> buf(std::min<std::uint64_t>(to - from, 1 << 20));
  int fd = inflight_->fd();
  while (from < to) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), to - from));
    ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(from));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "re-read " + id().str() + " for hashing");
    }
    if (n == 0)
      return ::shoal::fail(errc::io_error, "re-read " + id().str() + ": unexpected end of file");
    hasher_.update(buf.data(), static_cast<std::size_t>(n));
    from += static_cast<std::uint64_t>(n);
  }
  return {};
}

status object_writer::write_bytes(std::uint64_t offset, std::span<const std::byte> data) {
  if (done_) {
    return ::shoal::fail(errc::invalid_argument,
                         "write to " + id().str() + " after commit or abort");
  }
  if (core_->closed()) return std::unexpected(fail(error{errc::cancelled, "cache is closed"}));
  if (data.empty()) return {};
  std::uint64_t end = offset + data.size();
  if (auto exp = inflight_->expected_size(); exp && end > *exp) {
    return std::unexpected(fail(error{
        errc::size_mismatch, "write of " + id().str() + " goes past its expected size " +
                                 std::to_string(*exp) + " (to " + std::to_string(end) + ")"}));
  }
  if (offset < contiguous_) {
    // Not fatal for the write: the caller asked for something meaningless.
    return ::shoal::fail(errc::invalid_argument, "write of " + id().str() + " at " +
                                                     std::to_string(offset) +
                                                     " rewrites bytes already written (up to " +
                                                     std::to_string(contiguous_) + ")");
  }
  if (auto st = ensure_reserved(end); !st) {
    core_->count_no_space();
    return std::unexpected(fail(st.error().wrap("write " + id().str())));
  }
  int fd = inflight_->fd();
  // In-order writes are hashed on this thread while the pool copies the bytes into the file.
  const bool in_order = offset == contiguous_;
  detail::io_pool* pool = core_->pool();
  io_outcome out;
  bool hashed = false;
  if (pool && in_order && data.size() >= parallel_threshold) {
    std::future<void> done = pool->submit([&] { out = write_fully(fd, data, offset); });
    hasher_.update(data.data(), data.size());  // wasted only if the write fails for good
    hashed = true;
    done.wait();
  } else {
    out = write_fully(fd, data, offset);
  }
  if (out.err == ENOSPC || out.err == EDQUOT) {
    // The filesystem is full: evict once and retry the rest, else fail cleanly.
    std::uint64_t off = offset + out.done;
    std::uint64_t need = data.size() - out.done;
    if (auto exp = inflight_->expected_size()) need = std::max<std::uint64_t>(need, *exp - off);
    core_->make_room(need);
    io_outcome again = write_fully(fd, data.subspan(out.done), off);
    out.done += again.done;
    out.err = again.err;
    if (out.err == ENOSPC || out.err == EDQUOT) {
      core_->count_no_space();
      return std::unexpected(
          fail(error{errc::no_space, "write " + id().str() + ": filesystem full after evicting (" +
                                         std::string(std::strerror(out.err)) + "), " +
                                         std::to_string(offset + out.done) + " bytes written"}));
    }
  }
  if (out.err != 0) {
    return std::unexpected(fail(errno_error(out.err, "write " + id().str() + " to temp file")));
  }
  if (in_order && !hashed) hasher_.update(data.data(), data.size());
  // Start writeback early so that commit's fdatasync finds little left to do.
  if (end > writeback_from_ && end - writeback_from_ >= writeback_step) {
    ::sync_file_range(fd, static_cast<off_t>(writeback_from_),
                      static_cast<off_t>(end - writeback_from_), SYNC_FILE_RANGE_WRITE);
    writeback_from_ = end;
  }
  if (in_order) {
    contiguous_ = end;
  } else {
    auto& e = pending_[offset];
    e = std::max(e, end);
  }
  // Absorb out-of-order ranges that now touch the contiguous prefix.
  while (!pending_.empty() && pending_.begin()->first <= contiguous_) {
    std::uint64_t e = pending_.begin()->second;
    pending_.erase(pending_.begin());
    if (e > contiguous_) {
      if (auto st = hash_from_file(contiguous_, e); !st) return std::unexpected(fail(st.error()));
      contiguous_ = e;
    }
  }
  inflight_->advance(contiguous_);
  return {};
}

result<object_info> object_writer::commit() {
  if (done_) {
    return ::shoal::fail(errc::invalid_argument,
                         "commit of " + id().str() + " after commit or abort");
  }
  if (core_->closed()) return std::unexpected(fail(error{errc::cancelled, "cache is closed"}));
  if (!pending_.empty()) {
    return std::unexpected(
        fail(error{errc::size_mismatch, "commit " + id().str() + ": bytes missing between " +
                                            std::to_string(contiguous_) + " and " +
                                            std::to_string(pending_.begin()->first)}));
  }
  std::uint64_t size = contiguous_;
  if (auto exp = inflight_->expected_size(); exp && size != *exp) {
    return std::unexpected(
        fail(error{errc::size_mismatch, "commit " + id().str() + ": got " + std::to_string(size) +
                                            " bytes, expected " + std::to_string(*exp)}));
  }
  digest got = hasher_.finish();
  if (got != id()) {
    return std::unexpected(fail(
        error{errc::digest_mismatch, "commit " + id().str() + ": content hashes to " + got.str()}));
  }
  // Followers streaming the object may send its last byte now; durability comes next.
  inflight_->mark_verified();
  int fd = inflight_->fd();
  if (auto st = detail::fdatasync_fd(fd, "fdatasync " + tmp_name_); !st) {
    return std::unexpected(fail(st.error().wrap("commit " + id().str())));
  }
  if (::fchmod(fd, 0444) != 0) {
    return std::unexpected(fail(errno_error(errno, "commit " + id().str() + ": fchmod")));
  }
  detail::install_source src{core_->dirs().tmp_fd(), tmp_name_, false};
  auto info = core_->install(inflight_, src, size, reserved_, false);
  if (!info) return std::unexpected(fail(info.error()));
  done_ = true;
  reserved_ = 0;
  core_.reset();
  return info;
}

}  // namespace shoal::cache

namespace shoal::cache::detail {

// ---------------------------------------------------------------------------------------------
// core: begin_write, install, abandon, reservations, adoption

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
    std::uint64_t target = std::min(low_bytes(), cap >= bytes ? cap - bytes : 0);
    evict_pass(target, INT64_MIN, evict_reason::watermark);
    if (usage() + bytes > cap) {
      std::uint64_t protected_bytes = 0;
      {
        std::int64_t now_ms = to_ms(now());
        std::lock_guard lk(mu_);
        for (const auto& [id, v] : pins_) {
          if (!pinned_locked(id, now_ms)) continue;
          if (auto it = table_.find(id); it != table_.end()) protected_bytes += it->second.size;
        }
      }
      return fail(errc::no_space, "cache full: need " + std::to_string(bytes) +
                                      " more bytes; capacity " + std::to_string(cap) + ", used " +
                                      std::to_string(usage()) + " (" +
                                      std::to_string(protected_bytes) + " pinned, " +
                                      std::to_string(reserved_bytes_.load()) + " in flight)");
    }
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
    bool retried = false;
    while (::renameat(src.dirfd, src.name.c_str(), shard, hex.c_str()) != 0) {
      int err = errno;
      if ((err == ENOSPC || err == EDQUOT) && !retried) {
        retried = true;
        make_room(4096);
        continue;
      }
      if (err == ENOSPC || err == EDQUOT) count_no_space();
      return fail_errno(err, "commit " + id.str() + ": rename into " + layout_.shard_path(id));
    }
  }
  // Nothing below may leave the file in objects/ without a row, except a crash (which start-up
  // reconciliation repairs by re-verifying the orphan).
  auto undo = [&] {
    if (!src.in_place) ::unlinkat(shard, hex.c_str(), 0);
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

status core::adopt_file(const std::string& path, const digest& id, object_kind kind) {
  if (static_cast<std::size_t>(kind) >= object_kind_count) {
    return fail(errc::invalid_argument, "adopt " + path + ": invalid object kind");
  }
  if (closed()) return fail(errc::cancelled, "adopt " + path + ": cache is closed");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return fail_errno(errno, "adopt: open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    close_quietly(fd);
    return fail_errno(err, "adopt: stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    close_quietly(fd);
    return fail(errc::invalid_argument, "adopt: " + path + " is not a regular file");
  }
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
  auto got = sha256_fd(fd, 0, size);
  if (!got || *got != id) {
    error e = got ? error{errc::digest_mismatch, "adopt " + path + ": content hashes to " +
                                                     got->str() + ", expected " + id.str()}
                  : got.error().wrap("adopt " + path);
    // A bad file sitting at the object path would otherwise look like an object to a reader
    // that bypasses the index (libtorrent seeding); it goes.
    if (in_place && got.has_value()) ::unlinkat(layout_.shard_fd(id), hex.c_str(), 0);
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
  auto info = install(in, install_source{AT_FDCWD, path, in_place}, size, size, true);
  if (!info) {
    abandon(in, {}, size, info.error(), false);
    return std::unexpected(info.error().wrap("adopt " + path));
  }
  return {};
}

}  // namespace shoal::cache::detail
