#pragma once
// The heartbeat peerd sends to the scheduler: who the node is, where its BitTorrent listener is,
// and which complete objects it holds (so the tracker can hand it out as a holder even when the
// object's torrent is not loaded). Versioned JSON; both daemons use these functions so the wire
// format lives in one place.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/digest.h"
#include "common/error.h"

namespace shoal::heartbeat {

inline constexpr int schema_version = 1;

struct held_object {
  digest id;
  std::string info_hash;  // 40 hex characters (v1 info-hash of its torrent)
  std::uint64_t size = 0;
  std::string kind = "blob";
};

struct message {
  int schema = schema_version;
  std::string node;
  std::map<std::string, std::string> labels;  // zone, rack, fabric, ...
  std::string ip;                             // BitTorrent address peers connect to
  std::uint16_t bt_port = 0;
  std::uint16_t http_port = 0;
  std::string epoch;      // the scheduler epoch this node last saw ("" at start)
  std::uint64_t seq = 0;  // increases with every message
  bool full = true;       // `objects` is the complete list (else: deltas in added/removed)
  std::vector<held_object> objects;   // full: every held object; delta: added ones
  std::vector<digest> removed;        // delta: objects no longer held
  std::uint64_t cache_capacity = 0, cache_used = 0;
  std::string health = "ok";
};

struct reply {
  std::string epoch;
  std::uint64_t ack_seq = 0;
  bool resync = false;  // the scheduler wants a full list next time
};

[[nodiscard]] std::string encode(const message& m);
// Strict: unknown schema, bad digests, bad info-hashes, absurd sizes are errors naming the field.
[[nodiscard]] result<message> decode(std::string_view json);
[[nodiscard]] std::string encode(const reply& r);
[[nodiscard]] result<reply> decode_reply(std::string_view json);

}  // namespace shoal::heartbeat
