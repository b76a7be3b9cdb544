#pragma once
// Executes the scheduler's prewarm orders on this node: fetch every object of an image or a
// dataset into the local cache through the swarm, as a pull would, and report
// progress in the next heartbeats.
//
// Orders arrive in heartbeat replies (submit()); an id already known is ignored, so the
// scheduler may resend. Orders run one at a time, in arrival order, each with up to `parallel`
// objects in flight (fetcher::ensure: swarm first, registry-proxy's HTTP fallback when it
// stalls). An order whose objects were not resolved by the scheduler is resolved here for this
// node's platform through registry-proxy. The objects are pinned in the cache for the order's
// `pin_seconds` so eviction does not undo the prewarm before the job starts. Finished orders are
// reported for `keep` (10 min) after they end, then forgotten.
//
// Lifecycle: start() → submit()/reports() → request_stop() (before the swarm stops, so blocked
// fetches fail fast) → destructor (joins). Threading: public methods are thread-safe; one
// executor thread plus a small pool for the objects of the running order.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.h"
#include "common/heartbeat.h"
#include "common/http_client.h"
#include "common/thread_name.h"
#include "peerd/config.h"
#include "peerd/fetcher.h"
#include "peerd/swarm.h"

namespace shoal::peerd {

class dataset_manager;
class proxy_link;

class prewarm_executor {
 public:
  struct deps {
    const peerd_config& cfg;
    cache::store& store;
    swarm_manager& swarm;
    fetcher& fetch;
    http::client& http;
    dataset_manager* datasets = nullptr;     // null: dataset orders fail
    dataset_manager* checkpoints = nullptr;  // restores (checkpoint mode); null: those orders fail
    proxy_link* proxy = nullptr;             // registry-proxy with failover (proxy_link.h)
  };
  struct options {
    std::size_t parallel = 3;
    std::chrono::seconds keep{600};
    std::size_t max_orders = 256;  // known at once; beyond, new orders are refused (failed)
  };
  prewarm_executor(deps d, options o);
  ~prewarm_executor();
  prewarm_executor(const prewarm_executor&) = delete;
  prewarm_executor& operator=(const prewarm_executor&) = delete;

  void start();
  void request_stop();
  void submit(const std::vector<heartbeat::prewarm_order>& orders);
  [[nodiscard]] std::vector<heartbeat::order_report> reports();
  // Called (from the executor thread) when an order ends: the heartbeat goes out early.
  void on_change(std::function<void()> cb);

  // Resolves an image for a platform through registry-proxy (`link`, or the configured URL
  // when null) into its config and layers.
  [[nodiscard]] static result<std::vector<heartbeat::order_object>> resolve_image(
      http::client& c, proxy_link* link, const upstream_config& up, const std::string& image,
      const std::string& platform, std::chrono::milliseconds timeout);

 private:
  struct job {
    heartbeat::prewarm_order order;
    heartbeat::order_state state = heartbeat::order_state::queued;
    std::string error;
    std::chrono::steady_clock::time_point ended;
  };
  void run();
  void execute(const std::shared_ptr<job>& j);
  [[nodiscard]] std::uint64_t bytes_done(const heartbeat::prewarm_order& o) const;

  deps d_;
  options opts_;
  named_thread_pool pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<job>> jobs_;
  std::deque<std::shared_ptr<job>> queue_;
  std::function<void()> on_change_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shoal::peerd
