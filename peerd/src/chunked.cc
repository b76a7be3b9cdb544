#include "peerd/chunked.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <span>
#include <utility>

#include <boost/asio/post.hpp>

#include "common/fd.h"
#include "common/log.h"
#include "common/origin_protocol.h"
#include "common/thread_name.h"
#include "shed.h"

namespace shoal::peerd {

namespace net = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

// A read-only mapping of the first `size` bytes of a complete chunk file, so its bytes go to the
// blob's writer without being copied into a buffer first. Chunk files are never truncated (the
// cache's objects are read-only, a finished download's file is only ever removed), and the file
// is checked to hold `size` bytes before it is mapped.
class mapped_chunk {
 public:
  static result<mapped_chunk> map(int fd, std::uint64_t size, const std::string& what) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return fail_errno(errno, "stat " + what);
    if (static_cast<std::uint64_t>(st.st_size) < size)
      return fail(errc::size_mismatch, what + " is shorter than expected");
    mapped_chunk m;
    if (size == 0) return m;
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return fail_errno(errno, "map " + what);
    (void)::madvise(p, size, MADV_SEQUENTIAL);
    m.p_ = static_cast<const std::byte*>(p);
    m.n_ = size;
    return m;
  }
  mapped_chunk() = default;
  mapped_chunk(mapped_chunk&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  mapped_chunk& operator=(mapped_chunk&&) = delete;
  mapped_chunk(const mapped_chunk&) = delete;
  ~mapped_chunk() {
    if (p_) ::munmap(const_cast<std::byte*>(p_), n_);
  }
  [[nodiscard]] std::span<const std::byte> bytes(std::uint64_t off, std::uint64_t n) const {
    return {p_ + off, static_cast<std::size_t>(n)};
  }

 private:
  const std::byte* p_ = nullptr;
  std::uint64_t n_ = 0;
};

}  // namespace

chunked_blob::chunked_blob(deps d, std::string ns, std::string repo, const digest& id,
                           std::uint64_t size, std::uint64_t chunk_size, std::string authorization)
    : d_(std::move(d)),
      ns_(std::move(ns)),
      repo_(std::move(repo)),
      id_(id),
      size_(size),
      chunk_size_(chunk_size),
      // As registry-proxy cuts: the last chunk also takes the remainder.
      count_(static_cast<std::uint32_t>(size / chunk_size)),
      auth_(std::move(authorization)) {
  chunks_.resize(count_);
}

chunked_blob::~chunked_blob() {
  // The last reference may be dropped on one of these threads: that one is detached (it only
  // returns from here).
  auto end = [](std::thread& t) {
    if (!t.joinable()) return;
    if (t.get_id() == std::this_thread::get_id())
      t.detach();
    else
      t.join();
  };
  end(driver_);
  for (auto& [t, d] : direct_threads_) end(t);
}

void chunked_blob::start() {
  auto self = shared_from_this();
  driver_ = std::thread([self] {
    name_this_thread("chunked-blob");
    self->drive();
  });
}

void chunked_blob::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  finish(error{errc::cancelled, "peerd is stopping"});
  // No range thread starts once the fetch ended (want_range), so these are all of them.
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    for (auto& [t, d] : direct_threads_) threads.push_back(std::move(t));
    direct_threads_.clear();
  }
  // driver_ is set once by start(), before any other call can reach this object.
  if (driver_.joinable() && driver_.get_id() != std::this_thread::get_id()) driver_.join();
  for (auto& t : threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
}

bool chunked_blob::pause(std::chrono::milliseconds d) {
  std::unique_lock lk(mu_);
  return !cv_.wait_for(lk, d, [this] { return stopping_; });
}

status chunked_blob::wait_written_elsewhere(const digest& d, const std::string& what) {
  for (int i = 0; i < 6000 && !d_.store.contains(d); ++i) {
    if (!pause(std::chrono::milliseconds(10))) return fail(errc::cancelled, "peerd is stopping");
  }
  if (!d_.store.contains(d))
    return fail(errc::timeout, what + " written elsewhere never committed");
  return {};
}

chunked_blob::state chunked_blob::current() const {
  std::lock_guard lk(mu_);
  return st_;
}

std::optional<error> chunked_blob::failure() const {
  std::lock_guard lk(mu_);
  return err_;
}

status chunked_blob::first_round() {
  std::unique_lock lk(mu_);
  // The learner ends the fetch when registry-proxy sheds or makes no progress for the deadline;
  // this bound is a backstop only.
  cv_.wait_for(lk, d_.deadline * 3 + d_.poll_wait * 2,
               [this] { return first_round_ || st_ != state::running; });
  if (st_ == state::failed && err_) return fail(*err_);
  if (!first_round_ && st_ == state::running)
    return fail(errc::timeout, "registry-proxy never listed the chunks of " + id_.short_str());
  return {};
}

std::string chunked_blob::retry_after() const {
  std::lock_guard lk(mu_);
  return retry_after_;
}

result<http::full_response> chunked_blob::ask(const http::client_request& r, std::size_t max_body,
                                              steady::time_point until, const std::string& what) {
  const auto t0 = steady::now();
  // The client's own retries would honour Retry-After past the deadline: they are done here
  // (a broken connection or a 502/503/504 as often as the request allows, a 429 until `until`).
  int retries = r.max_retries;
  for (int round = 0; round < 100000; ++round) {
    http::client_request once(r);
    once.max_retries = 0;
    auto f = call(std::move(once), max_body);
    bool flaky = !f || f->status == 502 || f->status == 503 || f->status == 504;
    if (flaky && retries-- > 0) {
      if (!pause(std::chrono::milliseconds(200))) return fail(errc::cancelled, "peerd is stopping");
      continue;
    }
    if (!f) return fail(f.error().wrap(what + " from registry-proxy"));
    if (f->status != 429) return f;
    auto now = steady::now();
    if (now >= until || current() != state::running) {
      std::lock_guard lk(mu_);
      retry_after_ = shed::retry_after(*f);
      return fail(errc::busy, what + ": " + shed::gave_up(*f, now - t0));
    }
    const auto wait = std::min(shed::retry_wait(*f), until - now);
    if (!pause(std::chrono::ceil<std::chrono::milliseconds>(wait)))
      return fail(errc::cancelled, "peerd is stopping");
  }
  return fail(errc::timeout, what + ": registry-proxy never stopped shedding load");
}

std::pair<std::uint32_t, std::uint32_t> chunked_blob::chunks_done() const {
  std::lock_guard lk(mu_);
  std::uint32_t done = 0;
  for (std::uint32_t i = 0; i < known_; ++i) {
    if (!chunks_[i].dl || chunks_[i].dl->current() == download::state::complete) ++done;
  }
  return {done, count_};
}

std::string chunked_blob::blob_path() const { return origin::blob_target({ns_, repo_}, id_); }

result<http::full_response> chunked_blob::call(http::client_request req, std::size_t max_body) {
  if (d_.call) return d_.call(std::move(req), max_body);
  req.url = d_.proxy + req.url;
  return origin::call(d_.http, std::move(req), max_body);
}

void chunked_blob::drive() {
  auto t0 = steady::now();
  // The chunk list is learnt on a thread of its own while this one joins the chunks.
  std::thread learner([this] {
    name_this_thread("chunk-list");
    bool lost = false;
    if (auto st = learn_chunks(lost); !st && !(lost && take_tail(st.error()))) finish(st.error());
    {
      std::lock_guard lk(mu_);
      first_round_ = true;
    }
    cv_.notify_all();
  });
  status st = assemble();
  if (!st) finish(st.error());
  learner.join();
  if (!st || current() == state::failed) {
    auto e = st ? failure().value_or(error{errc::internal, "failed"}) : st.error();
    log::warn("chunked fetch failed", log::kv("digest", id_.str()), log::kv("error", e.message));
    return;
  }
  finish(std::nullopt);
  log::info("object downloaded in chunks", log::kv("digest", id_.str()), log::kv("bytes", size_),
            log::kv("chunks", count_),
            log::kv("seconds", std::chrono::duration<double>(steady::now() - t0).count()));
  record_metainfo();
}

void chunked_blob::record_metainfo() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
  }
  // The whole blob's metainfo, so this node seeds it to later pulls (which get whole-object
  // metainfo from registry-proxy once it holds the blob). registry-proxy has it once it
  // committed the blob, moments after its last chunk; hashing the blob here again is the
  // fallback.
  http::client_request r;
  r.url = origin::metainfo_target({ns_, repo_}, id_, {.wait = d_.poll_wait});
  if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
  r.timeouts.connect = d_.connect_timeout;
  r.timeouts.stall = d_.poll_wait + std::chrono::seconds(3);
  r.max_retries = 0;
  if (auto f = call(std::move(r), 64u << 20); f && f->status == 200) {
    if (auto a = origin::decode_metainfo(*f)) {
      if (auto m = object_metainfo::parse(a->torrent, id_)) {
        (void)d_.state.put(id_, m->info_hash_hex(), a->torrent);
        seed_whole();
        return;
      }
    }
  }
  auto m = metainfo_for_file(d_.store.object_path(id_), id_);
  if (m && d_.state.put(id_, m->info_hash_hex(), m->torrent_file({}))) seed_whole();
}

// The whole-object seed is loaded now and announced (an SSL swarm could not load it when a peer
// first asks: the TLS handshake names only loaded torrents), with its pieces trusted: the commit
// has just verified the blob's sha256, and its torrent came from registry-proxy or was computed
// from these bytes. Loaded on demand instead, each piece would be SHA-1 hashed before its first
// upload (a seed's largest CPU cost in bench/peerd/run, docs/p2p.md).
void chunked_blob::seed_whole() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
  }
  // stop() joins this thread before the swarm goes away.
  d_.swarm.load_seed(id_, true);
}

status chunked_blob::learn_chunks(bool& lost) {
  auto last_progress = steady::now();
  for (int round = 0; round < 100000; ++round) {
    std::uint32_t have;
    {
      std::lock_guard lk(mu_);
      have = known_;
      if (st_ != state::running) return fail(errc::cancelled, "chunked fetch ended");
    }
    if (have == count_) return {};
    http::client_request r;
    r.url = origin::chunks_target({ns_, repo_}, id_, have, d_.poll_wait);
    if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
    r.timeouts.connect = d_.connect_timeout;
    r.timeouts.stall = d_.poll_wait + std::chrono::seconds(3);
    r.max_retries = 1;
    auto f = ask(r, 4u << 20, last_progress + d_.deadline, "chunk list");
    // No replica answered, or one that is not cutting the blob (404), or a server error.
    lost = (!f && !f.error().is(errc::busy)) || (f && (f->status == 404 || f->status >= 500));
    if (!f) return fail(f.error());
    if (f->status != 200) {
      std::string why = origin::error_message_of(f->body);
      return fail(errc::upstream_error, "chunk list: registry-proxy answered HTTP " +
                                            std::to_string(f->status) +
                                            (why.empty() ? "" : ": " + why));
    }
    auto list = origin::decode_chunk_list(f->body);
    if (!list) return fail(list.error());
    if (list->error)
      return fail(errc::upstream_error, "registry-proxy could not cut the object: " + *list->error);
    if (list->parent != id_ || list->size != size_ || list->chunk_size != chunk_size_) {
      return fail(errc::protocol_error, "chunk list describes another layout than announced");
    }
    const auto known = static_cast<std::uint32_t>(list->chunks.size());
    for (std::uint32_t i = have; i < known; ++i) {
      const auto& c = list->chunks[i];
      {
        std::lock_guard lk(mu_);
        chunks_[i].id = c.id;
        chunks_[i].offset = c.offset;
        chunks_[i].size = c.size;
      }
      if (auto s = start_chunk(i); !s) return s;
      last_progress = steady::now();
    }
    if (round == 0) {
      {
        std::lock_guard lk(mu_);
        first_round_ = true;
      }
      cv_.notify_all();
    }
    if (known == have && steady::now() - last_progress > d_.deadline) {
      return fail(errc::timeout, "registry-proxy published no chunk of " + id_.short_str() +
                                     " for " + std::to_string(d_.deadline.count() / 1000) + " s");
    }
  }
  return fail(errc::timeout, "chunk list never completed");
}

status chunked_blob::start_chunk(std::uint32_t i) {
  chunk c;
  {
    std::lock_guard lk(mu_);
    c = chunks_[i];
  }
  std::shared_ptr<download> dl;
  if (!d_.store.contains(c.id)) {
    dl = d_.swarm.find(c.id);
    if (!dl) {
      http::client_request r;
      r.url = origin::metainfo_target({ns_, repo_}, c.id, {.parent = id_});
      if (!auth_.empty()) r.headers.emplace_back("Authorization", auth_);
      r.timeouts.connect = d_.connect_timeout;
      r.timeouts.stall = d_.deadline;
      r.max_retries = 1;
      auto f =
          ask(r, 16u << 20, steady::now() + d_.deadline, "metainfo of chunk " + std::to_string(i));
      if (!f) return fail(f.error());
      if (f->status == 404 || f->status >= 500) {
        // Listed but not swarmed (any more): registry-proxy evicted it, restarted or could not
        // seed it. Its bytes are still in the blob registry-proxy holds or is fetching.
        std::string why = origin::error_message_of(f->body);
        if (auto st = fetch_chunk_range(
                i, "metainfo HTTP " + std::to_string(f->status) + (why.empty() ? "" : ": " + why));
            !st)
          return st;
        return chunk_ready(i, nullptr);
      }
      if (f->status != 200) {
        return fail(errc::upstream_error, "metainfo of chunk " + std::to_string(i) + ": HTTP " +
                                              std::to_string(f->status));
      }
      auto a = origin::decode_metainfo(*f);
      if (!a) return fail(a.error().wrap("metainfo of chunk " + std::to_string(i)));
      auto m = object_metainfo::parse(a->torrent, c.id);
      if (!m) return fail(m.error().wrap("metainfo of chunk " + std::to_string(i)));
      std::vector<std::string> seeds;
      if (!a->seed.empty()) seeds.push_back(a->seed);
      d_.swarm.note_grant(a->grant);
      fallback_info fb;
      fb.url = d_.proxy + blob_path();
      fb.authorization = auth_;
      fb.offset = c.offset;
      // A replica that dies while this chunk streams from its seed: the chunk's ranges come
      // from the next.
      fb.endpoints = d_.endpoints;
      fb.path = blob_path();
      // Transient: the chunk's file is read into the blob and seeded while wanted, never
      // committed to the cache itself (the blob is verified whole).
      auto r2 = d_.swarm.fetch(c.id, a->torrent, *m, seeds, std::move(fb), true);
      if (r2) {
        dl = *r2;
      } else if (r2.error().is(errc::already_exists) && !d_.store.contains(c.id)) {
        // Seeded from the file of an earlier fetch of this blob that failed after the chunk
        // completed (a transient download is never committed): a retry takes it from there.
        if (auto st = adopt_seeded_chunk(i, d_.swarm.transient_file_of(c.id)); !st) return st;
        return chunk_ready(i, nullptr);
      } else if (!r2.error().is(errc::already_exists)) {
        return fail(r2.error().wrap("chunk " + std::to_string(i)));
      }
    }
  }
  return chunk_ready(i, std::move(dl));
}

status chunked_blob::chunk_ready(std::uint32_t i, std::shared_ptr<download> dl) {
  // A chunk held in the cache stays while the blob is joined.
  if (!dl) {
    digest id;
    {
      std::lock_guard lk(mu_);
      id = chunks_[i].id;
    }
    (void)d_.store.pin(id, "chunked", cache::clock::now() + std::chrono::minutes(10));
  }
  std::vector<waiter> ready;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> wanted;
  chunk joined;
  bool in_order = false;
  {
    std::lock_guard lk(mu_);
    in_order = in_order_;
    chunks_[i].dl = dl;
    chunks_[i].ready = true;
    known_ = i + 1;
    auto [b, e] = waiting_.equal_range(i);
    for (auto it = b; it != e; ++it) ready.push_back(std::move(it->second));
    waiting_.erase(b, e);
    if (dl) {
      joined = chunks_[i];
      wanted = wanted_;
    }
  }
  cv_.notify_all();
  if (dl && in_order) dl->want_in_order();
  for (const auto& [off, end] : wanted) want_in_chunk(joined, off, end);
  for (auto& [range, cb] : ready) serve(range.first, range.second, std::move(cb));
  return {};
}

void chunked_blob::want_in_chunk(const chunk& c, std::uint64_t off, std::uint64_t end) {
  if (!c.dl || end <= c.offset || off >= c.offset + c.size) return;
  std::uint64_t from = std::max(off, c.offset) - c.offset;
  std::uint64_t to = std::min(end, c.offset + c.size) - c.offset;
  (void)c.dl->want_range(from, to);
}

void chunked_blob::want_range(std::uint64_t off, std::uint64_t end) {
  start_direct(off, end);
  const std::uint64_t budget = d_.swarm.range_deadline_bytes();
  end = std::min(end, size_);
  if (budget == 0 || off >= end) return;
  end = std::min(end, off + budget);
  std::vector<chunk> joined;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running) return;
    if (wanted_.size() >= 16) wanted_.erase(wanted_.begin());
    wanted_.emplace_back(off, end);
    for (std::uint32_t k = static_cast<std::uint32_t>(off / chunk_size_); k < known_; ++k) {
      if (chunks_[k].offset >= end) break;
      if (chunks_[k].ready && chunks_[k].dl) joined.push_back(chunks_[k]);
    }
  }
  for (const auto& c : joined) want_in_chunk(c, off, end);
}

void chunked_blob::want_in_order() {
  std::vector<std::shared_ptr<download>> joined;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running || in_order_) return;
    in_order_ = true;
    for (std::uint32_t k = 0; k < known_; ++k)
      if (chunks_[k].ready && chunks_[k].dl) joined.push_back(chunks_[k].dl);
  }
  for (const auto& dl : joined) dl->want_in_order();
}

status chunked_blob::adopt_seeded_chunk(std::uint32_t i, const std::string& path) {
  chunk c;
  {
    std::lock_guard lk(mu_);
    c = chunks_[i];
  }
  const std::string what = "chunk " + std::to_string(i);
  auto copy = [&]() -> status {
    if (path.empty()) return fail(errc::not_found, "seeded, but its file is gone");
    // Under the chunk's own digest: the commit verifies the bytes.
    auto t = d_.store.begin_write(c.id, c.size, cache::object_kind::blob);
    if (!t) return fail(t.error());
    if (t->role == cache::write_role::present) return {};
    if (t->role == cache::write_role::follower) return wait_written_elsewhere(c.id, what);
    if (auto st = append_chunk(*t->writer, i, c.id, path, c.size); !st) return st;
    if (auto info = t->writer->commit(); !info) return fail(info.error());
    return {};
  };
  auto st = copy();
  if (st) return {};
  return fetch_chunk_range(i,
                           "seeded from an earlier fetch, but not readable: " + st.error().message);
}

status chunked_blob::wait_chunk(std::uint32_t i) {
  std::shared_ptr<download> dl;
  digest cid;
  {
    std::unique_lock lk(mu_);
    // The learner publishes chunks in order and ends the fetch when registry-proxy makes no
    // progress for the deadline, so this wait is bounded by it.
    cv_.wait(lk, [&] { return chunks_[i].ready || i >= tail_from_ || st_ != state::running; });
    if (!chunks_[i].ready && i >= tail_from_ && st_ == state::running) return {};  // a range
    if (!chunks_[i].ready)
      return fail(errc::timeout, "chunk " + std::to_string(i) + " was never published");
    dl = chunks_[i].dl;
    cid = chunks_[i].id;
  }
  if (dl) {
    // A download ends by itself (its stall fallback and deadline are bounded); this bound is a
    // backstop only.
    (void)dl->wait_done(d_.deadline * 20);
    if (dl->current() == download::state::failed) {
      return fail(dl->failure()
                      .value_or(error{errc::internal, "failed"})
                      .wrap("chunk " + std::to_string(i)));
    }
    if (dl->current() == download::state::running) {
      return fail(errc::timeout, "chunk " + std::to_string(i) + " never completed");
    }
  }
  if (!dl && !d_.store.contains(cid))
    return fail(errc::not_found, "chunk " + std::to_string(i) + " left the cache");
  return {};
}

status chunked_blob::assemble() {
  // Chunk i is appended as soon as it is complete, while later chunks still download, so the
  // blob is ready moments after its last chunk.
  auto t = d_.store.begin_write(id_, size_, cache::object_kind::blob);
  if (!t) return fail(t.error().wrap("cache"));
  if (t->role == cache::write_role::present) return {};
  if (t->role == cache::write_role::follower) return wait_written_elsewhere(id_, "blob");
  auto& w = *t->writer;
  {
    std::lock_guard lk(mu_);
    inflight_ = t->inflight;
  }
  for (std::uint32_t i = 0; i < count_; ++i) {
    if (auto st = wait_chunk(i); !st) {
      w.abort(st.error().message);
      return st;
    }
    digest cid;
    std::uint64_t len;
    std::string path;
    {
      std::unique_lock lk(mu_);
      if (!chunks_[i].ready) {  // this chunk and the rest: ranges of the blob (take_tail)
        lk.unlock();
        if (auto st = write_tail(w, std::uint64_t{i} * chunk_size_); !st) {
          w.abort(st.error().message);
          return st;
        }
        break;
      }
      cid = chunks_[i].id;
      len = chunks_[i].size;
      if (chunks_[i].dl) path = chunks_[i].dl->complete_path();
    }
    if (auto st = append_chunk(w, i, cid, path, len); !st) {
      w.abort(st.error().message);
      return st;
    }
  }
  // The cache verifies the blob's sha256: chunks that are each fine but do not make up the
  // blob (upstream sent wrong bytes) never become it. Readers get the last byte once it is
  // verified, before the commit's fdatasync.
  t->inflight->wait_verified([self = shared_from_this()](const cache::progress& p) {
    if (p.verified) self->mark_verified();
  });
  if (auto info = w.commit(); !info) return fail(info.error().wrap("blob from chunks"));
  return {};
}

status chunked_blob::append_chunk(cache::object_writer& w, std::uint32_t i, const digest& cid,
                                  const std::string& path, std::uint64_t len) {
  const std::string what = "chunk " + std::to_string(i);
  // The finished download's file, or the chunk held in the cache.
  unique_fd own;
  std::optional<cache::object_reader> rd;
  int fd = -1;
  if (path.empty()) {
    auto r = d_.store.open_read(cid);
    if (!r) return fail(r.error().wrap("open " + what));
    rd.emplace(std::move(*r));
    fd = rd->fd();
  } else {
    own = unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!own) return fail_errno(errno, "open " + what + " at " + path);
    fd = own.get();
  }
  auto m = mapped_chunk::map(fd, len, what);
  if (!m) return fail(m.error());
  // In steps, so readers of the blob see its bytes as they are appended.
  constexpr std::uint64_t step = 4u << 20;
  for (std::uint64_t off = 0; off < len; off += step) {
    if (auto st = w.write(m->bytes(off, std::min(step, len - off))); !st)
      return fail(st.error().wrap("write"));
  }
  return {};
}

void chunked_blob::mark_verified() {
  std::vector<waiter> retry;
  {
    std::lock_guard lk(mu_);
    if (verified_) return;
    verified_ = true;
    retry.swap(final_);
  }
  for (auto& [range, cb] : retry) serve(range.first, range.second, std::move(cb));
}

void chunked_blob::finish(std::optional<error> e) {
  std::vector<read_cb> failed;
  std::vector<waiter> retry;
  {
    std::lock_guard lk(mu_);
    if (st_ != state::running) return;
    st_ = e ? state::failed : state::complete;
    err_ = e;
    for (auto& [k, v] : waiting_) retry.push_back(std::move(v));
    for (auto& v : final_) retry.push_back(std::move(v));
    waiting_.clear();
    final_.clear();
    direct_.clear();  // ranges still asked keep their readers and serve them when answered
  }
  cv_.notify_all();
  for (auto& [range, cb] : retry) serve(range.first, range.second, std::move(cb));
}

status chunked_blob::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [this] { return st_ != state::running; });
  if (st_ == state::failed) return fail(*err_);
  return {};
}

}  // namespace shoal::peerd
