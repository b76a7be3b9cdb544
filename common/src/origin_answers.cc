// The origin protocol's answers (common/origin_protocol.h): metainfo, progress and chunk list,
// each with its encoder and its decoder, the error bodies, and the OCI pull API both daemons
// serve (error answers, status mapping, /v2 route parsing).

#include <nlohmann/json.hpp>

#include "common/grant.h"
#include "common/origin_protocol.h"
#include "common/text.h"
#include "common/json_text.h"
#include "origin_text.h"

namespace shoal::origin {

using json = nlohmann::json;

namespace {

void set(http::response& r, std::string_view name, std::string_view value) {
  r.headers.set(std::string(name), std::string(value));
}

// A header of an answer that must be printable ASCII without spaces, at most `max` bytes.
result<std::string> token_header(const http::full_response& r, std::string_view name,
                                 std::size_t max) {
  auto v = r.header(name);
  if (!v) return std::string();
  if (v->size() > max)
    return fail(errc::protocol_error, std::string(name) + " is longer than " + std::to_string(max));
  for (char c : *v) {
    if (c <= 0x20 || c >= 0x7f) {
      return fail(errc::protocol_error,
                  std::string(name) + " " + quote_excerpt(*v) + " is not a token");
    }
  }
  return std::string(*v);
}

result<std::optional<std::uint64_t>> count_header(const http::full_response& r,
                                                  std::string_view name) {
  auto v = r.header(name);
  if (!v) return std::optional<std::uint64_t>();
  auto n = detail::parse_count(*v);
  if (!n)
    return fail(errc::protocol_error,
                std::string(name) + " " + quote_excerpt(*v) + " is not a count");
  return std::optional<std::uint64_t>(*n);
}

// A JSON object from a peer's answer, bounded; errors name `what`.
result<json> parse_object(std::string_view body, std::size_t max, std::string_view what) {
  if (body.size() > max) {
    return fail(errc::protocol_error,
                std::string(what) + " is larger than " + std::to_string(max) + " bytes");
  }
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object())
    return fail(errc::protocol_error, std::string(what) + " is not a JSON object");
  return j;
}

// An optional unsigned field: absent gives `def`; present and not an unsigned number is an error.
result<std::uint64_t> uint_field(const json& j, const char* key, std::uint64_t def,
                                 std::string_view what) {
  auto it = j.find(key);
  if (it == j.end()) return def;
  if (!it->is_number_unsigned()) {
    return fail(errc::protocol_error, std::string(what) + ": \"" + key + "\" is not a count");
  }
  return it->get<std::uint64_t>();
}

}  // namespace

// ---- Metainfo

http::response encode(const metainfo_answer& a) {
  auto r = http::response::text(200, a.torrent, "application/x-bittorrent");
  if (!a.info_hash.empty()) set(r, headers::info_hash, a.info_hash);
  if (a.piece_size) set(r, headers::piece_size, std::to_string(*a.piece_size));
  if (a.object_size) set(r, headers::object_size, std::to_string(*a.object_size));
  if (!a.group_kind.empty()) set(r, headers::group_kind, a.group_kind);
  if (a.group_bytes) set(r, headers::group_bytes, std::to_string(*a.group_bytes));
  if (!a.seed.empty()) set(r, headers::seed, a.seed);
  if (a.is_public) set(r, headers::visibility, headers::visibility_public);
  if (!a.grant.empty()) set(r, headers::grant, grant::to_header(a.grant));
  return r;
}

result<metainfo_answer> decode_metainfo(const http::full_response& r) {
  if (r.status != 200)
    return fail(errc::protocol_error, "metainfo answer has status " + std::to_string(r.status));
  if (r.body.empty()) return fail(errc::protocol_error, "metainfo answer is empty");
  metainfo_answer a;
  auto seed = token_header(r, headers::seed, 300);
  auto hash = token_header(r, headers::info_hash, 128);
  auto kind = token_header(r, headers::group_kind, 32);
  auto piece = count_header(r, headers::piece_size);
  auto size = count_header(r, headers::object_size);
  auto bytes = count_header(r, headers::group_bytes);
  for (const error* e : {seed ? nullptr : &seed.error(), hash ? nullptr : &hash.error(),
                         kind ? nullptr : &kind.error(), piece ? nullptr : &piece.error(),
                         size ? nullptr : &size.error(), bytes ? nullptr : &bytes.error()}) {
    if (e) return fail(e->wrap("metainfo answer"));
  }
  a.seed = std::move(*seed);
  a.info_hash = std::move(*hash);
  a.group_kind = std::move(*kind);
  a.piece_size = *piece;
  a.object_size = *size;
  a.group_bytes = *bytes;
  a.torrent = r.body;
  a.is_public = r.header(headers::visibility) == headers::visibility_public;
  if (auto g = r.header(headers::grant); g && !g->empty()) {
    auto raw = grant::from_header(*g);
    if (!raw) return fail(raw.error().wrap("metainfo answer"));
    a.grant = std::move(*raw);
  }
  return a;
}

// ---- Progress

http::response encode(const progress& p) {
  json j = {{"status", "fetching"}, {"bytes", p.bytes}, {"size", p.size}};
  // The object is cut into chunk objects: the chunk list names them.
  if (p.chunk_size) j["chunk_size"] = p.chunk_size;
  auto r = http::response::json(202, json_text(j));
  r.headers.set("Retry-After", p.retry_after.empty() ? "1" : p.retry_after);
  return r;
}

result<progress> decode_progress(std::string_view body) {
  constexpr std::string_view what = "progress answer";
  auto j = parse_object(body, 64u << 10, what);
  if (!j) return fail(j.error());
  progress p;
  auto bytes = uint_field(*j, "bytes", 0, what);
  auto size = uint_field(*j, "size", 0, what);
  auto cs = uint_field(*j, "chunk_size", 0, what);
  if (!bytes) return fail(bytes.error());
  if (!size) return fail(size.error());
  if (!cs) return fail(cs.error());
  p.bytes = *bytes;
  p.size = *size;
  p.chunk_size = *cs;
  if (j->contains("chunk_size") &&
      (p.chunk_size == 0 || p.size < p.chunk_size || p.size / p.chunk_size > max_chunks)) {
    return fail(errc::protocol_error, "registry-proxy announced an impossible chunk layout");
  }
  return p;
}

// ---- Chunk list

std::string encode(const chunk_list& c) {
  json j;
  j["digest"] = c.parent.str();
  j["size"] = c.size;
  j["chunk_size"] = c.chunk_size;
  j["chunk_count"] = c.chunk_count();
  j["complete"] = c.complete;
  if (c.error) j["error"] = *c.error;
  auto& arr = j["chunks"] = json::array();
  for (const auto& e : c.chunks)
    arr.push_back({{"digest", e.id.str()}, {"offset", e.offset}, {"size", e.size}});
  return json_text(j);
}

namespace {

status decode_chunks(const json& arr, chunk_list& c) {
  const std::uint64_t count = c.chunk_count();
  if (arr.size() > count) return fail(errc::protocol_error, "chunk list has too many chunks");
  for (std::uint64_t i = 0; i < arr.size(); ++i) {
    const auto& e = arr[i];
    const std::string which = "chunk " + std::to_string(i);
    if (!e.is_object() || !e.contains("digest") || !e["digest"].is_string()) {
      return fail(errc::protocol_error, which + " has no digest");
    }
    auto d = digest::parse(e["digest"].get<std::string>());
    if (!d) return fail(d.error().wrap(which));
    std::uint64_t off = i * c.chunk_size;
    std::uint64_t len = i + 1 < count ? c.chunk_size : c.size - off;
    auto o = uint_field(e, "offset", UINT64_MAX, which);
    auto s = uint_field(e, "size", 0, which);
    if (!o || !s || *o != off || *s != len)
      return fail(errc::protocol_error, which + " has the wrong offset or size");
    c.chunks.push_back({*d, off, len});
  }
  return {};
}

}  // namespace

result<chunk_list> decode_chunk_list(std::string_view body) {
  constexpr std::string_view what = "chunk list";
  auto j = parse_object(body, 16u << 20, what);
  if (!j) return fail(j.error());
  if (!j->contains("chunks") || !(*j)["chunks"].is_array()) {
    return fail(errc::protocol_error, "chunk list has no chunks");
  }
  chunk_list c;
  if (!j->contains("digest") || !(*j)["digest"].is_string()) {
    return fail(errc::protocol_error, "chunk list names no blob");
  }
  auto parent = digest::parse((*j)["digest"].get<std::string>());
  if (!parent) return fail(parent.error().wrap("chunk list"));
  c.parent = *parent;
  auto size = uint_field(*j, "size", 0, what);
  auto cs = uint_field(*j, "chunk_size", 0, what);
  if (!size || !cs || *cs == 0 || *size < *cs || *size / *cs > max_chunks) {
    return fail(errc::protocol_error, "chunk list describes an impossible layout");
  }
  c.size = *size;
  c.chunk_size = *cs;
  if (auto it = j->find("complete"); it != j->end() && it->is_boolean())
    c.complete = it->get<bool>();
  if (auto it = j->find("error"); it != j->end() && it->is_string()) {
    c.error = detail::printable(it->get<std::string>(), 300);
  }
  if (auto st = decode_chunks((*j)["chunks"], c); !st) return fail(st.error());
  return c;
}

// ---- Error bodies

std::string plain_error_body(std::string_view message) {
  return json_text(json{{"error", std::string(message)}});
}

http::response plain_error(unsigned status, std::string_view message) {
  return http::response::json(status, plain_error_body(message));
}

std::string error_message_of(std::string_view body) {
  if (body.size() > (1u << 20)) return {};
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object()) return {};
  if (auto errs = j.find("errors");
      errs != j.end() && errs->is_array() && !errs->empty() && (*errs)[0].is_object()) {
    auto m = (*errs)[0].find("message");
    if (m != (*errs)[0].end() && m->is_string())
      return detail::printable(m->get<std::string>(), 300);
  }
  if (auto e = j.find("error"); e != j.end() && e->is_string())
    return detail::printable(e->get<std::string>(), 300);
  return {};
}

// ---- The OCI pull API

http::response oci_error(unsigned status, oci::error_code code, std::string_view message,
                         std::string_view challenge) {
  auto r = http::response::json(status, oci::error_body(code, message));
  set(r, headers::api_version, headers::api_version_value);
  if (status == 401 && !challenge.empty()) set(r, "WWW-Authenticate", challenge);
  return r;
}

oci::error_code code_for_status(unsigned status, oci::error_code not_found) {
  switch (status) {
    case 401:
      return oci::error_code::unauthorized;
    case 403:
      return oci::error_code::denied;
    case 404:
      return not_found;
    case 429:
      return oci::error_code::toomanyrequests;
    default:
      return oci::error_code::unsupported;
  }
}

http::response upstream_failure(unsigned status, std::string_view message,
                                std::string_view retry_after, oci::error_code not_found,
                                std::string_view challenge) {
  bool kept = status == 401 || status == 403 || status == 404 || status == 429 || status >= 500;
  unsigned s = kept ? status : 502;
  auto r = oci_error(s, code_for_status(s, not_found), message, challenge);
  if (s == 429 && !retry_after.empty()) set(r, "Retry-After", retry_after);
  return r;
}

http::response v2_base_ok() {
  auto r = http::response::json(200, "{}");
  set(r, headers::api_version, headers::api_version_value);
  return r;
}

std::optional<v2_route> parse_v2_path(std::string_view path, route_error& err) {
  if (path == "/v2" || path == "/v2/") return v2_route{};
  if (path.substr(0, 4) != "/v2/") return std::nullopt;
  std::string_view rest = path.substr(4);
  // The reference never contains '/', so the last "/manifests/" or "/blobs/" splits name from it
  // even when the name itself has a component called "manifests" or "blobs".
  auto m = rest.rfind("/manifests/");
  auto b = rest.rfind("/blobs/");
  route_kind kind;
  std::string_view name, ref;
  if (m != std::string_view::npos && (b == std::string_view::npos || m > b)) {
    kind = route_kind::manifest;
    name = rest.substr(0, m);
    ref = rest.substr(m + 11);
  } else if (b != std::string_view::npos) {
    kind = route_kind::blob;
    name = rest.substr(0, b);
    ref = rest.substr(b + 7);
  } else {
    err = {404, oci::error_code::unsupported, "unsupported path " + detail::printable(path, 120),
           std::nullopt};
    return std::nullopt;
  }
  if (!oci::valid_name(name)) {
    err = {400, oci::error_code::name_invalid,
           "invalid repository name \"" + detail::printable(name, 120) + "\"", kind};
    return std::nullopt;
  }
  v2_route r;
  r.kind = kind;
  r.name = std::string(name);
  if (kind == route_kind::blob) {
    auto d = digest::parse(ref);
    if (!d) {
      err = {400, oci::error_code::digest_invalid, d.error().message, kind};
      return std::nullopt;
    }
    r.blob = *d;
  } else {
    auto mr = oci::parse_manifest_ref(ref);
    if (!mr) {
      bool is_digest = ref.find(':') != std::string_view::npos;
      err = {400, is_digest ? oci::error_code::digest_invalid : oci::error_code::manifest_invalid,
             mr.error().message, kind};
      return std::nullopt;
    }
    r.manifest = *mr;
  }
  return r;
}

}  // namespace shoal::origin
