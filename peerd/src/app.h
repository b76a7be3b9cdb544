#pragma once
// Wiring of the peerd daemon: builds every part in dependency order from the config and runs
// it until a signal. Nothing here is global; tests build an app on temp dirs.

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <thread>

#include "cache/store.h"
#include "common/daemon.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "config.h"
#include "mirror.h"
#include "state_db.h"
#include "swarm.h"

namespace shoal::peerd {

class app {
 public:
  [[nodiscard]] static result<std::unique_ptr<app>> build(const peerd_config& cfg);
  ~app();
  app(const app&) = delete;
  app& operator=(const app&) = delete;
  int run();
  void stop();

 private:
  explicit app(const peerd_config& cfg);
  [[nodiscard]] status init();
  void register_metrics();
  void heartbeat_loop();

  peerd_config cfg_;
  daemon::runtime rt_;
  boost::asio::thread_pool pool_;
  metrics::registry reg_;
  std::unique_ptr<http::client> http_client_;
  std::unique_ptr<cache::store> store_;
  std::unique_ptr<state_db> state_;
  std::unique_ptr<swarm_manager> swarm_;
  std::unique_ptr<mirror> mirror_;
  std::unique_ptr<http::server> server_;
  cache::subscription cache_events_;
  std::thread heartbeat_;
  std::atomic<bool> stop_{false};
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
};

}  // namespace shoal::peerd
