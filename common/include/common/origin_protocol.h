#pragma once
// The origin protocol: everything peerd and registry-proxy say to each other over HTTP, declared
// once. Both daemons (and shoalctl and the scheduler, for the dataset and node APIs) build and
// read these requests and answers only through this module:
//
//   paths       /shoal/v1/metainfo/<digest>, /shoal/v1/chunks/<digest>, the dataset API, the
//               node API, and the OCI pull paths (/v2/...) with their parser;
//   parameters  repo=, ns=, wait_ms=, chunks=1, have=, parent=;
//   headers     Shoal-Protocol, Shoal-Seed, Shoal-Info-Hash, Shoal-Piece-Size, ...;
//   answers     the metainfo (200), the fetch progress (202), the chunk list, and the error
//               bodies (the OCI spec's {"errors":[...]} and the Shoal API's {"error": "..."}),
//               each a struct with one encoder and one decoder.
//
// Versioning (docs/design.md, "The origin protocol"): a client sends `Shoal-Protocol: <major>`
// on every request to registry-proxy. registry-proxy serves the majors from
// oldest_protocol_version to protocol_version; a request without the header is major 1 (peerd
// releases before the header). Any other value is answered 400 with an OCI UNSUPPORTED error
// naming both sides' versions (and a `Shoal-Protocol` header with the server's major), which
// peerd turns into an origin_errc::version_mismatch error saying so. New fields in answers are
// additions that old decoders ignore; anything an old peer would misread takes a new major.
//
// Decoders take hostile input: sizes are bounded, nothing throws, and any text taken from an
// answer into an error message is cut short and made printable.
// Thread-safety: everything here is a pure function or a constant.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/error.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/oci.h"

namespace shoal::origin {

// ---- Version ----------------------------------------------------------------------------------

// The major this build speaks, and the oldest it still serves.
inline constexpr unsigned protocol_version = 1;
inline constexpr unsigned oldest_protocol_version = 1;

// A Shoal-Protocol value: a decimal major (1 to 9999); an absent (empty) header is major 1.
[[nodiscard]] result<unsigned> parse_version(std::string_view header_value);

// The origin protocol's own error codes (category "origin").
enum class origin_errc {
  version_mismatch = 1,  // the peer speaks no protocol version this build speaks
};
[[nodiscard]] const std::error_category& origin_category() noexcept;
[[nodiscard]] std::error_code make_error_code(origin_errc e) noexcept;
[[nodiscard]] bool is_version_mismatch(const error& e) noexcept;

// ---- Names ------------------------------------------------------------------------------------

namespace headers {
inline constexpr std::string_view protocol = "Shoal-Protocol";
inline constexpr std::string_view seed =
    "Shoal-Seed";  // "ip:port" of the origin's BitTorrent listener
inline constexpr std::string_view info_hash = "Shoal-Info-Hash";
inline constexpr std::string_view piece_size = "Shoal-Piece-Size";
inline constexpr std::string_view object_size = "Shoal-Object-Size";
inline constexpr std::string_view group_kind = "Shoal-Group-Kind";  // "pack" or "object"
inline constexpr std::string_view group_bytes = "Shoal-Group-Bytes";
inline constexpr std::string_view manifest_digest = "Shoal-Manifest-Digest";
// On blob answers (GET, HEAD) and metainfo answers: `visibility_public` when registry-proxy
// serves the object to anyone, anonymous clients included, so a node may serve it from its own
// cache to anyone too. Absent: not known public; a node serves the object from its cache only to
// a client whose credential registry-proxy confirmed for the repository (peerd's blob_access).
inline constexpr std::string_view visibility = "Shoal-Visibility";
inline constexpr std::string_view visibility_public = "public";
// On metainfo answers to a node (its client certificate names it): registry-proxy's grant for
// that node and the answer's swarm, base64 (common/grant.h). The node presents it to peers, which
// upload pieces only to holders of a valid grant. Absent without TLS, or to a caller that is not
// a node.
inline constexpr std::string_view grant = "Shoal-Grant";
inline constexpr std::string_view api_version = "Docker-Distribution-API-Version";
inline constexpr std::string_view api_version_value = "registry/2.0";
}  // namespace headers

namespace params {
inline constexpr std::string_view repo = "repo";        // repository the object is pulled from
inline constexpr std::string_view ns = "ns";            // registry host (containerd's ns=)
inline constexpr std::string_view wait_ms = "wait_ms";  // long-poll bound the client asks for
inline constexpr std::string_view chunks = "chunks";    // "1": the asker takes chunk objects
inline constexpr std::string_view have = "have";        // chunk entries the asker knows already
inline constexpr std::string_view parent = "parent";    // the blob a chunk object belongs to
}  // namespace params

namespace paths {
inline constexpr std::string_view metainfo = "/shoal/v1/metainfo/";  // + <digest>
inline constexpr std::string_view chunks = "/shoal/v1/chunks/";      // + <digest>
// The dataset API: registry-proxy's (declare, state, manifest, objects) and peerd's (prefetch).
inline constexpr std::string_view datasets = "/shoal/v1/datasets";
inline constexpr std::string_view dataset_metainfo =
    "/shoal/v1/dataset-metainfo/";  // + <ref>/<group>
// Both of the above: what registry-proxy hands to its dataset service.
inline constexpr std::string_view dataset_family = "/shoal/v1/dataset";
// peerd's node API (shoalctl, the scheduler's prewarm orders go elsewhere).
inline constexpr std::string_view node_status = "/shoal/v1/status";
inline constexpr std::string_view node_pull = "/shoal/v1/pull";
inline constexpr std::string_view dataset_prefetch = "/shoal/v1/datasets/prefetch";
}  // namespace paths

// True when `path` is `prefix` or lies under it ("/shoal/v1/datasets", ".../datasets/x").
[[nodiscard]] bool has_prefix(std::string_view path, std::string_view prefix);

// ---- Requests: built by clients ---------------------------------------------------------------

// Where an object is pulled from: containerd's ns= (empty: registry-proxy's default upstream)
// and the repository.
struct object_ref {
  std::string ns;
  std::string repo;
};

struct metainfo_query {
  std::optional<std::chrono::milliseconds> wait;  // wait_ms=
  bool chunks = false;                            // chunks=1
  std::optional<digest> parent;                   // parent=: `d` is a chunk of this blob
};
// "/shoal/v1/metainfo/<d>?repo=..&ns=..[&wait_ms=..][&chunks=1][&parent=..]"
[[nodiscard]] std::string metainfo_target(const object_ref& o, const digest& d,
                                          const metainfo_query& q);
// "/shoal/v1/chunks/<parent>?repo=..&ns=..&have=..&wait_ms=.."
[[nodiscard]] std::string chunks_target(const object_ref& o, const digest& parent, std::size_t have,
                                        std::chrono::milliseconds wait);
// "/v2/<repo>/blobs/<d>[?ns=..]" and "/v2/<repo>/manifests/<reference>[?ns=..]"
[[nodiscard]] std::string blob_target(const object_ref& o, const digest& d);
[[nodiscard]] std::string manifest_target(const object_ref& o, std::string_view reference);
// The dataset API, <ref> = "<name>@<version>" (validated by the caller).
[[nodiscard]] std::string dataset_target(std::string_view ref);           // state
[[nodiscard]] std::string dataset_manifest_target(std::string_view ref);  // canonical manifest
[[nodiscard]] std::string dataset_objects_base(std::string_view ref);     // + <digest>
[[nodiscard]] std::string dataset_metainfo_target(std::string_view ref, std::uint32_t group,
                                                  std::chrono::milliseconds wait);

// The one way peerd asks registry-proxy anything: adds `Shoal-Protocol`, fetches (body bounded
// by `max_body`), and turns a version-mismatch answer into an origin_errc::version_mismatch
// error that names both versions. Other statuses come back as they are. Blocking (http::fetch).
[[nodiscard]] result<http::full_response> call(http::client& c, http::client_request r,
                                               std::size_t max_body);
// Adds `Shoal-Protocol: <protocol_version>` to a request (call() does it).
void add_protocol_header(http::client_request& r);
// The version-mismatch error in an answer, if it is one.
[[nodiscard]] std::optional<error> version_mismatch_of(int status, std::string_view body);

// ---- Requests: read by registry-proxy ---------------------------------------------------------

// A request registry-proxy refuses before doing anything: the status and OCI error to answer.
struct request_error {
  unsigned status = 400;
  oci::error_code code = oci::error_code::unsupported;
  std::string message;
};
template <class T>
using parsed = std::expected<T, request_error>;

// The request's Shoal-Protocol, checked: nothing when it is served, else the 400 answer.
[[nodiscard]] std::optional<http::response> check_version(const http::request& req);
// The ns= parameter as sent. Present but not percent-decodable is an error (falling back to the
// default upstream would answer for another registry than the one the client named).
[[nodiscard]] result<std::optional<std::string>> ns_param(const http::request& req);

struct metainfo_request {
  digest object;
  std::string repo;
  std::optional<std::string> ns;
  std::optional<std::chrono::milliseconds> wait;  // absent or malformed wait_ms= is ignored
  bool chunks = false;
  std::optional<digest> parent;
};
// GET /shoal/v1/metainfo/<digest>: digest (DIGEST_INVALID), repo= (NAME_INVALID), ns=
// (NAME_INVALID), parent= (DIGEST_INVALID).
[[nodiscard]] parsed<metainfo_request> parse_metainfo_request(const http::request& req);

struct chunks_request {
  digest parent;
  std::string repo;
  std::optional<std::string> ns;
  std::size_t have = 0;                           // at most max_chunks
  std::optional<std::chrono::milliseconds> wait;  // malformed wait_ms= is an error here
};
[[nodiscard]] parsed<chunks_request> parse_chunks_request(const http::request& req);

// A lenient wait_ms= (the metainfo endpoints): a decimal count, anything else ignored.
[[nodiscard]] std::optional<std::chrono::milliseconds> lenient_wait(const http::request& req);

// ---- Answers ----------------------------------------------------------------------------------

// 200 to a metainfo request: the .torrent (opaque here; the swarm library parses it) and what the
// headers tell about it. Object answers carry piece and object size; dataset group answers carry
// the group's kind and bytes.
struct metainfo_answer {
  std::string torrent;
  std::string info_hash;                     // hex, as the origin computed it
  std::optional<std::uint64_t> piece_size;   // objects
  std::optional<std::uint64_t> object_size;  // objects
  std::string group_kind;                    // dataset groups
  std::optional<std::uint64_t> group_bytes;  // dataset groups
  std::string seed;                          // Shoal-Seed; empty when the origin does not seed
  bool is_public = false;                    // Shoal-Visibility: public
  std::string grant;                         // Shoal-Grant, decoded; empty when none came
};
[[nodiscard]] http::response encode(const metainfo_answer& a);
// The 200 answer's torrent and headers; a malformed header (a Shoal-Grant that is not base64 of
// a grant-sized value included; it is not verified here) or an empty torrent is a protocol_error.
[[nodiscard]] result<metainfo_answer> decode_metainfo(const http::full_response& r);

// 202 to a metainfo request: the origin is still fetching (long-poll again).
struct progress {
  std::uint64_t bytes = 0;       // a growing count: liveness, not the object's own bytes
  std::uint64_t size = 0;        // the object's size when known, else 0
  std::uint64_t chunk_size = 0;  // nonzero: the object is cut into chunks of this size
  std::string retry_after = "1";
};
[[nodiscard]] http::response encode(const progress& p);
// Rejects a body that is not the JSON object, and an impossible chunk layout (chunk_size larger
// than size, or more than max_chunks chunks).
[[nodiscard]] result<progress> decode_progress(std::string_view body);

// 200 to a chunk-list request: the chunks published so far, in order. Chunk i starts at
// i * chunk_size; the last of size / chunk_size chunks also takes the remainder.
inline constexpr std::uint64_t max_chunks = 100000;
struct chunk_ref {
  digest id;
  std::uint64_t offset = 0, size = 0;
};
struct chunk_list {
  digest parent;
  std::uint64_t size = 0, chunk_size = 0;
  bool complete = false;
  std::optional<std::string> error;  // cutting failed
  std::vector<chunk_ref> chunks;
  [[nodiscard]] std::uint64_t chunk_count() const { return chunk_size ? size / chunk_size : 0; }
};
[[nodiscard]] std::string encode(const chunk_list& c);
// Checks the layout: every entry at its place and of its length, no more than chunk_count().
[[nodiscard]] result<chunk_list> decode_chunk_list(std::string_view body);

// The Shoal API's own error body, {"error": "<message>"} (chunk list and dataset endpoints).
[[nodiscard]] std::string plain_error_body(std::string_view message);
[[nodiscard]] http::response plain_error(unsigned status, std::string_view message);
// The message of an error answer, either form (the OCI spec's first error, or "error"), cut to
// 300 bytes and printable; empty when the body has none.
[[nodiscard]] std::string error_message_of(std::string_view body);

// ---- The OCI pull API (both daemons serve it) -------------------------------------------------

// The spec's JSON error answer. `challenge`: the WWW-Authenticate a 401 carries (registry-proxy
// asks for Basic credentials); empty: none.
[[nodiscard]] http::response oci_error(unsigned status, oci::error_code code,
                                       std::string_view message, std::string_view challenge = {});
// The error code for an HTTP status: 401 UNAUTHORIZED, 403 DENIED, 404 `not_found`, 429
// TOOMANYREQUESTS, anything else UNSUPPORTED.
[[nodiscard]] oci::error_code code_for_status(
    unsigned status, oci::error_code not_found = oci::error_code::blob_unknown);
// An upstream's failure passed on to a client: 401/403/404/429 keep their status (429 with
// Retry-After), 5xx too, anything else becomes 502.
[[nodiscard]] http::response upstream_failure(unsigned status, std::string_view message,
                                              std::string_view retry_after,
                                              oci::error_code not_found,
                                              std::string_view challenge = {});
// 200 "{}" to GET /v2/ (the API version check).
[[nodiscard]] http::response v2_base_ok();

enum class route_kind { base, manifest, blob };

struct v2_route {
  route_kind kind = route_kind::base;
  std::string name;            // repository as the client sent it (before upstream selection)
  oci::manifest_ref manifest;  // kind == manifest
  digest blob;                 // kind == blob
};

// A /v2 path that does not parse: the status and OCI error to answer with, and the route the path
// named when it named one (a blob path with a bad digest is still a blob path).
struct route_error {
  unsigned status = 404;
  oci::error_code code = oci::error_code::name_unknown;
  std::string message;
  std::optional<route_kind> kind;
};

// Parses "/v2/", "/v2/<name>/manifests/<tag|digest>", "/v2/<name>/blobs/<digest>".
// Returns nullopt (with `err` untouched) when the path is not under /v2 at all.
[[nodiscard]] std::optional<v2_route> parse_v2_path(std::string_view path, route_error& err);

}  // namespace shoal::origin

template <>
struct std::is_error_code_enum<shoal::origin::origin_errc> : std::true_type {};
