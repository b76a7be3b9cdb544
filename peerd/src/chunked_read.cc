// Reads of a blob fetched in chunks (chunked.h): from the committed blob, a listed chunk held in
// the cache, a joined chunk's download (its file once its pieces are confirmed there, else
// read_piece), or the blob's written bytes.

#include <algorithm>

#include <boost/asio/post.hpp>

#include "peerd/chunked.h"

namespace shoal::peerd {

namespace net = boost::asio;

namespace {

// Reads [off, off + n) of an object held in the cache.
result<std::string> read_object(cache::store& store, const digest& d, std::uint64_t off,
                                std::size_t n) {
  auto rd = store.open_read(d);
  if (!rd) return fail(rd.error().wrap("open " + d.short_str()));
  if (off >= rd->size())
    return fail(errc::size_mismatch, d.short_str() + " is shorter than expected");
  auto got = rd->read(off, std::min<std::uint64_t>(n, rd->size() - off));
  if (!got) return fail(got.error().wrap("read " + d.short_str()));
  return got;
}

}  // namespace

void chunked_blob::read(std::uint64_t off, std::size_t max, read_cb cb) {
  if (off >= size_ || max == 0) return cb(fail(errc::invalid_argument, "read beyond the object"));
  serve(off, max, std::move(cb));
}

void chunked_blob::serve(std::uint64_t off, std::size_t max, read_cb cb, bool waited) {
  std::unique_lock lk(mu_);
  if (st_ == state::failed) {
    auto e = *err_;
    lk.unlock();
    return cb(fail(e));
  }
  auto self = shared_from_this();
  if (st_ == state::complete) {
    lk.unlock();
    net::post(d_.swarm.pool(), [self, off, max, cb = std::move(cb)] {
      cb(read_object(self->d_.store, self->id_, off, max));
    });
    return;
  }
  // The last byte only once the whole blob is verified.
  if (!verified_ && off == size_ - 1) {
    final_.push_back({{off, max}, std::move(cb)});
    return;
  }
  std::uint64_t limit = verified_ ? max : std::min<std::uint64_t>(max, size_ - 1 - off);
  if (!direct_.empty() && serve_direct(lk, off, limit, max, cb)) return;
  auto k = std::min(static_cast<std::uint32_t>(off / chunk_size_), count_ - 1);
  if (!chunks_[k].ready && k >= tail_from_ && inflight_) {
    lk.unlock();
    return read_written(off, limit, std::move(cb));
  }
  if (!chunks_[k].ready) {
    waiting_.insert({k, {{off, max}, std::move(cb)}});
    return;
  }
  chunk c = chunks_[k];
  lk.unlock();
  std::uint64_t in = off - c.offset;
  std::uint64_t n = std::min<std::uint64_t>(limit, c.size - in);
  if (!c.dl) {
    net::post(d_.swarm.pool(), [self, c, in, n, cb = std::move(cb)] {
      cb(read_object(self->d_.store, c.id, in, static_cast<std::size_t>(n)));
    });
    return;
  }
  const auto& m = c.dl->meta();
  auto piece = static_cast<std::uint32_t>(in / m.piece_size);
  // The chunk's verified pieces whose writes are in its file: read from the file, not through
  // libtorrent's disk queue one piece at a time (download::when_in_file).
  if (auto run = c.dl->file_run(in, n); run > 0) {
    net::post(d_.swarm.pool(), [path = c.dl->partial_path(), in, run, cb = std::move(cb)] {
      cb(read_file_range(path, in, run));
    });
    return;
  }
  if (!waited && c.dl->current() == download::state::running) {
    c.dl->when_in_file(piece, [self, off, max, cb = std::move(cb)]() mutable {
      self->serve(off, max, std::move(cb), true);
    });
    return;
  }
  c.dl->read_piece(piece, [m = &c.dl->meta(), piece, in, n, cb = std::move(cb),
                           dl = c.dl](result<piece_buffer> b) {
    if (!b) return cb(fail(b.error()));
    std::uint64_t from = in - m->piece_offset(piece);
    if (from >= (*b)->size()) return cb(fail(errc::internal, "piece shorter than expected"));
    std::uint64_t take = std::min<std::uint64_t>(n, (*b)->size() - from);
    cb((*b)->substr(static_cast<std::size_t>(from), static_cast<std::size_t>(take)));
  });
}

}  // namespace shoal::peerd
