#pragma once
// The heartbeat peerd sends to the scheduler, and the scheduler's reply. Versioned JSON; both
// daemons use these functions so the wire format lives in one place (docs/scheduler.md documents
// every field).
//
// A message says who the node is (name, labels, GPUs, RDMA and netsetup documents, health), where
// its BitTorrent listener is, how full its cache is, which objects it holds, and how far it got
// with the prewarm orders it was given. The object list is either complete (`full`) or a delta
// against the previous message (`added` in `objects`, and `removed`) with `seq` exactly one
// higher than the previous message's. The scheduler answers `resync` when it cannot apply a delta
// (a gap in `seq`, a node it does not know, or an `epoch` that is not its own, i.e. it restarted);
// the node then sends its full list at once. The reply also carries prewarm orders, so the
// scheduler never needs to connect to a node.
//
// Schema 2 adds GPUs, RDMA/netsetup documents, health reasons and prewarm orders and reports to
// schema 1. decode() accepts schema 1 messages (full lists only, no orders) so a scheduler can be
// upgraded before its peerds. Unknown keys are ignored: fields may be added within a schema
// version; anything incompatible bumps it.
//
// Thread-safety: plain values and pure functions.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::heartbeat {

inline constexpr int schema_version = 2;
inline constexpr int min_schema_version = 1;

// Bounds the decoder enforces (a heartbeat is untrusted input). The object bound and the size
// bound derived from it are the scheduler's cap on objects per node (nodes.max_objects_per_node,
// passed in decode_limits); the constants here are its default and its ceiling.
inline constexpr std::size_t max_objects = 4'000'000;  // ceiling of decode_limits::max_objects
inline constexpr std::size_t default_max_objects = 100'000;
inline constexpr std::size_t max_message_bytes = 1u << 30;  // ceiling of the size bound
inline constexpr std::size_t max_labels = 64;
inline constexpr std::size_t max_gpu_groups = 64;
inline constexpr std::uint32_t max_gpus_per_group = 4096;
inline constexpr std::size_t max_document_bytes = 1u << 20;  // rdma / netsetup JSON, serialized
inline constexpr std::size_t max_orders = 1024;
inline constexpr std::size_t max_order_objects = 100'000;
inline constexpr std::uint64_t max_object_size = std::uint64_t{1} << 50;  // 1 PiB
inline constexpr int max_json_depth = 64;
inline constexpr std::size_t max_datasets = 4096;
inline constexpr std::size_t max_checkpoints = 1024;    // "<job>@<step>" entries (checkpoint.h)
inline constexpr std::size_t max_pods = 256;            // job_pod entries
inline constexpr std::size_t max_pod_name_bytes = 320;  // "<namespace>/<name>" (63 + 1 + 253)

// The largest encode() output of one `objects` entry: a 71-character digest, a 40-character
// info-hash, a size of up to 16 digits (max_object_size) and a 32-character kind, with the keys,
// quotes, braces and the comma. A `removed` entry is shorter (a quoted digest and a comma).
inline constexpr std::size_t max_object_json_bytes = 206;
// The largest encode() output of everything else, each list at its bound: 64 labels, the two
// documents (max_document_bytes each), 64 GPU groups, 32 health reasons, 1024 order reports
// with 4 KiB errors, 4096 dataset entries, 1024 checkpoint entries, 256 pods (strings without
// escapes). tests/common checks both.
inline constexpr std::size_t max_fixed_json_bytes = (8u << 20) + (896u << 10);

// The largest heartbeat a node holding `objects` objects sends (a full list), which is also the
// largest delta of that many entries (`objects` and `removed` together): the body limit of
// POST /v1/heartbeat. 100,000 objects: 28.1 MiB.
[[nodiscard]] constexpr std::size_t max_message_bytes_for(std::size_t objects) noexcept {
  return max_fixed_json_bytes + objects * max_object_json_bytes;
}

// What decode() accepts: at most `max_objects` entries in `objects` and `removed` together, and
// at most max_message_bytes_for(max_objects) bytes (checked before parsing).
struct decode_limits {
  std::size_t max_objects = default_max_objects;
};

struct held_object {
  digest id;
  std::string info_hash;  // 40 hex characters (v1 info-hash of its torrent); "" when unknown
  std::uint64_t size = 0;
  std::string kind = "blob";  // short lower-case token: blob, dataset_file, ...
};

// GPUs of one model on the node (capacity, not availability).
struct gpu_group {
  std::string model;
  std::uint32_t count = 0;
};

enum class order_state { queued, running, done, failed };
[[nodiscard]] std::string_view to_string(order_state s) noexcept;

// How far the node got with one prewarm order (sent in every heartbeat while the node remembers
// the order, terminal states included).
struct order_report {
  std::string id;
  order_state state = order_state::queued;
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::string error;  // failed: why
};

// A dataset this node holds wholly or in part (issue #7): how many of its bytes are in the cache
// and whether its read-only view is ready to mount. Sent in every message (it is small); absent in
// messages from nodes that predate it, so decoders treat a missing list as "none".
struct dataset_presence {
  std::string dataset;      // "name@version"
  std::uint64_t bytes = 0;  // bytes of the dataset's distinct objects present in the cache
  std::uint64_t total = 0;  // bytes of the dataset's distinct objects
  bool view = false;        // the view is materialized
  [[nodiscard]] double share() const {
    return total ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
  }
};

// A pod running on the node that carries the job label (peerd's node.cri_job_label, read from
// containerd's CRI): the job it belongs to and the pod.
struct job_pod {
  std::string job;  // checkpoint::valid_job
  std::string pod;  // "<namespace>/<name>", at most max_pod_name_bytes, printable
};

struct message {
  int schema = schema_version;
  std::string node;
  std::map<std::string, std::string> labels;  // zone, rack, fabric, platform, ...
  std::string ip;                             // BitTorrent address peers connect to
  std::uint16_t bt_port = 0;
  std::uint16_t http_port = 0;
  std::string epoch;      // the scheduler epoch this node last saw ("" at start)
  std::uint64_t seq = 0;  // one more than the previous message's, from 1
  bool full = true;       // `objects` is the complete list (else: deltas in objects/removed)
  std::vector<held_object> objects;  // full: every held object; delta: added ones
  std::vector<digest> removed;       // delta: objects no longer held
  std::uint64_t cache_capacity = 0, cache_used = 0;
  std::vector<gpu_group> gpus;
  // netsetup's documents, carried as JSON text and not interpreted here: `rdma` the RDMA NICs
  // (object or array), `netsetup` the discovery/validation document (object, {"schema":1,...}).
  // Empty when the node has none.
  std::string rdma;
  std::string netsetup;
  // Sent as "netsetup_unchanged": true in a delta, instead of `netsetup`, when the document is the
  // one the scheduler acknowledged last and its reply said keeps_netsetup: the scheduler keeps
  // the one it has. Never in a full message (which always carries its documents); an error
  // beside a `netsetup` document.
  bool netsetup_unchanged = false;
  std::string health = "ok";  // ok | degraded | failing
  std::vector<std::string> health_reasons;
  std::vector<order_report> orders;
  std::vector<dataset_presence> datasets;
  // Checkpoints restored or published here ("<job>@<step>" in `dataset`, common/checkpoint.h),
  // the same fields. Absent in messages from nodes that predate checkpoints.
  std::vector<dataset_presence> checkpoints;
  // The node's last message before a clean stop (SIGTERM: a restart, a rolling update): its
  // silence after this is a restart within failover.restart_grace, not a failure. Absent (false)
  // in messages from nodes that predate it.
  bool leaving = false;
  // The node's running pods with a job label (at most max_pods), when pods_known: peerd watches
  // the CRI and its last listing succeeded. Sent as "pods" (an empty array is "none running");
  // absent when unknown (no CRI watch, a failed listing, a node that predates it), and then the
  // scheduler keeps what it knew.
  bool pods_known = false;
  std::vector<job_pod> pods;
};

// One object of a prewarm order, with where to fetch it from (registry-proxy's ns= and repo).
struct order_object {
  digest id;
  std::uint64_t size = 0;
};

// A prewarm order for one image or one dataset on this node.
struct prewarm_order {
  std::string id;          // unique; the node reports progress under it
  std::string image;       // normalized reference ("docker.io/library/nginx:latest"), or ""
  std::string dataset;     // "name@version", or ""
  std::string checkpoint;  // "<job>@<step>" (common/checkpoint.h), or ""; exactly one of the three
  std::string platform;    // the platform `objects` were resolved for ("linux/amd64")
  std::string registry;    // ns= for registry-proxy ("docker.io")
  std::string repository;  // repository the objects belong to ("library/nginx")
  // Resolved by the scheduler for this node's platform. Empty for an image: the node resolves
  // `image` itself through registry-proxy.
  std::vector<order_object> objects;
  std::uint64_t pin_seconds = 0;  // keep the objects from eviction this long (0: no pin)
};

struct reply {
  int schema = schema_version;
  std::string epoch;
  std::uint64_t ack_seq = 0;
  bool resync = false;  // the scheduler wants a full list, now
  // The scheduler keeps each node's netsetup document between messages: a delta may say
  // netsetup_unchanged instead of carrying it again (22 KB for an 8-NIC node). Absent (false)
  // from schedulers that predate it, which would take a missing document for none.
  bool keeps_netsetup = false;
  std::vector<prewarm_order> orders;
};

[[nodiscard]] std::string encode(const message& m);
// What encode(m, parts) leaves out: the netsetup document (and netsetup_unchanged), and the
// holdings (objects and removed, written as empty lists). The scheduler's Redis path writes
// the message without them where it keeps them apart, instead of copying it to clear them.
struct encode_parts {
  bool netsetup = true;
  bool holdings = true;
};
[[nodiscard]] std::string encode(const message& m, const encode_parts& parts);
// Strict: unknown schema, bad names, digests, info-hashes, sizes, ports, addresses, documents,
// oversized lists and wrong JSON types are errors naming the field.
// Too many objects or too many bytes for `limits` are errc::too_large.
[[nodiscard]] result<message> decode(std::string_view json, const decode_limits& limits = {});
[[nodiscard]] std::string encode(const reply& r);
[[nodiscard]] result<reply> decode_reply(std::string_view json);

// Shared validators (also used by the scheduler's REST API for names and labels).
[[nodiscard]] bool valid_node_name(std::string_view s) noexcept;
[[nodiscard]] bool valid_label_key(std::string_view s) noexcept;
[[nodiscard]] bool valid_order_id(std::string_view s) noexcept;
// True when `text` nests arrays/objects deeper than `limit` (checked before parsing, so a
// hostile document cannot make a recursive parser or destructor run out of stack).
[[nodiscard]] bool json_too_deep(std::string_view text, int limit = max_json_depth) noexcept;

}  // namespace shoal::heartbeat
