#include "peerd/fetcher.h"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "common/log.h"
#include "peerd/blob_access.h"
#include "proxy_link.h"
#include "shed.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

std::unexpected<fetch_failure> failed(unsigned status, error why, std::string retry_after = {}) {
  return std::unexpected(fetch_failure{status, std::move(why), std::move(retry_after)});
}

// A chunked fetch answers the client once its first chunk-list round is through: a
// registry-proxy that shed load until the deadline is then a 503 with Retry-After, not a 200
// whose body breaks off.
fetch_start chunked_started(fetch_handle h) {
  auto st = h.chunked->first_round();
  if (st) return h;
  return failed(st.error().is(errc::busy) ? 503 : 502, st.error(), h.chunked->retry_after());
}

}  // namespace

metrics::counter& forward_errors_counter(metrics::registry& r) {
  return r
      .counter("shoal_peerd_forward_errors_total",
               "Requests registry-proxy could not answer (unreachable or timed out).")
      .with({});
}

// The single flight of "get the metainfo, start the download" for one object.
struct fetcher::job {
  std::mutex mu;
  bool finished = false;
  std::optional<fetch_start> outcome;  // once finished
  std::vector<std::function<void(fetch_start)>> waiters;
};

fetcher::fetcher(deps d) : d_(d) {
  swarm_fetches_ =
      &d_.metrics.counter("shoal_peerd_swarm_fetches_total", "Blobs fetched through the swarm.")
           .with({});
  chunked_fetches_ =
      &d_.metrics
           .counter("shoal_peerd_chunked_fetches_total",
                    "Blobs fetched as chunk objects while registry-proxy still downloaded them.")
           .with({});
  metainfo_retries_ =
      &d_.metrics
           .counter("shoal_peerd_metainfo_retries_total",
                    "Metainfo calls to registry-proxy that stalled (no answer within "
                    "upstream.metainfo_wait + 3 s, or no connection within connect_timeout) and "
                    "were asked again within swarm.fallback_deadline.")
           .with({});
  forward_errors_ = &forward_errors_counter(d_.metrics);
}

fetcher::~fetcher() {
  // A chunked fetch's threads use the swarm, cache and HTTP client this fetcher was given: they
  // end here, not after those are gone (app.cc stops the swarm and the client first, so each
  // stop returns at once).
  std::vector<std::shared_ptr<chunked_blob>> running;
  {
    std::lock_guard lk(mu_);
    for (const auto& w : chunked_started_) {
      if (auto cb = w.lock()) running.push_back(std::move(cb));
    }
    chunked_started_.clear();
  }
  for (const auto& cb : running) cb->stop();
}

std::string fetcher::proxy_url(const std::string& path_and_query) const {
  return peerd::proxy_url(d_.proxy, d_.cfg.upstream, path_and_query);
}

fetch_handle fetcher::find(const digest& d) {
  if (auto dl = d_.swarm.find(d)) return {dl, nullptr};
  return {nullptr, find_chunked(d)};
}

std::shared_ptr<chunked_blob> fetcher::find_chunked(const digest& d) {
  std::lock_guard lk(mu_);
  auto it = chunked_.find(d);
  if (it == chunked_.end()) return nullptr;
  if (it->second->current() != chunked_blob::state::running) {
    chunked_.erase(it);
    return nullptr;
  }
  return it->second;
}

void fetcher::join(const origin::object_ref& where, const digest& d,
                   const std::string& authorization, std::function<void(fetch_start)> done,
                   std::optional<http::byte_range> range) {
  std::shared_ptr<job> j;
  bool leader = false;
  {
    std::lock_guard lk(mu_);
    auto it = jobs_.find(d);
    if (it != jobs_.end()) {
      j = it->second;
    } else {
      j = std::make_shared<job>();
      jobs_[d] = j;
      leader = true;
    }
  }
  {
    std::unique_lock lk(j->mu);
    if (j->finished) {
      // Found just before the leader took it out of the table: the answer is known.
      auto outcome = *j->outcome;
      lk.unlock();
      return done(std::move(outcome));
    }
    j->waiters.push_back(std::move(done));
  }
  if (!leader) return;
  swarm_fetches_->inc();
  net::post(d_.pool,
            [this, j, where, d, authorization, range] { lead(j, where, d, authorization, range); });
}

void fetcher::lead(const std::shared_ptr<job>& j, const origin::object_ref& where, const digest& d,
                   const std::string& auth, std::optional<http::byte_range> range) {
  auto outcome = start(where, d, auth, range);
  std::vector<std::function<void(fetch_start)>> waiters;
  {
    std::lock_guard lk(j->mu);
    j->finished = true;
    j->outcome = outcome;
    waiters.swap(j->waiters);
  }
  {
    std::lock_guard lk(mu_);
    jobs_.erase(d);
  }
  for (auto& w : waiters) w(outcome);
}

fetch_start fetcher::start(const origin::object_ref& where, const digest& d,
                           const std::string& auth, std::optional<http::byte_range> range) {
  // Long-poll registry-proxy for the metainfo while it makes progress fetching the object.
  const auto wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.metainfo_wait.get());
  const auto deadline =
      std::chrono::duration_cast<steady::duration>(d_.cfg.swarm.fallback_deadline.get());
  std::uint64_t last_bytes = 0;
  auto last_progress = steady::now();
  const auto shed_deadline = last_progress + deadline;
  for (int round = 0; round < 100000; ++round) {
    http::client_request r;
    r.url = origin::metainfo_target(where, d, {.wait = wait, .chunks = true});
    if (!auth.empty()) r.headers.emplace_back("Authorization", auth);
    r.timeouts.connect = std::chrono::duration_cast<std::chrono::milliseconds>(
        d_.cfg.upstream.connect_timeout.get());
    r.timeouts.stall = wait + std::chrono::seconds(3);
    r.max_retries = 0;
    auto f = proxy_call(d_.proxy, d_.cfg.upstream, d_.http, std::move(r), 64u << 20);
    // A call that stalled (no answer byte for metainfo_wait + 3 s, or no connection within
    // connect_timeout) is asked again while fallback_deadline allows: on a congested link a
    // lost segment waits out TCP's retransmission backoff (1, 2, 4 s...), and at 32 nodes such a
    // stall failed a pull with 504 while registry-proxy had the metainfo ready. A refused or
    // broken connection still fails at once, so containerd can fall back.
    if (!f && f.error().is(errc::timeout) && steady::now() - last_progress < deadline) {
      log::info("metainfo call to registry-proxy stalled; asking again", log::kv("digest", d.str()),
                log::kv("error", f.error().message));
      metainfo_retries_->inc();
      continue;
    }
    if (!f) {
      forward_errors_->inc();
      return failed(f.error().is(errc::timeout) ? 504 : 502,
                    f.error().wrap("metainfo from registry-proxy"));
    }
    if (f->status == 200) return start_swarm(where, d, *f, auth);
    if (f->status == 429) {
      // registry-proxy sheds load (its fetch queue is full): wait as told, never past the
      // deadline; the client then hears 503 with Retry-After instead of a bare failure.
      auto now = steady::now();
      if (now >= shed_deadline)
        return failed(503, error{errc::busy, shed::gave_up(*f, deadline)}, shed::retry_after(*f));
      std::this_thread::sleep_for(std::min(shed::retry_wait(*f), shed_deadline - now));
      continue;
    }
    if (f->status == 202) {
      auto p = origin::decode_progress(f->body);
      if (!p) return failed(502, p.error());
      // registry-proxy cuts the object into chunk objects while it downloads: fetch those.
      if (d_.state && p->chunk_size) {
        auto started = start_chunked(where, d, *p, auth);
        // The starting client's range is asked for now, not once the first chunk is listed.
        if (started.chunked && range) started.chunked->want_range(range->first, range->last + 1);
        auto h = chunked_started(std::move(started));
        // Its first round was a 200 chunk list for this repository and credential, which
        // registry-proxy answers only after the parent blob's access check (or for a blob it
        // cut as itself, public): the client that started it is confirmed, as a metainfo 200
        // confirms it (start_swarm), and needs no HEAD of its own (blob_access::confirm).
        if (h && d_.access) d_.access->note_confirmed(where, d, auth);
        return h;
      }
      auto now = steady::now();
      if (round == 0 || p->bytes > last_bytes) {
        last_bytes = p->bytes;
        last_progress = now;
      } else if (now - last_progress > deadline) {
        return failed(
            504, error{errc::timeout, "registry-proxy made no progress fetching " + d.short_str()});
      }
      continue;
    }
    std::string msg = "registry-proxy answered HTTP " + std::to_string(f->status);
    if (auto why = origin::error_message_of(f->body); !why.empty()) msg += ": " + why;
    return failed(static_cast<unsigned>(f->status), error{errc::upstream_error, msg});
  }
  return failed(504, error{errc::timeout, "metainfo never became ready"});
}

fetch_start fetcher::start_swarm(const origin::object_ref& where, const digest& d,
                                 const http::full_response& answer, const std::string& auth) {
  auto a = origin::decode_metainfo(answer);
  if (!a) return failed(502, a.error());
  // registry-proxy answered 200 only after its access check of this credential.
  if (d_.access && a->is_public) d_.access->note_public(d);
  if (d_.access && !a->is_public) d_.access->note_confirmed(where, d, auth);
  auto m = object_metainfo::parse(a->torrent, d);
  if (!m) return failed(502, m.error());
  std::vector<std::string> seeds;
  if (!a->seed.empty()) seeds.push_back(a->seed);
  d_.swarm.note_grant(a->grant);
  fallback_info fb;
  fb.url = proxy_url(origin::blob_target(where, d));
  fb.authorization = auth;
  if (d_.proxy != nullptr) {
    fb.endpoints = d_.proxy->endpoints();
    fb.path = origin::blob_target(where, d);
  }
  auto dl = d_.swarm.fetch(d, a->torrent, *m, seeds, std::move(fb));
  if (!dl && dl.error().is(errc::already_exists))
    return failed(503, error{errc::busy, "object became available locally; retry"});
  if (!dl) return failed(500, dl.error());
  return fetch_handle{*dl, nullptr};
}

fetch_handle fetcher::start_chunked(const origin::object_ref& where, const digest& d,
                                    const origin::progress& p, const std::string& auth) {
  chunked_blob::deps cd{d_.swarm, d_.store, *d_.state, d_.http, proxy_url("")};
  // Its calls move between the replicas as every other read of registry-proxy does.
  cd.call = [link = d_.proxy, up = d_.cfg.upstream, &http = d_.http](http::client_request r,
                                                                     std::size_t max) {
    return proxy_call(link, up, http, std::move(r), max);
  };
  if (d_.proxy != nullptr) cd.endpoints = d_.proxy->endpoints();
  cd.poll_wait =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.metainfo_wait.get());
  cd.connect_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.upstream.connect_timeout.get());
  cd.deadline =
      std::chrono::duration_cast<std::chrono::milliseconds>(d_.cfg.swarm.fallback_deadline.get());
  auto cb = std::make_shared<chunked_blob>(std::move(cd), where.ns, where.repo, d, p.size,
                                           p.chunk_size, auth);
  {
    std::lock_guard lk(mu_);
    // Finished fetches leave the map here too (find_chunked() drops only the one it is asked
    // for): each held its chunks' downloads for the rest of peerd's life.
    std::erase_if(chunked_, [](const auto& e) {
      return e.second->current() != chunked_blob::state::running;
    });
    chunked_[d] = cb;
    std::erase_if(chunked_started_, [](const auto& w) { return w.expired(); });
    chunked_started_.push_back(cb);
  }
  cb->start();
  chunked_fetches_->inc();
  log::info("fetching in chunks", log::kv("digest", d.str()), log::kv("size", p.size),
            log::kv("chunk_size", p.chunk_size));
  return fetch_handle{nullptr, cb};
}

status fetcher::ensure(const origin::object_ref& where, const digest& d,
                       const std::string& authorization) {
  if (d_.store.contains(d)) return {};
  fetch_handle h = find(d);
  if (!h) {
    auto r = start(where, d, authorization);
    if (!r) {
      if (d_.store.contains(d)) return {};
      return fail(r.error().why);
    }
    h = *r;
  }
  if (h.chunked) return h.chunked->wait();
  return wait_committed(h.dl);
}

// Blocks until a download's object is committed to the cache, or the download failed, or it
// made no progress for ten minutes (a download ends by itself, by its stall fallback and
// deadline: this bound is a backstop that frees the worker).
status fetcher::wait_committed(const std::shared_ptr<download>& dl) {
  const digest& d = dl->id();
  if (dl->meta().piece_count() == 0) return {};
  // Shared with the callback, which may run after a wait that gave up.
  auto p = std::make_shared<std::promise<status>>();
  auto fut = p->get_future();
  dl->when_settled([p](status st) { p->set_value(std::move(st)); });
  constexpr auto stall = std::chrono::minutes(10);
  auto pieces = dl->pieces_done();
  auto moved = std::chrono::steady_clock::now();
  while (fut.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    const auto now = std::chrono::steady_clock::now();
    if (auto n = dl->pieces_done(); n != pieces) {
      pieces = n;
      moved = now;
    } else if (now - moved > stall) {
      return fail(errc::timeout, "the download of " + d.short_str() + " made no progress for " +
                                     std::to_string(stall.count()) + " minutes");
    }
  }
  if (auto st = fut.get(); !st) return st;
  if (!d_.store.contains(d)) return fail(errc::internal, "downloaded, but not in the cache");
  return {};
}

result<std::shared_ptr<group_download>> fetcher::fetch_group(group_spec spec) {
  // The swarm engine refuses when datasets are off on this node.
  return d_.swarm.fetch_group(std::move(spec));
}

fetcher::snapshot fetcher::status_snapshot() {
  snapshot s;
  s.chunked_fetches = chunked_fetches_->value();
  std::lock_guard lk(mu_);
  for (const auto& [d, cb] : chunked_) {
    if (cb->current() != chunked_blob::state::running) continue;
    auto [done, total] = cb->chunks_done();
    s.chunked.push_back({d, cb->size(), done, total});
  }
  return s;
}

}  // namespace shoal::peerd
