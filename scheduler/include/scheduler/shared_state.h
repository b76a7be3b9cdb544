#pragma once
// Scheduler replicas sharing state through Redis (docs/ha.md). Any replica answers any request;
// each keeps the whole index and tracker in memory (its read cache: placement never pays a Redis
// round trip per node) and they agree because they apply one shared log in one order:
//
//  - A heartbeat is judged and recorded by one Lua script, atomically: the node's record
//    (`<prefix>n:<node>`: inventory, seq, endpoint, synced, last seen, last log id) and holdings
//    (`<prefix>h:<node>`: digest → "size kind info_hash") are updated, and the heartbeat with its
//    verdict (full | ok | unknown_node | epoch | gap | moved, the index's rules) is appended to the
//    log stream (`<prefix>log`). The receiving replica then waits for `WAIT wait_replicas` (a
//    Sentinel failover is asynchronous: what a replica of Redis did not get is rebuilt from
//    heartbeat epochs, since the node's next delta is then a gap and it resends its full list),
//    applies the heartbeat itself when the node's previous entry (the script returns its id) is
//    the last one applied here for that node, and otherwise waits for its log reader to have
//    applied the entry (read-your-writes either way), and answers.
//  - Announces are answered at once by the replica that receives them and appended to the log
//    for the others (from a bounded queue, never on an io thread).
//  - Every replica reads the log (XREAD BLOCK, in batches of read_batch) and applies each entry
//    it has not applied yet (a heartbeat names its node; node_log_ has what was): heartbeats to the
//    index and the tracker with Redis's verdict (cluster_index::apply with a decision), announces
//    to the tracker.
//  - The cluster's epoch is `<prefix>epoch`, created once. When Redis loses it (restarted
//    empty), a replica creates a new one, every replica adopts it and every node resyncs.
//  - At start, after a gap in the log (trimmed past what this replica read) or a new epoch, a
//    replica loads every node's record and holdings and the recent announces, then reads on.
//  - Loops that must run once run on the holder of an expiring lease (`<prefix>lease`, SET NX PX,
//    renewed by compare-and-expire); it moves within lease_ttl when the holder dies. Today: the
//    expiry of node records in Redis (nodes silent for drop_after, found through `<prefix>seen`,
//    a sorted set of each node's last heartbeat).
//
// Degraded, not down: with Redis unreachable, heartbeats are applied locally as a lone scheduler
// would, answers carry `Shoal-Stale` and shoal_scheduler_shared_state_stale is 1; when Redis
// returns, the replica reads on (or reloads) and nodes whose deltas Redis did not see resync.
//
// Lifecycle: start() after the index and tracker exist; stop() (or the destructor) joins the
// threads. Threading: heartbeat() and announced() from any thread; two threads of its own (the
// log reader, the lease and announce publisher).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/heartbeat.h"
#include "common/metrics.h"
#include "scheduler/checkpoints.h"
#include "scheduler/index.h"
#include "scheduler/jobs.h"
#include "scheduler/prewarm.h"
#include "scheduler/redis.h"
#include "scheduler/tracker.h"

namespace shoal::scheduler {

// The format of the log's entries (field "f"). A replica applies the entries of its own format
// and of none (older), and skips, counts and logs others: a release that changes an entry writes
// it under a new format only once every replica reads it (docs/ha.md, "Upgrades").
inline const std::string shared_log_format = "1";

struct shared_state_options {
  redis_options redis;
  std::string prefix = "shoal:";  // every key starts with it (the ACL grants ~shoal:*)
  std::string replica_id;         // unique per process (host name + random)
  std::size_t log_max_entries = 100'000;
  int wait_replicas = 1;  // WAIT for this many Redis replicas before answering a heartbeat
  std::chrono::milliseconds wait_timeout{500};
  std::chrono::milliseconds lease_ttl{5000};
  std::chrono::milliseconds apply_wait{1000};  // a heartbeat waits this long for its local apply
  // After a read that returned entries, the reader waits this long before the next (entries of
  // the other replicas are applied in batches; a replica's own heartbeats are applied at once).
  std::chrono::milliseconds read_batch{20};
  // start() waits this long for a first load that is under way (Redis reachable, records being
  // read); without Redis it gives up after a few Redis timeouts and answers stale.
  std::chrono::milliseconds load_wait{300'000};
  std::chrono::milliseconds drop_after{300'000};
  std::chrono::milliseconds peer_timeout{180'000};
  std::size_t max_objects_per_node = heartbeat::default_max_objects;
  std::size_t announce_queue = 10'000;
  std::chrono::milliseconds prewarm_keep{90 * 60'000};      // prewarm.timeout + prewarm.retention
  std::chrono::milliseconds job_keep{7LL * 24 * 3600'000};  // jobs.ttl (also checkpoints)
};

// A log position: the stream id's milliseconds and sequence.
struct log_id {
  std::uint64_t ms = 0, seq = 0;
  [[nodiscard]] static std::optional<log_id> parse(std::string_view s);
  [[nodiscard]] std::string str() const;
  auto operator<=>(const log_id&) const = default;
};

class shared_state {
 public:
  shared_state(shared_state_options opts, cluster_index& index, tracker& trk,
               metrics::registry& reg);
  ~shared_state();
  shared_state(const shared_state&) = delete;
  shared_state& operator=(const shared_state&) = delete;

  // Connects, adopts (or creates) the cluster's epoch, loads what Redis holds and starts the
  // threads. Returns once the first load is done (a load under way is waited for up to
  // load_wait, with its progress logged every 5 s), so a replica never opens its port with part
  // of the state. Redis unreachable: starts stale after a few Redis timeouts and keeps trying
  // (never fails the start).
  void start();
  void stop();

  struct heartbeat_result {
    apply_outcome out;
    bool stale = false;  // applied locally only: Redis did not answer
    std::string epoch;   // the cluster's epoch as Redis judged it ("" when stale)
  };
  // Judges and applies a heartbeat through the log (or locally when Redis is down). `m.ip` is
  // the node's resolved address. A cap refusal (out.refused) applies nothing.
  [[nodiscard]] heartbeat_result heartbeat(const heartbeat::message& m);
  // An announce this replica answered: queued for the log (dropped and counted when full).
  void announced(const announce_request& a);
  // Prewarms go through the log too (prewarm_manager::set_sharer): every replica registers each
  // one, hands its orders out to the nodes that heartbeat to it, and records their reports from
  // the logged heartbeats. Before start().
  void attach(prewarm_manager& p);
  // Jobs too: a replica that changes a job (records it, forgets it, decides its failover)
  // logs the job's record; the others replace theirs with it. Pods reported in the logged
  // heartbeats are applied by every replica. Before start().
  void attach(job_registry& j);
  // GPU reservations of placements too (logged; the others add them for their remaining TTL).
  // A placement on another replica within the same few milliseconds can still count the same
  // GPUs: reservations are shared, not locked.
  void attach(placer& p);
  // The checkpoint catalog: a registration this replica took (created, not a repeat) is kept in
  // Redis (`<prefix>ck:<J@N>`, ordered in `<prefix>cks`) and logged; the others register it too,
  // without telling their listeners (the standbys' prewarm is ordered once, here). Removals the
  // same way. Before start().
  void attach(checkpoint_catalog& c);
  void checkpoint_registered(const std::string& key, const std::string& body,
                             const std::string& caller);
  void checkpoint_removed(const std::string& key);
  // A prewarm for the log: appended, WAITed for, applied here before it returns (so the caller
  // reads its progress). Redis down: registered here alone.
  [[nodiscard]] status share_prewarm(const std::string& id, const std::vector<planned_node>& nodes,
                                     const nlohmann::json& summary);

  [[nodiscard]] bool leader() const;
  // The registry-proxy ring's members (scheduler/origins.h) in Redis: records `url` (unless
  // empty), forgets members silent for `ttl`, and returns the rest (at most `cap`); `full` when
  // `url` was new and the set already held `cap`.
  struct origins_answer {
    std::vector<std::string> members;
    bool full = false;
  };
  [[nodiscard]] result<origins_answer> origins(const std::string& url,
                                               std::chrono::milliseconds ttl, std::size_t cap);
  // Since when some scheduler replica has been serving without a gap (every replica records its
  // calls in Redis; a gap longer than two lease periods starts it again): nodes had a replica
  // to heartbeat to since then. Empty until Redis answered.
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> serving_since() const;
  // "" when fresh; else why answers are stale.
  [[nodiscard]] std::string stale_reason() const;
  // Before a decision that reserves (POST /v1/place): applies the log up to its end now, so
  // reservations other replicas logged are counted, not only those the reader's batch reached.
  // Bounded by apply_wait; nothing when Redis is unreachable (the answer is stale anyway).
  void catch_up();

 private:
  struct entry;
  void reader_loop();
  void upkeep_loop();
  // Reads the cluster's epoch, creating it when missing; a new one is adopted and `reload_why`
  // set. Reader thread.
  [[nodiscard]] status sync_epoch(redis_conn& c, std::string& reload_why);
  // After a (re)connect: entries trimmed past what was read set `reload_why`; a primary behind
  // what was read (a failover lost its last entries) makes reading go on from its end.
  [[nodiscard]] status check_log(redis_conn& c, std::string& reload_why);
  // Loads every node record and the recent announces, then reads the log on from its end.
  [[nodiscard]] status reload(redis_conn& c, const std::string& why);
  [[nodiscard]] status load_nodes(redis_conn& c, std::unordered_map<std::string, log_id>& loaded);
  void apply_entry(const redis_reply& e);
  void apply_prewarm_entry(const std::string& body);
  void apply_job_entry(const redis_reply& fields);
  // A kept registration ("caller\nbody") into the catalog.
  void apply_checkpoint(const std::string& key, const std::string& kept);
  [[nodiscard]] status load_checkpoints(redis_conn& c, std::size_t& loaded);
  // A reservation entry, `age_ms` after it was logged.
  void apply_reservation_entry(const redis_reply& fields, std::uint64_t age_ms);
  void publish_jobs(redis_conn& c);
  // Prewarms and jobs kept as keys (the log is trimmed): loaded by reload().
  [[nodiscard]] status load_kept(redis_conn& c, std::size_t& prewarms, std::size_t& jobs);
  // WAIT for redis.wait_replicas Redis replicas (counted when they do not answer in time).
  // When the primary had fewer replicas connected at the last look (check_replicas), no WAIT
  // could succeed: the write is counted unreplicated at once instead of after wait_timeout (a
  // primary just promoted by Sentinel has none until another instance follows it).
  void replicated(redis_conn& c);
  // ROLE on the primary: how many replicas are connected (-1 when unknown). Upkeep, every second.
  void check_replicas(redis_conn& c);
  // replicated(), then wait for this replica's reader to have applied `id`.
  void settle(redis_conn& c, const log_id& id);
  // Wait for this replica's reader to have applied `id` (it reads at once).
  void wait_applied(const log_id& id);
  // False when not applied: applied here before (node_log_), or it does not decode.
  bool apply_heartbeat_entry(const std::string& id, const std::string& verdict,
                             const std::string& node, const std::string& body,
                             const std::string* netsetup);
  // A heartbeat Redis judged (`verdict`) into the index, the tracker, prewarm and jobs. Caller
  // holds apply_mu_.
  void apply_heartbeat(const heartbeat::message& m, const std::string& verdict);
  [[nodiscard]] result<redis_reply> eval(redis_conn& c, const char* script, const std::string& sha,
                                         const std::vector<std::string>& args);
  void renew_lease(redis_conn& c);
  void expire_records(redis_conn& c, bool full_scan);
  void publish_announces(redis_conn& c);
  void set_stale(std::string why);
  void set_fresh();

  shared_state_options opts_;
  cluster_index& index_;
  tracker& trk_;
  prewarm_manager* prewarm_ = nullptr;
  job_registry* jobs_ = nullptr;
  placer* placer_ = nullptr;
  checkpoint_catalog* checkpoints_ = nullptr;
  redis_pool pool_;
  const std::string sha_heartbeat_, sha_renew_, sha_expire_, sha_origins_;  // EVALSHA names

  std::atomic<bool> stop_{false};
  std::atomic<int> redis_replicas_{-1};  // check_replicas(): replicas the primary has, -1 unknown
  std::atomic<bool> loading_{false};     // reload() under way (Redis reachable)
  std::atomic<std::size_t> load_done_{0}, load_total_{0};  // nodes read / listed by load_nodes()
  std::thread reader_, upkeep_;

  // Heartbeats are applied one at a time, by the reader or by the replica that received one
  // (in the log's order per node: see heartbeat()).
  std::mutex apply_mu_;
  mutable std::mutex mu_;  // guards what follows
  std::condition_variable applied_cv_;
  std::condition_variable reader_cv_;  // wakes the reader from its batch wait
  bool hurry_ = false;                 // someone waits for the reader: read now
  log_id applied_;                     // the last entry the reader applied
  // node → the log id of its last heartbeat applied here (from its record at load, then from
  // every apply): the reader skips entries at or before it; a heartbeat whose previous entry is
  // this one is applied directly by the replica that received it.
  std::unordered_map<std::string, log_id> node_log_;
  std::string stale_;
  bool loaded_once_ = false;
  std::deque<announce_request> announces_;
  std::deque<std::string> jobs_changed_;
  std::condition_variable upkeep_cv_;
  std::chrono::steady_clock::time_point leader_until_{};
  std::optional<std::chrono::steady_clock::time_point> serving_since_;  // guarded by mu_

  metrics::gauge* stale_gauge_;
  metrics::gauge* lease_gauge_;
  metrics::gauge* replicas_gauge_;
  metrics::counter* errors_;
  metrics::counter* unreplicated_;
  metrics::counter* announces_dropped_;
  metrics::counter_family* applied_total_;
  metrics::counter_family* reloads_;
  metrics::counter* foreign_entries_;
  metrics::counter* heartbeats_waited_;
};

}  // namespace shoal::scheduler
