#pragma once
// Manifests: by digest, fetched once, verified (the bytes hash to the digest) and kept for good;
// by tag, resolved upstream with the known manifest types the client accepts and reused for a TTL
// (rows older than stale_if_error are swept from the state index), and served
// stale (with a Warning header) when the upstream is unreachable. The bytes are never
// re-serialized; the Content-Type is the one upstream gave for these bytes.

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <string>

#include "registry-proxy/access.h"
#include "cache/store.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/oci.h"
#include "registry-proxy/config.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

struct manifest_metrics {
  metrics::counter* upstream_requests = nullptr;
  metrics::counter* stale_served = nullptr;
  metrics::counter* tag_hits = nullptr;
  metrics::counter* digest_mismatch = nullptr;
};

class manifest_service {
 public:
  manifest_service(boost::asio::thread_pool& pool, cache::store& store, state_db& st,
                   upstream_client& uc, access_checker& access, manifest_config cfg,
                   manifest_metrics m)
      : pool_(pool),
        store_(store),
        st_(st),
        uc_(uc),
        access_(access),
        cfg_(std::move(cfg)),
        m_(m) {}

  void serve(const selection& sel, const oci::manifest_ref& ref, const credential& cred,
             std::string accept, bool head, http::responder resp);

  // Blocking: the manifest answer (worker thread). Exposed for tests.
  [[nodiscard]] http::response answer(const selection& sel, const oci::manifest_ref& ref,
                                      const credential& cred, const std::string& accept, bool head);

  // The known manifest media types the header names, in a fixed order and without parameters
  // ("" when it names none: the client accepts whatever upstream has). The tag cache key part and
  // the Accept sent upstream: types registry-proxy does not know are ignored, so varying them
  // cannot multiply cache keys or upstream requests.
  [[nodiscard]] static std::string normalize_accept(std::string_view accept);

 private:
  struct fetched {
    unsigned status = 0;
    std::string body, media_type, retry_after, message;
    digest dig;
    bool is_public = false;
    bool transport_error = false;
  };
  [[nodiscard]] fetched fetch_upstream(const selection& sel, const std::string& ref,
                                       const credential& cred, const std::string& accept);
  [[nodiscard]] status store_manifest(const digest& d, const std::string& body,
                                      const std::string& mt, bool is_public,
                                      const std::string& repo_key);
  [[nodiscard]] http::response from_store(const digest& d, const std::string& media_type_hint,
                                          bool head, bool stale);
  // At most every 10 minutes: deletes tag rows older than max(tag_ttl, stale_if_error).
  void sweep_tags(std::int64_t now_ms);

  boost::asio::thread_pool& pool_;
  cache::store& store_;
  state_db& st_;
  upstream_client& uc_;
  access_checker& access_;
  manifest_config cfg_;
  manifest_metrics m_;
  std::atomic<std::int64_t> last_sweep_ms_{0};
};

}  // namespace shoal::proxy
