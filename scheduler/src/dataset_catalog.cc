#include "scheduler/dataset_catalog.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/dataset.h"
#include "common/json_text.h"
#include "common/origin_protocol.h"

namespace shoal::scheduler {

registry_proxy_datasets::~registry_proxy_datasets() { pool_.join(); }

result<std::vector<object_ref>> registry_proxy_datasets::lookup(const std::string& ref) {
  return lookup_for(ref, std::nullopt);
}

result<std::vector<object_ref>> registry_proxy_datasets::lookup_within(
    const std::string& ref, std::chrono::milliseconds wait) {
  return lookup_for(ref, wait);
}

registry_proxy_datasets::answer registry_proxy_datasets::lookup_for(
    const std::string& ref, std::optional<std::chrono::milliseconds> wait) {
  if (auto p = dataset::parse_ref(ref); !p) return fail(p.error());
  std::shared_future<answer> flight;
  {
    std::lock_guard lk(mu_);
    if (auto it = cache_.find(ref); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    if (auto f = flights_.find(ref); f != flights_.end()) {
      flight = f->second;
    } else {
      // One fetch per dataset however many ask; it runs to its end even when nobody waits.
      auto done = std::make_shared<std::promise<answer>>();
      flight = done->get_future().share();
      flights_.emplace(ref, flight);
      boost::asio::post(pool_, [this, ref, done] {
        auto r = fetch(ref);
        {
          std::lock_guard lk(mu_);
          flights_.erase(ref);
          if (r && !cache_.count(ref)) {
            lru_.push_front(ref);
            cache_[ref] = {*r, lru_.begin()};
            while (cache_.size() > opts_.max_datasets) {
              cache_.erase(lru_.back());
              lru_.pop_back();
            }
          }
        }
        done->set_value(std::move(r));
      });
    }
  }
  if (wait && flight.wait_for(*wait) != std::future_status::ready) {
    return fail(errc::timeout, "dataset " + ref + ": registry-proxy has not answered within " +
                                   std::to_string(wait->count()) +
                                   " ms (the lookup goes on; a later request finds it)");
  }
  return flight.get();
}

registry_proxy_datasets::answer registry_proxy_datasets::fetch(const std::string& ref) {
  std::string base = opts_.registry_proxy;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto get = [&](const std::string& path, std::size_t max) {
    http::client_request r;
    r.url = base + path;
    r.timeouts.connect = opts_.connect_timeout;
    r.timeouts.stall = opts_.request_timeout;
    r.timeouts.total = opts_.request_timeout * 4;
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
  auto md = digest::parse(json_string(sj, "manifest"));
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
  return out;
}

}  // namespace shoal::scheduler
