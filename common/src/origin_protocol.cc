// The origin protocol (common/origin_protocol.h): the version rule, request targets built by
// clients, and requests read by registry-proxy. The answers and the OCI pull API are in
// origin_answers.cc.

#include "common/origin_protocol.h"

#include <nlohmann/json.hpp>

#include "common/text.h"
#include "common/json_text.h"
#include "origin_text.h"

namespace shoal::origin {

// ---- Version

result<unsigned> parse_version(std::string_view v) {
  std::string s = trim(v);
  if (s.empty()) return 1u;
  if (s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) {
    return fail(errc::protocol_error,
                "Shoal-Protocol " + quote_excerpt(v, 32) + " is not a version number");
  }
  unsigned out = 0;
  for (char c : s) out = out * 10 + static_cast<unsigned>(c - '0');
  if (out == 0) return fail(errc::protocol_error, "Shoal-Protocol 0 is not a version");
  return out;
}

namespace {

class origin_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "origin"; }
  std::string message(int ev) const override {
    if (static_cast<origin_errc>(ev) == origin_errc::version_mismatch)
      return "origin protocol version mismatch";
    return "unknown origin error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& origin_category() noexcept {
  static const origin_category_impl c;
  return c;
}

std::error_code make_error_code(origin_errc e) noexcept {
  return {static_cast<int>(e), origin_category()};
}

bool is_version_mismatch(const error& e) noexcept {
  return e.code == make_error_code(origin_errc::version_mismatch);
}

bool has_prefix(std::string_view path, std::string_view prefix) {
  if (path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || prefix.ends_with('/') || path[prefix.size()] == '/';
}

// ---- Request targets

namespace {

std::string ns_suffix(const object_ref& o, char sep) {
  return o.ns.empty() ? std::string()
                      : std::string(1, sep) + std::string(params::ns) + "=" + url_escape(o.ns);
}

std::string repo_query(const object_ref& o) {
  return std::string(params::repo) + "=" + url_escape(o.repo, true) + ns_suffix(o, '&');
}

std::string param(std::string_view name, std::string_view value) {
  return "&" + std::string(name) + "=" + std::string(value);
}

}  // namespace

std::string metainfo_target(const object_ref& o, const digest& d, const metainfo_query& q) {
  std::string t = std::string(paths::metainfo) + d.str() + "?" + repo_query(o);
  if (q.wait) t += param(params::wait_ms, std::to_string(q.wait->count()));
  if (q.chunks) t += param(params::chunks, "1");
  if (q.parent) t += param(params::parent, q.parent->str());
  return t;
}

std::string chunks_target(const object_ref& o, const digest& parent, std::size_t have,
                          std::chrono::milliseconds wait) {
  return std::string(paths::chunks) + parent.str() + "?" + repo_query(o) +
         param(params::have, std::to_string(have)) +
         param(params::wait_ms, std::to_string(wait.count()));
}

std::string blob_target(const object_ref& o, const digest& d) {
  return "/v2/" + o.repo + "/blobs/" + d.str() + ns_suffix(o, '?');
}

std::string manifest_target(const object_ref& o, std::string_view reference) {
  return "/v2/" + o.repo + "/manifests/" + std::string(reference) + ns_suffix(o, '?');
}

std::string dataset_target(std::string_view ref) {
  return std::string(paths::datasets) + "/" + std::string(ref);
}

std::string dataset_manifest_target(std::string_view ref) {
  return dataset_target(ref) + "/manifest";
}

std::string dataset_objects_base(std::string_view ref) { return dataset_target(ref) + "/objects/"; }

std::string dataset_metainfo_target(std::string_view ref, std::uint32_t group,
                                    std::chrono::milliseconds wait) {
  return std::string(paths::dataset_metainfo) + std::string(ref) + "/" + std::to_string(group) +
         "?" + std::string(params::wait_ms) + "=" + std::to_string(wait.count());
}

// ---- The client's door

void add_protocol_header(http::client_request& r) {
  r.headers.emplace_back(std::string(headers::protocol), std::to_string(protocol_version));
}

std::optional<error> version_mismatch_of(int status, std::string_view body) {
  if (status != 400 || body.size() > (64u << 10)) return std::nullopt;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto errs = j.find("errors");
  if (errs == j.end() || !errs->is_array() || errs->empty() || !(*errs)[0].is_object())
    return std::nullopt;
  auto det = (*errs)[0].find("detail");
  if (det == (*errs)[0].end() || !det->is_object()) return std::nullopt;
  auto sp = det->find("shoal_protocol");
  if (sp == det->end() || !sp->is_object()) return std::nullopt;
  auto num = [&](const char* k) {
    auto it = sp->find(k);
    if (it == sp->end() || !it->is_number_unsigned() || it->get<std::uint64_t>() > 9999)
      return std::string("?");
    return std::to_string(it->get<std::uint64_t>());
  };
  return error{make_error_code(origin_errc::version_mismatch),
               "registry-proxy does not speak Shoal origin protocol " +
                   std::to_string(protocol_version) + " (it speaks " + num("oldest") + " to " +
                   num("current") +
                   "): run a peerd and a registry-proxy whose releases share a protocol version"};
}

result<http::full_response> call(http::client& c, http::client_request r, std::size_t max_body) {
  add_protocol_header(r);
  auto f = http::fetch(c, std::move(r), max_body);
  if (!f) return f;
  if (auto e = version_mismatch_of(f->status, f->body)) return fail(std::move(*e));
  return f;
}

// ---- Requests read by registry-proxy

std::optional<http::response> check_version(const http::request& req) {
  std::string_view sent = req.header(headers::protocol);
  auto v = parse_version(sent);
  if (v && *v >= oldest_protocol_version && *v <= protocol_version) return std::nullopt;
  std::string range =
      std::to_string(oldest_protocol_version) + " to " + std::to_string(protocol_version);
  std::string msg = "this registry-proxy speaks Shoal origin protocol " + range +
                    ", the request asked for " + quote_excerpt(sent, 32) +
                    ": run a peerd and a registry-proxy whose releases share a version";
  nlohmann::json detail = {{"shoal_protocol",
                            {{"requested", detail::printable(sent, 32)},
                             {"oldest", oldest_protocol_version},
                             {"current", protocol_version}}}};
  auto r = http::response::json(
      400, oci::error_body(oci::error_code::unsupported, msg, json_text(detail)));
  r.headers.set(std::string(headers::api_version), std::string(headers::api_version_value));
  r.headers.set(std::string(headers::protocol), std::to_string(protocol_version));
  return r;
}

result<std::optional<std::string>> ns_param(const http::request& req) {
  if (auto v = req.query_param(params::ns)) return v;
  std::string_view q = req.query;
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view kv = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view{} : q.substr(amp + 1);
    if (kv.substr(0, kv.find('=')) == params::ns) {
      return fail(errc::invalid_argument, "ns is not percent-encoded correctly");
    }
  }
  return std::optional<std::string>();
}

namespace {

// The object digest after `prefix`, the repo= and the ns= of a Shoal API request.
parsed<std::tuple<digest, std::string, std::optional<std::string>>> object_params(
    const http::request& req, std::string_view prefix, std::string_view what) {
  auto d = digest::parse(std::string_view(req.path).substr(prefix.size()));
  if (!d)
    return std::unexpected(request_error{400, oci::error_code::digest_invalid, d.error().message});
  auto repo = req.query_param(params::repo);
  if (!repo || !oci::valid_name(*repo)) {
    return std::unexpected(request_error{
        400, oci::error_code::name_invalid,
        std::string(what) + " needs repo=<repository> (the repository the object is pulled from)"});
  }
  auto ns = ns_param(req);
  if (!ns)
    return std::unexpected(request_error{400, oci::error_code::name_invalid, ns.error().message});
  return std::make_tuple(*d, std::move(*repo), std::move(*ns));
}

}  // namespace

std::optional<std::chrono::milliseconds> lenient_wait(const http::request& req) {
  auto w = req.query_param(params::wait_ms);
  if (!w) return std::nullopt;
  auto v = detail::parse_count(*w);
  if (!v) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(*v));
}

parsed<metainfo_request> parse_metainfo_request(const http::request& req) {
  auto o = object_params(req, paths::metainfo, "metainfo");
  if (!o) return std::unexpected(std::move(o.error()));
  metainfo_request m;
  std::tie(m.object, m.repo, m.ns) = std::move(*o);
  m.wait = lenient_wait(req);
  if (auto p = req.query_param(params::parent)) {
    auto parent = digest::parse(*p);
    if (!parent) {
      return std::unexpected(
          request_error{400, oci::error_code::digest_invalid, "parent: " + parent.error().message});
    }
    m.parent = *parent;
  }
  m.chunks = req.query_param(params::chunks).value_or("") == "1";
  return m;
}

parsed<chunks_request> parse_chunks_request(const http::request& req) {
  auto o = object_params(req, paths::chunks, "chunks");
  if (!o) return std::unexpected(std::move(o.error()));
  chunks_request c;
  std::tie(c.parent, c.repo, c.ns) = std::move(*o);
  if (auto h = req.query_param(params::have)) {
    auto v = detail::parse_count(*h);
    if (!v || *v > 1000000) {
      return std::unexpected(
          request_error{400, oci::error_code::unsupported, "have must be a count"});
    }
    c.have = static_cast<std::size_t>(*v);
  }
  if (auto w = req.query_param(params::wait_ms)) {
    auto v = detail::parse_count(*w);
    if (!v)
      return std::unexpected(
          request_error{400, oci::error_code::unsupported, "wait_ms must be milliseconds"});
    c.wait = std::chrono::milliseconds(static_cast<std::int64_t>(*v));
  }
  return c;
}

}  // namespace shoal::origin
