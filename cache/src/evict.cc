// Eviction (watermarks, idle TTL, making room after ENOSPC), explicit removal, and the periodic
// maintenance pass.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/log.h"
#include "core.h"

namespace shoal::cache::detail {

core::victim core::take_locked(const digest& id) {
  auto it = table_.find(id);
  victim v;
  v.id = id;
  v.size = it->second.size;
  v.kind = it->second.kind;
  if (it->second.labels) v.labels = std::move(*it->second.labels);
  auto k = static_cast<std::size_t>(v.kind);
  by_kind_[k].objects -= 1;
  by_kind_[k].bytes -= v.size;
  committed_bytes_.fetch_sub(v.size, std::memory_order_relaxed);
  table_.erase(it);
  held_generation_.fetch_add(1, std::memory_order_release);
  removing_.insert(id);
  return v;
}

void core::finish_removal(std::vector<victim>& victims, event_type type, evict_reason reason) {
  if (victims.empty()) return;
  // File first, row second: a crash in between leaves a row without a file, which start-up
  // drops. A reader that already opened the file keeps reading it (unlink semantics).
  if (type != event_type::quarantined) {
    for (const victim& v : victims) {
      std::string hex = v.id.hex();
      if (unlinkat_sealed(layout_.shard_fd(v.id), hex.c_str()) != 0 && errno != ENOENT) {
        log::warn("cache: unlink of removed object failed", log::kv("digest", v.id.short_str()),
                  log::kv("errno", errno));
      }
    }
  }
  {
    std::lock_guard dl(db_mu_);
    index::batch b;
    for (const victim& v : victims) {
      b.del(object_key(v.id));
      for (const std::string& l : v.labels) b.del(label_key(v.id, l));
    }
    // Not synced: if the deletes are lost, start-up finds rows without files and drops them.
    if (auto st = index_->write(b, false); !st) {
      log::warn("cache: deleting index rows failed (start-up will repair)",
                log::kv("error", st.error().to_string()));
    }
  }
  {
    std::lock_guard lk(mu_);
    for (const victim& v : victims) removing_.erase(v.id);
  }
  removing_cv_.notify_all();
  for (const victim& v : victims) {
    publish(event{type, v.id, v.size, v.kind,
                  type == event_type::evicted ? reason : evict_reason::none});
  }
}

std::uint64_t core::evict_pass(std::uint64_t target, std::int64_t idle_cutoff_ms,
                               evict_reason reason) {
  // One selection at a time, so that concurrent passes do not both evict for the same shortfall.
  // The lock is released before files are deleted and events published: take_locked() has
  // already lowered the usage the next pass sees, and callbacks may call back into the store.
  std::unique_lock el(evict_mu_);
  std::int64_t now_ms = to_ms(now());
  struct cand {
    std::int64_t last;
    digest id;
  };
  std::vector<cand> cands;
  {
    std::lock_guard lk(mu_);
    bool any_idle = false;
    if (idle_cutoff_ms != INT64_MIN) {
      for (const auto& [id, e] : table_) {
        if (e.last_access_ms < idle_cutoff_ms) {
          any_idle = true;
          break;
        }
      }
    }
    if (usage() <= target && !any_idle) return 0;
    cands.reserve(table_.size());
    for (const auto& [id, e] : table_) {
      if (!pinned_locked(id, now_ms)) cands.push_back(cand{e.last_access_ms, id});
    }
  }
  // Sorting happens outside the lock; the choice is re-checked below under it.
  std::sort(cands.begin(), cands.end(), [](const cand& a, const cand& b) {
    return a.last != b.last ? a.last < b.last : a.id < b.id;
  });
  std::vector<victim> lru, idle;
  std::uint64_t freed = 0;
  {
    std::lock_guard lk(mu_);
    for (const cand& c : cands) {
      bool is_idle = c.last < idle_cutoff_ms;
      if (!is_idle && usage() <= target) break;
      auto it = table_.find(c.id);
      // Skip objects read (or replaced) since the snapshot, and ones pinned meanwhile.
      if (it == table_.end() || it->second.last_access_ms != c.last) continue;
      if (pinned_locked(c.id, now_ms)) continue;
      victim v = take_locked(c.id);
      freed += v.size;
      (is_idle ? idle : lru).push_back(std::move(v));
    }
  }
  el.unlock();
  std::uint64_t n = lru.size() + idle.size();
  if (n > 0) {
    ctr_.evictions.fetch_add(n, std::memory_order_relaxed);
    ctr_.evicted_bytes.fetch_add(freed, std::memory_order_relaxed);
    ctr_.ttl_evictions.fetch_add(idle.size(), std::memory_order_relaxed);
    log::info("cache evicted", log::kv("objects", n), log::kv("bytes", freed),
              log::kv("idle", idle.size()), log::kv("reason", to_string(reason)),
              log::kv("usage", usage()), log::kv("capacity", capacity()));
  }
  finish_removal(idle, event_type::evicted, evict_reason::idle_ttl);
  finish_removal(lru, event_type::evicted, reason);
  return freed;
}

std::uint64_t core::evict_to(std::uint64_t target, evict_reason reason) {
  return evict_pass(target, INT64_MIN, reason);
}

bool core::make_room(std::uint64_t need) {
  std::uint64_t u = usage();
  std::uint64_t target = std::min(low_bytes(), u > need ? u - need : 0);
  std::uint64_t freed = evict_pass(target, INT64_MIN, evict_reason::no_space);
  log::warn("cache: filesystem full, evicted to make room", log::kv("need", need),
            log::kv("freed", freed));
  return freed > 0;
}

status core::remove(const digest& id) {
  std::vector<victim> v;
  {
    std::int64_t now_ms = to_ms(now());
    std::unique_lock lk(mu_);
    if (inflight_.contains(id)) {
      return fail(errc::busy, "remove " + id.str() + ": a write is in progress");
    }
    if (!table_.contains(id)) return fail(errc::not_found, "remove " + id.str() + ": not in cache");
    if (pinned_locked(id, now_ms)) {
      std::string owners;
      for (const pin_rec& p : pins_.at(id)) {
        if (p.expiry_ms != 0 && p.expiry_ms <= now_ms) continue;
        owners += (owners.empty() ? "" : ", ") + p.owner;
      }
      return fail(errc::busy, "remove " + id.str() + ": pinned by " + owners);
    }
    v.push_back(take_locked(id));
  }
  finish_removal(v, event_type::removed, evict_reason::none);
  ctr_.removals.fetch_add(1, std::memory_order_relaxed);
  return {};
}

void core::run_maintenance(bool force_flush) {
  using namespace std::chrono;
  auto steady_now = steady_clock::now().time_since_epoch();
  auto now_ns = duration_cast<nanoseconds>(steady_now).count();
  if (force_flush || now_ns - last_flush_ns_.load() >=
                         duration_cast<nanoseconds>(opts_.access_flush_interval).count()) {
    last_flush_ns_.store(now_ns);
    flush_access();
  }
  refresh_capacity();
  prune_expired_pins();
  std::int64_t cutoff = INT64_MIN;
  if (opts_.idle_ttl.count() > 0) {
    cutoff = to_ms(now()) - duration_cast<milliseconds>(opts_.idle_ttl).count();
  }
  std::uint64_t target = usage() > high_bytes() ? low_bytes() : UINT64_MAX;
  if (cutoff != INT64_MIN || target != UINT64_MAX) {
    evict_pass(target, cutoff, evict_reason::watermark);
  }
}

}  // namespace shoal::cache::detail
