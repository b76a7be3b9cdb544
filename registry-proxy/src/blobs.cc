#include "registry-proxy/blobs.h"
#include "blob_fetch.h"
#include "upstream_range.h"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/log.h"
#include "common/oci.h"

namespace shoal::proxy {

namespace net = boost::asio;

// ---------------------------------------------------------------------------------------------
// Streaming the bytes of an in-flight object to one client.

namespace {

// The bytes of an object still being written are sent as they arrive, except its last byte,
// which is held back until the content is verified (size and sha256; the commit's fdatasync
// need not be waited for). If the bytes turn
// out not to match the digest, a client reading up to the end of the object is therefore cut off
// one byte short of its Content-Length and can never take wrong bytes for the blob. A range
// that ends before the last byte is answered as soon as its bytes exist: those bytes are not
// verified yet, and the client checks the digest of whatever it assembles.
class inflight_source final : public http::body_source {
 public:
  static constexpr std::uint64_t kBatch = 256 * 1024;

  inflight_source(std::shared_ptr<cache::inflight_object> obj, std::uint64_t off, std::uint64_t len)
      : obj_(std::move(obj)),
        pos_(std::make_shared<std::atomic<std::uint64_t>>(off)),
        end_(len == UINT64_MAX ? UINT64_MAX : off + len) {}

  void next(std::size_t max_bytes, std::function<void(result<http::chunk>)> done) override {
    std::uint64_t off = pos_->load();
    if (off >= end_) return done(http::chunk::end());
    // Every byte sent: the body ends once the content is verified (a mismatch fails it instead).
    if (auto total = obj_->expected_size(); total && off >= *total) {
      return wait(obj_, pos_, off, end_, max_bytes, UINT64_MAX, std::move(done));
    }
    // Wake up for a batch of bytes rather than every 16 KiB the upstream transfer delivers
    // (fewer wake-ups and larger sendfile calls); commit and failure wake us early anyway.
    std::uint64_t batch = std::min<std::uint64_t>({kBatch, end_ - off, max_bytes});
    wait(obj_, pos_, off, end_, max_bytes, off + batch - 1, std::move(done));
  }

 private:
  // The callback may run now or later on the writer's thread, possibly after this source is
  // gone (the client left): it owns everything it touches.
  static void wait(std::shared_ptr<cache::inflight_object> obj,
                   std::shared_ptr<std::atomic<std::uint64_t>> pos, std::uint64_t off,
                   std::uint64_t end, std::size_t max_bytes, std::uint64_t wait_at,
                   std::function<void(result<http::chunk>)> done) {
    auto cb = [obj, pos, off, end, max_bytes,
               done = std::move(done)](const cache::progress& p) mutable {
      if (p.state == cache::write_state::failed) {
        return done(fail(p.err ? *p.err : error{errc::io_error, "write failed"}));
      }
      const auto total = obj->expected_size();
      std::uint64_t sendable = p.available;
      // The last byte waits until the content matched its digest (not for the fdatasync).
      const bool holding = !p.verified && p.state != cache::write_state::committed && total &&
                           *total > 0 && sendable >= *total;
      if (holding) sendable = *total - 1;
      if (sendable > off) {
        std::uint64_t n = std::min<std::uint64_t>({sendable - off, end - off, max_bytes});
        pos->store(off + n);
        return done(http::chunk::file_region(obj->fd(), off, n));
      }
      if (holding) {
        // Only the held-back byte is missing: wake up when the content is verified, or the write
        // commits or fails (no more bytes can arrive past the expected size).
        return wait(obj, pos, off, end, max_bytes, UINT64_MAX, std::move(done));
      }
      if (p.state == cache::write_state::committed || (p.verified && total && off >= *total)) {
        if (end == UINT64_MAX) return done(http::chunk::end());
        return done(fail(errc::size_mismatch, "object ended before the requested range"));
      }
      done(fail(errc::internal, "woken without progress"));
    };
    // UINT64_MAX: the held-back last byte, released by verification (or commit, or failure).
    if (wait_at == UINT64_MAX) return obj->wait_verified(std::move(cb));
    obj->wait_for(wait_at, std::move(cb));
  }

  std::shared_ptr<cache::inflight_object> obj_;
  std::shared_ptr<std::atomic<std::uint64_t>> pos_;
  std::uint64_t end_;
};

http::response blob_headers(const digest& d) {
  http::response r;
  r.status = 200;
  r.headers.set("Docker-Content-Digest", d.str());
  r.headers.set("Content-Type", "application/octet-stream");
  r.headers.set(std::string(origin::headers::api_version),
                std::string(origin::headers::api_version_value));
  r.headers.set("ETag", "\"" + d.str() + "\"");
  r.rangeable = true;
  return r;
}

http::response failure_response(unsigned status, const std::string& message,
                                const std::string& retry_after, oci::error_code not_found_code) {
  return origin::upstream_failure(status, message, retry_after, not_found_code, basic_challenge);
}

// A fetch shared by every client of one upstream and repository failed with a refusal (401, 403,
// 404) of the credential it acted with, or of none: a client with another credential may get
// another answer, from a fetch of its own (keyed by its credential; never retried again).
bool wants_own_answer(blob_fetch& f, const credential& cred) {
  auto s = f.snap();
  return s.ph == blob_fetch::phase::failed && !cred.anonymous() && f.key().cred.empty() &&
         (s.status == 401 || s.status == 403 || s.status == 404) && s.client_hash != cred.hash;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// blob_service

blob_service::blob_service(net::io_context& io, net::thread_pool& pool, cache::store& store,
                           state_db& st, upstream_client& uc, access_checker& access,
                           blob_metrics m)
    : io_(io), pool_(pool), store_(store), st_(st), uc_(uc), access_(access), m_(m) {}

blob_service::~blob_service() { shutdown(); }

std::size_t blob_service::inflight_count() const {
  std::lock_guard lk(mu_);
  return fetches_.size() - queue_.size();
}

std::size_t blob_service::queued_count() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

void blob_service::shutdown() {
  stopping_ = true;
  std::vector<std::shared_ptr<blob_fetch>> all, waiting;
  {
    std::lock_guard lk(mu_);
    for (auto& [k, f] : fetches_) all.push_back(f);
    waiting = queue_.drain();
    for (auto& f : waiting) {
      f->admitted = true;
      ++running_[f->key().upstream];
    }
  }
  for (auto& f : all) f->cancel();
  // Queued fetches start cancelled: they fail at once and answer their waiters.
  for (auto& f : waiting) f->start();
}

bool blob_service::room_locked(const std::string& upstream) const {
  if (fetch_limit_ <= 0) return true;
  auto it = running_.find(upstream);
  return it == running_.end() || it->second < static_cast<std::size_t>(fetch_limit_);
}

std::vector<std::shared_ptr<blob_fetch>> blob_service::admit_locked(const std::string& upstream) {
  std::vector<std::shared_ptr<blob_fetch>> out;
  while (room_locked(upstream)) {
    auto f = queue_.pop(upstream);
    if (!f) break;
    (*f)->admitted = true;
    ++running_[upstream];
    out.push_back(std::move(*f));
  }
  return out;
}

// Called with mu_ held: `f` no longer holds a slot of its upstream.
static void uncount(std::map<std::string, std::size_t>& running, const std::string& upstream) {
  auto it = running.find(upstream);
  if (it == running.end()) return;
  if (it->second <= 1)
    running.erase(it);
  else
    --it->second;
}

void blob_service::release_slot(const std::shared_ptr<blob_fetch>& f) {
  std::vector<std::shared_ptr<blob_fetch>> next;
  {
    std::lock_guard lk(mu_);
    if (!f->admitted || f->released) return;
    f->released = true;
    uncount(running_, f->key().upstream);
    next = admit_locked(f->key().upstream);
  }
  for (auto& n : next) n->start();
}

void blob_service::finish_fetch(const std::shared_ptr<blob_fetch>& f) {
  std::vector<std::shared_ptr<blob_fetch>> next;
  {
    std::lock_guard lk(mu_);
    auto it = fetches_.find(f->key());
    if (it != fetches_.end() && it->second == f) fetches_.erase(it);
    if (f->admitted && !f->released) {
      f->released = true;
      uncount(running_, f->key().upstream);
    }
    next = admit_locked(f->key().upstream);
  }
  for (auto& n : next) n->start();
}

// A fetch of `d` through another upstream or repository that acted as registry-proxy itself and
// whose bytes already matched the digest: the object is about to be cached as public, and a
// cached public object is served to anyone, so joining it is joining the cache (no other
// upstream request). Unverified fetches are never joined across repositories (flight_key).
std::map<flight_key, std::shared_ptr<blob_fetch>>::iterator blob_service::verified_public_locked(
    const digest& d) {
  for (auto it = fetches_.lower_bound(flight_key{d, {}, {}, {}});
       it != fetches_.end() && it->first.d == d; ++it) {
    auto s = it->second->snap();
    bool verified =
        s.ph == blob_fetch::phase::committed ||
        (s.ph == blob_fetch::phase::streaming && s.inflight && s.inflight->snapshot().verified);
    if (s.is_public && verified && !it->second->failing()) return it;
  }
  return fetches_.end();
}

std::shared_ptr<blob_fetch> blob_service::join_or_start(const selection& sel, const digest& d,
                                                        const credential& cred, bool& started,
                                                        const fetch_opts& o) {
  std::shared_ptr<blob_fetch> f;
  const bool for_metainfo = o.for_metainfo, for_chunks = o.for_chunks;
  const flight_key key{d, sel.up->cfg.name, sel.repo, o.personal ? cred.hash : std::string()};
  {
    std::lock_guard lk(mu_);
    auto it = fetches_.find(key);
    // A fetch whose bytes already failed is over for a newcomer, who would get a 200 head and
    // then a cut-off: it starts a fetch of its own, as it would a moment later once the failed
    // one has left the table (it replaces it there; finish_fetch erases only its own entry).
    if (it != fetches_.end() && it->second->failing()) it = fetches_.end();
    if (it == fetches_.end() && !o.personal) it = verified_public_locked(d);
    if (it != fetches_.end() && !o.ring_from.empty() && it->second->source() == o.ring_from) {
      if (o.misdirected) *o.misdirected = true;
      if (o.refused)
        *o.refused = "this replica streams " + d.str() + " from " + o.ring_from +
                     ": the asking member owns it";
      return nullptr;
    }
    if (it != fetches_.end()) {
      started = false;
      if (m_.joins) m_.joins->inc();
      f = it->second;
      if (for_metainfo) f->want_metainfo();
      if (for_chunks) f->want_chunks();
      if (f->admitted || for_metainfo) return f;
      // An HTTP client streams this object: it may not wait in the queue.
      queue_.remove(f);
      f->admitted = true;
      ++running_[key.upstream];
    } else {
      f = std::make_shared<blob_fetch>(*this, sel, d, cred, o.personal, !o.ring_from.empty());
      if (for_metainfo) f->want_metainfo();
      if (for_chunks) f->want_chunks();
      started = true;
      if (for_metainfo && !room_locked(key.upstream)) {
        auto r = queue_.push(key.upstream, cred.peer, f);
        if (r != fetch_queue<std::shared_ptr<blob_fetch>>::pushed::queued) {
          started = false;
          if (o.refused)
            *o.refused = r == fetch_queue<std::shared_ptr<blob_fetch>>::pushed::full
                             ? "the upstream fetch queue is full; retry later"
                             : "this client has too many fetches in the upstream fetch queue; "
                               "retry later";
          return nullptr;
        }
        fetches_[key] = f;
        log::debug("upstream fetch queued", log::kv("digest", d.str()),
                   log::kv("upstream", key.upstream), log::kv("queued", queue_.size()));
        return f;
      }
      fetches_[key] = f;
      f->admitted = true;
      ++running_[key.upstream];
    }
  }
  f->start();
  return f;
}

void blob_service::serve(const selection& sel, const digest& d, const credential& cred, bool head,
                         http::responder resp, std::string ring_from) {
  net::post(pool_, [this, sel, d, cred, head, resp, ring_from] {
    if (store_.contains(d)) return serve_cached(sel, d, cred, head, resp);
    std::shared_ptr<blob_fetch> f;
    {
      std::lock_guard lk(mu_);
      auto it = fetches_.find(flight_key{d, sel.up->cfg.name, sel.repo, {}});
      if (it != fetches_.end() && it->second->failing()) it = fetches_.end();
      if (it == fetches_.end()) it = verified_public_locked(d);
      if (it != fetches_.end()) f = it->second;
    }
    if (!f && head) return head_upstream(sel, d, cred, resp);
    if (stopping_) {
      auto r = oci_error(503, oci::error_code::unsupported, "registry-proxy is shutting down");
      // A ring member takes this for "the owner is leaving": the next member takes over.
      if (ring_) r.headers.set(std::string(ring::from_header), ring_->self());
      return resp.send(std::move(r));
    }
    // Joins a running fetch, admits a queued one (an HTTP client may not wait in the queue) or
    // starts one.
    serve_fetched(sel, d, cred, head, false, resp, ring_from);
  });
}

void blob_service::serve_fetched(const selection& sel, const digest& d, const credential& cred,
                                 bool head, bool personal, http::responder resp,
                                 const std::string& ring_from) {
  bool started = false;
  bool misdirected = false;
  std::string refused;
  auto f = join_or_start(sel, d, cred, started,
                         {.personal = personal,
                          .ring_from = ring_from,
                          .misdirected = &misdirected,
                          .refused = &refused});
  if (!f && misdirected) return resp.send(oci_error(421, oci::error_code::unsupported, refused));
  if (!f) return resp.send(failure_response(429, refused, "5", oci::error_code::blob_unknown));
  serve_from_fetch(f, sel, cred, head, resp);
}

void blob_service::serve_from_fetch(const std::shared_ptr<blob_fetch>& f, const selection& sel,
                                    const credential& cred, bool head, http::responder resp) {
  // The fetch failed: its answer, unless this client's credential may get another one.
  auto answer_failure = [this, f, sel, cred, head, resp] {
    auto s = f->snap();
    // A refusal of the credential (or of none) the fetch acted with: this client's own
    // credential may get another answer, from a fetch of its own.
    if (wants_own_answer(*f, cred)) {
      net::post(pool_, [this, sel, d = f->id(), cred, head, resp] {
        serve_fetched(sel, d, cred, head, true, resp);
      });
      return;
    }
    resp.send(failure_response(s.status ? s.status : 502, s.message, s.retry_after,
                               oci::error_code::blob_unknown));
  };
  f->when_head([this, f, sel, cred, head, resp, answer_failure] {
    auto s = f->snap();
    if (s.ph == blob_fetch::phase::failed) return answer_failure();
    if (s.ph == blob_fetch::phase::committed) {
      net::post(pool_, [this, sel, d = f->id(), cred, head, resp] {
        serve_cached(sel, d, cred, head, resp);
      });
      return;
    }
    auto respond = [this, f, s, sel, cred, head, resp, answer_failure] {
      // Bytes that failed since this client joined (it joined before: joining a failing fetch
      // starts a new one): no 200 head for a body that can only be cut off; the fetch is about
      // to fail and this client gets its answer.
      if (f->failing()) return f->when_done(answer_failure);
      auto r = blob_headers(f->id());
      if (!s.size) r.rangeable = false;
      r.body = http::stream_body{
          s.size, [this, f, infl = s.inflight, sel, cred](std::uint64_t off, std::uint64_t len) {
            return open_range(f, infl, sel, cred, off, len);
          }};
      (void)head;
      resp.send(std::move(r));
    };
    if (s.is_public || (!s.client_hash.empty() && s.client_hash == cred.hash)) return respond();
    // Fetched privately for another client: this client proves its own access first.
    net::post(pool_, [this, f, sel, cred, resp, respond] {
      auto v = access_.check(sel, f->id(), "/v2/" + sel.repo + "/blobs/" + f->id().str(), cred);
      if (!v.allowed)
        return resp.send(
            failure_response(v.status, v.message, v.retry_after, oci::error_code::blob_unknown));
      respond();
    });
  });
}

std::unique_ptr<http::body_source> blob_service::open_range(
    const std::shared_ptr<blob_fetch>& f, const std::shared_ptr<cache::inflight_object>& infl,
    const selection& sel, const credential& cred, std::uint64_t off, std::uint64_t len) {
  auto from_fetch = [infl, off, len] { return std::make_unique<inflight_source>(infl, off, len); };
  // Small, bounded, far ahead of what the fetch wrote, short of the last byte (which goes out
  // only once the whole object is verified), and the fetch is this replica's own (a ring
  // member's fetch streams from the owner, which decides for itself).
  const auto total = infl ? infl->expected_size() : std::nullopt;
  if (ranges_.max_bytes == 0 || len == 0 || len > ranges_.max_bytes || !total ||
      off + len >= *total || off < infl->available() + ranges_.ahead || !f->source().empty())
    return from_fetch();
  for (int n = ranges_running_->load();;) {
    if (n >= ranges_.concurrency) return from_fetch();
    if (ranges_running_->compare_exchange_weak(n, n + 1)) break;
  }
  return upstream_range_source({.uc = &uc_,
                                .pool = &pool_,
                                .sel = sel,
                                .cred = cred,
                                .id = f->id(),
                                .off = off,
                                .len = len,
                                .m = m_,
                                .running = ranges_running_,
                                .fallback = from_fetch});
}

void blob_service::serve_cached(const selection& sel, const digest& d, const credential& cred,
                                bool head, http::responder resp) {
  auto v = access_.check(sel, d, "/v2/" + sel.repo + "/blobs/" + d.str(), cred);
  if (!v.allowed)
    return resp.send(
        failure_response(v.status, v.message, v.retry_after, oci::error_code::blob_unknown));
  auto rd = store_.open_read(d);
  if (!rd) {
    if (rd.error().is(errc::not_found)) {
      // Evicted between the check and the open: fetch it again.
      if (head) return head_upstream(sel, d, cred, resp);
      return serve_fetched(sel, d, cred, head, false, resp);
    }
    return resp.send(
        oci_error(500, oci::error_code::unsupported, "cache read: " + rd.error().message));
  }
  auto r = blob_headers(d);
  if (auto vis = st_.get_visibility(d); vis && vis->is_public)  // nodes may serve it to anyone
    r.headers.set(std::string(origin::headers::visibility), "public");
  std::uint64_t size = rd->size();
  if (m_.served_cache_bytes && !head) m_.served_cache_bytes->inc(size);
  r.body = http::file_body{std::make_shared<unique_fd>(rd->release()), 0, size};
  resp.send(std::move(r));
}

void blob_service::head_upstream(const selection& sel, const digest& d, const credential& cred,
                                 http::responder resp) {
  const std::string path = "/v2/" + sel.repo + "/blobs/" + d.str();
  auto r = uc_.call(*sel.up, sel.repo, nullptr, "HEAD", path, {{"Accept", "*/*"}}, 0);
  if (r && (r->status == 401 || r->status == 403 || r->status == 404) && !cred.anonymous()) {
    r = uc_.call(*sel.up, sel.repo, &cred, "HEAD", path, {{"Accept", "*/*"}}, 0);
  }
  if (!r) {
    unsigned s = gateway_status(r.error());
    return resp.send(failure_response(s, "upstream " + sel.up->cfg.name + ": " + r.error().message,
                                      s == 429 ? "1" : "", oci::error_code::blob_unknown));
  }
  if (r->status != 200) {
    std::string ra(r->header("Retry-After").value_or(""));
    return resp.send(failure_response(
        static_cast<unsigned>(r->status),
        "upstream " + sel.up->cfg.name + " answered HTTP " + std::to_string(r->status), ra,
        oci::error_code::blob_unknown));
  }
  http::response out = blob_headers(d);
  out.rangeable = false;
  if (auto cl = r->header("Content-Length")) out.headers.set("Content-Length", std::string(*cl));
  resp.send(std::move(out));
}

result<metainfo_answer> blob_service::cached_metainfo(const digest& d) {
  metainfo_answer a;
  if (auto t = st_.get_metainfo(d)) {
    auto m = object_metainfo::parse(*t, d);
    if (m) {
      a.meta = std::move(*m);
      a.torrent = std::move(*t);
      a.size = a.meta->size;
      return a;
    }
  }
  auto rd = store_.open_read(d);
  if (!rd) return fail(rd.error());
  auto m = metainfo_for_fd(rd->fd(), rd->size(), d);
  if (!m) return fail(m.error());
  a.torrent = m->torrent_file({});
  (void)st_.put_metainfo(d, a.torrent);
  a.size = m->size;
  a.meta = std::move(*m);
  return a;
}

void blob_service::metainfo_cached(const selection& sel, const digest& d, const credential& cred,
                                   const std::function<void(metainfo_answer)>& done) {
  auto v = access_.check(sel, d, "/v2/" + sel.repo + "/blobs/" + d.str(), cred);
  if (!v.allowed) {
    metainfo_answer a;
    a.status = v.status;
    a.message = v.message;
    a.retry_after = v.retry_after;
    return done(std::move(a));
  }
  auto a = cached_metainfo(d);
  if (!a) {
    metainfo_answer e;
    e.status = a.error().is(errc::not_found) ? 404 : 500;
    e.message = a.error().message;
    return done(std::move(e));
  }
  auto vis = st_.get_visibility(d);
  a->is_public = vis && vis->is_public;
  done(std::move(*a));
}

void blob_service::metainfo(const selection& sel, const digest& d, const credential& cred,
                            std::chrono::milliseconds wait, bool accept_chunks,
                            std::function<void(metainfo_answer)> done) {
  net::post(pool_, [this, sel, d, cred, wait, accept_chunks, done] {
    metainfo_fetch(sel, d, cred, wait, accept_chunks, false, done);
  });
}

// Worker thread: the metainfo of an object in the cache, or of the fetch this request starts or
// joins (`personal`: a fetch keyed by this client's credential, see wants_own_answer).
void blob_service::metainfo_fetch(const selection& sel, const digest& d, const credential& cred,
                                  std::chrono::milliseconds wait, bool accept_chunks, bool personal,
                                  std::function<void(metainfo_answer)> done) {
  if (store_.contains(d)) return metainfo_cached(sel, d, cred, done);
  if (stopping_) {
    metainfo_answer a;
    a.status = 503;
    a.message = "registry-proxy is shutting down";
    return done(std::move(a));
  }
  bool started = false;
  std::string refused;
  auto f = join_or_start(sel, d, cred, started,
                         {.for_metainfo = true,
                          .for_chunks = accept_chunks,
                          .personal = personal,
                          .refused = &refused});
  if (!f) {
    metainfo_answer a;
    a.status = 429;
    a.message = refused;
    a.retry_after = "5";
    return done(std::move(a));
  }
  auto fired = std::make_shared<std::atomic<bool>>(false);
  auto timer = std::make_shared<net::steady_timer>(io_, wait);
  f->when_done([this, f, fired, timer, done, sel, d, cred, wait, accept_chunks] {
    if (fired->exchange(true)) return;
    timer->cancel();
    auto s = f->snap();
    if (s.ph == blob_fetch::phase::committed) {
      net::post(pool_, [this, sel, d, cred, done] { metainfo_cached(sel, d, cred, done); });
      return;
    }
    if (wants_own_answer(*f, cred)) {
      net::post(pool_, [this, sel, d, cred, wait, accept_chunks, done] {
        metainfo_fetch(sel, d, cred, wait, accept_chunks, true, done);
      });
      return;
    }
    metainfo_answer a;
    a.status = s.status ? s.status : 502;
    a.message = s.message;
    a.retry_after = s.retry_after;
    done(std::move(a));
  });
  // A chunked object answers at once: the node fetches its chunks while the rest downloads.
  if (accept_chunks)
    f->when_chunked([f, fired, timer, done] {
      if (fired->exchange(true)) return;
      timer->cancel();
      auto s = f->snap();
      metainfo_answer a;
      a.status = 202;
      a.chunk_size = s.chunks ? s.chunks->chunk_size() : 0;
      a.bytes_done = s.progress;
      a.size = s.size.value_or(0);
      a.message = "fetch in progress; chunks swarm";
      a.retry_after = "1";
      done(std::move(a));
    });
  timer->async_wait([f, fired, accept_chunks, done](boost::system::error_code ec) {
    if (ec || fired->exchange(true)) return;
    auto s = f->snap();
    metainfo_answer a;
    a.status = 202;
    if (s.chunks && accept_chunks) a.chunk_size = s.chunks->chunk_size();
    // Progress, not the object's own bytes: peers treat a growing value as liveness, and an
    // object waiting in the fetch queue grows with the fetches ahead of it.
    a.bytes_done = s.progress;
    a.size = s.size.value_or(0);
    a.message = "fetch in progress";
    a.retry_after = "1";
    done(std::move(a));
  });
}

}  // namespace shoal::proxy
