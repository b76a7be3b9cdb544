#pragma once
// Parsing of the OCI distribution pull API paths (/v2/...) and of containerd's ns= parameter.
// Everything from the request line is validated here, before any upstream, cache key or file
// path is derived from it.

#include <optional>
#include <string>
#include <string_view>

#include "common/digest.h"
#include "common/error.h"
#include "common/oci.h"

namespace shoal::proxy {

enum class route_kind { base, manifest, blob };

struct v2_route {
  route_kind kind = route_kind::base;
  std::string name;            // repository as the client sent it (before upstream selection)
  oci::manifest_ref manifest;  // kind == manifest
  digest blob;                 // kind == blob
};

// A request that does not parse: the HTTP status and OCI error to answer with.
struct route_error {
  unsigned status = 404;
  oci::error_code code = oci::error_code::name_unknown;
  std::string message;
};

// Parses "/v2/", "/v2/<name>/manifests/<tag|digest>", "/v2/<name>/blobs/<digest>".
// Returns nullopt (with `err` untouched) when the path is not under /v2 at all.
[[nodiscard]] std::optional<v2_route> parse_v2_path(std::string_view path, route_error& err);

}  // namespace shoal::proxy
