#pragma once
// blob_fetch: one upstream transfer shared by every client that wants the object (single
// flight). blob_service (blobs.h) owns the fetches, admits them through its fetch queue and
// serves clients from them; this class runs one: the upstream GET with retries, hashing into the
// cache's in-flight object, metainfo and chunk objects on demand, and the waiters for its head
// and its end. Private to registry-proxy's blob service (included by blobs.cc and
// blob_fetch_answers.cc only).
//
// Threading: every member is guarded by mu_; callbacks of the HTTP client arrive on its thread.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "registry-proxy/blobs.h"
#include "registry-proxy/ring.h"
#include "commit_pin.h"
#include "common/log.h"
#include "common/oci.h"
#include "common/origin_protocol.h"
#include "common/text.h"

namespace shoal::proxy {

namespace net = boost::asio;

class blob_fetch : public std::enable_shared_from_this<blob_fetch> {
 public:
  enum class phase { starting, streaming, committed, failed };

  struct snapshot {
    phase ph = phase::starting;
    std::optional<std::uint64_t> size;
    bool is_public = false;
    std::string client_hash;  // credential the fetch acted with (when private)
    unsigned status = 0;
    std::string message, retry_after;
    std::shared_ptr<cache::inflight_object> inflight;
    std::uint64_t available = 0;
    bool queued = false;
    // Upstream bytes received toward this object: while it waits in the fetch queue, those of
    // the fetches ahead of it; then its own on top. Monotonic, so a long-polling peer sees
    // progress while the queue moves.
    std::uint64_t progress = 0;
    std::shared_ptr<chunk_list> chunks;  // set when the object is cut into chunk objects
  };

  // `personal`: keyed by the client's credential too (flight_key). `no_forward`: a request of
  // another ring member (ring::from_header) asked for it: fetch upstream, never from the ring.
  blob_fetch(blob_service& svc, selection sel, const digest& d, credential cred, bool personal,
             bool no_forward = false)
      : svc_(svc),
        sel_(std::move(sel)),
        id_(d),
        client_(std::move(cred)),
        key_{d, sel_.up->cfg.name, sel_.repo, personal ? client_.hash : std::string()},
        no_forward_(no_forward),
        enqueued_at_(svc.upstream_progress()) {}

  // The ring member this fetch streams from; empty while it fetches upstream.
  std::string source() {
    std::lock_guard lk(mu_);
    return source_;
  }

  const digest& id() const { return id_; }
  // The single-flight key (blobs.h): object, upstream, repository, credential.
  const flight_key& key() const { return key_; }
  // Someone wants this object's metainfo (peerd joining the swarm): hash pieces as bytes arrive.
  void want_metainfo() { want_meta_.store(true); }
  // A node that understands chunk objects waits for it: cut it into chunks (chunks.h).
  void want_chunks() { want_chunks_.store(true); }

  // Admission bookkeeping, guarded by blob_service::mu_.
  bool admitted = false;  // counted in blob_service::running_ (of its upstream)
  bool released = false;  // finished and uncounted

  // The first start of the transfer (admission); retries call restart().
  void start() {
    {
      std::lock_guard lk(mu_);
      started_at_ = svc_.upstream_progress();
      began_ = true;
    }
    restart();
  }

  void restart() {
    net::post(svc_.pool(), [self = shared_from_this()] { self->attempt(); });
  }

  void cancel() {
    http::request_id rid;
    http::client* c = nullptr;
    {
      std::lock_guard lk(mu_);
      cancelled_ = true;
      rid = req_id_;
      c = req_client_;
    }
    if (rid && c) c->cancel(rid);
  }

  // Runs `cb` once the response head is known (streaming, committed or failed).
  void when_head(std::function<void()> cb) {
    {
      std::lock_guard lk(mu_);
      if (ph_ == phase::starting) {
        head_waiters_.push_back(std::move(cb));
        return;
      }
    }
    cb();
  }

  // Runs `cb` once the fetch has ended (committed or failed).
  void when_done(std::function<void()> cb) {
    {
      std::lock_guard lk(mu_);
      if (ph_ == phase::starting || ph_ == phase::streaming) {
        done_waiters_.push_back(std::move(cb));
        return;
      }
    }
    cb();
  }

  snapshot snap() {
    std::lock_guard lk(mu_);
    snapshot s;
    s.ph = ph_;
    s.size = size_;
    s.is_public = who_ == acting_as::proxy;
    s.client_hash = who_ == acting_as::client ? client_.hash : std::string();
    s.status = status_;
    s.message = message_;
    s.retry_after = retry_after_;
    s.inflight = inflight_;
    s.available = inflight_ ? inflight_->available() : 0;
    s.queued = !began_;
    s.progress =
        began_ ? started_at_ - enqueued_at_ + s.available : svc_.upstream_progress() - enqueued_at_;
    s.chunks = chunks_;
    return s;
  }

  // Failed, or about to: its in-flight object failed (wrong bytes, an aborted write; readers
  // were cut off) before the fetch itself failed and left blob_service's table. Never joined.
  bool failing() {
    std::lock_guard lk(mu_);
    return ph_ == phase::failed || (inflight_ && inflight_->state() == cache::write_state::failed);
  }

  // Runs `cb` once the object is known to be cut into chunks (at once if it is). Never runs
  // for an object that is not chunked: the waiter is dropped when the fetch ends.
  void when_chunked(std::function<void()> cb) {
    {
      std::lock_guard lk(mu_);
      if (!chunks_) {
        if (ph_ == phase::starting || ph_ == phase::streaming)
          chunk_waiters_.push_back(std::move(cb));
        return;
      }
    }
    cb();
  }

 private:
  // On a worker thread: pick the credential, then start the streaming GET.
  void attempt() {
    bool cancelled;
    {
      std::lock_guard lk(mu_);
      cancelled = cancelled_;
    }
    if (cancelled) return fail_and_fire(503, "registry-proxy is shutting down");
    if (!planned_) {
      planned_ = true;
      // The ring (ring.h): the owner of the digest fetches it upstream; everyone else streams
      // it from the owner.
      if (auto* r = svc_.replica_ring(); r && !no_forward_) {
        if (auto o = r->owner(id_.str()); o != r->self()) {
          set_source(o);
          r->stats().forwarded.fetch_add(1);
        }
      }
    }
    if (auto src = source(); !src.empty()) return attempt_ring(src);
    if (who_ == acting_as::client && !gated_) {
      // The client's credential goes upstream: once per fetch it passes the credential gate
      // (credential_gate.h), and holds its pass until upstream answered.
      gated_ = true;
      auto pass = svc_.upstreams().gate().admit(client_.peer, client_.hash);
      if (!pass) {
        {
          std::lock_guard lk(mu_);
          retry_after_ = "1";
        }
        return fail_and_fire(429, "credential check refused: " + pass.error().message);
      }
      std::lock_guard lk(mu_);
      gate_pass_ = std::move(*pass);
    }
    const credential* cred = who_ == acting_as::client ? &client_ : nullptr;
    auto auth = svc_.upstreams().authorization(*sel_.up, sel_.repo, cred, auth_round_ > 0);
    if (!auth) {
      // A token realm that refuses us: as the proxy, the client may still have credentials.
      if (who_ == acting_as::proxy && !client_.anonymous()) {
        who_ = acting_as::client;
        auth_round_ = 0;
        return attempt();
      }
      unsigned s = auth.error().is(errc::unauthorized) ? 401
                   : auth.error().is(errc::timeout)    ? 504
                                                       : 502;
      return fail_and_fire(s, auth.error().message);
    }
    auto req =
        svc_.upstreams().make_request(*sel_.up, "GET", "/v2/" + sel_.repo + "/blobs/" + id_.str());
    req.resume = true;
    req.headers.emplace_back("Accept", "*/*");
    if (*auth) req.headers.emplace_back("Authorization", **auth);
    add_range(req);
    if (svc_.counters().upstream_gets) svc_.counters().upstream_gets->inc();
    submit(svc_.upstreams().http(), std::move(req));
  }

  // A continuation (after the ring owner failed mid-blob) asks for the bytes the writer lacks.
  void add_range(http::client_request& req) const {
    if (resume_from_ > 0)
      req.headers.emplace_back("Range", "bytes=" + std::to_string(resume_from_) + "-");
  }

  void submit(http::client& c, http::client_request req) {
    http::callbacks cb;
    auto self = shared_from_this();
    cb.on_response = [self](const http::response_head& h) { return self->on_response(h); };
    cb.on_data = [self](std::string_view c) { return self->on_data(c); };
    cb.on_complete = [self](result<http::completion> r) { self->on_complete(std::move(r)); };
    auto rid = c.submit(std::move(req), std::move(cb));
    std::lock_guard lk(mu_);
    req_id_ = rid;
    req_client_ = &c;
  }

  // The GET of the pull API at the ring member `src`, which serves it from its cache or its own
  // upstream fetch. The client's credential goes along once the owner refused us without it;
  // the owner checks it (its credential gate, the upstream) as for any client.
  void attempt_ring(const std::string& src) {
    auto* r = svc_.replica_ring();
    auto req = r->request(
        src, "/v2/" + sel_.repo + "/blobs/" + id_.str() + "?ns=" + url_escape(sel_.up->cfg.name));
    req.resume = true;
    req.headers.emplace_back("Accept", "*/*");
    if (who_ == acting_as::client && !client_.anonymous())
      req.headers.emplace_back("Authorization", client_.header);
    add_range(req);
    submit(r->client(), std::move(req));
  }

  void set_source(std::string s) {
    std::lock_guard lk(mu_);
    source_ = std::move(s);
  }

  // The ring member this fetch streamed from failed (`why`): it is marked down and the next
  // member in the digest's order takes over; if that is this replica, it goes upstream. The
  // bytes already written stay: the new source is asked for the rest (Range). Returns false
  // when there is no one to take over (then the fetch fails as before).
  bool take_over(const std::string& why) {
    auto* r = svc_.replica_ring();
    std::string src = source();
    if (!r || src.empty() || takeovers_ >= static_cast<int>(r->members().size())) return false;
    ++takeovers_;
    r->mark_down(src, why);
    if (writer_) {
      if (!flush_pending()) return false;
      resume_from_ = writer_->inflight()->available();
    }
    std::string next = r->owner(id_.str());
    if (next == src) next = r->self();
    set_source(next == r->self() ? std::string() : next);
    r->stats().takeovers.fetch_add(1);
    log::warn("ring owner failed mid-fetch; taking over", log::kv("digest", id_.str()),
              log::kv("owner", src), log::kv("next", next == r->self() ? "this replica" : next),
              log::kv("resume_at", resume_from_), log::kv("error", why));
    restart();
    return true;
  }

  // Client thread: a 200 from upstream. Checks the announced digest and length, records the
  // object's visibility, and starts the cache write (or follows the one already running);
  // returns whether this fetch streams the body itself.
  bool on_ok(const http::response_head& h) {
    if (auto dcd = h.header("Docker-Content-Digest"); dcd && *dcd != id_.str()) {
      capture_error(502, "upstream announced digest " + std::string(*dcd) + " for " + id_.str());
      return false;
    }
    std::optional<std::uint64_t> size;
    if (auto cl = h.header("Content-Length")) {
      std::uint64_t v = 0;
      auto s = std::string(*cl);
      if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 20)
        v = std::stoull(s);
      else
        return capture_error(502, "upstream sent a bad Content-Length"), false;
      size = v;
    }
    // A private fetch names its repository at once (that grants nothing: strangers are still
    // checked upstream). "Public" waits until this transfer's own bytes matched the digest
    // (commit): a response head proves nothing about the object it announces.
    std::string repo_key =
        who_ == acting_as::client ? sel_.up->cfg.name + "/" + sel_.repo : std::string();
    if (who_ == acting_as::client) {
      (void)svc_.state().add_visibility(id_, false, repo_key);
      svc_.upstreams().gate().note_accepted(client_.hash);
    }
    auto ticket = svc_.store().begin_write(id_, size, cache::object_kind::blob);
    if (!ticket) {
      capture_error(ticket.error().is(errc::no_space) ? 507 : 500,
                    "cache: " + ticket.error().message);
      return false;
    }
    if (ticket->role == cache::write_role::present) {
      set_phase(phase::committed, 0, {});
      return false;
    }
    if (ticket->role == cache::write_role::follower) {
      // Someone else in this process is writing it (it cannot be us): follow that write.
      auto infl = ticket->inflight;
      {
        std::lock_guard lk(mu_);
        inflight_ = infl;
        size_ = size;
      }
      set_phase(phase::streaming, 0, {});
      auto self = shared_from_this();
      infl->wait_for(UINT64_MAX - 1, [self](const cache::progress& p) {
        if (p.state == cache::write_state::committed)
          self->set_phase(phase::committed, 0, {});
        else
          self->set_phase(phase::failed, 502, p.err ? p.err->message : "write failed");
        self->svc_.finish_fetch(self);
      });
      follower_ = true;
      return false;
    }
    writer_ = std::move(ticket->writer);
    // Piece hashes cost CPU on every byte: compute them while streaming only when someone
    // already asked for the metainfo (peerd always does); else lazily when first asked.
    if (size && want_meta_.load()) pieces_ = std::make_unique<async_metainfo_builder>(*size, false);
    // A large object peerd waits for is also cut into chunk objects that swarm while the
    // rest still downloads (chunks.h).
    std::shared_ptr<chunk_list> chunks;
    std::uint64_t cs =
        size && want_chunks_.load() && !chunker_ ? chunk_size_for(*size, svc_.chunk_size()) : 0;
    if (std::string why; cs && !svc_.room_for_chunks(*size, why)) {
      cs = 0;
      if (svc_.counters().not_cut) svc_.counters().not_cut->inc();
      log::warn("blob not cut into chunks: nodes wait for the whole object",
                log::kv("digest", id_.str()), log::kv("bytes", *size), log::kv("why", why));
    }
    if (cs) {
      bool pub = who_ == acting_as::proxy;
      chunks = std::make_shared<chunk_list>(id_, *size, cs, pub);
      svc_.register_chunks(chunks);
      chunker_ = std::make_unique<chunker>(
          chunks, [svc = &svc_, pub, repo_key](const chunk_entry& e, const std::string& b,
                                               const object_metainfo& m) {
            return svc->commit_chunk(e, b, m, pub, repo_key);
          });
    }
    std::vector<std::function<void()>> chunk_waiters;
    {
      std::lock_guard lk(mu_);
      inflight_ = ticket->inflight;
      size_ = size;
      chunks_ = chunks;
      if (chunks_) chunk_waiters.swap(chunk_waiters_);
    }
    set_phase(phase::streaming, 0, {});
    for (auto& w : chunk_waiters) w();
    return true;
  }

  // The answers of upstream or a ring member (blob_fetch_answers.cc), on the client thread:
  // whether the body is streamed here; otherwise next_ or the captured error says what follows.
  bool on_continuation(const http::response_head& h);  // a continuation's writer has bytes
  bool on_ring_response(const http::response_head& h);
  bool retry_as_client(const http::response_head& h);  // true: next_ says so
  bool retry_as_client_or_pass_on(const http::response_head& h);
  bool on_response(const http::response_head& h);

  // libcurl delivers 16 KiB at a time: gather 256 KiB before handing bytes to the cache (and
  // to the piece hasher), so readers of the in-flight object wake up per batch.
  bool flush_pending() {
    if (pending_.empty()) return true;
    auto st = writer_->write(pending_);
    if (!st) {
      capture_error(st.error().is(errc::no_space) ? 507 : 500,
                    "cache write: " + st.error().message);
      return false;
    }
    if (pieces_) pieces_->update(pending_.data(), pending_.size());
    if (chunker_) chunker_->update(pending_.data(), pending_.size());
    svc_.note_upstream_bytes(pending_.size());
    if (auto* r = svc_.replica_ring(); r && !source().empty())
      r->stats().bytes.fetch_add(pending_.size());
    else if (svc_.counters().upstream_bytes)
      svc_.counters().upstream_bytes->inc(pending_.size());
    pending_.clear();
    return true;
  }

  bool on_data(std::string_view chunk) {
    if (writer_) {
      if (skip_ > 0) {
        auto n = std::min<std::uint64_t>(skip_, chunk.size());
        chunk.remove_prefix(static_cast<std::size_t>(n));
        skip_ -= n;
        if (chunk.empty()) return true;
      }
      pending_.append(chunk);
      if (pending_.size() >= 256 * 1024) return flush_pending();
      return true;
    }
    if (err_body_.size() < 4096) err_body_.append(chunk.substr(0, 4096 - err_body_.size()));
    return true;
  }

  void on_complete(result<http::completion> r) {
    if (follower_) return;
    auto step = next_;
    next_ = next_step::none;
    if (step == next_step::retry_auth) {
      ++auth_round_;
      return restart();
    }
    if (step == next_step::retry_as_client) {
      who_ = acting_as::client;
      auth_round_ = 0;
      return restart();
    }
    if (step == next_step::self_fetch) {
      set_source({});
      return restart();
    }
    if (step == next_step::take_over && take_over("the member is shutting down")) return;
    if (pending_error_) {
      if (chunker_) chunker_->abort(pending_message_);
      if (writer_) writer_->abort(pending_message_);
      writer_.reset();
      return fail_and_fire(pending_status_, pending_message_);
    }
    bool already_committed;
    {
      std::lock_guard lk(mu_);
      already_committed = ph_ == phase::committed;
    }
    if (already_committed) return svc_.finish_fetch(shared_from_this());
    if (!r) {
      if (!r.error().is(errc::cancelled) && take_over(r.error().message)) return;
      std::string msg = "upstream " + sel_.up->cfg.name + ": " + r.error().message;
      if (chunker_) chunker_->abort(msg);
      if (writer_) writer_->abort(msg);
      writer_.reset();
      if (svc_.counters().fetch_failures) svc_.counters().fetch_failures->inc();
      return fail_and_fire(r.error().is(errc::timeout) ? 504 : 502, msg);
    }
    if (writer_) {
      if (!flush_pending()) {
        if (chunker_) chunker_->abort(pending_message_);
        writer_->abort(pending_message_);
        writer_.reset();
        return fail_and_fire(pending_status_, pending_message_);
      }
      // The upstream transfer is over: the next queued fetch may start while this one commits
      // (fsync, metainfo), so the upstream link does not idle between objects.
      svc_.release_slot(shared_from_this());
      net::post(svc_.pool(), [self = shared_from_this()] { self->commit(); });
      return;
    }
    unsigned s = capture_status_;
    const std::string from = source();
    std::string msg = (from.empty() ? "upstream " + sel_.up->cfg.name : "ring member " + from) +
                      " answered HTTP " + std::to_string(s);
    // The answer's own reason (a rate limit, a quota, the member's upstream error), bounded and
    // printable: without it the client and the log only had the status.
    if (auto why = origin::error_message_of(err_body_); !why.empty()) msg += ": " + why;
    if (auto why = svc_.upstreams().realm_refused(*sel_.up); s == 401 && !why.empty())
      msg += " (" + why + ")";
    {
      std::lock_guard lk(mu_);
      retry_after_ = retry_after_capture_;
    }
    fail_and_fire(s, msg);
  }

  // Worker thread.
  void commit() {
    // The last chunk first: nodes wait for it, not for the blob's own commit.
    if (chunker_) {
      if (auto st = chunker_->finish(); !st) {
        log::warn("chunk objects incomplete; nodes fall back to the whole object",
                  log::kv("digest", id_.str()), log::kv("error", st.error().message));
      }
    }
    // Public is recorded once the bytes are verified and before the object becomes visible
    // (the callback runs inside commit(), between the hash check and the rename), so no reader
    // sees the object without knowing whether it is public.
    if (who_ == acting_as::proxy) {
      writer_->inflight()->wait_verified([svc = &svc_, id = id_](const cache::progress& p) {
        if (p.verified && p.state != cache::write_state::failed)
          (void)svc->state().add_visibility(id, true, {});
      });
    }
    const commit_pin_guard pinned(svc_.store(), id_);
    auto info = writer_->commit();
    writer_.reset();
    if (!info) {
      std::string msg = info.error().message;
      if (info.error().is(errc::digest_mismatch) || info.error().is(errc::size_mismatch)) {
        if (chunks_) chunks_->fail("the blob does not match its digest: " + msg, true);
        if (svc_.counters().digest_mismatch) svc_.counters().digest_mismatch->inc();
        log::error("upstream sent wrong bytes; object discarded", log::kv("digest", id_.str()),
                   log::kv("upstream", sel_.up->cfg.name), log::kv("repo", sel_.repo),
                   log::kv("error", msg));
      } else {
        log::error("cache commit failed", log::kv("digest", id_.str()), log::kv("error", msg));
      }
      return fail_and_fire(
          502, "object " + id_.short_str() + " from upstream " + sel_.up->cfg.name + ": " + msg);
    }
    std::optional<object_metainfo> meta;
    if (pieces_) {
      auto m = pieces_->finish(id_);
      if (m) meta = std::move(*m);
    }
    if (!meta && want_meta_.load()) {
      // Asked for after the stream began (or unknown length up front): hash the file once.
      auto rd = svc_.store().open_read(id_);
      if (rd) {
        auto m = metainfo_for_fd(rd->fd(), rd->size(), id_);
        if (m) meta = std::move(*m);
      }
    }
    if (meta) (void)svc_.state().put_metainfo(id_, meta->torrent_file({}));
    log::info("blob cached", log::kv("digest", id_.str()), log::kv("bytes", info->size),
              log::kv("upstream", sel_.up->cfg.name), log::kv("public", who_ == acting_as::proxy));
    set_phase(phase::committed, 0, {});
    if (meta) svc_.notify_committed(id_, *meta);
    svc_.finish_fetch(shared_from_this());
  }

  void capture_error(unsigned status, std::string msg) {
    pending_error_ = true;
    pending_status_ = status;
    pending_message_ = std::move(msg);
  }

  void fail_and_fire(unsigned status, std::string msg) {
    set_phase(phase::failed, status, std::move(msg));
    svc_.finish_fetch(shared_from_this());
  }

  void set_phase(phase p, unsigned status, std::string msg) {
    std::vector<std::function<void()>> heads, dones;
    credential_gate::pass done_with;
    {
      std::lock_guard lk(mu_);
      if (ph_ == phase::committed || ph_ == phase::failed) return;
      ph_ = p;
      if (p != phase::starting) done_with = std::move(gate_pass_);
      if (p == phase::failed) {
        status_ = status;
        message_ = std::move(msg);
      }
      if (p != phase::starting) heads.swap(head_waiters_);
      if (p == phase::committed || p == phase::failed) {
        dones.swap(done_waiters_);
        chunk_waiters_.clear();
      }
    }
    for (auto& f : heads) f();
    for (auto& f : dones) f();
  }

  enum class next_step { none, retry_auth, retry_as_client, self_fetch, take_over };

  blob_service& svc_;
  selection sel_;
  digest id_;
  credential client_;
  const flight_key key_;
  // Written by the fetch's own threads, read by snap() from any thread: atomic.
  std::atomic<acting_as> who_{acting_as::proxy};
  bool gated_ = false;  // the client's credential passed (or was refused by) the gate
  int auth_round_ = 0;
  next_step next_ = next_step::none;

  // Client-thread state (one transfer at a time).
  std::unique_ptr<cache::object_writer> writer_;
  std::unique_ptr<async_metainfo_builder> pieces_;
  std::unique_ptr<chunker> chunker_;
  std::string pending_;  // upstream bytes not yet handed to the writer
  std::atomic<bool> want_meta_{false};
  std::atomic<bool> want_chunks_{false};
  std::string err_body_;
  unsigned capture_status_ = 0;
  std::string retry_after_capture_;
  bool pending_error_ = false;
  unsigned pending_status_ = 0;
  std::string pending_message_;
  bool follower_ = false;
  // The ring (ring.h): whether the source was chosen, and the continuation after a takeover.
  const bool no_forward_;
  bool planned_ = false;
  int takeovers_ = 0;
  std::uint64_t resume_from_ = 0;  // bytes the writer holds when a new source continues
  std::uint64_t skip_ = 0;         // a continuation answered 200: its first bytes are dropped

  const std::uint64_t enqueued_at_;  // svc_.upstream_progress() when created
  std::mutex mu_;
  bool began_ = false;            // admitted and started
  std::uint64_t started_at_ = 0;  // svc_.upstream_progress() when started
  phase ph_ = phase::starting;
  bool cancelled_ = false;
  http::request_id req_id_ = 0;
  http::client* req_client_ = nullptr;  // the client req_id_ was submitted to
  std::string source_;                  // the ring member streamed from; empty: upstream
  std::optional<std::uint64_t> size_;
  std::shared_ptr<cache::inflight_object> inflight_;
  std::shared_ptr<chunk_list> chunks_;
  std::vector<std::function<void()>> chunk_waiters_;
  unsigned status_ = 0;
  std::string message_, retry_after_;
  std::vector<std::function<void()>> head_waiters_, done_waiters_;
  credential_gate::pass gate_pass_;
};

}  // namespace shoal::proxy
