// The dataset manager's expiry (datasets.h, security review F8): every view and every pin taken
// for it or for a prewarm order expires unless renewed; expired views are removed by a timer
// thread, off the event loop.
#include "datasets_internal.h"

namespace shoal::peerd {

using namespace datasets_detail;

cache::time_point dataset_manager::bounded_expiry(std::optional<cache::time_point> until) const {
  auto now = cache::clock::now();
  if (!until) return now + opts_.pin_ttl;
  return std::min(*until, now + opts_.pin_ttl_max);
}

std::shared_ptr<const dataset::manifest> dataset_manager::extend_locked(job& j,
                                                                        cache::time_point until) {
  if (j.expires && until <= *j.expires) return nullptr;
  j.expires = until;
  return j.view_pinned ? j.manifest : nullptr;
}

result<cache::time_point> dataset_manager::renew(const std::string& ref,
                                                 std::optional<std::chrono::seconds> ttl) {
  std::shared_ptr<job> j;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end()) j = it->second;
  }
  if (!j)
    return fail(errc::not_found,
                (opts_.checkpoints ? "checkpoint " : "dataset ") + ref + " is not on this node");
  auto until = cache::clock::now() + std::min(ttl.value_or(opts_.pin_ttl), opts_.pin_ttl_max);
  std::shared_ptr<const dataset::manifest> repin;
  cache::time_point now_expires;
  {
    std::lock_guard lk(j->mu);
    repin = extend_locked(*j, until);
    now_expires = *j->expires;
  }
  if (repin) {
    if (auto s = renew_pins(*repin, "view:" + ref, now_expires); !s) return fail(s.error());
  }
  persist(*j);
  log::info("dataset view renewed", log::kv("dataset", ref),
            log::kv("expires_in_s", std::chrono::duration_cast<std::chrono::seconds>(
                                        now_expires - cache::clock::now())
                                        .count()));
  return now_expires;
}

result<std::size_t> dataset_manager::drop(const std::string& ref) {
  std::shared_ptr<job> j;
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end()) j = it->second;
  }
  if (!j)
    return fail(errc::not_found,
                (opts_.checkpoints ? "checkpoint " : "dataset ") + ref + " is not on this node");
  {
    std::unique_lock lk(j->mu);
    j->cancel = true;
    j->cv.notify_all();
    j->cv.wait_for(lk, std::chrono::seconds(30), [&] { return !j->running; });
    if (j->running) return fail(errc::busy, "the prefetch of " + ref + " is still stopping; retry");
  }
  std::shared_ptr<const dataset::manifest> m;
  bool pinned;
  std::size_t objects;
  {
    std::lock_guard lk(j->mu);
    m = j->manifest;
    pinned = j->view_pinned;
    objects = j->objects.size();
  }
  remove_view(view_path(ref), m.get());
  std::size_t unpinned = 0;
  if (m && pinned) {
    unpin_all(*m, "view:" + ref);
    unpinned = objects;
  }
  std::error_code ec;
  fs::remove(opts_.dir + "/records/" + ref + ".json", ec);
  {
    std::lock_guard lk(mu_);
    if (auto it = jobs_.find(ref); it != jobs_.end() && it->second == j) jobs_.erase(it);
  }
  return unpinned;
}

std::size_t dataset_manager::expire_now() {
  auto now = cache::clock::now();
  std::vector<std::string> due, in_use;
  {
    std::lock_guard lk(mu_);
    for (auto& [ref, j] : jobs_) {
      std::lock_guard jl(j->mu);
      if (!j->expires) continue;
      // A prefetch in progress (a huge dataset may take longer than the TTL) is in use: its pins
      // are renewed before they lapse, and its TTL starts again when it ends.
      if (j->running && *j->expires - now < opts_.pin_ttl / 2) in_use.push_back(ref);
      if (!j->running && *j->expires <= now) due.push_back(ref);
    }
  }
  for (const auto& ref : in_use) {
    if (auto r = renew(ref, std::nullopt); !r) {
      log::warn("cannot renew the pins of a running prefetch", log::kv("dataset", ref),
                log::kv("error", r.error().message));
    }
  }
  std::size_t n = 0;
  for (const auto& ref : due) {
    if (stop_.load()) break;
    auto r = drop(ref);
    if (!r) {
      log::warn("cannot remove an expired dataset view", log::kv("dataset", ref),
                log::kv("error", r.error().message));
      continue;
    }
    ++n;
    expired_.fetch_add(1);
    log::warn("dataset view expired (not renewed); removed it and unpinned its objects",
              log::kv("dataset", ref), log::kv("unpinned", *r));
  }
  return n;
}

void dataset_manager::expiry_loop() {
  while (!stop_.load()) {
    {
      std::unique_lock lk(expiry_mu_);
      expiry_cv_.wait_for(lk, opts_.expiry_interval, [&] { return stop_.load(); });
    }
    if (stop_.load()) return;
    try {
      (void)expire_now();
    } catch (const std::exception& e) {
      log::error("dataset expiry pass failed", log::kv("error", e.what()));
    }
  }
}

}  // namespace shoal::peerd
