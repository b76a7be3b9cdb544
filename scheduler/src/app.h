#pragma once
// Wiring of the scheduler daemon: the tracker, the heartbeat receiver that feeds it holders,
// and the REST API. Soft state only: everything is rebuilt from heartbeats after a restart.

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/daemon.h"
#include "common/heartbeat.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "config.h"
#include "tracker.h"

namespace shoal::scheduler {

class app {
 public:
  [[nodiscard]] static result<std::unique_ptr<app>> build(const scheduler_config& cfg);
  ~app();
  int run();
  void stop();
  [[nodiscard]] std::uint16_t http_port() const { return server_ ? server_->port() : 0; }

 private:
  explicit app(const scheduler_config& cfg) : cfg_(cfg), rt_(static_cast<unsigned>(cfg.io_threads)) {}
  [[nodiscard]] status init();
  void handle(http::request&& req, http::responder resp);
  http::response on_heartbeat(const http::request& req);
  http::response nodes_json() const;

  struct node_state {
    heartbeat::message last;
    std::chrono::steady_clock::time_point seen;
  };

  scheduler_config cfg_;
  daemon::runtime rt_;
  metrics::registry reg_;
  std::unique_ptr<tracker> tracker_;
  std::unique_ptr<http::server> server_;
  std::string epoch_;
  mutable std::mutex mu_;
  std::map<std::string, node_state> nodes_;
  metrics::counter* heartbeats_ = nullptr;
  metrics::counter* bad_heartbeats_ = nullptr;
};

}  // namespace shoal::scheduler
