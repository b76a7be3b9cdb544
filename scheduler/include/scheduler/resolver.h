#pragma once
// Image references → the objects a node needs (config and layers, with sizes) for its platform,
// through registry-proxy, remembered in memory: manifests by digest (immutable; least recently
// used evicted beyond `max_manifests`), tags for `tag_ttl` (a stale tag is used when
// registry-proxy cannot answer). "nginx" is normalized to docker.io/library/nginx:latest; an
// index (multi-arch) is narrowed to the platform; every manifest fetched by digest is checked
// against its digest.
//
// Datasets go through a `dataset_catalog` ("name@version" to objects):
// registry_proxy_datasets reads each dataset's manifest from registry-proxy (dataset_catalog.h).
//
// Lifecycle: built by the app; owns a small thread pool for resolve_many(). Threading: every
// public method is thread-safe; resolve() blocks (worker threads only, never an io thread).

#include <chrono>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/digest.h"
#include "common/error.h"
#include "common/http_client.h"
#include "common/thread_name.h"
#include "scheduler/cost.h"

namespace shoal::scheduler {

// Where manifests come from: registry-proxy in production, a map in tests.
class manifest_source {
 public:
  struct manifest {
    std::string media_type;  // Content-Type
    std::string body;
  };
  virtual ~manifest_source() = default;
  // GET /v2/<repository>/manifests/<reference>?ns=<registry>. Blocking; thread-safe.
  [[nodiscard]] virtual result<manifest> get(const std::string& registry,
                                             const std::string& repository,
                                             const std::string& reference) = 0;
};

struct registry_proxy_options {
  std::string base_url;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{10000};
};

class registry_proxy_source final : public manifest_source {
 public:
  registry_proxy_source(http::client& c, registry_proxy_options o);
  [[nodiscard]] result<manifest> get(const std::string& registry, const std::string& repository,
                                     const std::string& reference) override;

 private:
  http::client& client_;
  registry_proxy_options opts_;
};

struct resolved_image {
  std::string ref;  // normalized: docker.io/library/nginx:latest
  std::string registry, repository;
  std::string platform;
  digest manifest;                  // the platform's image manifest
  std::optional<digest> index;      // the index it was chosen from, if any
  std::vector<object_ref> objects;  // config first, then layers in order
  [[nodiscard]] std::uint64_t bytes() const;
};

struct resolver_options {
  std::chrono::milliseconds tag_ttl{60'000};
  std::size_t max_manifests = 4096;
  int threads = 4;
};

struct resolver_stats {
  std::uint64_t hits = 0, fetches = 0, errors = 0, stale = 0;
};

class resolver {
 public:
  using clock = std::chrono::steady_clock;
  resolver(manifest_source& src, resolver_options o,
           std::function<clock::time_point()> now = clock::now);
  ~resolver();
  resolver(const resolver&) = delete;
  resolver& operator=(const resolver&) = delete;

  // Blocking resolution of one reference for one platform ("linux/amd64", "linux/arm64/v8").
  [[nodiscard]] result<resolved_image> resolve(const std::string& ref, const std::string& platform);
  // Resolves several in parallel and waits at most `wait`; those still running answer
  // errc::timeout (they go on in the background and fill the cache for the next call).
  [[nodiscard]] std::vector<result<resolved_image>> resolve_many(
      const std::vector<std::pair<std::string, std::string>>& ref_platforms,
      std::chrono::milliseconds wait);
  [[nodiscard]] resolver_stats stats() const;

 private:
  struct parsed {
    bool is_index = false;
    struct entry {
      digest d;
      std::string os, arch, variant;
      [[nodiscard]] std::string platform() const;  // os/arch[/variant]
    };
    std::vector<entry> entries;       // index
    std::vector<object_ref> objects;  // image manifest
    // The first entry of an index for `platform` (platform_matches), or null.
    [[nodiscard]] const entry* entry_for(const std::string& platform) const;
  };
  // The key of a tag in tags_.
  [[nodiscard]] static std::string tag_key(const std::string& registry,
                                           const std::string& repository, const std::string& tag);
  struct tag_entry {
    digest d;
    clock::time_point fetched;
  };
  [[nodiscard]] result<std::shared_ptr<const parsed>> by_digest(const std::string& registry,
                                                                const std::string& repository,
                                                                const digest& d);
  [[nodiscard]] result<digest> by_tag(const std::string& registry, const std::string& repository,
                                      const std::string& tag);
  [[nodiscard]] result<std::shared_ptr<const parsed>> fetch_and_parse(
      const std::string& registry, const std::string& repository, const std::string& reference,
      const std::optional<digest>& expect, digest& actual);
  void cache_parsed(const digest& d, std::shared_ptr<const parsed> p);
  // The resolution from the caches alone (a fresh tag, manifests held), or nullopt when any part
  // is missing or an error would need wording: then resolve() decides. Never fetches or blocks.
  [[nodiscard]] std::optional<resolved_image> cached(const std::string& ref,
                                                     const std::string& platform);

  manifest_source& src_;
  resolver_options opts_;
  std::function<clock::time_point()> now_;
  mutable std::mutex mu_;
  // Keyed by manifest digests that pods and index manifests name: a keyed hash.
  std::unordered_map<digest, std::pair<std::shared_ptr<const parsed>, std::list<digest>::iterator>,
                     keyed_hash>
      manifests_;
  std::list<digest> lru_;  // front: most recent
  std::map<std::string, tag_entry> tags_;
  std::map<std::string, std::shared_future<result<resolved_image>>> inflight_;
  resolver_stats stats_;
  named_thread_pool pool_;
};

// Parses a manifest or index body (OCI or Docker v2). Errors name what is wrong.
struct manifest_content {
  bool is_index = false;
  std::vector<std::pair<digest, std::string>> platforms;  // index: digest, "os/arch[/variant]"
  std::vector<object_ref> objects;                        // manifest: config, then layers
};
[[nodiscard]] result<manifest_content> parse_manifest(std::string_view body);
// Whether a manifest's platform satisfies a wanted one: os and arch equal; the variant too
// when both name one.
[[nodiscard]] bool platform_matches(std::string_view want, std::string_view have);

// Datasets by "name@version"; dataset_catalog.h asks registry-proxy, no_datasets knows none.
class dataset_catalog {
 public:
  virtual ~dataset_catalog() = default;
  [[nodiscard]] virtual result<std::vector<object_ref>> lookup(
      const std::string& name_at_version) = 0;
  // As lookup(), but errc::timeout once `wait` has passed without the answer (placement's and
  // the extender's time limits). A catalog that fetches goes on fetching, so a later lookup
  // finds the answer. By default lookup(), which does not wait on anything.
  [[nodiscard]] virtual result<std::vector<object_ref>> lookup_within(
      const std::string& name_at_version, std::chrono::milliseconds wait) {
    (void)wait;
    return lookup(name_at_version);
  }
};

class no_datasets final : public dataset_catalog {
 public:
  [[nodiscard]] result<std::vector<object_ref>> lookup(const std::string& name_at_version) override;
};

// "name@version": name [a-z0-9._-/]{1,200}, version [A-Za-z0-9._-]{1,128}.
[[nodiscard]] bool valid_dataset_ref(std::string_view s);

}  // namespace shoal::scheduler
