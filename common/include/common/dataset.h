#pragma once
// Datasets: what a user declares (a name, a version, an origin and include/exclude globs), the
// content-addressed manifest registry-proxy resolves it into (every file's path, size and
// sha256, and how files are grouped for transfer), and the path rules that keep origin keys from
// escaping a dataset view (no "..", no absolute paths, no NUL or control characters, bounded
// lengths).
//
// Grouping: files smaller than `small_file_max` are packed, in path order, into packs of about
// `pack_target` bytes (one multi-file torrent each), so a dataset of millions of small files
// means thousands of swarms, not millions; larger files are each their own object and swarm, so
// they are never held up by small ones.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::dataset {

// ---- declaration

struct origin {
  enum class kind { s3, http } type = kind::s3;
  std::string url;       // s3://bucket/prefix or https://host/base/
  std::string endpoint;  // S3 endpoint URL (empty: AWS for the region)
  std::string region = "us-east-1";
  std::string
      credentials_file;  // "ACCESS_KEY:SECRET" (empty: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)
  // Parsed from url:
  std::string bucket;  // s3
  std::string prefix;  // s3 key prefix ("" or ending in '/'), or the http base URL
};

struct declaration {
  std::string name;     // [a-z0-9][a-z0-9._-]{0,127}
  std::string version;  // [A-Za-z0-9][A-Za-z0-9._-]{0,127}
  dataset::origin origin;
  std::vector<std::string> include;  // globs; empty: everything
  std::vector<std::string> exclude;
};

// "name@version" → (name, version); errors say which part is invalid.
[[nodiscard]] result<std::pair<std::string, std::string>> parse_ref(std::string_view ref);
[[nodiscard]] bool valid_name(std::string_view name);
[[nodiscard]] bool valid_version(std::string_view version);
// Parses and validates a declaration from JSON; fills origin.bucket/prefix.
[[nodiscard]] result<declaration> parse_declaration(std::string_view json);
[[nodiscard]] std::string to_json(const declaration& d);

// ---- paths and globs

inline constexpr std::size_t max_path_bytes = 4096;
inline constexpr std::size_t max_component_bytes = 255;

// A dataset-relative path is valid when it is non-empty, relative, '/'-separated, has no empty,
// "." or ".." component, no NUL or control character, no backslash, is valid UTF-8, and fits the
// limits above. The error message says which rule failed (the path is quoted, escaped).
[[nodiscard]] status check_path(std::string_view path);

// Glob match on '/'-separated paths: '*' and '?' stay within a component, '**' spans
// components ("a/**/b.txt" matches "a/b.txt" and "a/x/y/b.txt"), "[abc]" / "[a-z]" / "[!a]"
// classes. A pattern without '/' matches the file name in any directory.
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view path);
// include (empty = all) and not any exclude.
[[nodiscard]] bool selected(const declaration& d, std::string_view path);

// ---- manifest

struct file_entry {
  std::string path;
  std::uint64_t size = 0;
  digest id;  // sha256 of the content
  // Checkpoints (common/checkpoint.h): the ranks that wrote the file and read it back, sorted and
  // unique, at most max_file_ranks, each below max_rank; empty: every rank's (metadata). Datasets
  // leave it empty; the canonical form carries "ranks" only when it is not.
  std::vector<std::uint32_t> ranks;
};
inline constexpr std::size_t max_file_ranks = 4096;
inline constexpr std::uint32_t max_rank = 1u << 20;

struct group {
  enum class kind { single, pack } type = kind::single;
  std::vector<std::uint32_t> files;  // indices into manifest::files (single: exactly one)
  std::uint64_t bytes = 0;           // unique bytes transferred for this group
};

struct grouping_policy {
  std::uint64_t small_file_max = 4u << 20;  // files below this are packed
  std::uint64_t pack_target = 64u << 20;    // a pack closes once it holds this many bytes
};

struct manifest {
  int schema = 1;
  std::string name, version, origin;
  std::vector<file_entry> files;  // sorted by path, unique paths
  std::vector<group> groups;
  [[nodiscard]] std::uint64_t total_bytes() const;
};

// Sorts files, checks paths and duplicates, and groups them. Errors name the offending path.
[[nodiscard]] result<manifest> build_manifest(std::string name, std::string version,
                                              std::string origin, std::vector<file_entry> files,
                                              const grouping_policy& p = {});
// The canonical JSON (stable key order, no whitespace): its sha256 is the manifest's digest.
[[nodiscard]] std::string canonical_json(const manifest& m);
[[nodiscard]] digest manifest_digest(const manifest& m);
// Parses a manifest and checks it: paths, sorting, group coverage (every file in exactly one
// group), sizes. `expected` (when given) must equal the digest of the canonical form.
[[nodiscard]] result<manifest> parse_manifest(std::string_view json,
                                              const std::optional<digest>& expected = {});

// ---- groups and origins (shared by registry-proxy and peerd)

// The distinct objects of a group, as (digest, size) in pack order (sorted by digest): what its
// torrent holds.
[[nodiscard]] std::vector<std::pair<digest, std::uint64_t>> group_objects(const manifest& m,
                                                                          const group& g);
// A pack's identity independent of its torrent: the sha256 of its members' "<digest> <size>\n"
// lines in pack order. Two datasets with the same small files share packs and their torrents.
[[nodiscard]] digest pack_key(const std::vector<std::pair<digest, std::uint64_t>>& objects);
// The distinct objects of a whole manifest (every non-empty file once), sorted by digest.
[[nodiscard]] std::vector<std::pair<digest, std::uint64_t>> manifest_objects(const manifest& m);

// One entry of an HTTP origin's directory listing (nginx `autoindex_format json`).
struct listing_entry {
  std::string name;
  bool directory = false;
  std::uint64_t size = 0;
};
// Parses nginx's JSON autoindex: [{"name":..., "type":"file"|"directory", "size":N, ...}].
// Other types (symlinks nginx could not follow) are skipped. Names are returned as sent; the
// caller checks the resulting paths with check_path(). Bounded: at most `max_entries`.
[[nodiscard]] result<std::vector<listing_entry>> parse_autoindex(
    std::string_view json, std::size_t max_entries = 10'000'000);
// Percent-encodes a dataset path for an http(s) origin URL ('/' kept, RFC 3986 unreserved kept).
[[nodiscard]] std::string url_path_escape(std::string_view path);

}  // namespace shoal::dataset
