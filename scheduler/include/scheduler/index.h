#pragma once
// The cluster cache index: what every node is (inventory from its heartbeats) and which objects
// it holds, kept as soft state. Heartbeats carry the node's full object list or a delta with a
// sequence number; a delta the index cannot apply (an unknown node, a gap in the sequence, or an
// epoch from before this scheduler started) is refused with "resync", and the node sends its
// full list at once. A node silent for `unhealthy_after`, reporting `failing`, or whose last
// heartbeat said it was leaving is unhealthy (not a placement target, not a source); silent for
// `drop_after`, it is forgotten with everything it held. Whether an unhealthy node has failed is
// failures.h's question.
//
// Lifecycle: built by the app with the scheduler's epoch (random per start); lives until exit.
// Threading: thread-safe; one shared_mutex (heartbeats write, queries read). All queries copy
// what they return, except the node part of a view: that is an immutable list shared by views
// (see node_snapshot below).

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/heartbeat.h"
#include "common/siphash.h"
#include "scheduler/cost.h"

namespace shoal::scheduler {

using info_hash = std::array<std::uint8_t, 20>;

struct index_options {
  std::chrono::milliseconds unhealthy_after{30'000};
  std::chrono::milliseconds drop_after{300'000};
  std::string default_platform = "linux/amd64";
  std::size_t max_seen = 1'000'000;  // digests remembered as "has been in the cluster"
  // Caps (the sender chooses the digests it lists: in plain mode any sender can name a new node;
  // with TLS, any node can still list any digests for itself).
  // A heartbeat from a node not yet known when max_nodes are is refused (429); known nodes are
  // always heard. A heartbeat that would leave its node holding more than max_objects_per_node
  // objects is refused (413). Refused heartbeats change nothing.
  std::size_t max_nodes = 10'000;
  std::size_t max_objects_per_node = heartbeat::default_max_objects;
  // Holding changes kept for changes_since() (about 40 bytes each; allocated on the first
  // change). At 10,000 heartbeats/s of 5 changes each, 131,072 reach back 2.6 s.
  std::size_t change_log = 1u << 17;
  // Tests only: runs inside apply() between a full list's plan (made under the shared lock) and
  // its application (under the exclusive one), with no lock held.
  std::function<void()> between_plan_and_apply_for_test;
};

// One change of which node holds which object, as the change log keeps it: per-job scores
// (scores.h) follow the index through these instead of reading every holder again.
struct holding_change {
  enum class kind : std::uint8_t {
    added,      // `node` now holds `id`
    removed,    // `node` no longer holds `id`
    forgotten,  // `id` left the "has been in the cluster" window (max_seen)
  };
  digest id;
  std::uint32_t node = 0;  // the index's node id (node_classes::index_of_id); 0 for forgotten
  kind what = kind::added;
  // removed: whether the object still counts as seen (held elsewhere, or remembered)
  bool seen = true;
};

// How apply() takes a heartbeat that shared state (shared_state.h) already judged: every
// scheduler replica applies the shared log in one order with Redis's verdict, so that they all
// hold the same index.
struct apply_decision {
  // "full", "ok" (apply the delta), or a resync reason: the delta is not applied. Empty: the
  // index judges (a lone scheduler).
  std::string verdict;
  // How long ago the heartbeat arrived (a node loaded from Redis at start).
  std::chrono::milliseconds age{0};
};

// What applying one heartbeat did, for the tracker and the reply.
struct apply_outcome {
  bool resync = false;
  std::string resync_reason;  // unknown_node | epoch | gap | moved (a new BitTorrent endpoint)
  bool full = false;          // a full list replaced the node's holdings
  std::string ip;             // the node's BitTorrent address (message ip, or the source address)
  std::vector<info_hash> added;    // full: every held info-hash; delta: added ones
  std::vector<info_hash> removed;  // delta only
  // The node's previous BitTorrent endpoint when this heartbeat moved it (its tracker holder
  // entries there go); empty otherwise.
  std::string moved_from_ip;
  std::uint16_t moved_from_port = 0;
  // Refused by a cap, nothing applied: the HTTP status (413 or 429) and why; 0 when applied.
  unsigned refused = 0;
  std::string refused_reason;
};

struct node_summary {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string platform;
  std::string ip;
  std::uint16_t bt_port = 0, http_port = 0;
  std::vector<heartbeat::gpu_group> gpus;
  std::string rdma;                // JSON text
  shared_text netsetup;            // JSON text, the index's copy (node_view::netsetup)
  std::uint64_t netsetup_rev = 0;  // node_view::netsetup_rev
  std::string health;              // as reported
  std::vector<std::string> health_reasons;
  std::vector<heartbeat::dataset_presence> datasets;  // as last reported (issue #7)
  bool healthy = false;    // reported ok/degraded, heard from recently, not leaving
  bool leaving = false;    // its last heartbeat said it was stopping cleanly (a restart)
  double last_seen_s = 0;  // seconds since the last heartbeat
  std::uint64_t cache_capacity = 0, cache_used = 0;
  std::size_t objects = 0;
  std::uint64_t bytes_held = 0;
  std::uint64_t seq = 0;
  bool synced = false;  // the index has the node's full list
  int schema = 0;
};

struct holder_info {
  std::string node;
  bool healthy = false;
  std::string zone, rack;
};

struct object_summary {
  object_ref ref;
  std::string info_hash;
  std::string kind;
  std::vector<holder_info> holders;
};

struct dropped_node {
  std::string name;
  std::string ip;
  std::uint16_t bt_port = 0;
};

struct index_stats {
  std::size_t nodes = 0, healthy_nodes = 0, objects = 0, holdings = 0;
};

class cluster_index {
 public:
  using clock = std::chrono::steady_clock;
  cluster_index(index_options opts, std::string epoch,
                std::function<clock::time_point()> now = clock::now);
  cluster_index(const cluster_index&) = delete;
  cluster_index& operator=(const cluster_index&) = delete;

  [[nodiscard]] std::string epoch() const;
  // A new epoch (shared state: the cluster's epoch changed because Redis lost its data). Nodes
  // then resend their full lists: their deltas name the old one.
  void set_epoch(std::string epoch);
  // Records the node's inventory and applies its object list (full) or delta (if it can).
  // With a decision, the verdict is taken as given and the caps are not checked (the replica
  // that received the heartbeat checked them: refused() before it wrote the log).
  [[nodiscard]] apply_outcome apply(const heartbeat::message& m, std::string_view source_ip,
                                    const apply_decision* decided = nullptr);
  // Whether the caps refuse `m` (out.refused and why set), without applying it.
  [[nodiscard]] apply_outcome refused(const heartbeat::message& m) const;
  // Forgets nodes silent for drop_after; returns them (their tracker entries go too).
  [[nodiscard]] std::vector<dropped_node> expire();

  [[nodiscard]] std::vector<node_summary> nodes() const;
  // Every node with only what liveness needs: name, ip, bt_port, health, health_reasons,
  // healthy, leaving, last_seen_s, netsetup (shared, not copied) and netsetup_rev, seq, synced
  // (labels, GPUs and datasets left empty). The failure detector's input once a second: at 5,000
  // nodes, copying whole summaries was most of an idle scheduler's CPU, and an H100 node's
  // netsetup document alone is some 22 KB.
  [[nodiscard]] std::vector<node_summary> liveness() const;
  [[nodiscard]] std::optional<node_summary> node(std::string_view name) const;
  [[nodiscard]] bool healthy(std::string_view name) const;
  [[nodiscard]] std::optional<object_summary> object(const digest& d) const;
  // Every node, and these objects with their holders: the input of the cost model.
  [[nodiscard]] cluster_view view(std::span<const digest> objects) const;
  // The holding changes logged after sequence `since` (a view's `changes`, or what an earlier
  // call returned), in order, under one read lock: `on_nodes` first gets the current node list
  // (the one view() would share) and may refuse it (false: nothing more is called), then
  // `on_change` gets each change. Returns the sequence after the last change, or nullopt when
  // `on_nodes` refused or the log no longer reaches back to `since` (then the caller starts over
  // from a view).
  [[nodiscard]] std::optional<std::uint64_t> changes_since(
      std::uint64_t since, const std::function<bool(const node_list&)>& on_nodes,
      const std::function<void(const holding_change&)>& on_change) const;
  // How many of `objects` the node holds, and their bytes (0 for an unknown node).
  struct held_summary {
    std::size_t count = 0;
    std::uint64_t bytes = 0;
  };
  [[nodiscard]] held_summary held(std::string_view node, std::span<const object_ref> objects) const;
  [[nodiscard]] index_stats stats() const;
  // The platform of a node (label `platform`, or kubernetes.io/os + kubernetes.io/arch), else
  // the default.
  [[nodiscard]] std::string platform_of(const std::map<std::string, std::string>& labels) const;

 private:
  // Every node as placement sees it, built once and shared by every view until it goes stale.
  // Building it copies each node's labels and strings (milliseconds at 5,000 nodes); the
  // extender needs it on every request, while heartbeats rarely change what it holds: a
  // heartbeat that only refreshes liveness or objects leaves it valid. It is stale when
  //  - `generation` differs from the index's: a node came or went, changed its labels, GPUs,
  //    netsetup document or reported health, or came back after being unreachable;
  //  - the clock reached `valid_until`, the first moment a node reachable at build time can
  //    have become unreachable (its last heartbeat then + unhealthy_after; later heartbeats only
  //    postpone that, so the bound is safe), or went back before `built_at` (test clocks).
  // So checking it costs O(1) per view. Immutable once built.
  struct node_snapshot {
    std::uint64_t generation = 0;
    clock::time_point built_at, valid_until;
    std::vector<node_view> nodes;  // sorted by name (the order of nodes_)
    // Of nodes (cost.h), shared by views like nodes; its index_of_id maps a node id to its
    // index in nodes (npos: none).
    node_classes classes;
    static constexpr std::uint32_t npos = ~std::uint32_t{0};
  };
  // The current snapshot (rebuilt when stale). Caller holds mu_ (shared is enough).
  [[nodiscard]] std::shared_ptr<const node_snapshot> snapshot_locked(clock::time_point now) const;
  // The snapshot's node list as views share it (aliasing: the list keeps the snapshot alive).
  [[nodiscard]] static node_list list_of(const std::shared_ptr<const node_snapshot>& snap);

  struct object_entry {
    std::uint64_t size = 0;
    std::string info_hash;  // 40 hex, "" when unknown
    std::string kind;
    std::vector<std::uint32_t> holders;  // node ids, sorted
  };
  // Keyed by digests that heartbeats name (chosen by the sender): hashed with a keyed hash.
  using object_map = std::unordered_map<digest, object_entry, keyed_hash>;
  // An object's element of objects_ (stable: unordered_map never moves its elements). A node's
  // holdings point at them, so that a digest is hashed (SipHash) once per heartbeat entry rather
  // than once per container it is looked up in, and a holding costs a 16-byte node.
  using object_ptr = object_map::value_type*;
  struct node_entry {
    std::uint32_t id = 0;
    heartbeat::message inv;  // last inventory (objects, removed and orders cleared)
    std::string ip;
    clock::time_point last_seen;
    // What the node holds: elements of objects_ (each lists this node in its holders). Hashed by
    // address, which no sender chooses.
    std::unordered_set<object_ptr> held;
    std::uint64_t bytes_held = 0;
    // A value no other state of any node's `held` had (from held_versions_); a full list's plan
    // is applied only while it is unchanged.
    std::uint64_t held_version = 0;
    std::uint64_t seq = 0;
    bool synced = false;
    std::uint64_t netsetup_rev = 0;  // node_view::netsetup_rev (from netsetup_revs_)
    // The netsetup document, shared with the node snapshots (inv.netsetup stays empty).
    shared_text netsetup;
  };

  // A full list of a known node, planned under the shared lock (decisions go on meanwhile):
  // which of its objects the node does not hold yet, or holds with other details (`fresh`,
  // indexes into m.objects, applied by add_holder), which held ones it leaves out (`gone`),
  // and the info-hashes of the rest, which change nothing. Valid while the node's held_version
  // is `version`; the exclusive section then applies only this difference. The same plan, made
  // under the exclusive lock, applies a list whose plan went stale or whose node is new.
  struct full_plan {
    std::uint64_t version = 0;
    std::vector<std::uint32_t> fresh;
    std::vector<object_ptr> gone;
    std::vector<info_hash> kept_hashes;
  };
  [[nodiscard]] std::optional<full_plan> plan_full(const heartbeat::message& m) const;
  [[nodiscard]] full_plan plan_full_locked(const node_entry& n, const heartbeat::message& m) const;
  // Applies `plan`, or one made now when it is missing or the node's holdings changed since.
  void apply_full_locked(node_entry& n, const heartbeat::message& m, std::optional<full_plan> plan,
                         apply_outcome& out);

  // Why the caps refuse `m` (sets out.refused), with mu_ held; `n` is null for a new node.
  [[nodiscard]] bool refuse_locked(const heartbeat::message& m, const node_entry* n,
                                   apply_outcome& out) const;
  // Records that `n` holds `o`; returns its element of objects_.
  object_ptr add_holder(node_entry& n, const heartbeat::held_object& o,
                        std::vector<info_hash>* hashes);
  void remove_holder(node_entry& n, const digest& d, std::vector<info_hash>* hashes);
  void remove_holder(node_entry& n, object_ptr e, std::vector<info_hash>* hashes);
  // Whether `n` holds `d`.
  [[nodiscard]] bool holds_locked(const node_entry& n, const digest& d) const;
  void remember(const digest& d);
  void log_change(const digest& d, std::uint32_t node, holding_change::kind what, bool seen);
  [[nodiscard]] bool healthy_locked(const node_entry& n, clock::time_point now) const;
  [[nodiscard]] node_summary summary_locked(const node_entry& n, clock::time_point now) const;
  // The fields liveness() fills (summary_locked fills them the same way).
  void liveness_locked(node_summary& s, const node_entry& n, clock::time_point now) const;

  index_options opts_;
  std::string epoch_;  // guarded by mu_
  std::function<clock::time_point()> now_;
  mutable std::shared_mutex mu_;
  std::map<std::string, node_entry, std::less<>> nodes_;
  std::unordered_map<std::uint32_t, std::string> names_;  // id → name
  std::uint32_t next_id_ = 1;
  std::uint64_t netsetup_revs_ = 0;  // the last netsetup_rev given to a document
  object_map objects_;
  std::size_t holdings_ = 0;
  std::unordered_set<digest, keyed_hash> seen_;
  std::deque<digest> seen_order_;
  // The change log: a ring of the last opts_.change_log holding changes; change s (counted from
  // 0) is at log_[s % size]. log_next_ is the sequence the next change gets.
  std::vector<holding_change> log_;
  std::uint64_t log_next_ = 0;
  // Bumped (under the unique lock) by every change a node_snapshot shows, other than liveness.
  std::uint64_t nodes_generation_ = 1;
  std::uint64_t held_versions_ = 0;  // node_entry::held_version's source
  // Guards snapshot_ only: readers under the shared lock may replace a stale snapshot.
  mutable std::mutex snapshot_mu_;
  mutable std::shared_ptr<const node_snapshot> snapshot_;
};

// "0123..." (40 hex) → bytes; false when malformed.
[[nodiscard]] bool parse_info_hash(std::string_view hex, info_hash& out);

}  // namespace shoal::scheduler
