#include "common/oci.h"
#include "common/text.h"
#include "common/json_text.h"

#include <cctype>

#include <nlohmann/json.hpp>

namespace shoal::oci {
namespace {

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

// component = [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)*
bool valid_component(std::string_view c) {
  if (c.empty() || !is_lower_alnum(c.front()) || !is_lower_alnum(c.back())) return false;
  std::size_t i = 0;
  while (i < c.size()) {
    if (is_lower_alnum(c[i])) {
      ++i;
      continue;
    }
    // A separator run: ".", "_", "__" or "-+", followed by an alphanumeric.
    if (c[i] == '.') {
      ++i;
    } else if (c[i] == '_') {
      ++i;
      if (i < c.size() && c[i] == '_') ++i;
    } else if (c[i] == '-') {
      while (i < c.size() && c[i] == '-') ++i;
    } else {
      return false;
    }
    if (i >= c.size() || !is_lower_alnum(c[i])) return false;
  }
  return true;
}

}  // namespace

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > max_name_length) return false;
  std::size_t start = 0;
  for (;;) {
    auto slash = name.find('/', start);
    std::string_view comp = name.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!valid_component(comp)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool valid_tag(std::string_view tag) {
  if (tag.empty() || tag.size() > max_tag_length) return false;
  if (!(is_alnum(tag[0]) || tag[0] == '_')) return false;
  for (char c : tag.substr(1)) {
    if (!(is_alnum(c) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

bool valid_registry_host(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  std::string_view h = host;
  std::string_view port;
  if (h.front() == '[') {
    auto close = h.find(']');
    if (close == std::string_view::npos) return false;
    std::string_view v6 = h.substr(1, close - 1);
    if (v6.empty()) return false;
    for (char c : v6) {
      if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) return false;
    }
    std::string_view rest = h.substr(close + 1);
    if (rest.empty()) return true;
    if (rest.front() != ':') return false;
    port = rest.substr(1);
    if (port.empty()) return false;
  } else {
    auto colon = h.find(':');
    if (colon != std::string_view::npos) {
      port = h.substr(colon + 1);
      h = h.substr(0, colon);
      if (port.empty()) return false;
    }
    if (h.empty()) return false;
    // DNS labels: alphanumerics and hyphens, separated by dots; no empty label.
    std::size_t start = 0;
    for (;;) {
      auto dot = h.find('.', start);
      std::string_view label =
          h.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
        return false;
      for (char c : label) {
        if (!(is_alnum(c) || c == '-')) return false;
      }
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
  }
  if (!port.empty()) {
    if (port.size() > 5) return false;
    unsigned v = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535) return false;
  }
  return true;
}

result<manifest_ref> parse_manifest_ref(std::string_view s) {
  manifest_ref r;
  if (s.find(':') != std::string_view::npos) {
    auto d = digest::parse(s);
    if (!d) return fail(d.error());
    r.dig = *d;
    return r;
  }
  if (!valid_tag(s)) {
    return fail(errc::invalid_argument, "invalid tag " + quote_excerpt(s) +
                                            ": must match [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}");
  }
  r.tag = std::string(s);
  return r;
}

std::string normalize_docker_hub_name(std::string_view name) {
  if (name.find('/') == std::string_view::npos) return "library/" + std::string(name);
  return std::string(name);
}

std::string image_ref::str() const {
  std::string s = registry + "/" + repository;
  if (!tag.empty() && (!dig || tag != "latest")) s += ":" + tag;
  if (dig) s += "@" + dig->str();
  return s;
}

result<image_ref> parse_image_ref(std::string_view s) {
  if (s.empty()) return fail(errc::invalid_argument, "empty image reference");
  if (s.size() > 512)
    return fail(errc::invalid_argument, "image reference longer than 512 characters");
  image_ref r;
  std::string_view rest = s;
  auto at = rest.find('@');
  if (at != std::string_view::npos) {
    auto d = digest::parse(rest.substr(at + 1));
    if (!d) return fail(d.error().wrap("image reference " + quote_excerpt(s)));
    r.dig = *d;
    rest = rest.substr(0, at);
  }
  // A tag follows the last ':' that comes after the last '/'.
  auto last_slash = rest.rfind('/');
  auto colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (last_slash == std::string_view::npos || colon > last_slash)) {
    std::string_view tag = rest.substr(colon + 1);
    if (!valid_tag(tag))
      return fail(errc::invalid_argument,
                  "image reference " + quote_excerpt(s) + ": invalid tag " + quote_excerpt(tag));
    r.tag = std::string(tag);
    rest = rest.substr(0, colon);
  }
  auto first_slash = rest.find('/');
  std::string_view first = rest.substr(0, first_slash);
  bool has_host =
      first_slash != std::string_view::npos &&
      (first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos ||
       first == "localhost" || (!first.empty() && first.front() == '['));
  if (has_host) {
    if (!valid_registry_host(first))
      return fail(errc::invalid_argument, "image reference " + quote_excerpt(s) +
                                              ": invalid registry host " + quote_excerpt(first));
    r.registry = std::string(first);
    rest = rest.substr(first_slash + 1);
  } else {
    r.registry = "docker.io";
  }
  if (r.registry == "index.docker.io" || r.registry == "registry-1.docker.io")
    r.registry = "docker.io";
  if (!valid_name(rest)) {
    return fail(errc::invalid_argument, "image reference " + quote_excerpt(s) +
                                            ": invalid repository name " + quote_excerpt(rest));
  }
  r.repository = r.registry == "docker.io" ? normalize_docker_hub_name(rest) : std::string(rest);
  // As containerd's and Docker's parsers: the whole name (host, '/', repository, after the
  // Docker Hub normalisation adds "library/") is at most 255 characters. Without this, a name
  // accepted here could be refused once normalised: a 250-character name without a host.
  if (r.registry.size() + 1 + r.repository.size() > max_name_length) {
    return fail(errc::invalid_argument, "image reference " + quote_excerpt(s) + ": the name " +
                                            quote_excerpt(r.registry + "/" + r.repository) +
                                            " is longer than " + std::to_string(max_name_length) +
                                            " characters");
  }
  if (r.tag.empty() && !r.dig) r.tag = "latest";
  return r;
}

bool is_manifest_media_type(std::string_view mt) {
  return mt == media::oci_manifest || mt == media::oci_index || mt == media::docker_manifest ||
         mt == media::docker_manifest_list;
}

std::optional<std::string> manifest_media_type_of(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto it = j.find("mediaType");
  if (it != j.end() && it->is_string()) return it->get<std::string>();
  // OCI manifests may omit mediaType: tell index from manifest by their fields.
  if (j.contains("manifests")) return std::string(media::oci_index);
  if (j.contains("layers") && j.contains("config")) return std::string(media::oci_manifest);
  return std::nullopt;
}

std::string_view error_code_string(error_code c) {
  switch (c) {
    case error_code::blob_unknown:
      return "BLOB_UNKNOWN";
    case error_code::blob_upload_invalid:
      return "BLOB_UPLOAD_INVALID";
    case error_code::blob_upload_unknown:
      return "BLOB_UPLOAD_UNKNOWN";
    case error_code::digest_invalid:
      return "DIGEST_INVALID";
    case error_code::manifest_blob_unknown:
      return "MANIFEST_BLOB_UNKNOWN";
    case error_code::manifest_invalid:
      return "MANIFEST_INVALID";
    case error_code::manifest_unknown:
      return "MANIFEST_UNKNOWN";
    case error_code::name_invalid:
      return "NAME_INVALID";
    case error_code::name_unknown:
      return "NAME_UNKNOWN";
    case error_code::size_invalid:
      return "SIZE_INVALID";
    case error_code::unauthorized:
      return "UNAUTHORIZED";
    case error_code::denied:
      return "DENIED";
    case error_code::unsupported:
      return "UNSUPPORTED";
    case error_code::toomanyrequests:
      return "TOOMANYREQUESTS";
    case error_code::range_invalid:
      return "RANGE_INVALID";
  }
  return "UNKNOWN";
}

std::string error_body(error_code c, std::string_view message, std::string_view detail_json) {
  nlohmann::json e = {{"code", error_code_string(c)}, {"message", std::string(message)}};
  if (!detail_json.empty()) {
    auto d = nlohmann::json::parse(detail_json, nullptr, false);
    if (!d.is_discarded()) e["detail"] = d;
  }
  nlohmann::json body = {{"errors", nlohmann::json::array({e})}};
  return json_text(body);
}

}  // namespace shoal::oci
