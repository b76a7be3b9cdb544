#pragma once
// peerd's door to registry-proxy (upstream.registry_proxy and upstream.registry_proxies): the
// replicas are tried in turn the way the scheduler's are (common/endpoints.h), so a replica that
// died, hangs or drains costs a pull one connect timeout, not its failure. A host name that
// resolves to several addresses (the replicas' headless Service) is one endpoint per address.
//
// Every call peerd makes to registry-proxy is a read (manifests, metainfo, HEAD checks, dataset
// records and manifests), so each moves on when a replica is refused, hangs or answers 503
// (endpoints::call_kind::read). A 502 or 504 is registry-proxy's word on its upstream and is
// passed on: another replica would only ask the same upstream again.
//
// A blob's HTTP fallback ranges (the swarm stalled) are asked of the first replica in the set's
// order each, so a replica that dies while a blob streams from it costs one failed range, and the
// rest comes from the next (swarm.h, fallback_info::endpoints); a dataset group's HTTP objects
// likewise (group_spec::fallback_endpoints). A chunked blob's calls (chunk list, chunk metainfo,
// ranges) go through call() and its chunks' fallback ranges through the set; when the replica
// cutting the blob dies, the next one answers its chunk list with 404 (it is not cutting it), and
// the rest of the blob comes from it as ranges (chunked.h, take_tail).
//
// Null link (unit tests that build a module alone): the one URL in the config, no failover.
// Lifecycle: made once in app::init, lives as long as the app. Threading: safe from any thread.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/endpoints.h"
#include "common/http_client.h"
#include "peerd/config.h"

namespace shoal::peerd {

class proxy_link {
 public:
  [[nodiscard]] static result<std::unique_ptr<proxy_link>> create(const upstream_config& c,
                                                                  http::client& http);

  // The base URL of the replica to use first (the one that last answered), without a trailing
  // slash.
  [[nodiscard]] std::string base();
  // Runs `req` (its url a path and query) on the replicas in order; origin::call's checks.
  [[nodiscard]] result<http::full_response> call(http::client_request req, std::size_t max_body);
  [[nodiscard]] const std::vector<std::string>& urls() const { return urls_; }
  // The replicas, for requests made outside call() (the swarm's HTTP fallback ranges).
  [[nodiscard]] std::shared_ptr<endpoints::endpoint_set> endpoints() const { return set_; }

 private:
  proxy_link(http::client& http, std::shared_ptr<endpoints::endpoint_set> s,
             std::vector<std::string> urls);

  http::client& http_;
  std::shared_ptr<endpoints::endpoint_set> set_;
  std::vector<std::string> urls_;
};

// `path` on registry-proxy: through `link`, or the configured URL when it is null.
[[nodiscard]] std::string proxy_url(proxy_link* link, const upstream_config& c,
                                    std::string_view path);
// A read of registry-proxy (`req.url` a path): through `link`, or the configured URL once.
[[nodiscard]] result<http::full_response> proxy_call(proxy_link* link, const upstream_config& c,
                                                     http::client& http, http::client_request req,
                                                     std::size_t max_body);

}  // namespace shoal::peerd
