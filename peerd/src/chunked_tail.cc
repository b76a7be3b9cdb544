// The rest of a blob fetched in chunks once registry-proxy no longer lists them (chunked.h,
// take_tail): ranges of the blob from any replica, written after the listed chunks. And one
// chunk without a swarm, from its range of the blob (fetch_chunk_range).

#include <thread>

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "common/origin_protocol.h"
#include "peerd/chunked.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

bool chunked_blob::take_tail(const error& why) {
  std::vector<waiter> moved;
  std::uint32_t from;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running) return false;
    from = tail_from_ = known_;
    // Readers waiting for a chunk that will never be listed read the blob as it is written.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->first >= from) {
        moved.push_back(std::move(it->second));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  d_.swarm.counters_mut().chunked_tails.fetch_add(1);
  log::warn(
      "registry-proxy no longer lists the chunks (the replica cutting the blob died or "
      "restarted): the rest of the blob comes as ranges of it",
      log::kv("digest", id_.str()), log::kv("from_chunk", from),
      log::kv("from_byte", std::uint64_t{from} * chunk_size_), log::kv("why", why.message));
  cv_.notify_all();
  for (auto& [range, cb] : moved) serve(range.first, range.second, std::move(cb));
  return true;
}

status chunked_blob::write_tail(cache::object_writer& w, std::uint64_t from) {
  constexpr std::uint64_t step = 8u << 20;  // bounded memory per request
  // registry-proxy may be down for a moment (a restart, the ring moving the blob): a range that
  // gets no answer or a 5xx is asked again until nothing arrived for the deadline.
  auto last_progress = steady::now();
  for (std::uint64_t off = from; off < size_;) {
    const std::uint64_t n = std::min<std::uint64_t>(step, size_ - off);
    const std::string what =
        "bytes " + std::to_string(off) + "-" + std::to_string(off + n - 1) + " of the blob";
    http::client_request r;
    r.url = blob_path();
    r.headers.emplace_back("Range",
                           "bytes=" + std::to_string(off) + "-" + std::to_string(off + n - 1));
    if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
    r.timeouts.connect = d_.connect_timeout;
    r.timeouts.stall = d_.deadline;
    r.max_retries = 1;
    auto f = ask(r, static_cast<std::size_t>(n), last_progress + d_.deadline, what);
    const bool again = (!f && !f.error().is(errc::busy)) || (f && f->status >= 500);
    if (again && steady::now() - last_progress < d_.deadline && current() == state::running) {
      log::info("range of the blob failed; asking again", log::kv("digest", id_.str()),
                log::kv("offset", off),
                log::kv("error", f ? "HTTP " + std::to_string(f->status) : f.error().message));
      if (!pause(std::chrono::milliseconds(500))) return fail(errc::cancelled, "peerd is stopping");
      continue;
    }
    if (!f) return fail(f.error());
    if (f->status != 206 || f->body.size() != n) {
      std::string why = origin::error_message_of(f->body);
      return fail(errc::upstream_error,
                  what + ": registry-proxy answered HTTP " + std::to_string(f->status) + " with " +
                      std::to_string(f->body.size()) + " bytes" + (why.empty() ? "" : ": " + why));
    }
    last_progress = steady::now();
    if (auto st = w.write(std::string_view(f->body)); !st) return fail(st.error().wrap("write"));
    d_.swarm.counters_mut().fallbacks.fetch_add(1);
    d_.swarm.counters_mut().from_http.fetch_add(n);
    off += n;
  }
  return {};
}

void chunked_blob::read_written(std::uint64_t off, std::uint64_t n, read_cb cb) {
  std::shared_ptr<cache::inflight_object> infl;
  {
    std::lock_guard lk(mu_);
    infl = inflight_;
  }
  auto self = shared_from_this();
  infl->wait_for(off, [self, infl, off, n, cb = std::move(cb)](const cache::progress& p) mutable {
    if (p.state == cache::write_state::failed) {
      return cb(fail(p.err.value_or(error{errc::internal, "the blob's write failed"})));
    }
    // Committed meanwhile: serve() reads the cache once the fetch is complete; until then the
    // written file still holds the bytes.
    net::post(self->d_.swarm.pool(), [infl, off, n, cb = std::move(cb)] {
      std::string out(static_cast<std::size_t>(n), '\0');
      auto got = infl->pread(off, std::as_writable_bytes(std::span(out)));
      if (!got) return cb(fail(got.error()));
      if (*got == 0) return cb(fail(errc::internal, "the blob's written bytes ended early"));
      out.resize(*got);
      cb(std::move(out));
    });
  });
}

status chunked_blob::fetch_chunk_range(std::uint32_t i, const std::string& why) {
  chunk c;
  {
    std::lock_guard lk(mu_);
    c = chunks_[i];
  }
  const std::string what = "chunk " + std::to_string(i);
  log::warn("chunk has no swarm; fetching its range of the blob from registry-proxy",
            log::kv("digest", id_.str()), log::kv("chunk", i), log::kv("bytes", c.size),
            log::kv("why", why));
  // Into the cache under the chunk's own digest: the commit verifies the bytes against it.
  auto t = d_.store.begin_write(c.id, c.size, cache::object_kind::blob);
  if (!t) return fail(t.error().wrap(what));
  if (t->role == cache::write_role::present) return {};
  if (t->role == cache::write_role::follower) return wait_written_elsewhere(c.id, what);
  auto& w = *t->writer;
  constexpr std::uint64_t step = 8u << 20;  // bounded memory per request
  for (std::uint64_t off = 0; off < c.size;) {
    const std::uint64_t n = std::min<std::uint64_t>(step, c.size - off);
    const std::uint64_t from = c.offset + off, to = from + n - 1;
    http::client_request r;
    r.url = blob_path();
    r.headers.emplace_back("Range", "bytes=" + std::to_string(from) + "-" + std::to_string(to));
    if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
    r.timeouts.connect = d_.connect_timeout;
    r.timeouts.stall = d_.deadline;
    r.max_retries = 1;
    auto f = ask(r, static_cast<std::size_t>(n), steady::now() + d_.deadline, "range of " + what);
    if (f && (f->status != 206 || f->body.size() != n)) {
      f = fail(errc::upstream_error, "range of " + what + ": registry-proxy answered HTTP " +
                                         std::to_string(f->status) + " with " +
                                         std::to_string(f->body.size()) + " bytes, not 206 with " +
                                         std::to_string(n));
    }
    if (!f) {
      w.abort(f.error().message);
      return fail(f.error());
    }
    if (auto st = w.write(std::string_view(f->body)); !st) return fail(st.error().wrap(what));
    d_.swarm.counters_mut().fallbacks.fetch_add(1);
    d_.swarm.counters_mut().from_http.fetch_add(n);
    off += n;
  }
  if (auto info = w.commit(); !info) return fail(info.error().wrap(what + " from its range"));
  return {};
}

}  // namespace shoal::peerd
