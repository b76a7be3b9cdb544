// Local readers of running downloads: read_piece (libtorrent's disk queue, one piece at a time)
// and the file path (when_in_file: verified pieces whose writes a flush confirmed, read straight
// from the download's file).

#include <fcntl.h>
#include <unistd.h>

#include <libtorrent/torrent_handle.hpp>

#include <boost/asio/post.hpp>

#include "common/fd.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

namespace net = boost::asio;

result<std::string> read_file_range(const std::string& path, std::uint64_t off, std::uint64_t len) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(errno, "open " + path);
  std::string buf(static_cast<std::size_t>(len), '\0');
  std::uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd.get(), buf.data() + done, static_cast<std::size_t>(len - done),
                        static_cast<off_t>(off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(errno, "read " + path);
    }
    if (n == 0) return fail(errc::size_mismatch, path + " ended early");
    done += static_cast<std::uint64_t>(n);
  }
  return buf;
}

void download::read_piece(std::uint32_t i, std::function<void(result<piece_buffer>)> cb) {
  if (i >= meta_.piece_count()) return cb(fail(errc::invalid_argument, "piece out of range"));
  std::unique_lock lk(mu_);
  if (st_ == state::failed) {
    auto e = *err_;
    lk.unlock();
    return cb(fail(e));
  }
  if (st_ == state::complete) {
    std::string path = object_path_;
    lk.unlock();
    std::uint64_t off = meta_.piece_offset(i);
    std::uint64_t len = meta_.piece_length(i);
    net::post(mgr_->pool(), [path, off, len, cb = std::move(cb)] {
      auto b = read_file_range(path, off, len);
      if (!b) return cb(fail(b.error()));
      cb(std::make_shared<const std::string>(std::move(*b)));
    });
    return;
  }
  if (have_[i]) {
    bool issue = reading_[i].empty();
    reading_[i].push_back(std::move(cb));
    lk.unlock();
    if (issue) mgr_->request_piece(shared_from_this(), i);
    return;
  }
  waiting_[i].push_back(std::move(cb));
  bool moved = i < cursor_ || cursor_ == 0 || waiting_.begin()->first == i;
  cursor_ = waiting_.begin()->first;
  auto h = h_;
  std::uint32_t total = meta_.piece_count();
  lk.unlock();
  if (moved && h.is_valid() && mgr_->streaming_window() > 0) {
    // Streaming priority: deadlines for the pieces right after the reader's position.
    int window = mgr_->streaming_window();
    for (std::uint32_t j = i;
         j < std::min<std::uint32_t>(total, i + static_cast<std::uint32_t>(window)); ++j) {
      h.set_piece_deadline(lt::piece_index_t(static_cast<int>(j)),
                           static_cast<int>(100 * (j - i + 1)));
    }
  }
}

void download::when_in_file(std::uint32_t i, std::function<void()> cb) {
  {
    std::unique_lock lk(mu_);
    if (i >= in_file_.size() || st_ != state::running || in_file_[i]) {
      lk.unlock();
      return cb();
    }
    file_waiting_[i].push_back(std::move(cb));
    if (!have_[i] || fence_inflight_) return;  // on_piece_finished or fence_done asks then
  }
  mgr_->start_fence(shared_from_this());
}

std::uint64_t download::file_run(std::uint64_t off, std::uint64_t max) const {
  if (off >= meta_.size || meta_.piece_size == 0) return 0;
  std::lock_guard lk(mu_);
  if (st_ != state::running && !verified_) return 0;
  std::uint64_t end = std::min(meta_.size, off + max);
  auto p = static_cast<std::uint32_t>(off / meta_.piece_size);
  std::uint64_t run_end = off;
  while (run_end < end && p < in_file_.size() && in_file_[p]) {
    run_end = std::min(end, meta_.piece_offset(p) + meta_.piece_length(p));
    ++p;
  }
  return run_end - off;
}

std::vector<std::function<void()>> download::take_file_waiters() {
  std::vector<std::function<void()>> out;
  for (auto& [p, cbs] : file_waiting_)
    for (auto& cb : cbs) out.push_back(std::move(cb));
  file_waiting_.clear();
  return out;
}

void download::want_in_order() {
  if (!mgr_->in_order_readers()) return;
  lt::torrent_handle h;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running || in_order_) return;
    in_order_ = true;
    h = h_;  // not set yet: fetch() applies it once the torrent is added
  }
  if (!h.is_valid()) return;
  try {
    h.set_flags(lt::torrent_flags::sequential_download);
  } catch (const std::exception&) {
    // The torrent went away meanwhile.
  }
}

// One flush at a time per download, covering every piece verified but not yet known to be in
// the file: async_release_files is a fence in libtorrent's disk queue (mmap_disk_io), so once it
// answers, every write queued before it is in the file. Each answer is a cache_flushed_alert;
// libtorrent posts one of its own only when a torrent finishes (every write queued by then) or
// is removed, so taking any answer as this flush's never marks a piece whose write is pending.
void swarm_manager::start_fence(const std::shared_ptr<download>& dl) {
  lt::torrent_handle h;
  {
    std::lock_guard lk(dl->mu_);
    if (dl->fence_inflight_ || dl->st_ != transfer::state::running || dl->finishing_ ||
        !dl->h_.is_valid())
      return;
    dl->fencing_.clear();
    for (std::uint32_t p = 0; p < dl->have_.size(); ++p)
      if (dl->have_[p] && !dl->in_file_[p]) dl->fencing_.push_back(p);
    if (dl->fencing_.empty()) return;
    dl->fence_inflight_ = true;
    h = dl->h_;
  }
  counters_.stream_flushes.fetch_add(1);
  try {
    h.flush_cache();
  } catch (const std::exception&) {
    // The torrent went away meanwhile: its end (complete or failed) wakes the readers.
  }
}

bool swarm_manager::fence_done(const std::shared_ptr<download>& dl) {
  std::vector<std::function<void()>> ready;
  bool again = false;
  {
    std::lock_guard lk(dl->mu_);
    if (!dl->fence_inflight_) return false;
    dl->fence_inflight_ = false;
    for (auto p : dl->fencing_) dl->in_file_[p] = true;
    dl->fencing_.clear();
    for (auto it = dl->file_waiting_.begin(); it != dl->file_waiting_.end();) {
      if (dl->in_file_[it->first]) {
        for (auto& cb : it->second) ready.push_back(std::move(cb));
        it = dl->file_waiting_.erase(it);
      } else {
        again = again || dl->have_[it->first];
        ++it;
      }
    }
  }
  if (again) start_fence(dl);
  for (auto& cb : ready) cb();
  hash_more(dl);  // the confirmed prefix may have grown
  return true;
}

void swarm_manager::request_piece(const std::shared_ptr<download>& dl, std::uint32_t piece) {
  lt::torrent_handle h;
  {
    std::lock_guard lk(dl->mu_);
    h = dl->h_;
  }
  if (h.is_valid()) h.read_piece(lt::piece_index_t(static_cast<int>(piece)));
}

}  // namespace shoal::peerd
