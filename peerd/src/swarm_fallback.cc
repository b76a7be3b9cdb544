// swarm_manager's stall watch (swarm.h): the monitor thread that notices a download making no
// progress, and the HTTP fallback that fetches its missing pieces from registry-proxy.
#include "swarm.h"

#include <libtorrent/alert_types.hpp>
#include <libtorrent/session_stats.hpp>
#include <libtorrent/torrent_status.hpp>

#include <boost/asio/post.hpp>

#include <filesystem>

#include "common/log.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

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
  http::client_request r;
  r.url = dl->fallback_.url;
  const std::uint64_t base = dl->fallback_.offset;
  r.headers.emplace_back("Range",
                         "bytes=" + std::to_string(base + from) + "-" + std::to_string(base + to));
  if (!dl->fallback_.authorization.empty())
    r.headers.emplace_back("Authorization", dl->fallback_.authorization);
  r.timeouts.connect = std::chrono::milliseconds(2000);
  r.timeouts.stall =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.stall_timeout.get()) * 2;
  r.max_retries = 1;
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
  cb.on_complete = [dl, st](result<http::completion> res) {
    std::lock_guard lk(dl->mu_);
    dl->fallback_inflight_ = false;
    bool ok = res && (st->status == 206 || st->status == 200);
    dl->fallback_chain_ = ok;
    if (!ok) {
      log::warn("HTTP fallback failed", log::kv("digest", dl->id().str()),
                log::kv("status", st->status),
                log::kv("error", res ? std::string() : res.error().message));
    }
  };
  d_.http.submit(std::move(r), std::move(cb));
}

void swarm_manager::monitor() {
  auto next_sweep = steady::now();
  std::unique_lock lk(mon_mu_);
  while (!stop_.load()) {
    mon_cv_.wait_for(lk, std::chrono::milliseconds(250));
    if (stop_.load()) break;
    lk.unlock();
    auto now = steady::now();
    std::vector<std::shared_ptr<download>> dls;
    {
      std::lock_guard g(mu_);
      for (auto& [d, dl] : downloads_) dls.push_back(dl);
    }
    auto stall = std::chrono::duration_cast<steady::duration>(cfg_.stall_timeout.get());
    auto deadline = std::chrono::duration_cast<steady::duration>(cfg_.fallback_deadline.get());
    for (auto& dl : dls) {
      steady::time_point last;
      bool inflight, chain;
      {
        std::lock_guard g(dl->mu_);
        last = dl->last_progress_;
        inflight = dl->fallback_inflight_;
        // The last range arrived and verified, and no peer sent anything meanwhile.
        chain = dl->fallback_chain_ && dl->last_progress_ >= dl->fallback_started_ &&
                dl->last_peer_block_ < dl->fallback_started_;
      }
      if (now - last > deadline) {
        fail(dl, error{errc::timeout,
                       "no data from the swarm or registry-proxy for " +
                           std::to_string(
                               std::chrono::duration_cast<std::chrono::seconds>(deadline).count()) +
                           "s"});
      } else if ((now - last > stall || chain) && !inflight) {
        start_fallback(dl);
      }
    }
    if (now >= next_sweep) {
      next_sweep = now + std::chrono::seconds(5);
      ses_->raw().post_session_stats();
      // Unload seeds nobody used for a while.
      auto idle = std::chrono::duration_cast<steady::duration>(cfg_.seed_idle_unload.get());
      std::vector<std::pair<std::string, lt::torrent_handle>> snap;
      {
        std::lock_guard g(mu_);
        for (auto& [ih, s] : seeds_) snap.emplace_back(ih, s.h);
      }
      std::vector<lt::torrent_handle> drop;
      std::vector<std::string> files;
      std::vector<digest> keep;
      for (auto& [ih, h] : snap) {
        bool serving = swarm::serving_a_peer(h);
        std::lock_guard g(mu_);
        auto it = seeds_.find(ih);
        if (it == seeds_.end()) continue;
        if (serving) it->second.last_used = now;
        if (now - it->second.last_used > idle) {
          drop.push_back(it->second.h);
          if (!it->second.transient_file.empty()) files.push_back(it->second.transient_file);
          lru_.erase(it->second.lru);
          seeds_.erase(it);
        } else {
          keep.push_back(it->second.id);
        }
      }
      for (auto& h : drop) ses_->remove(h);
      for (const auto& f : files) {
        std::error_code ec;
        std::filesystem::remove(f, ec);
      }
      auto expiry =
          cache::clock::now() +
          std::chrono::duration_cast<std::chrono::seconds>(cfg_.seed_idle_unload.get()) * 3;
      for (const auto& d : keep) {
        if (d_.store.pin(d, "swarm", expiry)) (void)d_.store.unpin(d, "swarm");
      }
    }
    lk.lock();
  }
}

}  // namespace shoal::peerd
