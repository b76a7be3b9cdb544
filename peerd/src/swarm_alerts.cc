// swarm_manager's one alert dispatch (swarm.h): group torrents' alerts go to swarm_groups.cc; for
// objects, pieces verified and read back, downloads finished and moved into the cache, corrupt
// seeds quarantined, failed torrents dropped, on-demand seeds tracked. Blocks are counted by
// source from the network thread (on_block). Alerts run on the alert pump thread. Also the
// deadlines a Range reader gives its pieces (download::want_range).
#include "peerd/swarm.h"

#include <libtorrent/alert_types.hpp>
#include <libtorrent/session_stats.hpp>
#include <libtorrent/torrent_status.hpp>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <vector>

#include "common/log.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

void swarm_manager::on_alert(lt::alert* a) {
  if (log::enabled(log::level::trace))
    log::trace("libtorrent alert", log::kv("type", a->what()), log::kv("message", a->message()));
  if (on_group_alert(a)) return;
  if (auto* pf = lt::alert_cast<lt::piece_finished_alert>(a)) return on_piece_finished(pf);
  if (auto* rp = lt::alert_cast<lt::read_piece_alert>(a)) return on_read_piece(rp);
  if (auto* tf = lt::alert_cast<lt::torrent_finished_alert>(a)) return on_torrent_finished(tf);
  if (auto* cf = lt::alert_cast<lt::cache_flushed_alert>(a)) {
    auto dl = by_alert(cf);
    // A reader's flush (download::when_in_file) first: a flush asked before the torrent finished
    // may answer after it, while later writes are still queued.
    if (!dl || fence_done(dl)) return;
    // Two come (libtorrent flushes by itself when a torrent finishes): the first completes it.
    if (!dl->transient()) return;
    {
      std::lock_guard lk(dl->mu_);
      if (!dl->flushing_) return;
      dl->flushing_ = false;
    }
    post_step(dl, [this, dl] { complete_transient(dl); });
    return;
  }
  if (auto* sm = lt::alert_cast<lt::storage_moved_alert>(a)) {
    if (auto dl = by_alert(sm)) finish_object(dl, sm->handle);
    return;
  }
  if (auto* smf = lt::alert_cast<lt::storage_moved_failed_alert>(a)) {
    if (auto dl = by_alert(smf))
      fail(dl, error{errc::io_error, "move into the cache's staging: " + smf->error.message()});
    return;
  }
  if (auto* sc = lt::alert_cast<lt::state_changed_alert>(a)) return on_state_changed(sc);
  if (auto* hf = lt::alert_cast<lt::hash_failed_alert>(a)) return on_hash_failed(hf);
  if (auto* te = lt::alert_cast<lt::torrent_error_alert>(a)) {
    return on_torrent_failure(swarm::hash_hex(te->handle), "torrent error: " + te->error.message());
  }
  if (auto* fe = lt::alert_cast<lt::file_error_alert>(a)) {
    return on_torrent_failure(swarm::hash_hex(fe->handle), "file error: " + fe->error.message());
  }
  if (auto* at = lt::alert_cast<lt::add_torrent_alert>(a)) return on_torrent_added(at);
  if (auto* ss = lt::alert_cast<lt::session_stats_alert>(a)) return on_session_stats(ss);
}

void swarm_manager::on_session_stats(lt::session_stats_alert* ss) {
  // The metric indexes are the library's, found once; the counters are this manager's (a static
  // table of pointers kept the first manager's, which every later one in the process wrote into,
  // freed or not).
  static const int index[] = {lt::find_metric_idx("net.sent_payload_bytes"),
                              lt::find_metric_idx("net.recv_bytes"),
                              lt::find_metric_idx("net.sent_bytes"),
                              lt::find_metric_idx("net.recv_redundant_bytes"),
                              lt::find_metric_idx("ses.num_incoming_have"),
                              lt::find_metric_idx("ses.waste_piece_timed_out"),
                              lt::find_metric_idx("ses.waste_piece_cancelled"),
                              lt::find_metric_idx("ses.waste_piece_end_game")};
  std::atomic<std::uint64_t>* const to[] = {&counters_.uploaded,        &counters_.wire_received,
                                            &counters_.wire_sent,       &counters_.redundant,
                                            &counters_.haves_received,  &counters_.waste_timed_out,
                                            &counters_.waste_cancelled, &counters_.waste_end_game};
  static_assert(std::size(index) == std::size(to));
  static const int other[] = {lt::find_metric_idx("ses.waste_piece_unknown"),
                              lt::find_metric_idx("ses.waste_piece_seed"),
                              lt::find_metric_idx("ses.waste_piece_closing")};
  auto c = ss->counters();
  auto at = [&c](int idx) {
    return idx >= 0 && idx < c.size() ? static_cast<std::uint64_t>(c[idx]) : std::uint64_t{0};
  };
  for (std::size_t i = 0; i < std::size(index); ++i) to[i]->store(at(index[i]));
  std::uint64_t rest = 0;
  for (int idx : other) rest += at(idx);
  counters_.waste_other.store(rest);
}

// A verified piece: record it and start the reads that waited for it.
void swarm_manager::on_piece_finished(lt::piece_finished_alert* pf) {
  auto dl = by_alert(pf);
  if (!dl) return;
  auto p = static_cast<std::uint32_t>(static_cast<int>(pf->piece_index));
  bool issue = false, fence = false;
  {
    std::lock_guard lk(dl->mu_);
    if (p < dl->have_.size() && !dl->have_[p]) {
      dl->have_[p] = true;
      ++dl->done_;
    }
    dl->last_progress_ = steady::now();
    auto it = dl->waiting_.find(p);
    if (it != dl->waiting_.end()) {
      auto& r = dl->reading_[p];
      issue = r.empty();
      for (auto& cb : it->second) r.push_back(std::move(cb));
      dl->waiting_.erase(it);
    }
    fence = dl->file_waiting_.count(p) && !dl->fence_inflight_;
  }
  if (issue) pf->handle.read_piece(pf->piece_index);
  if (fence) start_fence(dl);
}

// Deadlines for a Range reader's pieces (swarm.h).
std::uint32_t download::want_range(std::uint64_t off, std::uint64_t end) {
  const std::uint64_t budget = mgr_->range_deadline_bytes();
  end = std::min(end, meta_.size);
  if (budget == 0 || off >= end || meta_.piece_size == 0) return 0;
  end = std::min(end, off + budget);
  const auto first = static_cast<std::uint32_t>(off / meta_.piece_size);
  const auto last = static_cast<std::uint32_t>((end - 1) / meta_.piece_size);
  std::vector<std::uint32_t> missing;
  lt::torrent_handle h;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running) return 0;
    for (std::uint32_t p = first; p <= last && p < have_.size(); ++p)
      if (!have_[p]) missing.push_back(p);
    h = h_;
  }
  if (!h.is_valid()) return 0;
  int rank = 0;
  for (auto p : missing) {
    try {
      // Earliest first: libtorrent asks the fastest peers for pieces closest to their deadline.
      h.set_piece_deadline(lt::piece_index_t(static_cast<int>(p)), 20 * ++rank);
    } catch (const std::exception&) {
      return 0;  // the torrent went away meanwhile
    }
  }
  mgr_->counters_mut().range_deadline_pieces.fetch_add(missing.size());
  return static_cast<std::uint32_t>(missing.size());
}

// A piece read back for a streaming reader: hand it to the readers waiting for it.
void swarm_manager::on_read_piece(lt::read_piece_alert* rp) {
  auto dl = by_alert(rp);
  if (!dl) return;
  auto p = static_cast<std::uint32_t>(static_cast<int>(rp->piece));
  std::vector<download::piece_cb> cbs;
  {
    std::lock_guard lk(dl->mu_);
    auto it = dl->reading_.find(p);
    if (it == dl->reading_.end()) return;
    cbs = std::move(it->second);
    dl->reading_.erase(it);
  }
  if (rp->error) {
    {
      // A read that raced with the move into the cache: complete() re-reads it from the file.
      std::lock_guard lk(dl->mu_);
      if (dl->st_ == download::state::running && dl->done_ == dl->meta_.piece_count()) {
        auto& w = dl->waiting_[p];
        for (auto& cb : cbs) w.push_back(std::move(cb));
        return;
      }
    }
    for (auto& cb : cbs)
      cb(shoal::fail(errc::io_error,
                     "read piece " + std::to_string(p) + ": " + rp->error.message()));
    return;
  }
  auto buf =
      std::make_shared<const std::string>(rp->buffer.get(), static_cast<std::size_t>(rp->size));
  for (auto& cb : cbs) cb(piece_buffer(buf));
}

// Every piece passed its hash: stage the download for adoption (a transient one is handed over
// as it is).
void swarm_manager::on_torrent_finished(lt::torrent_finished_alert* tf) {
  auto dl = by_alert(tf);
  if (!dl) return;
  {
    // The seed that replaced a finished download's torrent says "finished" too: not again.
    std::lock_guard lk(dl->mu_);
    if (dl->finishing_) return;
  }
  if (dl->transient()) {
    // Its file is read as soon as it completes, so every write must be in it first: a piece
    // passes its hash from libtorrent's store buffer, possibly before the disk thread wrote it.
    // flush_cache (a fence in the disk queue) answers with cache_flushed_alert once all are.
    {
      std::lock_guard lk(dl->mu_);
      if (dl->flushing_ || dl->flushed_) return;
      dl->flushing_ = dl->flushed_ = true;
    }
    tf->handle.flush_cache();
    return;
  }
  // Every piece passed its hash: move the file into the cache's staging directory (which holds
  // downloads only, never a committed object: a leftover of an earlier attempt is replaced),
  // then finish_object drops the torrent and the cache adopts the file.
  tf->handle.move_storage(d_.store.staging_dir(), lt::move_flags_t::always_replace_files);
}

void swarm_manager::on_state_changed(lt::state_changed_alert* sc) {
  // A seed that goes back to checking or downloading has left seed mode: libtorrent 2.0.8
  // does that, without a hash_failed_alert, when a piece fails its check on first upload
  // (peer_connection::on_seed_mode_hashed). The file in the cache is corrupt; left alone,
  // libtorrent would rewrite the piece inside the committed object.
  using ts = lt::torrent_status;
  bool was_seed = sc->prev_state == ts::seeding || sc->prev_state == ts::finished;
  bool left = sc->state == ts::checking_files || sc->state == ts::downloading;
  if (!was_seed || !left) return;
  if (auto d = seed_digest(swarm::hash_hex(sc->handle))) {
    quarantine(*d, "a piece failed its hash check before upload (seed mode left)");
  }
}

// A piece failed its hash: a corrupt object we seed is quarantined, a bad peer piece logged.
void swarm_manager::on_hash_failed(lt::hash_failed_alert* hf) {
  counters_.hash_failures.fetch_add(1);
  std::string ih = swarm::hash_hex(hf->handle);
  if (auto seed_of = seed_digest(ih)) {
    // A piece of an object we hold failed its hash while being uploaded: the file is corrupt.
    quarantine(*seed_of, "piece " + std::to_string(static_cast<int>(hf->piece_index)) +
                             " failed its hash check");
  } else {
    if (auto dl = by_hash(ih)) {
      std::lock_guard lk(dl->mu_);
      dl->hash_failed_ = true;  // blocks no longer count as progress (watch())
    }
    log::warn("rejected a piece that failed its hash check", log::kv("info_hash", ih),
              log::kv("piece", static_cast<int>(hf->piece_index)));
  }
}

// libtorrent gave up on a torrent (torrent or file error): a download fails with the cause, a
// seed is dropped from the session.
void swarm_manager::on_torrent_failure(const std::string& ih, const std::string& why) {
  if (auto dl = by_hash(ih)) {
    {
      // Its torrent is gone (the file is staged for adoption): late alerts of it do not count.
      std::lock_guard lk(dl->mu_);
      if (dl->finishing_) return;
    }
    fail(dl, error{errc::io_error, why});
    return;
  }
  unloaded u;
  {
    std::lock_guard lk(mu_);
    auto it = seeds_.find(ih);
    if (it != seeds_.end()) erase_seed_locked(it, &u);
  }
  unload(u);
}

// A torrent the on-demand seed plugin or load_seed added: track it as a seed and pin its object.
void swarm_manager::on_torrent_added(lt::add_torrent_alert* at) {
  if (at->error) return;  // load_seed saw the same error from add_torrent
  std::string ih = swarm::hash_hex(at->handle);
  bool loaded_at_once = false;
  {
    std::lock_guard lk(mu_);
    loaded_at_once = loading_.erase(ih) > 0;
    // The seed of a download that just completed (seed_object) is in the table already.
    if (auto it = seeds_.find(ih); it != seeds_.end() && it->second.h == at->handle) return;
  }
  auto d = d_.state.by_info_hash(ih);
  if (!d || by_hash(ih)) return;
  touch_seed(ih, *d, at->handle);
  net::post(d_.pool, [this, d = *d] { (void)d_.store.pin(d, "swarm", pin_expiry()); });
  log::info(loaded_at_once ? "loaded a seed at once" : "loaded a seed on demand",
            log::kv("digest", d->str()), log::kv("info_hash", ih));
}

void swarm_manager::on_block(const lt::torrent_handle& th, bool origin, std::size_t n) {
  // Pieces injected from the HTTP fallback come without a peer and are counted there.
  (origin ? counters_.from_origin : counters_.from_peers).fetch_add(n);
  std::vector<std::shared_ptr<transfer>> jobs;
  {
    std::lock_guard lk(mu_);
    jobs.reserve(jobs_.size());
    for (auto& [ih, x] : jobs_) jobs.push_back(x);
  }
  auto now = steady::now();
  for (auto& x : jobs) {
    std::lock_guard lk(x->mu_);
    if (x->h_ != th) continue;
    // Not progress: a peer sending garbage delivers blocks forever (a banned peer comes back
    // from a new port). Only a piece that passes its hash moves last_progress_; blocks only hold
    // off the fallback for a while, and not after a hash failure (watch()).
    x->last_block_ = now;
    if (x->type() == transfer::kind::group) {
      // Attributed per group download (the totals are counted above).
      auto* g = static_cast<group_download*>(x.get());
      (origin ? g->from_origin : g->from_peers).fetch_add(n);
    }
    return;
  }
}

}  // namespace shoal::peerd
