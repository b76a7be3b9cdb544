#pragma once
// Wiring of the peerd daemon: builds every part in dependency order from the config and runs
// it until a signal. Nothing here is global; tests build an app on temp dirs.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.h"
#include "common/daemon.h"
#include "common/digest.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "common/tls.h"
#include "common/version.h"
#include "peerd/config.h"

namespace shoal::peerd {

// The parts, defined in their own (private) headers: app.h is the daemon's door for main() and
// tests, and names them only.
class state_db;
class swarm_manager;
class blob_access;
class fetcher;
class dataset_manager;
class checkpoint_publisher;
class mirror;
class prewarm_executor;
class heartbeat_sender;
class scheduler_link;
class proxy_link;
class health_monitor;
namespace cri {
class pod_watcher;
}

// The libraries shoal-peerd links and their versions (--version, shoal_build_info).
[[nodiscard]] std::vector<version::library> linked_libraries();

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
  [[nodiscard]] status init_groups();
  [[nodiscard]] status init_datasets();
  // Checkpoints (app_checkpoints.cc): the publisher, the restores (a dataset_manager in
  // checkpoint mode) and the API's token check.
  [[nodiscard]] status init_checkpoints();
  bool handle_checkpoints(const http::request& req, const http::responder& resp);
  [[nodiscard]] std::string dataset_dir() const;
  [[nodiscard]] status clean_partial_dir();
  [[nodiscard]] status start_server();
  void start_heartbeat();
  [[nodiscard]] status init_tls();
  [[nodiscard]] status start_metrics_server();
  void register_metrics();

  peerd_config cfg_;
  daemon::runtime rt_;
  named_thread_pool pool_;
  metrics::registry reg_;
  std::unique_ptr<http::client> http_client_;
  // The scheduler replicas (upstream.scheduler, upstream.schedulers); null without one.
  std::unique_ptr<scheduler_link> scheduler_;
  std::unique_ptr<proxy_link> proxy_;
  std::unique_ptr<cache::store> store_;
  std::unique_ptr<state_db> state_;
  std::unique_ptr<swarm_manager> swarm_;
  std::unique_ptr<blob_access> access_;  // who may read what this node holds
  std::unique_ptr<fetcher> fetcher_;
  std::unique_ptr<dataset_manager> datasets_;
  std::unique_ptr<dataset_manager> restores_;  // checkpoints restored here
  std::unique_ptr<checkpoint_publisher> publisher_;
  std::optional<digest> checkpoint_token_;  // sha256 of checkpoints.token_file's token
  std::unique_ptr<mirror> mirror_;
  std::unique_ptr<http::server> server_;
  // The metrics listener (metrics_listen) and its TLS context (tls.enabled); null when off.
  std::shared_ptr<tls::tls_context> metrics_tls_;
  std::unique_ptr<http::server> metrics_server_;
  cache::subscription cache_events_;
  std::unique_ptr<prewarm_executor> prewarm_;
  std::unique_ptr<health_monitor> health_;
  std::unique_ptr<cri::pod_watcher> pods_;
  std::unique_ptr<heartbeat_sender> heartbeat_;
};

}  // namespace shoal::peerd
