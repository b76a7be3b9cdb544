#pragma once
// OCI distribution grammar and the few wire constants every daemon needs: repository names,
// tags, image references (with Docker's normalization), media types, and the spec's JSON error
// body. Validation is hand-written (no regex) and strict: a name, tag or reference that does not
// match the grammar never reaches an upstream, a cache key or the filesystem.

#include <optional>
#include <string>
#include <string_view>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::oci {

inline constexpr std::size_t max_name_length = 255;
inline constexpr std::size_t max_tag_length = 128;

// <name>: path-component ("/" path-component)*, component = [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*
[[nodiscard]] bool valid_name(std::string_view name);
// <tag>: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}
[[nodiscard]] bool valid_tag(std::string_view tag);
// A registry host as it appears in references and in containerd's ns= parameter:
// "docker.io", "registry.example.com:5000", "127.0.0.1:5000", "[::1]:5000", "localhost".
[[nodiscard]] bool valid_registry_host(std::string_view host);

// A manifest reference in a request path: a tag or a digest.
struct manifest_ref {
  std::optional<std::string> tag;
  std::optional<digest> dig;
  [[nodiscard]] bool is_digest() const { return dig.has_value(); }
  [[nodiscard]] std::string str() const { return dig ? dig->str() : *tag; }
};
// Parses the <reference> of /v2/<name>/manifests/<reference>; errors say which rule failed and
// carry errc::invalid_argument (bad tag) or the digest error (bad digest).
[[nodiscard]] result<manifest_ref> parse_manifest_ref(std::string_view s);

// A fully qualified image reference: registry host, repository, and a tag and/or digest.
struct image_ref {
  std::string registry;    // "docker.io"
  std::string repository;  // "library/nginx"
  std::string tag;         // "latest" when neither tag nor digest was given
  std::optional<digest> dig;
  // "docker.io/library/nginx:latest", "host:5000/app@sha256:..", "host/app:v1@sha256:.."
  [[nodiscard]] std::string str() const;
};

// Parses and normalizes the way docker and containerd do: "nginx" →
// docker.io/library/nginx:latest; "user/app" → docker.io/user/app:latest; a first component with
// a '.' or ':' or equal to "localhost" is a registry host; "index.docker.io" → "docker.io".
[[nodiscard]] result<image_ref> parse_image_ref(std::string_view s);

// Docker Hub's short names: single-component repositories live under "library/".
[[nodiscard]] std::string normalize_docker_hub_name(std::string_view name);

namespace media {
inline constexpr std::string_view oci_manifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view oci_index = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view docker_manifest =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view docker_manifest_list =
    "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view docker_manifest_v1_signed =
    "application/vnd.docker.distribution.manifest.v1+prettyjws";
// The Accept header we send when a client sent none: everything we can serve.
inline constexpr std::string_view accept_all =
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";
}  // namespace media

// True for the four manifest media types we serve (index, list, OCI and Docker manifests).
[[nodiscard]] bool is_manifest_media_type(std::string_view mt);
// The media type declared inside a manifest body ("mediaType"), if any and well-formed JSON.
[[nodiscard]] std::optional<std::string> manifest_media_type_of(std::string_view body);

// Spec error codes (distribution-spec "Error Codes").
enum class error_code {
  blob_unknown,
  blob_upload_invalid,
  blob_upload_unknown,
  digest_invalid,
  manifest_blob_unknown,
  manifest_invalid,
  manifest_unknown,
  name_invalid,
  name_unknown,
  size_invalid,
  unauthorized,
  denied,
  unsupported,
  toomanyrequests,
  range_invalid,
};
[[nodiscard]] std::string_view error_code_string(error_code c);
// {"errors":[{"code":"BLOB_UNKNOWN","message":"...","detail":...}]}; detail omitted when empty.
[[nodiscard]] std::string error_body(error_code c, std::string_view message,
                                     std::string_view detail_json = {});

}  // namespace shoal::oci
