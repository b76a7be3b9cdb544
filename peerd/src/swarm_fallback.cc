// swarm_manager's stall watch (swarm.h): the one monitor thread that notices a job making no
// progress (HTTP fallback) or none for fallback_deadline (failure) and sweeps the seed table, and
// the HTTP fallbacks: an object's missing pieces as Ranges, a group's missing members whole.
#include "peerd/swarm.h"

#include <libtorrent/alert_types.hpp>
#include <libtorrent/session_stats.hpp>
#include <libtorrent/torrent_status.hpp>

#include <boost/asio/post.hpp>

#include <filesystem>
#include <future>

#include "common/log.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

// With several registry-proxy replicas, the one to ask: the first in the set's order (the one
// that last answered; one that failed is passed over for registry_proxy_backoff).
std::optional<endpoints::endpoint> first_replica(
    const std::shared_ptr<endpoints::endpoint_set>& replicas) {
  if (!replicas) return std::nullopt;
  return replicas->order().front();  // never empty
}

// Points `r` at `path` on `replica`, or at `url` (the one registry-proxy peerd knows).
void aim(http::client_request& r, const std::optional<endpoints::endpoint>& replica,
         const std::string& path, const std::string& url) {
  r.url = replica ? path : url;
  if (replica) replica->apply(r);
}

// How `replica` did: one that sent no answer, cut a stream or drained (503) goes last. (A 502 or
// 504 is registry-proxy's word on its upstream, which another replica would only ask again.)
void report(const std::shared_ptr<endpoints::endpoint_set>& replicas,
            const std::optional<endpoints::endpoint>& replica, bool failed) {
  if (!replica || !replicas) return;
  if (failed)
    replicas->failed(*replica);
  else
    replicas->succeeded(*replica);
}

// The request for bytes [from, to] of the object (on first_replica(), returned in `replica`).
http::client_request range_request(const fallback_info& fb, std::uint64_t from, std::uint64_t to,
                                   std::chrono::milliseconds stall,
                                   std::optional<endpoints::endpoint>& replica) {
  http::client_request r;
  replica = first_replica(fb.endpoints);
  aim(r, replica, fb.path, fb.url);
  r.headers.emplace_back(
      "Range", "bytes=" + std::to_string(fb.offset + from) + "-" + std::to_string(fb.offset + to));
  if (!fb.authorization.empty()) r.headers.emplace_back("Authorization", fb.authorization);
  r.timeouts.connect = std::chrono::milliseconds(2000);
  r.timeouts.stall = stall;
  r.max_retries = 1;
  return r;
}

}  // namespace

void swarm_manager::start_fallback(const std::shared_ptr<download>& dl) {
  std::uint32_t first = UINT32_MAX, count = 0;
  {
    std::lock_guard lk(dl->mu_);
    if (dl->fallback_inflight_ || dl->st_ != download::state::running || dl->fallback_.url.empty())
      return;
    std::uint32_t n = dl->meta_.piece_count();
    std::uint32_t start = dl->waiting_.empty() ? 0 : dl->waiting_.begin()->first;
    for (std::uint32_t k = 0; k < n; ++k) {
      std::uint32_t p = (start + k) % n;
      if (!dl->have_[p]) {
        first = p;
        break;
      }
    }
    if (first == UINT32_MAX) return;
    // A run of missing pieces, about 4 MiB or one piece.
    std::uint64_t budget = std::max<std::uint64_t>(4u << 20, dl->meta_.piece_size);
    std::uint64_t bytes = 0;
    for (std::uint32_t p = first; p < n && !dl->have_[p] && bytes < budget; ++p) {
      ++count;
      bytes += dl->meta_.piece_length(p);
    }
    dl->fallback_inflight_ = true;
    dl->fallback_chain_ = false;
    dl->fallback_started_ = steady::now();
  }
  const auto& m = dl->meta();
  std::uint64_t from = m.piece_offset(first);
  std::uint64_t to = m.piece_offset(first + count - 1) + m.piece_length(first + count - 1) - 1;
  counters_.fallbacks.fetch_add(1);
  log::info("swarm stalled; fetching a range from registry-proxy",
            log::kv("digest", dl->id().str()), log::kv("first_piece", first),
            log::kv("pieces", count));
  std::optional<endpoints::endpoint> replica;
  http::client_request r = range_request(
      dl->fallback_, from, to,
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.stall_timeout.get()) * 2, replica);
  const std::uint64_t base = dl->fallback_.offset;
  struct state_t {
    std::string buf;
    std::uint32_t next;
    int status = 0;
  };
  auto st = std::make_shared<state_t>();
  st->next = first;
  http::callbacks cb;
  cb.on_response = [st](const http::response_head& h) {
    st->status = h.status;
    return h.status == 206 || h.status == 200;
  };
  cb.on_data = [this, dl, st, first, from, base](std::string_view chunk) {
    if (st->status == 200 && st->buf.empty() && st->next == first && base + from > 0) {
      // The server ignored the range: give up on this fallback (never feed wrong offsets).
      return false;
    }
    st->buf.append(chunk);
    counters_.from_http.fetch_add(chunk.size());
    const auto& m = dl->meta();
    lt::torrent_handle h;
    {
      std::lock_guard lk(dl->mu_);
      h = dl->h_;
    }
    while (st->next < m.piece_count() && st->buf.size() >= m.piece_length(st->next)) {
      std::size_t len = m.piece_length(st->next);
      std::vector<char> piece(st->buf.begin(), st->buf.begin() + static_cast<std::ptrdiff_t>(len));
      st->buf.erase(0, len);
      if (h.is_valid())
        h.add_piece(lt::piece_index_t(static_cast<int>(st->next)), std::move(piece));
      ++st->next;
    }
    return true;
  };
  cb.on_complete = [dl, st, replica](result<http::completion> res) {
    bool ok = res && (st->status == 206 || st->status == 200);
    // The next range goes to another replica when this one failed.
    report(dl->fallback_.endpoints, replica, !res || st->status == 503);
    std::lock_guard lk(dl->mu_);
    dl->fallback_inflight_ = false;
    dl->fallback_chain_ = ok;
    if (!ok) {
      log::warn("HTTP fallback failed", log::kv("digest", dl->id().str()),
                log::kv("status", st->status),
                log::kv("registry_proxy", replica ? replica->str() : dl->fallback_.url),
                log::kv("error", res ? std::string() : res.error().message));
    }
  };
  d_.http.submit(std::move(r), std::move(cb));
}

void swarm_manager::monitor() {
  try {
    auto next_sweep = steady::now();
    std::unique_lock lk(mon_mu_);
    while (!stop_.load()) {
      mon_cv_.wait_for(lk, std::chrono::milliseconds(250));
      if (stop_.load()) break;
      lk.unlock();
      auto now = steady::now();
      std::vector<std::shared_ptr<transfer>> jobs;
      {
        std::lock_guard g(mu_);
        for (auto& [ih, job] : jobs_) jobs.push_back(job);
      }
      for (auto& job : jobs) watch(job, now);
      if (now >= next_sweep) {
        next_sweep = now + std::chrono::seconds(5);
        ses_->raw().post_session_stats();
        sweep_seeds(now);
      }
      lk.lock();
    }
  } catch (const std::exception& e) {
    log::error("swarm monitor stopped", log::kv("error", e.what()));
  }
}

// Blocks still arriving are not a stall: a piece may take longer than stall_timeout to come in
// when many share a link (32 nodes each waiting for its first piece from registry-proxy,
// docs/p2p.md "Scale curve"), and a range over HTTP then only loads registry-proxy's link more.
// Blocks count until a piece of the job fails its hash (a peer sending garbage) and never for
// more than 3 × stall_timeout (at most halfway to fallback_deadline) without a verified piece
// (a peer dripping blocks of a piece it never finishes). Under the job's mu_.
bool swarm_manager::blocks_flowing(const transfer& job, steady::time_point now) const {
  auto stall = std::chrono::duration_cast<steady::duration>(cfg_.stall_timeout.get());
  auto deadline = std::chrono::duration_cast<steady::duration>(cfg_.fallback_deadline.get());
  const auto credit = std::min(3 * stall, (stall + deadline) / 2);
  return !job.hash_failed_ && now - job.last_block_ <= stall && now - job.last_progress_ <= credit;
}

// One running job: its progress, an HTTP fallback when it stalled, failure past the deadline.
void swarm_manager::watch(const std::shared_ptr<transfer>& job, steady::time_point now) {
  auto stall = std::chrono::duration_cast<steady::duration>(cfg_.stall_timeout.get());
  auto deadline = std::chrono::duration_cast<steady::duration>(cfg_.fallback_deadline.get());
  steady::time_point last;
  bool want_fallback = false;
  std::string what;  // names a group in the deadline's error
  std::shared_ptr<group_download> g;
  if (job->type() == transfer::kind::group) {
    g = std::static_pointer_cast<group_download>(job);
    lt::torrent_handle h;
    bool busy, fallback, flowing;
    {
      std::lock_guard lk(g->mu_);
      h = g->h_;
      last = g->last_progress_;
      busy = g->finishing_ || g->fallback_;
      fallback = g->fallback_;
      flowing = blocks_flowing(*g, now);
    }
    if (!busy && h.is_valid()) {
      auto st = h.status(lt::torrent_handle::query_accurate_download_counters);
      auto done = g->present_bytes_ +
                  static_cast<std::uint64_t>(std::max<std::int64_t>(0, st.total_wanted_done));
      g->done_ = std::min(done, g->total_);
    } else if (fallback) {
      g->done_ = std::min(g->total_, g->present_bytes_ + g->from_http.load() +
                                         g->from_peers.load() + g->from_origin.load());
    }
    if (busy && !fallback) return;  // adopting its members
    want_fallback = !busy && now - last > stall && !flowing && !g->spec_.fallback_base.empty();
    what = " for " + g->spec_.name;
  } else {
    auto* dl = static_cast<download*>(job.get());
    std::lock_guard lk(dl->mu_);
    if (dl->finishing_) return;  // every piece is in; the cache is adopting it
    last = dl->last_progress_;
    // The last range arrived and verified, and no peer sent anything meanwhile.
    bool chain = dl->fallback_chain_ && dl->last_progress_ >= dl->fallback_started_ &&
                 dl->last_block_ < dl->fallback_started_;
    want_fallback =
        ((now - last > stall && !blocks_flowing(*dl, now)) || chain) && !dl->fallback_inflight_;
  }
  if (now - last > deadline) {
    auto secs = std::chrono::duration_cast<std::chrono::seconds>(deadline).count();
    fail(job, error{errc::timeout, "no data" + what + " from the swarm or registry-proxy for " +
                                       std::to_string(secs) + "s"});
  } else if (want_fallback) {
    if (g) {
      start_group_fallback(g);
    } else {
      start_fallback(std::static_pointer_cast<download>(job));
    }
  }
}

// A stalled group: its torrent is dropped and the missing members come over HTTP.
void swarm_manager::start_group_fallback(const std::shared_ptr<group_download>& g) {
  lt::torrent_handle h;
  {
    std::lock_guard lk(g->mu_);
    if (g->fallback_ || g->finishing_ || g->st_ != transfer::state::running) return;
    h = g->h_;
    g->fallback_ = true;
    g->last_progress_ = steady::now();
    g->h_ = lt::torrent_handle{};
  }
  if (h.is_valid()) ses_->raw().remove_torrent(h);
  post_step(g, [this, g] { group_http_fallback(g); });
}

void swarm_manager::group_http_fallback(const std::shared_ptr<group_download>& dl) {
  counters_.fallbacks.fetch_add(1);
  // Members whose file is already whole in the partial directory are adopted (the cache verifies
  // them); the rest come over HTTP, each straight into the cache.
  std::vector<std::pair<digest, std::uint64_t>> missing;
  for (const auto& [d, size] : dl->spec_.objects) {
    if (d_.store.contains(d)) continue;
    std::error_code ec;
    auto path = member_path(*dl, d);
    if (std::filesystem::file_size(path, ec) == size && !ec) {
      if (auto s = d_.store.adopt_file(path, d, cache::object_kind::dataset_file);
          s || s.error().is(errc::already_exists)) {
        continue;
      }
    }
    missing.emplace_back(d, size);
  }
  log::info("dataset group stalled; fetching its objects from registry-proxy over HTTP",
            log::kv("group", dl->spec_.name), log::kv("objects", missing.size()));
  // With several replicas, once on each while one fails under the transfers (it died mid-group).
  const std::size_t tries =
      dl->spec_.fallback_endpoints ? dl->spec_.fallback_endpoints->order().size() : 1;
  for (std::size_t t = 0;; ++t) {
    bool replica_failed = false;
    auto e = group_fetch_members(dl, missing, replica_failed);
    if (!e) break;
    if (!replica_failed || t + 1 >= tries || stop_.load()) return fail(dl, *e);
    log::warn("dataset group: registry-proxy failed under the transfers; the rest from the next",
              log::kv("group", dl->spec_.name), log::kv("error", e->message));
    std::erase_if(missing, [&](const auto& m) { return d_.store.contains(m.first); });
  }
  for (const auto& [d, size] : dl->spec_.objects) {
    // Members written by someone else meanwhile: give them a moment.
    for (int i = 0; i < 200 && !d_.store.contains(d); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!d_.store.contains(d))
      return fail(dl, error{errc::not_found, d.str() + " did not arrive for " + dl->spec_.name});
  }
  std::error_code ec;
  std::filesystem::remove_all(dl->dir_, ec);
  complete_group(dl);
}

// Batches of `http_parallel` transfers; each object streams into its cache writer. The first
// error, if any.
std::optional<error> swarm_manager::group_fetch_members(
    const std::shared_ptr<group_download>& dl,
    const std::vector<std::pair<digest, std::uint64_t>>& missing, bool& replica_failed) {
  const std::size_t parallel = std::max<std::size_t>(1, groups_->http_parallel);
  // One replica for this pass; marked down when it fails.
  const auto replica = first_replica(dl->spec_.fallback_endpoints);
  auto stall = std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.stall_timeout.get());
  std::optional<error> first;
  for (std::size_t at = 0; at < missing.size() && !first && !stop_.load(); at += parallel) {
    struct member {
      digest id;
      std::shared_ptr<cache::object_writer> writer;
      std::shared_ptr<int> status = std::make_shared<int>(0);
      std::future<result<http::completion>> done;
    };
    std::vector<member> batch;
    for (std::size_t k = at; k < std::min(missing.size(), at + parallel); ++k) {
      const auto& [d, size] = missing[k];
      auto t = d_.store.begin_write(d, size, cache::object_kind::dataset_file);
      if (!t) {
        first = t.error().wrap("HTTP fallback for " + dl->spec_.name);
        break;
      }
      if (t->role != cache::write_role::writer) continue;  // present, or someone else writes it
      member x;
      x.id = d;
      x.writer = std::shared_ptr<cache::object_writer>(std::move(t->writer));
      auto prom = std::make_shared<std::promise<result<http::completion>>>();
      x.done = prom->get_future();
      http::client_request r;
      aim(r, replica, dl->spec_.fallback_path + d.str(), dl->spec_.fallback_base + d.str());
      r.timeouts.connect = std::chrono::milliseconds(2000);
      r.timeouts.stall = stall * 2;
      r.max_retries = 2;
      r.resume = true;
      http::callbacks cb;
      cb.on_response = [st = x.status](const http::response_head& h) {
        *st = h.status;
        return h.status == 200;
      };
      cb.on_data = [w = x.writer, dl, this](std::string_view chunk) {
        if (!w->write(chunk)) return false;
        dl->from_http.fetch_add(chunk.size());
        counters_.from_http.fetch_add(chunk.size());
        std::lock_guard lk(dl->mu_);
        dl->last_progress_ = steady::now();
        return true;
      };
      cb.on_complete = [prom](result<http::completion> res) { prom->set_value(std::move(res)); };
      d_.http.submit(std::move(r), std::move(cb));
      batch.push_back(std::move(x));
    }
    for (auto& x : batch) {
      auto res = x.done.get();
      std::optional<error> e;
      if (!res || *x.status == 503) replica_failed = true;
      if (!res) {
        e = res.error();
      } else if (*x.status != 200) {
        e = error{errc::upstream_error, "registry-proxy answered HTTP " +
                                            std::to_string(*x.status) + " for " + x.id.str()};
      } else if (auto c = x.writer->commit(); !c) {
        e = c.error();
      }
      if (e) {
        x.writer->abort(e->message);
        if (!first) first = e->wrap("HTTP fallback for " + dl->spec_.name);
      }
    }
  }
  report(dl->spec_.fallback_endpoints, replica, replica_failed);
  return first;
}

}  // namespace shoal::peerd
