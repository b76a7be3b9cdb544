#pragma once
// The Lua scripts shared_state runs in Redis (each atomic: no other command runs in between).

namespace shoal::scheduler::scripts {

// Judges a heartbeat by the index's rules against the node's record, applies it to the record
// and holdings, and appends it to the log with its verdict.
// KEYS: record, holdings, log, node set, epoch.
// ARGV: node, message epoch, seq, full ("1"/"0"), endpoint ("ip:port", "" without BitTorrent),
//       inventory JSON, message JSON (both without the netsetup document), log max length,
//       replica id, the netsetup document ("" for none, "=" the node's previous one: the
//       message said netsetup_unchanged),
//       n added, n × (digest, "size kind info_hash"), n removed, n × digest.
// Returns {verdict, log id, epoch, the node's previous log id or ""}, or {"noepoch"} when the
// cluster has no epoch yet. The entry is written in format 1 (shared_log_format) and names its
// node (field n) so that a reader skips what it applied already without decoding it. The
// netsetup document (some 22 KB for an H100 node, in every heartbeat) is kept once per node, in
// the record's field ns, and the entry carries it (field ns) only when it differs from the
// node's previous one: "=" otherwise (the node's previous entry, which every reader applied
// before this one, has it). Entries of older replicas have no ns and the document in m.
extern const char* const heartbeat;

// Takes or keeps the lease. KEYS: lease. ARGV: replica id, ttl ms. Returns 1 when held.
extern const char* const renew;

// Forgets a node silent for longer than ARGV[2] ms (its record, holdings and set member).
// KEYS: record, holdings, node set. ARGV: node, drop_after ms. Returns 1 when forgotten.
extern const char* const expire;

// The registry-proxy replicas that announced themselves (the ring's membership): records ARGV[1]
// (unless empty) at Redis's clock, forgets members silent for longer than ARGV[2] ms, and returns
// the others, at most ARGV[3]. A new member beyond ARGV[3] is not recorded ({"full"} first).
// KEYS: the members' sorted set.
extern const char* const origins;

}  // namespace shoal::scheduler::scripts
