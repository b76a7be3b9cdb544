#pragma once
// The HTTP face of registry-proxy: the OCI pull API (/v2/...), the origin protocol's metainfo
// and chunk-list endpoints (common/origin_protocol.h), and the operational endpoints. Routing,
// validation and error answers live here; the work is done by the blob and manifest services.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "registry-proxy/blobs.h"
#include "common/daemon.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "registry-proxy/manifests.h"
#include "registry-proxy/ring.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

struct handler_deps {
  upstream_set& upstreams;
  manifest_service& manifests;
  blob_service& blobs;
  metrics::registry& metrics;
  std::string credential_salt;
  std::vector<std::string> trackers;  // announce URLs for metainfo answers
  std::string seed_endpoint;          // "ip:port" of our BitTorrent listener (Shoal-Seed)
  std::chrono::milliseconds metainfo_wait{20000};
  std::function<void(const digest&)> on_metainfo_served;  // the seeder loads the torrent
  // The grant for a metainfo answer to `caller` for the swarm named (hex info-hash): empty when
  // none is due (common/grant.h). Unset: no grants.
  std::function<std::string(const tls::peer_identity& caller, const std::string& info_hash)>
      grant_for;
  // The swarm root (canonical PEM) to answer a caller's metainfo in: the root its certificate
  // chained to when the seeder holds a pair for it (a CA rotation); empty: the metainfo as
  // stored (the primary root). Empty function: always as stored.
  std::function<std::string(const tls::peer_identity&)> metainfo_root_for;
  std::function<daemon::health()> health;
  // The dataset API (datasets.h): handles origin::paths::datasets and dataset_metainfo; returns
  // false for paths it does not own. Empty when datasets are disabled.
  std::function<bool(http::request&, const http::responder&)> datasets;
  // This replica's dataset list (a JSON array), merged with the other ring members' for GET
  // origin::paths::datasets. Empty when datasets are disabled.
  std::function<std::string()> dataset_list;
  // A ring member's copy of a dataset record (dataset_service::accept_copy; dataset_copies.h):
  // (ref, record JSON, manifest text or empty) → what was done, or why it was refused.
  std::function<result<std::string>(const std::string&, const std::string&, const std::string&)>
      dataset_copy;
  // Whether the canonical manifest with this digest is held here (the copy needs no fetch).
  std::function<bool(const digest&)> dataset_has_manifest;
  // The replica ring (ring.h); null without one.
  ring* replicas = nullptr;
};

class proxy_handler {
 public:
  explicit proxy_handler(handler_deps d);
  void operator()(http::request&& req, http::responder resp);

 private:
  void handle_v2(http::request&& req, const http::responder& resp);
  void handle_metainfo(http::request&& req, const http::responder& resp);
  void handle_chunks(http::request&& req, const http::responder& resp);
  // A dataset request on the ring: a ref another member owns is redirected there (307, which
  // keeps a declaration's method and body); the list merges every live member's. False when
  // this replica answers it itself.
  bool route_dataset(const http::request& req, const http::responder& resp);
  // PUT <datasets>/<ref>/copy from a ring member (dataset_copies.h): keeps the record, fetching
  // its manifest from the sender first when it is ready and not held here.
  void accept_dataset_copy(const http::request& req, const http::responder& resp);
  // The request's ring::from_header when a ring member may send it (TLS: a registry-proxy
  // certificate; plain mode: anyone, which only makes this replica answer itself).
  [[nodiscard]] std::string ring_from(const http::request& req) const;
  // The upstream for a Shoal API request's repo= and ns= (which name the repository an object is
  // pulled from); on an unknown one answers the error itself and returns nothing.
  std::optional<selection> select_repo(const std::string& repo,
                                       const std::optional<std::string>& ns,
                                       const http::responder& resp);
  // The request's credential, with the client's address (the limits of unseen credentials and
  // of the fetch queue are per address).
  [[nodiscard]] credential credential_of(const http::request& req) const;
  handler_deps d_;
};

// Who may call a route with TLS on (docs/registry-proxy.md "Who may call what"), by the role in
// the caller's verified certificate:
//   /metrics, /healthz, /readyz                       any certificate of the cluster CA
//   /v2/... (manifests, blobs)                        node, scheduler, operator, registry-proxy
//   metainfo, chunk lists                             node, operator
//   GET datasets: list, status, manifest              node, scheduler, operator
//   GET dataset objects and dataset metainfo          node, operator
//   POST /shoal/v1/datasets (declare)                 operator
//   PUT /shoal/v1/datasets/<ref>/copy                 registry-proxy (another ring member)
// Anything else (a 404 anyway) needs a certificate. Empty when allowed, otherwise why not (the
// 403's message). A plain connection (tls.enabled false) is always allowed: nobody has a role.
[[nodiscard]] std::string authorize(const http::request& req);

// The metrics label for a request target: base, manifest, blob, metainfo, dataset, ops, v2_other,
// other.
[[nodiscard]] std::string route_of(std::string_view target);

}  // namespace shoal::proxy
