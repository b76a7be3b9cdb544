#pragma once
// peerd's heartbeat to the scheduler (schema in common/heartbeat.h): the node's inventory
// (labels, GPUs, netsetup document, health, cache use), its cache index, and the progress of its
// prewarm orders; the reply brings the scheduler's epoch, resync requests and new orders.
//
// The cache index goes as deltas: each message lists the objects added and removed since the
// last one the scheduler acknowledged, with `seq` one higher. A full list goes instead at start,
// after any heartbeat that failed (the scheduler may or may not have applied it), and when the
// scheduler answers `resync` (a gap, or it restarted: a new epoch), in which case it goes at
// once rather than a period later, so a restarted scheduler is whole again within one period.
//
// The cache index is walked only when it may have changed: while neither the cache's
// held_generation() nor the state index's generation (the info-hashes) moved since the last
// acknowledged message, a delta lists nothing without listing the cache (a steady node of 200,000
// objects listed and compared them every interval).
//
// Lifecycle: start() runs a thread; stop() (or the destructor) ends it. Threading: the loop owns
// its state; poke() is safe from any thread. build_message()/on_reply() are the loop's steps,
// public for tests.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "cache/store.h"
#include "common/heartbeat.h"
#include "common/http_client.h"
#include "peerd/config.h"
#include "peerd/netsetup_report.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

class prewarm_executor;
class health_monitor;
class scheduler_link;

class heartbeat_sender {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    swarm_manager& swarm;
    http::client& http;
    std::function<std::uint16_t()> http_port;
    prewarm_executor* prewarm = nullptr;     // may be null
    const health_monitor* health = nullptr;  // the node's health hook; null: none
    // Called (on the heartbeat thread; must not block) when the scheduler's epoch changed: it
    // restarted and knows only what nodes tell it again (published checkpoints).
    std::function<void()> on_new_epoch;
    // Datasets held here (datasets.h); empty when datasets are disabled.
    std::function<std::vector<heartbeat::dataset_presence>()> datasets;
    // Checkpoints restored or published here; empty when checkpoints are disabled.
    std::function<std::vector<heartbeat::dataset_presence>()> checkpoints;
    // The node's pods with a job label (cri.h); nullopt while unknown. Empty: no CRI watch.
    std::function<std::optional<std::vector<heartbeat::job_pod>>()> pods;
    // The scheduler replicas (never null once start() runs): a heartbeat goes to the one that
    // last answered and fails over to the next (scheduler_link.h says why that is safe).
    scheduler_link* scheduler = nullptr;
  };
  explicit heartbeat_sender(deps d);
  ~heartbeat_sender();
  heartbeat_sender(const heartbeat_sender&) = delete;
  heartbeat_sender& operator=(const heartbeat_sender&) = delete;

  void start();
  void stop();
  // Sends the next heartbeat soon (a prewarm order ended).
  void poke();

  // One round, without the network: the message to send now.
  [[nodiscard]] heartbeat::message build_message();
  // What the scheduler answered to the message build_message() returned last (an error when the
  // request failed). Returns true when the next message should go at once (resync).
  bool on_reply(const heartbeat::message& sent, const result<heartbeat::reply>& r);
  [[nodiscard]] std::uint64_t seq() const { return seq_; }
  [[nodiscard]] const std::string& epoch() const { return epoch_; }
  // How many messages listed the cache (tests: a steady node's deltas do not).
  [[nodiscard]] std::uint64_t cache_walks() const { return walks_; }

 private:
  void loop();
  [[nodiscard]] result<heartbeat::reply> send(const heartbeat::message& m);

  deps d_;
  std::string url_;
  std::string platform_;
  // What the scheduler holds for this node after the last acknowledged message: digest → info-hash.
  std::map<digest, std::string> acked_;
  bool need_full_ = true;
  // The generations (cache, info-hashes) read by the last build_message(), for its seq, and
  // those of the last acknowledged message: acked_ is exactly the holdings at those.
  struct generations {
    std::uint64_t cache = 0, hashes = 0;
    bool operator==(const generations&) const = default;
  };
  generations built_gen_;
  std::uint64_t built_seq_ = 0;
  std::optional<generations> acked_gen_;
  std::uint64_t walks_ = 0;
  // The netsetup document the scheduler holds after the last acknowledged message, and whether
  // its reply said it keeps documents (then a delta says netsetup_unchanged instead of resending).
  std::string acked_netsetup_;
  bool keeps_netsetup_ = false;
  std::unique_ptr<netsetup_report> report_;  // null without node.netsetup_report
  std::uint64_t seq_ = 0;
  std::string epoch_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;
};

}  // namespace shoal::peerd
