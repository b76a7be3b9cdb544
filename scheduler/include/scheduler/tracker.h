#pragma once
// The BitTorrent tracker (BEP 3 HTTP announce, BEP 23 compact peers), keyed by info-hash.
//
// Handout policy, in order: complete holders (seeds) first; then peers in the requester's rack,
// then its zone; then the least loaded (fewest recent handouts, then most bytes left to fetch,
// so that nearly-done peers are not swamped). Origins (registry-proxy) are always included when
// they are in the swarm. A peer is never handed itself (same node name or same endpoint).
//
// Node identity and topology come from the announce URL that peerd configures:
//   /announce?node=<name>&zone=<zone>&rack=<rack>&role=<peer|origin>&info_hash=...
// (libtorrent appends its own parameters to a tracker URL that already has a query string.)
// With TLS on, the caller's certificate must name that node (authorize_announce).
//
// Threading: thread-safe (one mutex); announce handling is O(swarm size) and never blocks.
// Heartbeat holdings, a dropped node and expiry cost what they touch, never a walk over every
// swarm: a node's holder entries are found through what it reported (holdings_), announced
// peers expire from a queue ordered by when they fall silent.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/bencode.h"
#include "common/error.h"
#include "common/http_server.h"
#include "common/siphash.h"

namespace shoal::scheduler {

struct tracker_options {
  std::chrono::seconds interval{15};       // re-announce interval while downloading
  std::chrono::seconds seed_interval{60};  // re-announce interval for complete holders
  std::chrono::seconds min_interval{5};    // "min interval" answered to clients
  std::chrono::seconds peer_timeout{180};  // drop peers silent for this long
  std::uint32_t default_numwant = 50;
  std::uint32_t max_numwant = 200;
  bool trust_announced_ip = false;       // use ip= instead of the source address (not with TLS)
  std::chrono::seconds load_window{30};  // handouts counted as load for this long
  // Caps: an announce that would start a swarm beyond max_swarms, or add a peer to a swarm that
  // has max_peers_per_swarm, is refused (429 with a failure reason); a heartbeat's holdings
  // beyond them are not recorded (set_holdings counts them). Known peers are always heard.
  std::size_t max_swarms = 1'000'000;
  std::size_t max_peers_per_swarm = 20'000;
  // BitTorrent between members (TLS on): hand out only peers that announced the swarm and did
  // not stop, i.e. that have its torrent loaded. A holder known from heartbeats alone cannot
  // answer: an SSL peer refuses, in the TLS handshake, a connection for a torrent it has not
  // loaded (docs/p2p.md "SSL torrents and unloaded seeds"). Such holders stay in the index.
  bool announced_peers_only = false;
};

struct announce_request {
  std::array<std::uint8_t, 20> info_hash{};
  std::array<std::uint8_t, 20> peer_id{};
  std::string ip;  // address the peer is reachable at
  std::uint16_t port = 0;
  std::uint64_t uploaded = 0, downloaded = 0, left = 0;
  enum class event_t { none, started, completed, stopped } event = event_t::none;
  std::uint32_t numwant = 0;
  bool compact = true;
  std::string node, zone, rack;
  bool origin = false;
};

// Parses the query of an announce; `source_ip` is the TCP peer address. Errors name the field.
[[nodiscard]] result<announce_request> parse_announce(const http::request& req,
                                                      const std::string& source_ip,
                                                      const tracker_options& opts);
// Mutual TLS: "" when the caller's certificate may make this announce, else why not
// (answered 403). A node certificate announces for its own node only (an announce without
// node= takes the certificate's name); role=origin needs registry-proxy's certificate. Plain
// connections (tls.enabled: false) are not checked.
[[nodiscard]] std::string authorize_announce(announce_request& a, const tls::peer_identity& peer);

struct tracker_stats {
  std::uint64_t announces = 0;
  std::uint64_t bad_announces = 0;
  std::uint64_t swarms = 0;
  std::uint64_t peers = 0;
  std::uint64_t refused_announces = 0;       // by max_swarms or max_peers_per_swarm
  std::uint64_t skipped_holdings = 0;        // heartbeat holdings beyond the caps
  std::uint64_t unauthorized_announces = 0;  // TLS: the certificate does not name the announcer
  std::uint64_t stale_stops = 0;  // "stopped" from a torrent the endpoint has since replaced
};

// An announce's answer: the HTTP status and the bencoded body (peers, or a failure reason).
struct announce_answer {
  unsigned status = 200;
  std::string body;
};

class tracker {
 public:
  using clock = std::chrono::steady_clock;
  explicit tracker(tracker_options opts, std::function<clock::time_point()> now = clock::now);

  // Records the announce and returns the bencoded response body.
  [[nodiscard]] std::string announce(const announce_request& a) { return answer(a).body; }
  // The same with the status: 429 when a cap refuses the announce.
  [[nodiscard]] announce_answer answer(const announce_request& a);
  // The HTTP face: GET /announce → 200 with a bencoded body (failure reason on bad input, 400).
  [[nodiscard]] http::response handle(const http::request& req);
  // An announce another scheduler replica answered (shared_state.h): recorded, not answered.
  void record(const announce_request& a);
  // Called with every announce handle() answered with 200 (shared_state.h publishes them for
  // the other replicas). Set before serving; must not block.
  void set_observer(std::function<void(const announce_request&)> fn) { observer_ = std::move(fn); }

  // A node's complete objects as reported by its heartbeat: it becomes a holder (a seed) of each
  // swarm even when the torrent is not loaded there (peerd loads it when a peer connects).
  // With `full`, swarms the node no longer lists drop its holder entry.
  // Every call (also with an empty delta) refreshes the node's holder entries: they expire
  // `peer_timeout` after the node's last heartbeat, not after the heartbeat that listed them.
  // Returns how many info-hashes were not recorded because of max_swarms/max_peers_per_swarm.
  std::size_t set_holdings(const std::string& node, const std::string& ip, std::uint16_t port,
                           const std::string& zone, const std::string& rack,
                           const std::vector<std::array<std::uint8_t, 20>>& info_hashes, bool full);
  // A heartbeat delta's removed objects: the node stops being a holder of these swarms.
  void remove_holdings(const std::string& ip, std::uint16_t port,
                       const std::vector<std::array<std::uint8_t, 20>>& info_hashes);
  // The node was dropped by the index: every holder entry of the endpoint goes.
  void drop_holder(const std::string& ip, std::uint16_t port);

  // Drops peers that stopped announcing. Called periodically and by announce().
  void expire();
  [[nodiscard]] tracker_stats stats() const;
  // Holders of a swarm by node name (complete or not), for the scheduler's index and tests.
  [[nodiscard]] std::vector<std::string> nodes_in(
      const std::array<std::uint8_t, 20>& info_hash) const;

 private:
  struct peer {
    std::string node, zone, rack;
    std::string ip;
    std::uint16_t port = 0;
    std::uint64_t left = 0;
    bool origin = false;
    bool holder = false;     // from a heartbeat, not an announce
    bool announced = false;  // its last announce was not "stopped" (announced_peers_only)
    // The peer id of its last announce (libtorrent draws one per torrent); all zero: unknown (a
    // holder from a heartbeat, or an announce from an older replica's log entry).
    std::array<std::uint8_t, 20> peer_id{};
    clock::time_point last_seen;
    std::vector<clock::time_point> handouts;  // recent handouts (load estimate)
    std::uint64_t ticket = 0;                 // its entry in expiries_ (announced peers), 0: none
  };
  struct swarm {
    std::map<std::string, peer> peers;  // key: ip:port
    std::uint64_t completed = 0;
  };
  // Info-hashes come from announces and heartbeats (chosen by the sender): a keyed hash, so
  // nobody can pile swarms into one bucket.
  using hash_key = keyed_hash;
  using swarm_map = std::unordered_map<std::array<std::uint8_t, 20>, swarm, hash_key>;

  // The peers an announce hands out, and the swarm's seed and leecher counts.
  struct peer_pick {
    std::vector<peer*> chosen;
    std::int64_t complete = 0, incomplete = 0;
  };

  // When an announced peer is next looked at by expire_locked(): peer_timeout after it was
  // last seen. `id` is the peer's ticket; an entry whose peer has another ticket (or is gone) is
  // stale and skipped.
  struct expiry {
    clock::time_point due;
    std::uint64_t id = 0;
    std::array<std::uint8_t, 20> info_hash{};
    std::string key;
  };

  std::string failure(const std::string& why) const;
  void expire_locked(clock::time_point now);
  // The peer `key` of `sw`, created (and counted) when absent.
  peer& peer_locked(swarm& sw, const std::string& key);
  // Erases a peer (uncounting it) and then the swarm when it has no peer left.
  void erase_peer_locked(swarm_map::iterator sw, std::map<std::string, peer>::iterator p);
  // Drops `key`'s holder entry in the swarm `info_hash` (not an announced peer's), if it was
  // last seen before `seen_before`.
  void drop_holding_locked(const std::array<std::uint8_t, 20>& info_hash, const std::string& key,
                           clock::time_point seen_before = clock::time_point::max());
  // An announced peer without an entry in expiries_ gets one.
  void schedule_locked(const std::array<std::uint8_t, 20>& info_hash, const std::string& key,
                       peer& p, clock::time_point due);
  // The swarm an announce or a holding goes to, created if the caps allow (else null), and
  // whether `key` may join it (already there, or room for one more peer).
  swarm* admit_locked(const std::array<std::uint8_t, 20>& info_hash, const std::string& key);
  // announce(), with mu_ held: records the requester in its swarm (a "stopped" holder stays a
  // holder), ...
  void record_locked(swarm& sw, const std::string& key, const announce_request& a,
                     clock::time_point now);
  // ... ranks the other peers (seeds, then topology, load, bytes left) and picks numwant of them,
  // origins always, ...
  peer_pick pick_peers_locked(swarm& sw, const std::string& key, const announce_request& a,
                              clock::time_point now);
  // ... and writes them into the response, compact or not, counting handouts as load.
  static void add_peers(bencode::dict& d, const std::vector<peer*>& chosen,
                        const announce_request& a, clock::time_point now);

  tracker_options opts_;
  std::function<clock::time_point()> now_;
  std::function<void(const announce_request&)> observer_;
  mutable std::mutex mu_;
  swarm_map swarms_;
  // What each node endpoint (ip:port) last reported holding: a "stopped" announce for one of
  // these keeps the node as a holder (it unloaded the torrent, it did not drop the object).
  std::unordered_map<std::string, std::set<std::array<std::uint8_t, 20>>> holdings_;
  // Last heartbeat per holder endpoint: keeps its holder entries alive.
  std::unordered_map<std::string, clock::time_point> holder_seen_;
  clock::time_point last_expire_{};
  // Min-heap on `due` (std::push_heap with a greater-than), at most one live entry per peer.
  std::vector<expiry> expiries_;
  std::uint64_t next_ticket_ = 1;
  std::size_t peer_count_ = 0;
  tracker_stats stats_;
};

}  // namespace shoal::scheduler
