#pragma once
// containerd's mirror endpoint on the node (the same OCI pull subset as registry-proxy):
// manifests are forwarded to registry-proxy with ns= and the client's Authorization; a cached
// blob is served from the local cache with sendfile and Range; a missing blob is fetched through
// the swarm and streamed to the client in order as its pieces arrive. Also the node's own API:
// status and pull (warm the cache with an image), at origin::paths::node_status and node_pull.
// Everything said to registry-proxy goes through the origin protocol (common/origin_protocol.h).

#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "common/daemon.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/oci.h"
#include "common/origin_protocol.h"
#include "chunked.h"
#include "config.h"
#include "swarm.h"

namespace shoal::peerd {

class mirror {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    swarm_manager& swarm;
    http::client& http;
    boost::asio::thread_pool& pool;
    metrics::registry& metrics;
    // The dataset API (datasets.h): handles origin::paths::datasets, false for other paths.
    std::function<bool(const http::request&, const http::responder&)> datasets;
    // Where a chunked blob records its metainfo once joined (required for chunked fetches).
    state_db* state = nullptr;
  };
  explicit mirror(deps d);
  void operator()(http::request&& req, http::responder resp);

  // Blocking: makes sure the blob is in the local cache (fetching it through the swarm); used by
  // the pull API. Returns once it is committed, or the error.
  [[nodiscard]] status ensure_blob(const std::string& ns, const std::string& repo, const digest& d,
                                   const std::string& authorization);

 private:
  struct job;
  void forward(const http::request& req, const http::responder& resp);
  void serve_blob(const std::string& ns, const std::string& repo, const digest& d,
                  const std::string& auth, bool head, const http::responder& resp);
  void respond_from_download(const std::shared_ptr<download>& dl, bool head,
                             const http::responder& resp);
  void respond_from_chunked(const std::shared_ptr<chunked_blob>& cb, const http::responder& resp);
  // A fetch in progress: one download of the whole object, or the object's chunks (chunked.h).
  struct fetch_handle {
    std::shared_ptr<download> dl;
    std::shared_ptr<chunked_blob> chunked;
  };
  // Gets the metainfo (long-polling while registry-proxy fetches) and starts the download, or
  // the chunked fetch when registry-proxy cuts the object into chunks.
  [[nodiscard]] result<fetch_handle> start_download(const std::string& ns, const std::string& repo,
                                                    const digest& d, const std::string& auth,
                                                    unsigned& status_out);
  // The two ways start_download goes on: a 200 (metainfo) joins the swarm, a 202 announcing
  // chunks starts the chunked fetch.
  [[nodiscard]] result<fetch_handle> start_swarm(const origin::object_ref& where, const digest& d,
                                                 const http::full_response& answer,
                                                 const std::string& auth, unsigned& status_out);
  [[nodiscard]] result<fetch_handle> start_chunked(const origin::object_ref& where, const digest& d,
                                                   const origin::progress& p,
                                                   const std::string& auth);
  [[nodiscard]] std::shared_ptr<chunked_blob> find_chunked(const digest& d);
  void handle_pull(const http::request& req, const http::responder& resp);
  [[nodiscard]] result<nlohmann::json> pull_manifest(const oci::image_ref& ref,
                                                     const std::string& reference,
                                                     const std::string& auth);
  void handle_status(const http::responder& resp);
  std::string proxy_url(const std::string& path_and_query) const;

  deps d_;
  std::mutex mu_;
  std::map<digest, std::shared_ptr<job>> jobs_;  // metainfo fetch in progress, per object
  std::map<digest, std::shared_ptr<chunked_blob>> chunked_;  // chunked fetches (guarded by mu_)
  metrics::counter* cache_hits_;
  metrics::counter* swarm_fetches_;
  metrics::counter* chunked_fetches_;
  metrics::counter* forward_errors_;
};

}  // namespace shoal::peerd
