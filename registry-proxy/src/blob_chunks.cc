// blob_service's chunk objects (chunks.h): whether a blob is cut, committing its chunks, the
// chunk-list endpoint and each chunk's metainfo.
#include "registry-proxy/blobs.h"
#include "blob_fetch.h"
#include "commit_pin.h"

#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/log.h"

namespace shoal::proxy {

bool blob_service::room_for_chunks(std::uint64_t size, std::string& why) const {
  auto s = store_.get_stats();
  // The blob's own write is among the in-flight bytes already; pinned objects cannot be
  // evicted to make room.
  const std::uint64_t high = store_.high_watermark_bytes();
  const std::uint64_t need = s.inflight_bytes + s.pinned_bytes + size;
  if (need <= high) return true;
  why = "the chunks need " + std::to_string(size) + " bytes beside " +
        std::to_string(s.inflight_bytes) + " in flight and " + std::to_string(s.pinned_bytes) +
        " pinned; the high watermark is " + std::to_string(high) +
        " (cache.quota: about twice the largest blob)";
  return false;
}

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
  const commit_pin_guard pinned(store_, e.id);
  auto t = store_.begin_write(e.id, e.size, cache::object_kind::blob);
  if (!t) return fail(t.error().wrap("cache chunk " + e.id.short_str()));
  if (t->role == cache::write_role::writer) {
    // The chunker named the chunk by hashing these very bytes: not hashed again.
    if (auto st = t->writer->write_whole_hashed(bytes, e.id); !st)
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

access_verdict blob_service::parent_access(const selection& sel, const digest& parent,
                                           const credential& cred) {
  // While the blob is still arriving it is not recorded public yet (only its verified bytes
  // make it so): its fetch says whom it was fetched for, as it does for streaming readers.
  std::shared_ptr<blob_fetch> f;
  {
    std::lock_guard lk(mu_);
    auto it = fetches_.find(flight_key{parent, sel.up->cfg.name, sel.repo, {}});
    if (it != fetches_.end()) f = it->second;
  }
  if (f) {
    auto s = f->snap();
    bool answered = s.ph == blob_fetch::phase::streaming || s.ph == blob_fetch::phase::committed;
    if (answered && (s.is_public || (!s.client_hash.empty() && s.client_hash == cred.hash)))
      return {true, 0, {}, {}};
  }
  return access_.check(sel, parent, "/v2/" + sel.repo + "/blobs/" + parent.str(), cred);
}

void blob_service::chunks(const selection& sel, const digest& parent, const credential& cred,
                          std::size_t have, std::chrono::milliseconds wait,
                          std::function<void(unsigned, std::string)> done) {
  net::post(pool_, [this, sel, parent, cred, have, wait, done] {
    auto c = chunks_of(parent);
    if (!c) return done(404, origin::plain_error_body("the object is not cut into chunks here"));
    auto v = c->cut_publicly() ? access_verdict{true, 0, {}, {}} : parent_access(sel, parent, cred);
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
    auto v = c->cut_publicly() ? access_verdict{true, 0, {}, {}} : parent_access(sel, parent, cred);
    if (!v.allowed) {
      e.status = v.status;
      e.message = v.message;
      e.retry_after = v.retry_after;
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
