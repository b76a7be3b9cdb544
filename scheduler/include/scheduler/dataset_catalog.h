#pragma once
// The scheduler's dataset catalog (issue #7): "name@version" → the dataset's distinct objects
// (digest, size), from the canonical manifest registry-proxy resolved. A resolved version never
// changes (its manifest is content addressed), so answers are kept in memory for good (least
// recently used dropped beyond `max_datasets`); "not resolved yet" and errors are not kept.
//
// Used by placement (bytes each node still lacks) and prewarm (the objects of a dataset order).
// Threading: lookup() blocks on registry-proxy (worker threads only) and is thread-safe.

#include <chrono>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/http_client.h"
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
  [[nodiscard]] result<std::vector<object_ref>> lookup(const std::string& name_at_version) override;

 private:
  http::client& client_;
  dataset_catalog_options opts_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::vector<object_ref>, std::list<std::string>::iterator>>
      cache_;
  std::list<std::string> lru_;  // front: most recent
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
