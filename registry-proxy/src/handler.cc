#include "handler.h"

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/oci.h"
#include "routes.h"

namespace shoal::proxy {

proxy_handler::proxy_handler(handler_deps d) : d_(std::move(d)) {}

namespace {

// The ns= parameter as sent. An ns= that is present but does not percent-decode is an error,
// not an absent parameter: falling back to the default upstream would answer for a registry
// other than the one the client named.
result<std::optional<std::string>> ns_param(const http::request& req) {
  if (auto v = req.query_param("ns")) return v;
  std::string_view q = req.query;
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (kv.substr(0, kv.find('=')) == "ns") {
      return fail(errc::invalid_argument, "ns is not percent-encoded correctly");
    }
  }
  return std::optional<std::string>();
}

// A decimal count of at most 18 digits (no sign, no spaces).
std::optional<std::uint64_t> parse_uint(std::string_view v) {
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  std::uint64_t out = 0;
  for (char c : v) out = out * 10 + static_cast<std::uint64_t>(c - '0');
  return out;
}

}  // namespace

std::string route_of(std::string_view target) {
  auto q = target.find('?');
  std::string_view path = target.substr(0, q);
  if (path.rfind("/shoal/v1/metainfo/", 0) == 0) return "metainfo";
  if (path.rfind("/shoal/v1/chunks/", 0) == 0) return "chunks";
  if (path.rfind("/shoal/v1/dataset", 0) == 0) return "dataset";
  if (path.rfind("/v2", 0) == 0) {
    if (path.rfind("/blobs/") != std::string_view::npos) return "blob";
    if (path.rfind("/manifests/") != std::string_view::npos) return "manifest";
    if (path == "/v2" || path == "/v2/") return "base";
    return "v2_other";
  }
  if (path == "/metrics" || path == "/healthz" || path == "/readyz") return "ops";
  return "other";
}

void proxy_handler::operator()(http::request&& req, http::responder resp) {
  if (daemon::serve_ops(req, resp, d_.metrics, d_.health)) return;
  if (req.path.rfind("/v2", 0) == 0) return handle_v2(std::move(req), resp);
  if (req.path.rfind("/shoal/v1/metainfo/", 0) == 0) return handle_metainfo(std::move(req), resp);
  if (req.path.rfind("/shoal/v1/chunks/", 0) == 0) return handle_chunks(std::move(req), resp);
  if (d_.datasets && req.path.rfind("/shoal/v1/dataset", 0) == 0 && d_.datasets(req, resp)) return;
  resp.send(oci_error(404, oci::error_code::unsupported, "no such endpoint"));
}

void proxy_handler::handle_v2(http::request&& req, const http::responder& resp) {
  const bool head = req.method == http::verb::head;
  if (req.method != http::verb::get && req.method != http::verb::head) {
    auto r = oci_error(405, oci::error_code::unsupported, "registry-proxy serves the pull API only (GET, HEAD)");
    r.headers.set("Allow", "GET, HEAD");
    return resp.send(std::move(r));
  }
  route_error err;
  auto route = parse_v2_path(req.path, err);
  if (!route) {
    return resp.send(oci_error(err.status, err.code, err.message));
  }
  if (route->kind == route_kind::base) {
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
    auto r = http::response::json(200, "{}");
    r.headers.set("Docker-Distribution-API-Version", "registry/2.0");
    return resp.send(std::move(r));
  }
  auto ns = ns_param(req);
  if (!ns) return resp.send(oci_error(400, oci::error_code::name_invalid, ns.error().message));
  auto sel = d_.upstreams.select(*ns, route->name);
  if (!sel) {
    unsigned s = sel.error().is(errc::not_found) ? 404 : 400;
    return resp.send(oci_error(s, s == 404 ? oci::error_code::name_unknown : oci::error_code::name_invalid,
                               sel.error().message));
  }
  credential cred = credential_from(req.header("Authorization"), d_.credential_salt);
  const http::responder& out = resp;
  if (route->kind == route_kind::manifest) {
    std::string accept = req.header_list("Accept");
    d_.manifests.serve(*sel, route->manifest, cred, std::move(accept), head, out);
  } else {
    d_.blobs.serve(*sel, route->blob, cred, head, out);
  }
}

std::optional<selection> proxy_handler::select_repo(const http::request& req, const http::responder& resp,
                                                    std::string_view what) {
  auto repo = req.query_param("repo");
  if (!repo || !oci::valid_name(*repo)) {
    resp.send(oci_error(400, oci::error_code::name_invalid,
                        std::string(what) + " needs repo=<repository> (the repository the object is pulled from)"));
    return std::nullopt;
  }
  auto ns = ns_param(req);
  if (!ns) {
    resp.send(oci_error(400, oci::error_code::name_invalid, ns.error().message));
    return std::nullopt;
  }
  auto sel = d_.upstreams.select(*ns, *repo);
  if (!sel) {
    unsigned s = sel.error().is(errc::not_found) ? 404 : 400;
    resp.send(oci_error(s, oci::error_code::name_unknown, sel.error().message));
    return std::nullopt;
  }
  return std::move(*sel);
}

void proxy_handler::handle_metainfo(http::request&& req, const http::responder& resp) {
  std::string_view rest = std::string_view(req.path).substr(std::string_view("/shoal/v1/metainfo/").size());
  auto d = digest::parse(rest);
  if (!d) {
    return resp.send(oci_error(400, oci::error_code::digest_invalid, d.error().message));
  }
  auto sel = select_repo(req, resp, "metainfo");
  if (!sel) return;
  credential cred = credential_from(req.header("Authorization"), d_.credential_salt);
  auto wait = d_.metainfo_wait;
  if (auto w = req.query_param("wait_ms")) {
    // Clients may ask for a shorter wait, never a longer one.
    try {
      auto v = std::stoll(*w);
      if (v >= 0) wait = std::min(wait, std::chrono::milliseconds(v));
    } catch (...) {
    }
  }
  auto dig = *d;
  auto answer = [this, resp, dig](metainfo_answer a) {
    if (a.status == 200 && a.meta) {
      auto r = http::response::text(200, a.meta->torrent_file(d_.trackers), "application/x-bittorrent");
      r.headers.set("Shoal-Info-Hash", a.meta->info_hash_hex());
      r.headers.set("Shoal-Piece-Size", std::to_string(a.meta->piece_size));
      r.headers.set("Shoal-Object-Size", std::to_string(a.meta->size));
      if (!d_.seed_endpoint.empty()) r.headers.set("Shoal-Seed", d_.seed_endpoint);
      if (d_.on_metainfo_served) d_.on_metainfo_served(dig);
      return resp.send(std::move(r));
    }
    if (a.status == 202) {
      nlohmann::json j = {{"status", "fetching"}, {"bytes", a.bytes_done}, {"size", a.size}};
      // The object is cut into chunk objects: GET /shoal/v1/chunks/<digest> lists them.
      if (a.chunk_size) j["chunk_size"] = a.chunk_size;
      auto r = http::response::json(202, j.dump());
      r.headers.set("Retry-After", a.retry_after.empty() ? "1" : a.retry_after);
      return resp.send(std::move(r));
    }
    oci::error_code code = a.status == 404 ? oci::error_code::blob_unknown
                           : a.status == 401 ? oci::error_code::unauthorized
                           : a.status == 403 ? oci::error_code::denied
                           : a.status == 429 ? oci::error_code::toomanyrequests
                                             : oci::error_code::unsupported;
    auto r = oci_error(a.status ? a.status : 502, code, a.message);
    if (!a.retry_after.empty()) r.headers.set("Retry-After", a.retry_after);
    resp.send(std::move(r));
  };
  // parent=<blob>: `dig` is one of the blob's chunk objects (chunks.h).
  if (auto p = req.query_param("parent")) {
    auto parent = digest::parse(*p);
    if (!parent) return resp.send(oci_error(400, oci::error_code::digest_invalid, "parent: " + parent.error().message));
    return d_.blobs.chunk_metainfo(*sel, *parent, dig, cred, std::move(answer));
  }
  const bool accept_chunks = req.query_param("chunks").value_or("") == "1";
  d_.blobs.metainfo(*sel, dig, cred, wait, accept_chunks, std::move(answer));
}

void proxy_handler::handle_chunks(http::request&& req, const http::responder& resp) {
  std::string_view rest = std::string_view(req.path).substr(std::string_view("/shoal/v1/chunks/").size());
  auto d = digest::parse(rest);
  if (!d) return resp.send(oci_error(400, oci::error_code::digest_invalid, d.error().message));
  auto sel = select_repo(req, resp, "chunks");
  if (!sel) return;
  std::size_t have = 0;
  if (auto h = req.query_param("have")) {
    auto v = parse_uint(*h);
    if (!v || *v > 1000000) return resp.send(oci_error(400, oci::error_code::unsupported, "have must be a count"));
    have = static_cast<std::size_t>(*v);
  }
  auto wait = d_.metainfo_wait;
  if (auto w = req.query_param("wait_ms")) {
    auto v = parse_uint(*w);
    if (!v) return resp.send(oci_error(400, oci::error_code::unsupported, "wait_ms must be milliseconds"));
    wait = std::min(wait, std::chrono::milliseconds(*v));
  }
  credential cred = credential_from(req.header("Authorization"), d_.credential_salt);
  d_.blobs.chunks(*sel, *d, cred, have, wait, [resp](unsigned status, std::string body) {
    resp.send(http::response::json(status, std::move(body)));
  });
}

}  // namespace shoal::proxy
