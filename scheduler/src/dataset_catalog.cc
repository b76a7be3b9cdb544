#include "scheduler/dataset_catalog.h"

#include <nlohmann/json.hpp>

#include "common/dataset.h"
#include "common/origin_protocol.h"

namespace shoal::scheduler {

result<std::vector<object_ref>> registry_proxy_datasets::lookup(const std::string& ref) {
  if (auto p = dataset::parse_ref(ref); !p) return fail(p.error());
  {
    std::lock_guard lk(mu_);
    if (auto it = cache_.find(ref); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  std::string base = opts_.registry_proxy;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto get = [&](const std::string& path, std::size_t max) {
    http::client_request r;
    r.url = base + path;
    r.timeouts.connect = opts_.connect_timeout;
    r.timeouts.stall = opts_.request_timeout;
    r.max_retries = 1;
    return origin::call(client_, std::move(r), max);
  };
  auto st = get(origin::dataset_target(ref), 1u << 20);
  if (!st) return fail(st.error().wrap("dataset " + ref + " from registry-proxy"));
  auto sj = nlohmann::json::parse(st->body, nullptr, false);
  std::string why = origin::error_message_of(st->body);
  if (st->status == 404)
    return fail(errc::not_found, "unknown dataset " + ref + (why.empty() ? "" : ": " + why));
  if (st->status == 202)
    return fail(errc::unavailable, "dataset " + ref + " is still being resolved by registry-proxy");
  if (st->status != 200 || !sj.is_object()) {
    return fail(errc::upstream_error, "dataset " + ref + ": registry-proxy answered HTTP " +
                                          std::to_string(st->status) +
                                          (why.empty() ? "" : ": " + why));
  }
  auto md = digest::parse(sj.value("manifest", ""));
  if (!md)
    return fail(errc::protocol_error,
                "dataset " + ref + ": registry-proxy gave no manifest digest");
  auto mf = get(origin::dataset_manifest_target(ref), opts_.max_manifest_bytes);
  if (!mf) return fail(mf.error().wrap("manifest of " + ref));
  if (mf->status != 200) {
    return fail(errc::upstream_error,
                "manifest of " + ref + ": HTTP " + std::to_string(mf->status));
  }
  auto m = dataset::parse_manifest(mf->body, *md);
  if (!m) return fail(m.error().wrap("manifest of " + ref));
  std::vector<object_ref> out;
  for (const auto& [d, size] : dataset::manifest_objects(*m)) out.push_back(object_ref{d, size});
  std::lock_guard lk(mu_);
  if (!cache_.count(ref)) {
    lru_.push_front(ref);
    cache_[ref] = {out, lru_.begin()};
    while (cache_.size() > opts_.max_datasets) {
      cache_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  return out;
}

}  // namespace shoal::scheduler
