// inflight_object: the state of an object being written, shared by its writer and every follower
// that streams it while it arrives (progress, waiters woken as bytes land, reads of the prefix).

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/log.h"
#include "core.h"

namespace shoal::cache {

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
  if (!ready.empty())
    fire(ready, progress{write_state::writing, n, std::nullopt, verified_.load()});
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

}  // namespace shoal::cache
