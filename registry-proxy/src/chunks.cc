#include "registry-proxy/chunks.h"

#include <algorithm>

#include "common/sha256.h"
#include "common/thread_name.h"

namespace shoal::proxy {

std::uint64_t chunk_size_for(std::uint64_t size, std::uint64_t configured) {
  if (configured == 0) return 0;
  constexpr std::uint64_t mib = 1u << 20;
  std::uint64_t c = std::max<std::uint64_t>(configured, (size + 255) / 256);
  c = (c + mib - 1) / mib * mib;
  if (size < 2 * c) return 0;
  return c;
}

// ---------------------------------------------------------------------------------------------
// chunk_list

chunk_list::snapshot chunk_list::snap() const {
  std::lock_guard lk(mu_);
  snapshot s;
  s.chunks = chunks_;
  s.complete = chunks_.size() == chunk_count() && !failed_;
  s.failed = failed_;
  return s;
}

bool chunk_list::contains(const digest& chunk) const {
  std::lock_guard lk(mu_);
  return std::any_of(chunks_.begin(), chunks_.end(),
                     [&](const chunk_entry& e) { return e.id == chunk; });
}

void chunk_list::fire_locked(std::vector<std::function<void()>>& out) {
  bool done = failed_ || chunks_.size() == chunk_count();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (done || chunks_.size() > it->first) {
      out.push_back(std::move(it->second));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void chunk_list::publish(chunk_entry e) {
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard lk(mu_);
    if (failed_) return;
    chunks_.push_back(std::move(e));
    fire_locked(fire);
  }
  for (auto& f : fire) f();
}

void chunk_list::fail(std::string why, bool even_if_complete) {
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard lk(mu_);
    if (failed_ || (chunks_.size() == chunk_count() && !even_if_complete)) return;
    failed_ = std::move(why);
    fire_locked(fire);
  }
  for (auto& f : fire) f();
}

bool chunk_list::when_beyond(std::size_t have, std::function<void()> cb) {
  {
    std::lock_guard lk(mu_);
    if (!(failed_ || chunks_.size() == chunk_count() || chunks_.size() > have)) {
      waiters_.emplace_back(have, std::move(cb));
      return false;
    }
  }
  cb();
  return true;
}

// ---------------------------------------------------------------------------------------------
// chunker

chunker::chunker(std::shared_ptr<chunk_list> list, commit_fn commit, std::size_t max_queued)
    : list_(std::move(list)), commit_(std::move(commit)), max_queued_(max_queued) {
  buf_.reserve(static_cast<std::size_t>(list_->chunk_length(list_->chunk_count() - 1)));
  worker_ = std::thread([this] {
    name_this_thread("chunk-cutter");
    run();
  });
}

chunker::~chunker() { abort("the upstream transfer ended"); }

void chunker::update(const char* data, std::size_t n) {
  if (n == 0) return;
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return aborted_ || queued_ == 0 || queued_ + n <= max_queued_; });
  if (aborted_ || closed_) return;
  q_.emplace_back(data, n);
  queued_ += n;
  lk.unlock();
  cv_.notify_all();
}

void chunker::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return closed_ || aborted_ || !q_.empty(); });
    if (aborted_) return;
    if (q_.empty()) return;  // closed and drained
    std::string part = std::move(q_.front());
    q_.pop_front();
    bool failed = err_.has_value();
    lk.unlock();
    // Bytes after a failed chunk are drained and dropped: the list has failed already.
    std::size_t pos = 0;
    while (!failed && pos < part.size()) {
      std::uint64_t want =
          list_->chunk_length(static_cast<std::uint32_t>(offset_ / list_->chunk_size()));
      std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(part.size() - pos, want - buf_.size()));
      buf_.append(part, pos, take);
      pos += take;
      if (buf_.size() == want) {
        close_chunk();
        std::lock_guard g(mu_);
        failed = err_.has_value();
      }
      if (offset_ >= list_->size()) break;
    }
    lk.lock();
    queued_ -= part.size();
    cv_.notify_all();
  }
}

void chunker::close_chunk() {
  chunk_entry e;
  e.offset = offset_;
  e.size = buf_.size();
  e.id = sha256_of(std::string_view(buf_));
  metainfo_builder b(e.size, false);
  b.update(buf_.data(), buf_.size());
  auto m = b.finish(e.id);
  status st = m ? commit_(e, buf_, *m) : status(fail(m.error()));
  offset_ += buf_.size();
  buf_.clear();
  if (!st) {
    {
      std::lock_guard lk(mu_);
      err_ = st.error();
    }
    list_->fail("chunk at " + std::to_string(e.offset) + ": " + st.error().message);
    return;
  }
  list_->publish(e);
}

status chunker::finish() {
  {
    std::lock_guard lk(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard lk(mu_);
  if (err_) return fail(*err_);
  if (offset_ != list_->size()) {
    auto why = "got " + std::to_string(offset_) + " of " + std::to_string(list_->size()) + " bytes";
    list_->fail(why);
    return fail(errc::size_mismatch, why);
  }
  return {};
}

void chunker::abort(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (!aborted_ && !(closed_ && !worker_.joinable())) aborted_ = true;
    q_.clear();
    queued_ = 0;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  list_->fail(why);
}

}  // namespace shoal::proxy
