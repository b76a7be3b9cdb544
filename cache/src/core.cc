// core: open/close, the read path, pins, labels, events, stats and the background threads.
// The write path is in write.cc, eviction in evict.cc, start-up in reconcile.cc, scrub in
// scrub.cc.

#include "core.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "common/thread_name.h"

namespace shoal::cache::detail {

std::int64_t to_ms(time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

time_point from_ms(std::int64_t ms) noexcept {
  return time_point(std::chrono::duration_cast<clock::duration>(std::chrono::milliseconds(ms)));
}

result<std::shared_ptr<core>> core::open(const options& opts) {
  if (auto st = opts.validate(); !st) return std::unexpected(st.error().wrap("cache options"));
  std::shared_ptr<core> c(new core(opts));
  auto l = layout::create(opts.root);
  if (!l) return std::unexpected(l.error().wrap("open cache " + opts.root));
  c->layout_ = std::move(*l);
  auto idx = index::open(c->layout_.index_dir(), {});
  if (!idx) return std::unexpected(idx.error().wrap("open cache " + opts.root));
  c->index_ = std::move(*idx);
  if (opts.write_threads > 0) c->pool_ = std::make_unique<io_pool>(opts.write_threads);
  c->refresh_capacity();
  if (c->capacity() == 0) {
    return fail(errc::config_error, "open cache " + opts.root + ": capacity is 0 bytes");
  }
  if (auto st = c->reconcile(); !st) {
    return std::unexpected(st.error().wrap("reconcile cache " + opts.root));
  }
  log::info("cache opened", log::kv("root", opts.root), log::kv("objects", c->table_.size()),
            log::kv("bytes", c->committed_bytes_.load()), log::kv("capacity", c->capacity()));
  return c;
}

core::~core() { stop(); }

void core::start_background() {
  std::lock_guard lk(bg_mu_);
  if (bg_stop_ || maintenance_thread_.joinable()) return;
  maintenance_thread_ = std::thread([this] {
    name_this_thread("cache-upkeep");
    maintenance_loop();
  });
  if (opts_.scrub_bytes_per_sec > 0)
    scrub_thread_ = std::thread([this] {
      name_this_thread("cache-scrub");
      scrub_loop();
    });
}

void core::stop() {
  {
    std::lock_guard lk(bg_mu_);
    bg_stop_ = true;
  }
  bg_cv_.notify_all();
  if (maintenance_thread_.joinable()) maintenance_thread_.join();
  if (scrub_thread_.joinable()) scrub_thread_.join();
  closed_.store(true, std::memory_order_release);
  flush_access();  // cheap when nothing is dirty; the destructor calls stop() once more
}

void core::refresh_capacity() {
  if (opts_.quota_bytes > 0) {
    capacity_.store(opts_.quota_bytes, std::memory_order_relaxed);
    return;
  }
  struct statvfs vfs {};
  if (::statvfs(layout_.root().c_str(), &vfs) != 0) {
    log::warn("statvfs failed; keeping the previous capacity", log::kv("root", layout_.root()),
              log::kv("errno", errno));
    return;
  }
  auto total = static_cast<double>(vfs.f_blocks) * static_cast<double>(vfs.f_frsize);
  capacity_.store(static_cast<std::uint64_t>(total * opts_.fs_share), std::memory_order_relaxed);
}

std::uint64_t core::high_bytes() const noexcept {
  return static_cast<std::uint64_t>(static_cast<double>(capacity()) * opts_.high_watermark);
}

std::uint64_t core::low_bytes() const noexcept {
  return static_cast<std::uint64_t>(static_cast<double>(capacity()) * opts_.low_watermark);
}

// ---------------------------------------------------------------------------------------------
// Read path

result<object_reader> core::open_read(const digest& id) {
  std::int64_t now_ms = to_ms(now());
  std::uint64_t size = 0;
  object_kind kind = object_kind::blob;
  {
    std::lock_guard lk(mu_);
    auto it = table_.find(id);
    if (it == table_.end()) {
      ctr_.misses.fetch_add(1, std::memory_order_relaxed);
      return fail(errc::not_found, "object " + id.str() + " is not in the cache");
    }
    entry& e = it->second;
    e.last_access_ms = std::max(e.last_access_ms, now_ms);
    ++e.hits;
    if (!e.dirty) {
      e.dirty = true;
      dirty_.push_back(id);
    }
    size = e.size;
    kind = e.kind;
  }
  std::string hex = id.hex();
  int shard = layout_.shard_fd(id);
  int fd = open_read_noatime(shard, hex.c_str());
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) {
      // Evicted between the lookup and the open: a miss like any other.
      ctr_.misses.fetch_add(1, std::memory_order_relaxed);
      return fail(errc::not_found, "object " + id.str() + " is not in the cache");
    }
    return fail_errno(err, "open " + layout_.object_path(id));
  }
  ctr_.hits.fetch_add(1, std::memory_order_relaxed);
  return object_reader(fd, id, size, kind);
}

bool core::pinned_locked(const digest& id, std::int64_t now_ms) const {
  if (pins_.empty()) return false;
  auto it = pins_.find(id);
  if (it == pins_.end()) return false;
  for (const pin_rec& p : it->second) {
    if (p.count > 0 && (p.expiry_ms == 0 || p.expiry_ms > now_ms)) return true;
  }
  return false;
}

object_info core::info_locked(const digest& id, const entry& e, std::int64_t now_ms) const {
  object_info info;
  info.id = id;
  info.size = e.size;
  info.kind = e.kind;
  info.created = from_ms(e.created_ms);
  info.last_access = from_ms(e.last_access_ms);
  info.last_scrub = from_ms(e.last_scrub_ms);
  info.hit_count = e.hits;
  if (e.labels) info.labels = *e.labels;
  if (auto it = pins_.find(id); it != pins_.end()) {
    for (const pin_rec& p : it->second) {
      pin_info pi;
      pi.owner = p.owner;
      pi.count = p.count;
      if (p.expiry_ms != 0) pi.expiry = from_ms(p.expiry_ms);
      info.pins.push_back(std::move(pi));
    }
  }
  info.pinned = pinned_locked(id, now_ms);
  return info;
}

std::optional<object_info> core::stat(const digest& id) const {
  std::int64_t now_ms = to_ms(now());
  std::lock_guard lk(mu_);
  auto it = table_.find(id);
  if (it == table_.end()) return std::nullopt;
  return info_locked(id, it->second, now_ms);
}

bool core::contains(const digest& id) const {
  std::lock_guard lk(mu_);
  return table_.contains(id);
}

std::vector<object_info> core::list() const {
  std::int64_t now_ms = to_ms(now());
  std::lock_guard lk(mu_);
  std::vector<object_info> out;
  out.reserve(table_.size());
  for (const auto& [id, e] : table_) out.push_back(info_locked(id, e, now_ms));
  return out;
}

std::vector<held_info> core::list_held() const {
  std::lock_guard lk(mu_);
  std::vector<held_info> out;
  out.reserve(table_.size());
  for (const auto& [id, e] : table_) out.push_back({id, e.size, e.kind});
  return out;
}

std::shared_ptr<inflight_object> core::find_inflight(const digest& id) const {
  std::lock_guard lk(mu_);
  auto it = inflight_.find(id);
  return it == inflight_.end() ? nullptr : it->second;
}

void core::insert_locked(const digest& id, entry e) {
  auto k = static_cast<std::size_t>(e.kind);
  by_kind_[k].objects += 1;
  by_kind_[k].bytes += e.size;
  committed_bytes_.fetch_add(e.size, std::memory_order_relaxed);
  table_.insert_or_assign(id, std::move(e));
  held_generation_.fetch_add(1, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------------
// Access flush

void core::flush_access() {
  std::lock_guard dl(db_mu_);
  index::batch b;
  {
    std::lock_guard lk(mu_);
    if (dirty_.empty()) return;
    for (const digest& id : dirty_) {
      auto it = table_.find(id);
      if (it == table_.end() || !it->second.dirty) continue;
      entry& e = it->second;
      e.dirty = false;
      object_row row{e.size, e.kind, e.created_ms, e.last_access_ms, e.last_scrub_ms, e.hits};
      b.put(object_key(id), encode(row));
    }
    dirty_.clear();
  }
  // Not synced: losing the last few seconds of access history to a power cut is harmless.
  if (auto st = index_->write(b, false); !st) {
    log::warn("cache access flush failed", log::kv("error", st.error().to_string()));
    return;
  }
  ctr_.access_flushes.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Pins and labels

status core::change_pin(const digest& id, std::string_view owner, const char* what,
                        const std::function<status(pin_rec& rec, bool live)>& change) {
  if (auto st = check_name("pin owner", owner); !st) return st;
  std::int64_t now_ms = to_ms(now());
  std::lock_guard dl(db_mu_);
  pin_rec before;
  bool existed = false;
  pin_row row;
  {
    std::lock_guard lk(mu_);
    auto& v = pins_[id];
    auto it = std::find_if(v.begin(), v.end(), [&](const pin_rec& p) { return p.owner == owner; });
    if (it == v.end()) {
      v.push_back(pin_rec{std::string(owner), 0, 0});
      it = v.end() - 1;
    } else {
      existed = true;
      before = *it;
    }
    const bool live = existed && (it->expiry_ms == 0 || it->expiry_ms > now_ms);
    if (auto st = change(*it, live); !st) {
      if (existed)
        *it = before;
      else
        v.erase(it);
      if (v.empty()) pins_.erase(id);
      return st;
    }
    row = pin_row{it->count, it->expiry_ms};
  }
  if (auto st = index_->put(pin_key(id, owner), encode(row), opts_.sync_metadata); !st) {
    std::lock_guard lk(mu_);
    auto& v = pins_[id];
    auto it = std::find_if(v.begin(), v.end(), [&](const pin_rec& p) { return p.owner == owner; });
    if (it != v.end()) {
      if (existed)
        *it = before;
      else
        v.erase(it);
    }
    if (v.empty()) pins_.erase(id);
    return std::unexpected(st.error().wrap(std::string(what) + " " + id.str()));
  }
  return {};
}

status core::pin(const digest& id, std::string_view owner, std::optional<time_point> expiry) {
  std::int64_t exp = expiry ? std::max<std::int64_t>(to_ms(*expiry), 1) : 0;
  return change_pin(id, owner, "pin", [&](pin_rec& p, bool live) -> status {
    if (!live) {  // new, or expired: a fresh count of one
      p.count = 1;
      p.expiry_ms = exp;
      return {};
    }
    if (p.count == UINT32_MAX)
      return fail(errc::invalid_argument, "pin count overflow for " + id.str());
    ++p.count;
    p.expiry_ms = (exp == 0 || p.expiry_ms == 0) ? 0 : std::max(exp, p.expiry_ms);
    return {};
  });
}

status core::renew_pin(const digest& id, std::string_view owner, std::optional<time_point> expiry) {
  std::int64_t exp = expiry ? std::max<std::int64_t>(to_ms(*expiry), 1) : 0;
  return change_pin(id, owner, "renew pin", [&](pin_rec& p, bool live) -> status {
    if (!live) p.count = 1;
    p.expiry_ms = exp;
    return {};
  });
}

status core::unpin(const digest& id, std::string_view owner) {
  if (auto st = check_name("pin owner", owner); !st) return st;
  std::lock_guard dl(db_mu_);
  pin_rec before;
  bool erased = false;
  {
    std::lock_guard lk(mu_);
    auto pit = pins_.find(id);
    auto it = pit == pins_.end() ? std::vector<pin_rec>::iterator{}
                                 : std::find_if(pit->second.begin(), pit->second.end(),
                                                [&](const pin_rec& p) { return p.owner == owner; });
    if (pit == pins_.end() || it == pit->second.end()) {
      return fail(errc::not_found, id.str() + " has no pin by \"" + std::string(owner) + "\"");
    }
    before = *it;
    if (--it->count == 0) {
      pit->second.erase(it);
      if (pit->second.empty()) pins_.erase(pit);
      erased = true;
    }
  }
  status st;
  if (erased) {
    index::batch b;
    b.del(pin_key(id, owner));
    st = index_->write(b, opts_.sync_metadata);
  } else {
    st = index_->put(pin_key(id, owner), encode(pin_row{before.count - 1, before.expiry_ms}),
                     opts_.sync_metadata);
  }
  if (!st) {
    std::lock_guard lk(mu_);
    auto& v = pins_[id];
    auto it = std::find_if(v.begin(), v.end(), [&](const pin_rec& p) { return p.owner == owner; });
    if (it == v.end())
      v.push_back(before);
    else
      *it = before;
    return std::unexpected(st.error().wrap("unpin " + id.str()));
  }
  return {};
}

void core::prune_expired_pins() {
  std::int64_t now_ms = to_ms(now());
  std::lock_guard dl(db_mu_);
  index::batch b;
  {
    std::lock_guard lk(mu_);
    for (auto it = pins_.begin(); it != pins_.end();) {
      auto& v = it->second;
      for (auto p = v.begin(); p != v.end();) {
        if (p->expiry_ms != 0 && p->expiry_ms <= now_ms) {
          b.del(pin_key(it->first, p->owner));
          p = v.erase(p);
        } else {
          ++p;
        }
      }
      it = v.empty() ? pins_.erase(it) : std::next(it);
    }
  }
  if (auto st = index_->write(b, false); !st) {
    // The pins are already gone from memory; at the next start they are loaded again, found
    // expired and pruned again. Nothing to undo.
    log::warn("pruning expired pins failed", log::kv("error", st.error().to_string()));
  }
}

status core::add_label(const digest& id, std::string_view label) {
  if (auto st = check_name("label", label); !st) return st;
  std::lock_guard dl(db_mu_);
  {
    std::lock_guard lk(mu_);
    auto it = table_.find(id);
    if (it == table_.end()) return fail(errc::not_found, "label " + id.str() + ": not in cache");
    auto& labels = it->second.labels;
    if (!labels) labels = std::make_unique<std::vector<std::string>>();
    if (std::find(labels->begin(), labels->end(), label) != labels->end()) return {};
    labels->emplace_back(label);
  }
  if (auto st = index_->put(label_key(id, label), encode_label(to_ms(now())), opts_.sync_metadata);
      !st) {
    std::lock_guard lk(mu_);
    if (auto it = table_.find(id); it != table_.end() && it->second.labels) {
      auto& l = *it->second.labels;
      l.erase(std::remove(l.begin(), l.end(), label), l.end());
    }
    return std::unexpected(st.error().wrap("label " + id.str()));
  }
  return {};
}

status core::remove_label(const digest& id, std::string_view label) {
  if (auto st = check_name("label", label); !st) return st;
  std::lock_guard dl(db_mu_);
  {
    std::lock_guard lk(mu_);
    auto it = table_.find(id);
    if (it == table_.end()) return fail(errc::not_found, "unlabel " + id.str() + ": not in cache");
    auto& labels = it->second.labels;
    if (!labels) return {};
    auto pos = std::find(labels->begin(), labels->end(), label);
    if (pos == labels->end()) return {};
    labels->erase(pos);
    if (labels->empty()) labels.reset();
  }
  index::batch b;
  b.del(label_key(id, label));
  if (auto st = index_->write(b, opts_.sync_metadata); !st) {
    // Memory already forgot the label; a stale row only resurfaces after a restart.
    return std::unexpected(st.error().wrap("unlabel " + id.str()));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Events and stats

subscription core::on_event(std::function<void(const event&)> cb) {
  auto l = std::make_shared<listener>();
  l->fn = std::move(cb);
  {
    std::lock_guard lk(listeners_mu_);
    listeners_.push_back(l);
  }
  subscription s;
  std::weak_ptr<core> weak = weak_from_this();
  s.cancel_ = [weak, l]() {
    {
      std::lock_guard g(l->mu);  // waits for a callback running on another thread
      l->active = false;
    }
    if (auto c = weak.lock()) {
      std::lock_guard lk(c->listeners_mu_);
      std::erase(c->listeners_, l);
    }
  };
  return s;
}

void core::publish(const event& ev) {
  std::vector<std::shared_ptr<listener>> ls;
  {
    std::lock_guard lk(listeners_mu_);
    ls = listeners_;
  }
  for (auto& l : ls) {
    std::lock_guard g(l->mu);
    if (!l->active) continue;
    try {
      l->fn(ev);
    } catch (const std::exception& e) {
      log::error("cache event callback threw", log::kv("error", e.what()));
    } catch (...) {
      log::error("cache event callback threw a non-exception");
    }
  }
}

stats core::get_stats() const {
  stats s;
  std::int64_t now_ms = to_ms(now());
  {
    std::lock_guard lk(mu_);
    s.by_kind = by_kind_;
    s.objects = table_.size();
    s.inflight_objects = inflight_.size();
    for (const auto& [id, v] : pins_) {
      if (!pinned_locked(id, now_ms)) continue;
      ++s.pinned_objects;
      if (auto it = table_.find(id); it != table_.end()) s.pinned_bytes += it->second.size;
    }
  }
  s.bytes = committed_bytes_.load(std::memory_order_relaxed);
  s.inflight_bytes = reserved_bytes_.load(std::memory_order_relaxed);
  s.capacity_bytes = capacity();
  auto ld = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.hits = ld(ctr_.hits);
  s.misses = ld(ctr_.misses);
  s.commits = ld(ctr_.commits);
  s.adoptions = ld(ctr_.adoptions);
  s.adoptions_proven = ld(ctr_.adoptions_proven);
  s.commit_mismatches = ld(ctr_.mismatches);
  s.aborted_writes = ld(ctr_.aborted);
  s.coalesced_writes = ld(ctr_.coalesced);
  s.no_space_errors = ld(ctr_.no_space);
  s.evictions = ld(ctr_.evictions);
  s.evicted_bytes = ld(ctr_.evicted_bytes);
  s.ttl_evictions = ld(ctr_.ttl_evictions);
  s.removals = ld(ctr_.removals);
  s.access_flushes = ld(ctr_.access_flushes);
  s.scrubbed_objects = ld(ctr_.scrubbed_objects);
  s.scrubbed_bytes = ld(ctr_.scrubbed_bytes);
  s.scrub_mismatches = ld(ctr_.scrub_mismatches);
  s.scrub_missing = ld(ctr_.scrub_missing);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Background threads

void core::wake_maintenance() {
  {
    std::lock_guard lk(bg_mu_);
    bg_wake_ = true;
  }
  bg_cv_.notify_all();
}

bool core::sleep_unless_stopped(std::chrono::nanoseconds d) {
  std::unique_lock lk(bg_mu_);
  return !bg_cv_.wait_for(lk, d, [this] { return bg_stop_; });
}

void core::maintenance_loop() {
  for (;;) {
    {
      std::unique_lock lk(bg_mu_);
      bg_cv_.wait_for(lk, opts_.maintenance_interval, [this] { return bg_stop_ || bg_wake_; });
      if (bg_stop_) return;
      bg_wake_ = false;
    }
    run_maintenance(false);
  }
}

}  // namespace shoal::cache::detail
