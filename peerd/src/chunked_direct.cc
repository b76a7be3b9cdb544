// A lazy reader's small Range of a blob fetched in chunks, inside a chunk registry-proxy has not
// cut yet: asked of registry-proxy at once (chunked.h, want_range; swarm.range_direct_bytes).

#include <algorithm>

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/thread_name.h"
#include "peerd/chunked.h"

namespace shoal::peerd {

namespace net = boost::asio;

void chunked_blob::start_direct(std::uint64_t off, std::uint64_t end) {
  const std::uint64_t budget = d_.swarm.range_direct_bytes();
  // The last byte only from the verified blob (serve()).
  end = std::min(end, size_ - 1);
  if (budget == 0 || off >= end || end - off > budget) return;
  std::vector<std::thread> exited;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running || verified_) return;
    if (chunks_[std::min(static_cast<std::uint32_t>(off / chunk_size_), count_ - 1)].ready) return;
    for (const auto& x : direct_) {
      if (x->off <= off && off < x->end) return;
    }
    for (auto it = direct_threads_.begin(); it != direct_threads_.end();) {
      if (it->second->exited) {
        exited.push_back(std::move(it->first));
        it = direct_threads_.erase(it);
      } else {
        ++it;
      }
    }
    if (direct_.size() >= max_direct) {
      // The oldest answered range makes room; with every one still asked, this range waits for
      // its chunk.
      auto it = std::find_if(direct_.begin(), direct_.end(), [](const auto& x) { return x->done; });
      if (it == direct_.end()) return;
      direct_.erase(it);
    }
    auto d = std::make_shared<direct_range>();
    d->off = off;
    d->end = end;
    direct_.push_back(d);
    direct_threads_.emplace_back(std::thread([self = shared_from_this(), d] {
                                   name_this_thread("chunk-range");
                                   self->fetch_direct(d);
                                 }),
                                 d);
  }
  // Threads that set `exited` only return now.
  for (auto& t : exited) t.join();
}

void chunked_blob::fetch_direct(const std::shared_ptr<direct_range>& d) {
  const std::uint64_t n = d->end - d->off;
  http::client_request r;
  r.url = blob_path();
  r.headers.emplace_back("Range",
                         "bytes=" + std::to_string(d->off) + "-" + std::to_string(d->end - 1));
  if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
  r.timeouts.connect = d_.connect_timeout;
  r.timeouts.stall = d_.deadline;
  r.max_retries = 0;
  auto f = call(std::move(r), static_cast<std::size_t>(n));
  std::shared_ptr<const std::string> bytes;
  if (f && f->status == 206 && f->body.size() == n) {
    bytes = std::make_shared<const std::string>(std::move(f->body));
    d_.swarm.counters_mut().range_direct.fetch_add(1);
    d_.swarm.counters_mut().range_direct_bytes.fetch_add(n);
  } else {
    // Not an error for the reader: its bytes come from the chunk once it is joined.
    log::info(
        "range of a blob not cut yet: registry-proxy did not answer it, reading it from its "
        "chunk",
        log::kv("digest", id_.str()), log::kv("offset", d->off), log::kv("bytes", n),
        log::kv("why", f ? "HTTP " + std::to_string(f->status) + " with " +
                               std::to_string(f->body.size()) + " bytes"
                         : f.error().message));
  }
  std::vector<waiter> waiters;
  {
    std::lock_guard lk(mu_);
    d->done = true;
    d->bytes = std::move(bytes);
    waiters.swap(d->waiters);
  }
  for (auto& [range, cb] : waiters) serve(range.first, range.second, std::move(cb));
  std::lock_guard lk(mu_);
  d->exited = true;
}

bool chunked_blob::serve_direct(std::unique_lock<std::mutex>& lk, std::uint64_t off,
                                std::uint64_t limit, std::size_t max, read_cb& cb) {
  std::shared_ptr<direct_range> d;
  for (const auto& x : direct_) {
    if (x->off <= off && off < x->end && (!x->done || x->bytes)) d = x;
  }
  if (!d) return false;
  if (!d->done) {
    d->waiters.push_back({{off, max}, std::move(cb)});
    return true;
  }
  lk.unlock();
  const std::uint64_t n = std::min(limit, d->end - off);
  net::post(d_.swarm.pool(), [d, off, n, cb = std::move(cb)] {
    cb(d->bytes->substr(static_cast<std::size_t>(off - d->off), static_cast<std::size_t>(n)));
  });
  return true;
}

}  // namespace shoal::peerd
