#include "routes.h"

namespace shoal::proxy {
namespace {

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 120)) {
    auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  if (s.size() > 120) out += "...";
  return out;
}

}  // namespace

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
    err = {404, oci::error_code::unsupported, "unsupported path " + printable(path)};
    return std::nullopt;
  }
  if (!oci::valid_name(name)) {
    err = {400, oci::error_code::name_invalid, "invalid repository name \"" + printable(name) + "\""};
    return std::nullopt;
  }
  v2_route r;
  r.kind = kind;
  r.name = std::string(name);
  if (kind == route_kind::blob) {
    auto d = digest::parse(ref);
    if (!d) {
      err = {400, oci::error_code::digest_invalid, d.error().message};
      return std::nullopt;
    }
    r.blob = *d;
  } else {
    auto mr = oci::parse_manifest_ref(ref);
    if (!mr) {
      bool is_digest = ref.find(':') != std::string_view::npos;
      err = {400, is_digest ? oci::error_code::digest_invalid : oci::error_code::manifest_invalid,
             mr.error().message};
      return std::nullopt;
    }
    r.manifest = *mr;
  }
  return r;
}

}  // namespace shoal::proxy
