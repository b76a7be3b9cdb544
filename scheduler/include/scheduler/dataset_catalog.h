#pragma once
// The scheduler's dataset catalog (issue #7): "name@version" → the dataset's distinct objects
// (digest, size), from the canonical manifest registry-proxy resolved. A resolved version never
// changes (its manifest is content addressed), so answers are kept in memory for good (least
// recently used dropped beyond `max_datasets`); "not resolved yet" and errors are not kept.
//
// Used by placement (bytes each node still lacks) and prewarm (the objects of a dataset order).
// Threading: thread-safe. A dataset not known yet is fetched once however many ask at once, on
// the catalog's own two threads ("dataset-lookup"); lookup() waits for it (worker threads only),
// lookup_within() at most its `wait`. Each request has a total time limit (4 × request_timeout:
// a large manifest sent slowly cannot hold a thread for ever).

#include <chrono>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "common/thread_name.h"
#include "scheduler/resolver.h"

namespace shoal::scheduler {

struct dataset_catalog_options {
  std::string registry_proxy;  // base URL
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{30000};
  std::size_t max_manifest_bytes = 1u << 30;
  std::size_t max_datasets = 256;
};

class registry_proxy_datasets final : public dataset_catalog {
 public:
  registry_proxy_datasets(http::client& c, dataset_catalog_options o)
      : client_(c), opts_(std::move(o)) {}
  // Waits for the fetches it started (each bounded by its requests' time limits).
  ~registry_proxy_datasets() override;
  [[nodiscard]] result<std::vector<object_ref>> lookup(const std::string& name_at_version) override;
  [[nodiscard]] result<std::vector<object_ref>> lookup_within(
      const std::string& name_at_version, std::chrono::milliseconds wait) override;

 private:
  using answer = result<std::vector<object_ref>>;
  [[nodiscard]] answer lookup_for(const std::string& ref,
                                  std::optional<std::chrono::milliseconds> wait);
  // The two GETs (state, manifest); blocking, on the catalog's threads.
  [[nodiscard]] answer fetch(const std::string& ref);

  http::client& client_;
  dataset_catalog_options opts_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::vector<object_ref>, std::list<std::string>::iterator>>
      cache_;
  std::list<std::string> lru_;                                 // front: most recent
  std::map<std::string, std::shared_future<answer>> flights_;  // being fetched
  named_thread_pool pool_{2, "dataset-lookup"};
};

// A catalog held in memory and filled by its owner (tests, the scheduler benchmark). Fill it
// before lookups start: lookup() only reads.
class static_datasets final : public dataset_catalog {
 public:
  std::map<std::string, std::vector<object_ref>> sets;  // "name@version" → objects
  [[nodiscard]] result<std::vector<object_ref>> lookup(const std::string& name) override {
    auto it = sets.find(name);
    if (it == sets.end()) return fail(errc::not_found, "unknown dataset " + name);
    return it->second;
  }
};

}  // namespace shoal::scheduler
