#include "registry-proxy/handler.h"

#include "common/log.h"
#include "common/oci.h"
#include "common/origin_protocol.h"

namespace shoal::proxy {

proxy_handler::proxy_handler(handler_deps d) : d_(std::move(d)) {}

std::string route_of(std::string_view target) {
  auto q = target.find('?');
  std::string_view path = target.substr(0, q);
  if (path.starts_with(origin::paths::metainfo)) return "metainfo";
  if (path.starts_with(origin::paths::chunks)) return "chunks";
  if (path.starts_with(origin::paths::dataset_family)) return "dataset";
  if (path.rfind("/v2", 0) == 0) {
    if (path.rfind("/blobs/") != std::string_view::npos) return "blob";
    if (path.rfind("/manifests/") != std::string_view::npos) return "manifest";
    if (path == "/v2" || path == "/v2/") return "base";
    return "v2_other";
  }
  if (path == "/metrics" || path == "/healthz" || path == "/readyz") return "ops";
  return "other";
}

namespace {

using tls::peer_role;

constexpr unsigned bit(peer_role r) { return 1u << static_cast<unsigned>(r); }
constexpr unsigned node = bit(peer_role::node);
constexpr unsigned scheduler = bit(peer_role::scheduler);
constexpr unsigned operator_ = bit(peer_role::operator_);
constexpr unsigned proxy = bit(peer_role::registry_proxy);  // another ring member
constexpr peer_role all_roles[] = {peer_role::node, peer_role::registry_proxy, peer_role::scheduler,
                                   peer_role::operator_, peer_role::kube_scheduler};

struct route_policy {
  std::string_view what;  // for the refusal: "the pull API", "declaring datasets", ...
  unsigned roles = 0;     // bits of the roles admitted; 0: any verified certificate
};

route_policy policy_for(const http::request& req) {
  using origin::paths::dataset_metainfo;
  using origin::paths::datasets;
  std::string_view path = req.path;
  if (path == "/metrics" || path == "/healthz" || path == "/readyz") return {"metrics and health"};
  if (path.starts_with("/v2")) return {"the pull API", node | scheduler | operator_ | proxy};
  if (path.starts_with(origin::paths::metainfo) || path.starts_with(origin::paths::chunks)) {
    return {"metainfo and chunk lists", node | operator_};
  }
  if (path.starts_with(dataset_metainfo)) return {"dataset metainfo", node | operator_};
  if (path == datasets || path == std::string(datasets) + "/") {
    if (req.method == http::verb::post) return {"declaring datasets", operator_};
    // Ring members merge each other's lists.
    return {"the dataset list", node | scheduler | operator_ | proxy};
  }
  if (path.starts_with(std::string(datasets) + "/")) {
    if (req.method == http::verb::put) return {"dataset record copies", proxy};
    if (path.find("/objects/") != std::string_view::npos) {
      return {"dataset objects", node | operator_};
    }
    // A ring member reads a record and its manifest when it keeps a copy (dataset_copies.h).
    return {"dataset records", node | scheduler | operator_ | proxy};
  }
  return {"this path"};
}

}  // namespace

std::string authorize(const http::request& req) {
  const auto& peer = req.peer;
  if (!peer.tls) return {};  // plain mode: no identities (tls.enabled: false)
  auto pol = policy_for(req);
  if (!peer.verified) {
    return std::string(pol.what) +
           ": needs a client certificate of the cluster CA; none was presented";
  }
  if (pol.roles == 0 || (pol.roles & bit(peer.role)) != 0) return {};
  std::string allowed;
  for (auto r : all_roles) {
    if ((pol.roles & bit(r)) == 0) continue;
    if (!allowed.empty()) allowed += ", ";
    allowed += tls::to_string(r);
  }
  return std::string(pol.what) + ": needs a certificate with role " + allowed +
         "; the client certificate is " + peer.str();
}

credential proxy_handler::credential_of(const http::request& req) const {
  credential c = credential_from(req.header("Authorization"), d_.credential_salt);
  c.peer = req.remote.address().to_string();
  return c;
}

void proxy_handler::operator()(http::request&& req, http::responder resp) {
  if (auto why = authorize(req); !why.empty()) {
    log::warn("request refused", log::kv("from", req.remote.address().to_string()),
              log::kv("path", req.path.substr(0, 256)), log::kv("certificate", req.peer.str()),
              log::kv("reason", why));
    return resp.send(oci_error(403, oci::error_code::denied, why));
  }
  if (daemon::serve_ops(req, resp, d_.metrics, d_.health)) return;
  // A peer of another release that speaks no protocol version this one serves: a clear 400.
  if (auto mismatch = origin::check_version(req)) return resp.send(std::move(*mismatch));
  if (req.path.rfind("/v2", 0) == 0) return handle_v2(std::move(req), resp);
  if (req.path.starts_with(origin::paths::metainfo)) return handle_metainfo(std::move(req), resp);
  if (req.path.starts_with(origin::paths::chunks)) return handle_chunks(std::move(req), resp);
  if (d_.datasets && req.path.starts_with(origin::paths::dataset_family)) {
    if (req.method == http::verb::put) return accept_dataset_copy(req, resp);
    if (d_.replicas && route_dataset(req, resp)) return;
    if (d_.datasets(req, resp)) return;
  }
  resp.send(oci_error(404, oci::error_code::unsupported, "no such endpoint"));
}

void proxy_handler::handle_v2(http::request&& req, const http::responder& resp) {
  const bool head = req.method == http::verb::head;
  if (req.method != http::verb::get && req.method != http::verb::head) {
    auto r = oci_error(405, oci::error_code::unsupported,
                       "registry-proxy serves the pull API only (GET, HEAD)");
    r.headers.set("Allow", "GET, HEAD");
    return resp.send(std::move(r));
  }
  origin::route_error err;
  auto route = origin::parse_v2_path(req.path, err);
  if (!route) {
    return resp.send(oci_error(err.status, err.code, err.message));
  }
  if (route->kind == origin::route_kind::base) {
    // Docker-style clients (skopeo, docker) learn whether to send credentials from this ping
    // alone: a 200 makes them pull anonymously for good, and a private repository then fails
    // with 401 even when the user gave credentials. So an anonymous ping is challenged (as
    // Docker Hub does); clients without credentials go on anonymously, the others come back
    // with them. Whether the credentials are any good is for the upstream to say, per request.
    if (req.header("Authorization").empty()) {
      return resp.send(oci_error(401, oci::error_code::unauthorized,
                                 "send credentials for private repositories; anonymous pulls of "
                                 "public ones work without"));
    }
    return resp.send(origin::v2_base_ok());
  }
  auto ns = origin::ns_param(req);
  if (!ns) return resp.send(oci_error(400, oci::error_code::name_invalid, ns.error().message));
  auto sel = d_.upstreams.select(*ns, route->name);
  if (!sel) {
    unsigned s = sel.error().is(errc::not_found) ? 404 : 400;
    return resp.send(
        oci_error(s, s == 404 ? oci::error_code::name_unknown : oci::error_code::name_invalid,
                  sel.error().message));
  }
  credential cred = credential_of(req);
  const http::responder& out = resp;
  // A ring member's request is served here, never forwarded again (ring.h). With TLS on only
  // a registry-proxy certificate may say so; in plain mode the header only makes this replica
  // fetch the object itself.
  if (route->kind == origin::route_kind::manifest) {
    std::string accept = req.header_list("Accept");
    d_.manifests.serve(*sel, route->manifest, cred, std::move(accept), head, out, ring_from(req));
  } else {
    d_.blobs.serve(*sel, route->blob, cred, head, out, ring_from(req));
  }
}

std::optional<selection> proxy_handler::select_repo(const std::string& repo,
                                                    const std::optional<std::string>& ns,
                                                    const http::responder& resp) {
  auto sel = d_.upstreams.select(ns, repo);
  if (!sel) {
    unsigned s = sel.error().is(errc::not_found) ? 404 : 400;
    resp.send(oci_error(s, oci::error_code::name_unknown, sel.error().message));
    return std::nullopt;
  }
  return std::move(*sel);
}

void proxy_handler::handle_metainfo(http::request&& req, const http::responder& resp) {
  auto q = origin::parse_metainfo_request(req);
  if (!q) return resp.send(oci_error(q.error().status, q.error().code, q.error().message));
  auto sel = select_repo(q->repo, q->ns, resp);
  if (!sel) return;
  credential cred = credential_of(req);
  // Clients may ask for a shorter wait, never a longer one.
  auto wait = std::min(d_.metainfo_wait, q->wait.value_or(d_.metainfo_wait));
  auto dig = q->object;
  // During a CA rotation the answer is rooted where the caller's certificate is from, so a node
  // with a leaf of either CA joins a swarm it can enter (the seeder seeds both).
  std::string root = d_.metainfo_root_for ? d_.metainfo_root_for(req.peer) : std::string();
  auto answer = [this, resp, dig, root = std::move(root), caller = req.peer](metainfo_answer a) {
    if (a.status == 200 && a.meta) {
      if (!root.empty() && a.meta->ssl_cert != root) a.meta->ssl_cert = root;
      origin::metainfo_answer m;
      m.torrent = a.meta->torrent_file(d_.trackers);
      m.info_hash = a.meta->info_hash_hex();
      m.piece_size = a.meta->piece_size;
      m.object_size = a.meta->size;
      m.seed = d_.seed_endpoint;
      m.is_public = a.is_public;
      if (d_.grant_for) m.grant = d_.grant_for(caller, m.info_hash);
      if (d_.on_metainfo_served) d_.on_metainfo_served(dig);
      return resp.send(origin::encode(m));
    }
    if (a.status == 202) {
      return resp.send(
          origin::encode(origin::progress{a.bytes_done, a.size, a.chunk_size, a.retry_after}));
    }
    auto r = oci_error(a.status ? a.status : 502, origin::code_for_status(a.status), a.message);
    if (!a.retry_after.empty()) r.headers.set("Retry-After", a.retry_after);
    resp.send(std::move(r));
  };
  // parent=<blob>: `dig` is one of the blob's chunk objects (chunks.h).
  if (q->parent) return d_.blobs.chunk_metainfo(*sel, *q->parent, dig, cred, std::move(answer));
  d_.blobs.metainfo(*sel, dig, cred, wait, q->chunks, std::move(answer));
}

void proxy_handler::handle_chunks(http::request&& req, const http::responder& resp) {
  auto q = origin::parse_chunks_request(req);
  if (!q) return resp.send(oci_error(q.error().status, q.error().code, q.error().message));
  auto sel = select_repo(q->repo, q->ns, resp);
  if (!sel) return;
  auto wait = std::min(d_.metainfo_wait, q->wait.value_or(d_.metainfo_wait));
  credential cred = credential_of(req);
  d_.blobs.chunks(*sel, q->parent, cred, q->have, wait, [resp](unsigned status, std::string body) {
    resp.send(http::response::json(status, std::move(body)));
  });
}

}  // namespace shoal::proxy
