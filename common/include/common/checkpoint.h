#pragma once
// Checkpoints: what peerd, the scheduler and shoalctl say to each other about them, declared once.
//
// A checkpoint is a job's state at one step, "<job>@<step>": a content-addressed file set
// published by the node that wrote it (the first seed) and restored over BitTorrent on any member
// (docs/checkpoints.md). Its manifest is a dataset manifest (common/dataset.h) whose name is the
// job, whose version is the step in decimal and whose origin is "node:<writer>"; every file may
// carry the ranks that wrote it (file_entry::ranks), so a restore can take only what some ranks
// read. Its digest is the sha256 of its canonical form, as for datasets.
//
//   peerd (loopback node API, checkpoints.token_file's bearer token):
//     POST   /shoal/v1/checkpoints/publish {"job","step","dir"[,"ranks"]}  → 202 publish
//     GET    /shoal/v1/checkpoints/published[/<job>@<step>]                         publish state
//     POST   /shoal/v1/checkpoints/restore {"checkpoint":"J[@N|@latest]"[,"ranks":[..]]}
//     GET    /shoal/v1/checkpoints[/<job>@<step>]                                   restores here
//     DELETE /shoal/v1/checkpoints/<job>@<step>                                     view and pins
//   scheduler:
//     POST   /v1/checkpoints                        node      register (registration below)
//     GET    /v1/checkpoints[?job=J]                member    records, newest step first
//     GET    /v1/checkpoints/<job>@<step|latest>    member    one record (holders included)
//     GET    /v1/checkpoints/<job>@<step>/manifest  member    the canonical manifest
//     GET    /v1/checkpoints/<job>@<step>/groups/<g> node     group g's torrent, as a metainfo
//                                                             answer (origin::encode), with the
//                                                             scheduler's grant for the caller
//     DELETE /v1/checkpoints/<job>@<step>           operator  forget the record
//
// Decoders take hostile input: bounded, strict, never throwing.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dataset.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::checkpoint {

// ---- Names

// A job name follows dataset names' rule ([a-z0-9][a-z0-9._-]{0,127}); a step is a decimal
// number without sign or leading zeros, at most max_step.
inline constexpr std::uint64_t max_step = 999'999'999'999'999'999ull;
[[nodiscard]] bool valid_job(std::string_view job);

struct ref {
  std::string job;
  std::optional<std::uint64_t> step;      // nullopt: the newest registered step ("latest")
  [[nodiscard]] std::string str() const;  // "J@N" or "J@latest"
};
// "J", "J@latest" or "J@N"; errors say which part is wrong. `allow_latest` false refuses the
// first two.
[[nodiscard]] result<ref> parse_ref(std::string_view s, bool allow_latest = true);
[[nodiscard]] std::string key(std::string_view job, std::uint64_t step);  // "J@N"

// ---- Manifest

// Builds a checkpoint's manifest (groups as datasets': small files packed, large ones single).
[[nodiscard]] result<dataset::manifest> build_manifest(const std::string& job, std::uint64_t step,
                                                       const std::string& writer,
                                                       std::vector<dataset::file_entry> files);
// Parses a manifest (its digest checked when given) and checks that it names a checkpoint: a valid
// job, a step, an origin "node:<name>".
[[nodiscard]] result<dataset::manifest> parse_manifest(std::string_view json,
                                                       const std::optional<digest>& expected = {});
// The step a checkpoint manifest names (its version).
[[nodiscard]] std::uint64_t step_of(const dataset::manifest& m);
// The writer a checkpoint manifest names ("node:<name>" → "<name>").
[[nodiscard]] std::string writer_of(const dataset::manifest& m);

// The rank a file belongs to by its path: the last "rank" (any case) followed by an optional '_'
// or '-' and 1 to 6 digits, not preceded by a letter ("rank_3/model.pt", "mp_rank_00_model.pt",
// "shard-rank7.bin"); nullopt for metadata every rank reads.
[[nodiscard]] std::optional<std::uint32_t> rank_of(std::string_view path);
// Which files a restore of `ranks` takes (indices into m.files): every file whose ranks meet
// `ranks`, and every file without ranks. An empty `ranks` takes everything.
[[nodiscard]] std::vector<std::uint32_t> files_for_ranks(const dataset::manifest& m,
                                                         const std::vector<std::uint32_t>& ranks);
// "0,3,5" → {0,3,5} (sorted, unique, each below dataset::max_rank, at most max_file_ranks).
[[nodiscard]] result<std::vector<std::uint32_t>> parse_ranks(std::string_view list);

// ---- Registration (peerd → scheduler)

inline constexpr std::size_t max_torrent_bytes = 8u << 20;
inline constexpr std::size_t max_registration_bytes = 256u << 20;
inline constexpr std::size_t max_groups = 100'000;

struct group_torrent {
  std::string info_hash;  // 40 lower-case hex: the v1 info-hash of `torrent`
  std::string torrent;    // the .torrent as the writer seeds it (bytes)
};
struct registration {
  std::string manifest;               // canonical JSON
  std::vector<group_torrent> groups;  // one per manifest group, in order
};
// {"manifest": "<canonical JSON as a string>", "groups": [{"info_hash", "torrent": base64}]}
[[nodiscard]] std::string encode(const registration& r);
// Strict: the manifest parses as a checkpoint's, one group entry per manifest group, info-hashes
// are 40 hex, each torrent at most max_torrent_bytes. The parsed manifest comes back too.
struct decoded_registration {
  registration reg;
  dataset::manifest manifest;
  digest manifest_digest;
};
[[nodiscard]] result<decoded_registration> decode_registration(std::string_view json);

// ---- Records (scheduler → members)

struct holder {
  std::string node;
  std::uint64_t bytes = 0;  // of the checkpoint's distinct objects, held there
};
struct record {
  std::string job;
  std::uint64_t step = 0;
  digest manifest;
  std::uint64_t bytes = 0;  // distinct objects
  std::uint64_t files = 0;
  std::uint32_t groups = 0;
  std::string writer;
  std::int64_t published_ms = 0;  // Unix milliseconds, when the scheduler registered it
  std::vector<holder> holders;    // nodes holding all or part of it, most bytes first
  [[nodiscard]] std::string key() const { return checkpoint::key(job, step); }
};
[[nodiscard]] std::string encode(const record& r);
[[nodiscard]] result<record> decode_record(std::string_view json);
// A list: {"checkpoints": [record...]}.
[[nodiscard]] std::string encode(const std::vector<record>& rs);
[[nodiscard]] result<std::vector<record>> decode_records(std::string_view json);

// ---- Paths

namespace paths {
inline constexpr std::string_view node = "/shoal/v1/checkpoints";
inline constexpr std::string_view node_publish = "/shoal/v1/checkpoints/publish";
inline constexpr std::string_view node_published = "/shoal/v1/checkpoints/published";
inline constexpr std::string_view node_restore = "/shoal/v1/checkpoints/restore";
inline constexpr std::string_view scheduler = "/v1/checkpoints";
}  // namespace paths
// "/v1/checkpoints/<J@N>/manifest" and "/v1/checkpoints/<J@N>/groups/<g>".
[[nodiscard]] std::string manifest_target(std::string_view key);
[[nodiscard]] std::string group_target(std::string_view key, std::uint32_t group);
// What follows /v1/checkpoints/ in a path: the ref, and "manifest" or "groups/<g>" or nothing.
struct scheduler_route {
  ref which;
  enum class kind { record, manifest, group } what = kind::record;
  std::uint32_t group = 0;
};
[[nodiscard]] result<scheduler_route> parse_scheduler_path(std::string_view rest);

}  // namespace shoal::checkpoint
