#include "common/dataset.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "common/text.h"
#include "common/siphash.h"
#include "common/json_text.h"

namespace shoal::dataset {

using nlohmann::json;

namespace {

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (n < 0) return false;
    std::uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k <= n; ++k) {
      if (i + static_cast<std::size_t>(k) >= s.size()) return false;
      auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values beyond U+10FFFF are invalid.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

bool token_ok(std::string_view s, bool allow_upper) {
  if (s.empty() || s.size() > 128) return false;
  auto alnum = [allow_upper](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (allow_upper && c >= 'A' && c <= 'Z');
  };
  if (!alnum(s[0])) return false;
  for (char c : s) {
    if (!(alnum(c) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

// Matches one path component against one pattern component ('*', '?', classes).
bool match_component(std::string_view p, std::string_view s) {
  std::size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '[') {
      auto close = p.find(']', pi + 1);
      if (close != std::string_view::npos) {
        std::string_view cls = p.substr(pi + 1, close - pi - 1);
        bool neg = !cls.empty() && (cls[0] == '!' || cls[0] == '^');
        if (neg) cls.remove_prefix(1);
        bool hit = false;
        for (std::size_t k = 0; k < cls.size(); ++k) {
          if (k + 2 < cls.size() && cls[k + 1] == '-') {
            if (s[si] >= cls[k] && s[si] <= cls[k + 2]) hit = true;
            k += 2;
          } else if (cls[k] == s[si]) {
            hit = true;
          }
        }
        if (hit != neg) {
          pi = close + 1;
          ++si;
          continue;
        }
      } else if (s[si] == '[') {
        ++pi;
        ++si;
        continue;
      }
    } else if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
      continue;
    } else if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (star_p != std::string_view::npos) {
      pi = star_p + 1;
      si = ++star_s;
      continue;
    }
    return false;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    auto slash = s.find('/', start);
    out.push_back(
        s.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

// Whether pattern components p match path components s, '**' matching zero or more whole
// components. Dynamic programming over (pattern index, path index), each pair decided once:
// time O(|p| × |s|) component matches whatever the number of '**' (a backtracking matcher is
// exponential in it). row[si] holds the answer for p[pi..] against s[si..], built from the last
// pattern component backwards.
bool match_parts(const std::vector<std::string_view>& p, const std::vector<std::string_view>& s) {
  const std::size_t n = s.size();
  std::vector<char> next(n + 1, 0), row(n + 1, 0);
  next[n] = 1;  // the empty pattern matches only the empty rest of the path
  for (std::size_t pi = p.size(); pi-- > 0;) {
    if (p[pi] == "**") {
      row[n] = next[n];
      for (std::size_t si = n; si-- > 0;) row[si] = next[si] || row[si + 1];
    } else {
      row[n] = 0;
      for (std::size_t si = 0; si < n; ++si)
        row[si] = next[si + 1] && match_component(p[pi], s[si]) ? 1 : 0;
    }
    std::swap(row, next);
  }
  return next[0] != 0;
}

}  // namespace

bool valid_name(std::string_view name) { return token_ok(name, false); }
bool valid_version(std::string_view v) { return token_ok(v, true); }

result<std::pair<std::string, std::string>> parse_ref(std::string_view ref) {
  auto at = ref.find('@');
  if (at == std::string_view::npos)
    return fail(errc::invalid_argument,
                "dataset reference " + quote_excerpt(ref) + " must be name@version");
  auto n = ref.substr(0, at), v = ref.substr(at + 1);
  if (!valid_name(n))
    return fail(errc::invalid_argument,
                "dataset name " + quote_excerpt(n) + " must match [a-z0-9][a-z0-9._-]{0,127}");
  if (!valid_version(v)) {
    return fail(errc::invalid_argument, "dataset version " + quote_excerpt(v) +
                                            " must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}");
  }
  return std::make_pair(std::string(n), std::string(v));
}

status check_path(std::string_view path) {
  if (path.empty()) return fail(errc::invalid_argument, "empty path");
  if (path.size() > max_path_bytes) {
    return fail(errc::invalid_argument, "path " + quote_excerpt(path) + " is longer than " +
                                            std::to_string(max_path_bytes) + " bytes");
  }
  if (path.front() == '/')
    return fail(errc::invalid_argument, "path " + quote_excerpt(path) + " is absolute");
  for (char c : path) {
    auto u = static_cast<unsigned char>(c);
    if (u == 0)
      return fail(errc::invalid_argument, "path " + quote_excerpt(path) + " contains NUL");
    if (u < 0x20 || u == 0x7f)
      return fail(errc::invalid_argument,
                  "path " + quote_excerpt(path) + " contains a control character");
    if (c == '\\')
      return fail(errc::invalid_argument, "path " + quote_excerpt(path) + " contains a backslash");
  }
  if (!valid_utf8(path))
    return fail(errc::invalid_argument, "path " + quote_excerpt(path) + " is not valid UTF-8");
  for (auto comp : split(path)) {
    if (comp.empty())
      return fail(errc::invalid_argument,
                  "path " + quote_excerpt(path) + " has an empty component");
    if (comp == "." || comp == "..")
      return fail(errc::invalid_argument,
                  "path " + quote_excerpt(path) + " has a '" + std::string(comp) + "' component");
    if (comp.size() > max_component_bytes) {
      return fail(errc::invalid_argument, "path " + quote_excerpt(path) +
                                              " has a component longer than " +
                                              std::to_string(max_component_bytes) + " bytes");
    }
  }
  return {};
}

bool glob_match(std::string_view pattern, std::string_view path) {
  if (pattern.size() > 1024 || path.size() > max_path_bytes) return false;
  auto s = split(path);
  if (pattern.find('/') == std::string_view::npos) return match_component(pattern, s.back());
  return match_parts(split(pattern), s);
}

bool selected(const declaration& d, std::string_view path) {
  bool in = d.include.empty();
  for (const auto& g : d.include) {
    if (glob_match(g, path)) {
      in = true;
      break;
    }
  }
  if (!in) return false;
  for (const auto& g : d.exclude) {
    if (glob_match(g, path)) return false;
  }
  return true;
}

result<declaration> parse_declaration(std::string_view text) {
  if (text.size() > (1u << 20))
    return fail(errc::too_large, "dataset declaration larger than 1 MiB");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail(errc::invalid_argument, "dataset declaration is not a JSON object");
  declaration d;
  try {
    d.name = j.value("name", "");
    d.version = j.value("version", "");
    if (!valid_name(d.name))
      return fail(errc::invalid_argument, "dataset name " + quote_excerpt(d.name) + " is invalid");
    if (!valid_version(d.version))
      return fail(errc::invalid_argument,
                  "dataset version " + quote_excerpt(d.version) + " is invalid");
    if (!j.contains("origin") || !j["origin"].is_object())
      return fail(errc::invalid_argument, "dataset origin is missing");
    const auto& o = j["origin"];
    d.origin.url = o.value("url", "");
    d.origin.endpoint = o.value("endpoint", "");
    d.origin.region = o.value("region", "us-east-1");
    d.origin.credentials_file = o.value("credentials_file", "");
    for (const char* k : {"include", "exclude"}) {
      if (!j.contains(k)) continue;
      if (!j[k].is_array())
        return fail(errc::invalid_argument,
                    std::string("dataset ") + k + " must be a list of globs");
      for (const auto& g : j[k]) {
        if (!g.is_string() || g.get<std::string>().empty() || g.get<std::string>().size() > 1024) {
          return fail(errc::invalid_argument, std::string("dataset ") + k + " has an invalid glob");
        }
        (std::string(k) == "include" ? d.include : d.exclude).push_back(g.get<std::string>());
      }
    }
  } catch (const json::exception& e) {
    return fail(errc::invalid_argument,
                std::string("dataset declaration field has the wrong type: ") + e.what());
  }
  const std::string& u = d.origin.url;
  if (u.rfind("s3://", 0) == 0) {
    d.origin.type = origin::kind::s3;
    std::string rest = u.substr(5);
    auto slash = rest.find('/');
    d.origin.bucket = rest.substr(0, slash);
    d.origin.prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (d.origin.bucket.empty() || d.origin.bucket.size() > 63)
      return fail(errc::invalid_argument, "s3 bucket name is invalid");
    for (char c : d.origin.bucket) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) {
        return fail(errc::invalid_argument,
                    "s3 bucket name " + quote_excerpt(d.origin.bucket) + " is invalid");
      }
    }
    if (!d.origin.prefix.empty() && d.origin.prefix.back() != '/') d.origin.prefix += '/';
    if (!d.origin.endpoint.empty() && d.origin.endpoint.rfind("http://", 0) != 0 &&
        d.origin.endpoint.rfind("https://", 0) != 0) {
      return fail(errc::invalid_argument, "s3 endpoint must be an http(s) URL");
    }
  } else if (u.rfind("https://", 0) == 0 || u.rfind("http://", 0) == 0) {
    d.origin.type = origin::kind::http;
    d.origin.prefix = u.back() == '/' ? u : u + "/";
  } else {
    return fail(errc::invalid_argument,
                "dataset origin url must start with s3://, https:// or http://");
  }
  return d;
}

std::string to_json(const declaration& d) {
  json j = {{"name", d.name},
            {"version", d.version},
            {"origin",
             {{"url", d.origin.url},
              {"endpoint", d.origin.endpoint},
              {"region", d.origin.region},
              {"credentials_file", d.origin.credentials_file}}},
            {"include", d.include},
            {"exclude", d.exclude}};
  return json_text(j);
}

std::uint64_t manifest::total_bytes() const {
  std::uint64_t t = 0;
  for (const auto& f : files) t += f.size;
  return t;
}

result<manifest> build_manifest(std::string name, std::string version, std::string origin,
                                std::vector<file_entry> files, const grouping_policy& p) {
  manifest m;
  m.name = std::move(name);
  m.version = std::move(version);
  m.origin = std::move(origin);
  std::sort(files.begin(), files.end(),
            [](const file_entry& a, const file_entry& b) { return a.path < b.path; });
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (auto s = check_path(files[i].path); !s) return fail(s.error());
    if (i > 0 && files[i].path == files[i - 1].path)
      return fail(errc::invalid_argument, "duplicate path " + quote_excerpt(files[i].path));
    auto& r = files[i].ranks;
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    if (r.size() > max_file_ranks || (!r.empty() && r.back() >= max_rank))
      return fail(errc::invalid_argument,
                  quote_excerpt(files[i].path) + ": more than " + std::to_string(max_file_ranks) +
                      " ranks, or a rank beyond " + std::to_string(max_rank - 1));
  }
  m.files = std::move(files);
  group pack;
  pack.type = group::kind::pack;
  std::unordered_set<digest, keyed_hash> in_pack;
  auto close_pack = [&] {
    if (!pack.files.empty()) m.groups.push_back(std::move(pack));
    pack = group{};
    pack.type = group::kind::pack;
    in_pack.clear();
  };
  for (std::uint32_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (f.size == 0) continue;  // nothing to transfer: empty files are materialized locally
    if (f.size >= p.small_file_max) {
      group g;
      g.type = group::kind::single;
      g.files = {i};
      g.bytes = f.size;
      m.groups.push_back(std::move(g));
      continue;
    }
    pack.files.push_back(i);
    if (in_pack.insert(f.id).second) pack.bytes += f.size;
    if (pack.bytes >= p.pack_target) close_pack();
  }
  close_pack();
  return m;
}

std::string canonical_json(const manifest& m) {
  // Written directly rather than through a JSON document: a manifest of millions of files would
  // otherwise hold a DOM ten times its size. The bytes are exactly what nlohmann's dump() of the
  // same document gives (keys sorted, no whitespace, its string escaping).
  auto str = [](std::string& out, const std::string& v) { out += json_text(json(v)); };
  std::string out;
  out.reserve(64 + m.files.size() * 140 + m.groups.size() * 64);
  out += "{\"files\":[";
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    if (i) out += ',';
    out += "{\"digest\":\"" + f.id.str() + "\",\"path\":";
    str(out, f.path);
    if (!f.ranks.empty()) {
      out += ",\"ranks\":[";
      for (std::size_t k = 0; k < f.ranks.size(); ++k) {
        if (k) out += ',';
        out += std::to_string(f.ranks[k]);
      }
      out += ']';
    }
    out += ",\"size\":" + std::to_string(f.size) + "}";
  }
  out += "],\"groups\":[";
  for (std::size_t i = 0; i < m.groups.size(); ++i) {
    const auto& g = m.groups[i];
    if (i) out += ',';
    out += "{\"bytes\":" + std::to_string(g.bytes) + ",\"files\":[";
    for (std::size_t k = 0; k < g.files.size(); ++k) {
      if (k) out += ',';
      out += std::to_string(g.files[k]);
    }
    out += "],\"kind\":";
    out += g.type == group::kind::pack ? "\"pack\"" : "\"single\"";
    out += '}';
  }
  out += "],\"name\":";
  str(out, m.name);
  out += ",\"origin\":";
  str(out, m.origin);
  out += ",\"schema\":" + std::to_string(m.schema) + ",\"version\":";
  str(out, m.version);
  out += '}';
  return out;
}

digest manifest_digest(const manifest& m) { return sha256_of(canonical_json(m)); }

result<manifest> parse_manifest(std::string_view text, const std::optional<digest>& expected) {
  if (expected && sha256_of(text) != *expected) {
    return fail(errc::digest_mismatch, "dataset manifest does not hash to " + expected->str());
  }
  manifest m;
  {
    // The document goes as soon as the manifest is read: it is many times the manifest's size.
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return fail(errc::protocol_error, "dataset manifest is not a JSON object");
    try {
      m.schema = j.value("schema", 0);
      if (m.schema != 1)
        return fail(errc::protocol_error,
                    "dataset manifest schema " + std::to_string(m.schema) + " is not supported");
      m.name = j.value("name", "");
      m.version = j.value("version", "");
      m.origin = j.value("origin", "");
      if (!valid_name(m.name) || !valid_version(m.version))
        return fail(errc::protocol_error, "dataset manifest name or version is invalid");
      if (!j.contains("files") || !j["files"].is_array() || !j.contains("groups") ||
          !j["groups"].is_array()) {
        return fail(errc::protocol_error, "dataset manifest needs files and groups");
      }
      for (const auto& f : j["files"]) {
        file_entry e;
        e.path = f.at("path").get<std::string>();
        e.size = f.at("size").get<std::uint64_t>();
        auto d = digest::parse(f.at("digest").get<std::string>());
        if (!d) return fail(d.error().wrap("dataset manifest file " + quote_excerpt(e.path)));
        e.id = *d;
        if (auto s = check_path(e.path); !s) return fail(s.error().wrap("dataset manifest"));
        if (auto r = f.find("ranks"); r != f.end()) {
          if (!r->is_array() || r->empty() || r->size() > max_file_ranks)
            return fail(errc::protocol_error, "dataset manifest file " + quote_excerpt(e.path) +
                                                  ": ranks must be a non-empty array of at most " +
                                                  std::to_string(max_file_ranks));
          for (const auto& v : *r) {
            auto rank = v.get<std::uint32_t>();
            if (rank >= max_rank || (!e.ranks.empty() && e.ranks.back() >= rank))
              return fail(errc::protocol_error, "dataset manifest file " + quote_excerpt(e.path) +
                                                    ": ranks must be sorted, unique, below " +
                                                    std::to_string(max_rank));
            e.ranks.push_back(rank);
          }
        }
        if (!m.files.empty() && !(m.files.back().path < e.path)) {
          return fail(errc::protocol_error, "dataset manifest files are not sorted and unique at " +
                                                quote_excerpt(e.path));
        }
        m.files.push_back(std::move(e));
      }
      std::vector<int> seen(m.files.size(), 0);
      for (const auto& g : j["groups"]) {
        group gr;
        std::string kind = g.at("kind").get<std::string>();
        if (kind == "pack")
          gr.type = group::kind::pack;
        else if (kind == "single")
          gr.type = group::kind::single;
        else
          return fail(errc::protocol_error,
                      "dataset manifest group kind " + quote_excerpt(kind) + " is unknown");
        gr.bytes = g.at("bytes").get<std::uint64_t>();
        std::unordered_set<digest, keyed_hash> uniq;
        std::uint64_t bytes = 0;
        for (const auto& i : g.at("files")) {
          auto idx = i.get<std::uint32_t>();
          if (idx >= m.files.size())
            return fail(errc::protocol_error, "dataset manifest group refers to a missing file");
          if (++seen[idx] > 1)
            return fail(
                errc::protocol_error,
                "dataset manifest file " + quote_excerpt(m.files[idx].path) + " is in two groups");
          if (uniq.insert(m.files[idx].id).second) bytes += m.files[idx].size;
          gr.files.push_back(idx);
        }
        if (gr.files.empty() || (gr.type == group::kind::single && gr.files.size() != 1) ||
            bytes != gr.bytes) {
          return fail(errc::protocol_error, "dataset manifest group is inconsistent");
        }
        m.groups.push_back(std::move(gr));
      }
      for (std::size_t i = 0; i < m.files.size(); ++i) {
        if (seen[i] == 0 && m.files[i].size != 0) {
          return fail(errc::protocol_error, "dataset manifest file " +
                                                quote_excerpt(m.files[i].path) + " is in no group");
        }
      }
    } catch (const json::exception& e) {
      return fail(errc::protocol_error, std::string("dataset manifest: ") + e.what());
    }
  }
  if (canonical_json(m) != text)
    return fail(errc::protocol_error, "dataset manifest is not in canonical form");
  return m;
}

std::vector<std::pair<digest, std::uint64_t>> group_objects(const manifest& m, const group& g) {
  std::vector<std::pair<digest, std::uint64_t>> out;
  out.reserve(g.files.size());
  for (auto i : g.files) {
    if (i < m.files.size()) out.emplace_back(m.files[i].id, m.files[i].size);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; }),
            out.end());
  return out;
}

digest pack_key(const std::vector<std::pair<digest, std::uint64_t>>& objects) {
  sha256_hasher h;
  for (const auto& [d, size] : objects) {
    std::string line = d.str() + " " + std::to_string(size) + "\n";
    h.update(line.data(), line.size());
  }
  return h.finish();
}

std::vector<std::pair<digest, std::uint64_t>> manifest_objects(const manifest& m) {
  std::vector<std::pair<digest, std::uint64_t>> out;
  out.reserve(m.files.size());
  for (const auto& f : m.files) {
    if (f.size > 0) out.emplace_back(f.id, f.size);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; }),
            out.end());
  return out;
}

result<std::vector<listing_entry>> parse_autoindex(std::string_view text, std::size_t max_entries) {
  if (text.size() > (512u << 20))
    return fail(errc::too_large, "directory listing larger than 512 MiB");
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return fail(
        errc::protocol_error,
        "directory listing is not a JSON array (nginx: autoindex on; autoindex_format json;)");
  }
  std::vector<listing_entry> out;
  for (const auto& e : j) {
    if (out.size() >= max_entries)
      return fail(errc::too_large,
                  "directory listing has more than " + std::to_string(max_entries) + " entries");
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("type") ||
        !e["type"].is_string()) {
      return fail(errc::protocol_error, "directory listing entry without a name and a type");
    }
    listing_entry le;
    le.name = e["name"].get<std::string>();
    std::string type = e["type"].get<std::string>();
    if (type == "directory") {
      le.directory = true;
    } else if (type == "file") {
      if (!e.contains("size") || !e["size"].is_number_unsigned()) {
        return fail(errc::protocol_error,
                    "directory listing: file " + quote_excerpt(le.name) + " has no size");
      }
      le.size = e["size"].get<std::uint64_t>();
    } else {
      continue;
    }
    out.push_back(std::move(le));
  }
  return out;
}

std::string url_path_escape(std::string_view path) { return url_escape(path, true); }

}  // namespace shoal::dataset
