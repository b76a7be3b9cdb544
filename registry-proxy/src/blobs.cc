#include "registry-proxy/blobs.h"
#include "blob_fetch.h"

#include <algorithm>
#include <thread>

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
    for (auto& [d, f] : fetches_) all.push_back(f);
    for (auto& f : queue_) {
      f->admitted = true;
      ++running_;
      waiting.push_back(f);
    }
    queue_.clear();
  }
  for (auto& f : all) f->cancel();
  // Queued fetches start cancelled: they fail at once and answer their waiters.
  for (auto& f : waiting) f->start();
}

std::vector<std::shared_ptr<blob_fetch>> blob_service::admit_locked() {
  std::vector<std::shared_ptr<blob_fetch>> out;
  while (!queue_.empty() &&
         (fetch_limit_ <= 0 || running_ < static_cast<std::size_t>(fetch_limit_))) {
    auto f = queue_.front();
    queue_.pop_front();
    f->admitted = true;
    ++running_;
    out.push_back(std::move(f));
  }
  return out;
}

void blob_service::release_slot(const std::shared_ptr<blob_fetch>& f) {
  std::vector<std::shared_ptr<blob_fetch>> next;
  {
    std::lock_guard lk(mu_);
    if (!f->admitted || f->released) return;
    f->released = true;
    --running_;
    next = admit_locked();
  }
  for (auto& n : next) n->start();
}

void blob_service::finish_fetch(const std::shared_ptr<blob_fetch>& f) {
  std::vector<std::shared_ptr<blob_fetch>> next;
  {
    std::lock_guard lk(mu_);
    auto it = fetches_.find(f->id());
    if (it != fetches_.end() && it->second == f) fetches_.erase(it);
    if (f->admitted && !f->released) {
      f->released = true;
      --running_;
    }
    next = admit_locked();
  }
  for (auto& n : next) n->start();
}

std::shared_ptr<blob_fetch> blob_service::join_or_start(const selection& sel, const digest& d,
                                                        const credential& cred, bool& started,
                                                        bool for_metainfo, bool for_chunks) {
  std::shared_ptr<blob_fetch> f;
  {
    std::lock_guard lk(mu_);
    auto it = fetches_.find(d);
    if (it != fetches_.end()) {
      started = false;
      if (m_.joins) m_.joins->inc();
      f = it->second;
      if (for_metainfo) f->want_metainfo();
      if (for_chunks) f->want_chunks();
      if (f->admitted || for_metainfo) return f;
      // An HTTP client streams this object: it may not wait in the queue.
      queue_.erase(std::remove(queue_.begin(), queue_.end(), f), queue_.end());
      f->admitted = true;
      ++running_;
    } else {
      f = std::make_shared<blob_fetch>(*this, sel, d, cred);
      if (for_metainfo) f->want_metainfo();
      if (for_chunks) f->want_chunks();
      fetches_[d] = f;
      started = true;
      bool room = fetch_limit_ <= 0 || running_ < static_cast<std::size_t>(fetch_limit_);
      if (for_metainfo && !room) {
        queue_.push_back(f);
        log::debug("upstream fetch queued", log::kv("digest", d.str()),
                   log::kv("ahead", queue_.size() - 1));
        return f;
      }
      f->admitted = true;
      ++running_;
    }
  }
  f->start();
  return f;
}

void blob_service::serve(const selection& sel, const digest& d, const credential& cred, bool head,
                         http::responder resp) {
  net::post(pool_, [this, sel, d, cred, head, resp] {
    if (store_.contains(d)) return serve_cached(sel, d, cred, head, resp);
    std::shared_ptr<blob_fetch> f;
    {
      std::lock_guard lk(mu_);
      auto it = fetches_.find(d);
      if (it != fetches_.end()) f = it->second;
    }
    if (!f && head) return head_upstream(sel, d, cred, resp);
    if (stopping_)
      return resp.send(
          oci_error(503, oci::error_code::unsupported, "registry-proxy is shutting down"));
    // Joins a running fetch, admits a queued one (an HTTP client may not wait in the queue) or
    // starts one.
    bool started = false;
    f = join_or_start(sel, d, cred, started);
    serve_from_fetch(f, sel, cred, head, resp);
  });
}

void blob_service::serve_from_fetch(const std::shared_ptr<blob_fetch>& f, const selection& sel,
                                    const credential& cred, bool head, http::responder resp) {
  f->when_head([this, f, sel, cred, head, resp] {
    auto s = f->snap();
    if (s.ph == blob_fetch::phase::failed) {
      return resp.send(
          failure_response(s.status, s.message, s.retry_after, oci::error_code::blob_unknown));
    }
    if (s.ph == blob_fetch::phase::committed) {
      net::post(pool_, [this, sel, d = f->id(), cred, head, resp] {
        serve_cached(sel, d, cred, head, resp);
      });
      return;
    }
    auto respond = [f, s, head, resp] {
      auto r = blob_headers(f->id());
      if (!s.size) r.rangeable = false;
      auto infl = s.inflight;
      r.body = http::stream_body{s.size, [infl](std::uint64_t off, std::uint64_t len) {
                                   return std::make_unique<inflight_source>(infl, off, len);
                                 }};
      (void)head;
      resp.send(std::move(r));
    };
    if (s.is_public || (!s.client_hash.empty() && s.client_hash == cred.hash)) return respond();
    // Fetched privately for another client: this client proves its own access first.
    net::post(pool_, [this, f, sel, cred, resp, respond] {
      auto v = access_.check(sel, f->id(), "/v2/" + sel.repo + "/blobs/" + f->id().str(), cred);
      if (!v.allowed)
        return resp.send(failure_response(v.status, v.message, {}, oci::error_code::blob_unknown));
      respond();
    });
  });
}

void blob_service::serve_cached(const selection& sel, const digest& d, const credential& cred,
                                bool head, http::responder resp) {
  auto v = access_.check(sel, d, "/v2/" + sel.repo + "/blobs/" + d.str(), cred);
  if (!v.allowed)
    return resp.send(failure_response(v.status, v.message, {}, oci::error_code::blob_unknown));
  auto rd = store_.open_read(d);
  if (!rd) {
    if (rd.error().is(errc::not_found)) {
      // Evicted between the check and the open: fetch it again.
      if (head) return head_upstream(sel, d, cred, resp);
      bool started = false;
      auto f = join_or_start(sel, d, cred, started);
      return serve_from_fetch(f, sel, cred, head, resp);
    }
    return resp.send(
        oci_error(500, oci::error_code::unsupported, "cache read: " + rd.error().message));
  }
  auto r = blob_headers(d);
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
    return resp.send(failure_response(gateway_status(r.error()),
                                      "upstream " + sel.up->cfg.name + ": " + r.error().message, {},
                                      oci::error_code::blob_unknown));
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

void blob_service::metainfo(const selection& sel, const digest& d, const credential& cred,
                            std::chrono::milliseconds wait, bool accept_chunks,
                            std::function<void(metainfo_answer)> done) {
  auto answer_cached = [this, sel, d, cred, done] {
    auto v = access_.check(sel, d, "/v2/" + sel.repo + "/blobs/" + d.str(), cred);
    if (!v.allowed) {
      metainfo_answer a;
      a.status = v.status;
      a.message = v.message;
      return done(std::move(a));
    }
    auto a = cached_metainfo(d);
    if (!a) {
      metainfo_answer e;
      e.status = a.error().is(errc::not_found) ? 404 : 500;
      e.message = a.error().message;
      return done(std::move(e));
    }
    done(std::move(*a));
  };
  net::post(pool_, [this, sel, d, cred, wait, accept_chunks, done, answer_cached] {
    if (store_.contains(d)) return answer_cached();
    if (stopping_) {
      metainfo_answer a;
      a.status = 503;
      a.message = "registry-proxy is shutting down";
      return done(std::move(a));
    }
    bool started = false;
    auto f = join_or_start(sel, d, cred, started, true, accept_chunks);
    auto fired = std::make_shared<std::atomic<bool>>(false);
    auto timer = std::make_shared<net::steady_timer>(io_, wait);
    f->when_done([this, f, fired, timer, done, answer_cached] {
      if (fired->exchange(true)) return;
      timer->cancel();
      auto s = f->snap();
      if (s.ph == blob_fetch::phase::committed) {
        net::post(pool_, answer_cached);
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
  });
}

}  // namespace shoal::proxy

namespace shoal::proxy {

void blob_service::register_chunks(const std::shared_ptr<chunk_list>& c) {
  std::lock_guard lk(mu_);
  if (!chunk_lists_.count(c->parent())) chunk_order_.push_back(c->parent());
  chunk_lists_[c->parent()] = c;
  // Kept for nodes still joining after the blob is committed; the oldest go first.
  while (chunk_order_.size() > 256) {
    chunk_lists_.erase(chunk_order_.front());
    chunk_order_.pop_front();
  }
}

std::shared_ptr<chunk_list> blob_service::chunks_of(const digest& parent) const {
  std::lock_guard lk(mu_);
  auto it = chunk_lists_.find(parent);
  return it == chunk_lists_.end() ? nullptr : it->second;
}

status blob_service::commit_chunk(const chunk_entry& e, const std::string& bytes,
                                  const object_metainfo& m, bool is_public,
                                  const std::string& repo_key) {
  // A chunk is visible to exactly those who may read its blob.
  (void)st_.add_visibility(e.id, is_public, repo_key);
  auto t = store_.begin_write(e.id, e.size, cache::object_kind::blob);
  if (!t) return fail(t.error().wrap("cache chunk " + e.id.short_str()));
  if (t->role == cache::write_role::writer) {
    if (auto st = t->writer->write(std::string_view(bytes)); !st)
      return fail(st.error().wrap("write chunk"));
    if (auto info = t->writer->commit(); !info) return fail(info.error().wrap("commit chunk"));
  } else if (t->role == cache::write_role::follower) {
    // The same bytes are being cached for another blob: wait for that write (bounded).
    for (int i = 0; i < 3000 && !store_.contains(e.id); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!store_.contains(e.id))
      return fail(errc::timeout,
                  "chunk " + e.id.short_str() + " written elsewhere never committed");
  }
  (void)st_.put_metainfo(e.id, m.torrent_file({}));
  if (m_.chunks) m_.chunks->inc();
  log::debug("chunk cached", log::kv("digest", e.id.str()), log::kv("offset", e.offset),
             log::kv("bytes", e.size));
  notify_committed(e.id, m);
  return {};
}

namespace {

// The chunk list answer (origin_protocol.h) of what is published so far.
std::string chunk_list_body(const chunk_list& c) {
  auto snap = c.snap();
  origin::chunk_list out;
  out.parent = c.parent();
  out.size = c.size();
  out.chunk_size = c.chunk_size();
  out.complete = snap.complete;
  out.error = snap.failed;
  for (const auto& e : snap.chunks) out.chunks.push_back({e.id, e.offset, e.size});
  return origin::encode(out);
}

}  // namespace

void blob_service::chunks(const selection& sel, const digest& parent, const credential& cred,
                          std::size_t have, std::chrono::milliseconds wait,
                          std::function<void(unsigned, std::string)> done) {
  net::post(pool_, [this, sel, parent, cred, have, wait, done] {
    auto c = chunks_of(parent);
    if (!c) return done(404, origin::plain_error_body("the object is not cut into chunks here"));
    auto v = access_.check(sel, parent, "/v2/" + sel.repo + "/blobs/" + parent.str(), cred);
    if (!v.allowed) return done(v.status, origin::plain_error_body(v.message));
    auto fired = std::make_shared<std::atomic<bool>>(false);
    auto timer = std::make_shared<net::steady_timer>(io_, wait);
    auto answer = [c, fired, timer, done] {
      if (fired->exchange(true)) return;
      timer->cancel();
      done(200, chunk_list_body(*c));
    };
    timer->async_wait([answer](boost::system::error_code ec) {
      if (!ec) answer();
    });
    c->when_beyond(have, answer);
  });
}

void blob_service::chunk_metainfo(const selection& sel, const digest& parent, const digest& chunk,
                                  const credential& cred,
                                  std::function<void(metainfo_answer)> done) {
  net::post(pool_, [this, sel, parent, chunk, cred, done] {
    metainfo_answer e;
    auto c = chunks_of(parent);
    if (!c || !c->contains(chunk)) {
      e.status = 404;
      e.message = chunk.short_str() + " is not a published chunk of " + parent.short_str();
      return done(std::move(e));
    }
    auto v = access_.check(sel, parent, "/v2/" + sel.repo + "/blobs/" + parent.str(), cred);
    if (!v.allowed) {
      e.status = v.status;
      e.message = v.message;
      return done(std::move(e));
    }
    auto a = cached_metainfo(chunk);
    if (!a) {
      e.status = a.error().is(errc::not_found) ? 404 : 500;
      e.message = a.error().message;
      return done(std::move(e));
    }
    done(std::move(*a));
  });
}

}  // namespace shoal::proxy
