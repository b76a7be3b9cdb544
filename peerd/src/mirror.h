#pragma once
// containerd's mirror endpoint on the node (the same OCI pull subset as registry-proxy), HTTP
// only: manifests are forwarded to registry-proxy with ns= and the client's Authorization; a
// cached blob is served from the local cache with sendfile and Range (to a client registry-proxy
// allows, blob_access.h; so is a fetch in progress another client started); a missing blob is
// joined through the fetcher (fetcher.h, which gets it from the swarm or in chunks) and streamed to
// the client in order as its pieces arrive. Also the node's own API: status and pull (warm the
// cache with an image, fetcher::ensure), at origin::paths::node_status and node_pull. Blocking work
// (disk, registry-proxy) runs on the worker pool, never on the HTTP loop. Everything said to
// registry-proxy goes through the origin protocol (common/origin_protocol.h).

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "common/daemon.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/oci.h"
#include "common/origin_protocol.h"
#include "peerd/blob_access.h"
#include "peerd/config.h"
#include "peerd/fetcher.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

class proxy_link;

class mirror {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    swarm_manager& swarm;  // bytes served and /status
    fetcher& fetch;
    blob_access& access;  // who may read what this node holds
    http::client& http;
    boost::asio::thread_pool& pool;
    metrics::registry& metrics;
    // The dataset API (datasets.h): handles origin::paths::datasets, false for other paths.
    std::function<bool(const http::request&, const http::responder&)> datasets;
    // The checkpoint API (app_checkpoints.cc): checkpoint::paths::node, false for other paths.
    std::function<bool(const http::request&, const http::responder&)> checkpoints;
    proxy_link* proxy = nullptr;  // registry-proxy with failover (proxy_link.h)
  };
  explicit mirror(deps d);
  void operator()(http::request&& req, http::responder resp);

 private:
  // Relays a manifest request (a parsed, clean path) to registry-proxy; blocking.
  void forward(const http::request& req, const http::responder& resp,
               const std::optional<origin::object_ref>& manifest_of);
  // Starts the fetch of every blob an image manifest names that is not here yet
  // (mirror.prefetch_layers); returns how many started.
  std::size_t prefetch_layers(const origin::object_ref& where, std::string_view manifest,
                              const std::string& auth);
  // `range`: the request's Range header (empty when none).
  void serve_blob(const std::string& ns, const std::string& repo, const digest& d,
                  const std::string& auth, bool head, const std::string& range,
                  const http::responder& resp);
  // Streams the fetch in progress to the client.
  void respond_from(const fetch_handle& h, const http::responder& resp);
  void handle_pull(const http::request& req, const http::responder& resp);
  [[nodiscard]] result<nlohmann::json> pull_manifest(const oci::image_ref& ref,
                                                     const std::string& reference,
                                                     const std::string& auth);
  void handle_status(const http::responder& resp);
  std::string proxy_url(const std::string& path_and_query) const;

  deps d_;
  // POST pull requests running: each holds a worker for its whole length.
  std::atomic<int> pulls_running_{0};
  metrics::counter* cache_hits_;
  metrics::counter* forward_errors_;
  metrics::counter* prefetches_;
};

}  // namespace shoal::peerd
