#include "scheduler/origins.h"

#include <algorithm>

#include "common/http_client.h"
#include "common/log.h"
#include "scheduler/shared_state.h"

namespace shoal::scheduler {

origin_members::origin_members(std::chrono::milliseconds ttl, shared_state* shared,
                               std::function<clock::time_point()> now)
    : ttl_(ttl), shared_(shared), now_(std::move(now)) {}

bool origin_members::valid_url(const std::string& url) {
  if (url.empty() || url.size() > 256) return false;
  if (!url.starts_with("http://") && !url.starts_with("https://")) return false;
  auto rest = std::string_view(url).substr(url.find("://") + 3);
  if (rest.empty() || rest.find_first_of("/?#@ \t\r\n\\") != std::string_view::npos) return false;
  for (unsigned char ch : rest) {
    if (ch < 0x21 || ch > 0x7e) return false;
  }
  return http::parse_endpoint(url).has_value();
}

result<origin_members::listing> origin_members::local(const std::string& url) {
  const auto now = now_();
  std::lock_guard lk(mu_);
  std::erase_if(seen_, [&](const auto& e) { return now - e.second > ttl_; });
  if (!url.empty()) {
    if (!seen_.contains(url) && seen_.size() >= max_members) {
      return fail(errc::too_large, "the ring already lists " + std::to_string(max_members) +
                                       " registry-proxy replicas");
    }
    seen_[url] = now;
  }
  listing out;
  for (const auto& [u, t] : seen_) out.members.push_back(u);
  return out;
}

result<origin_members::listing> origin_members::announce(const std::string& url) {
  auto mine = local(url);  // kept either way: it answers while Redis does not
  if (!shared_) return mine;
  auto r = shared_->origins(url, ttl_, max_members);
  if (!r) {
    // Redis already known down was logged once, when the replica found it so.
    if (!r.error().is(errc::unavailable)) {
      log::warn("redis did not answer for the registry-proxy ring; answering this replica's view",
                log::kv("error", r.error().message));
    }
    if (!mine) return mine;
    mine->stale = true;
    return mine;
  }
  if (r->full) {
    return fail(errc::too_large, "the ring already lists " + std::to_string(max_members) +
                                     " registry-proxy replicas");
  }
  listing out;
  out.members = std::move(r->members);
  std::sort(out.members.begin(), out.members.end());
  return out;
}

origin_members::listing origin_members::list() {
  auto r = announce({});
  return r ? std::move(*r) : listing{};
}

}  // namespace shoal::scheduler
