#pragma once
// Wiring of the scheduler daemon: the tracker, the cluster cache index fed by heartbeats, the
// resolver (registry-proxy), placement, the extender, prewarm, the checkpoint catalog, and the
// HTTP API. Soft state only: everything is rebuilt from heartbeats after a restart (a new epoch
// makes every peerd resend its full list at its next heartbeat); the checkpoint catalog starts
// empty (checkpoints.h).
//
// Lifecycle: build() → run() (blocks until SIGTERM/SIGINT or stop()) → destructor. Threading:
// the HTTP server on `io_threads`; heartbeats on their own small pool; placement, resolution and
// the extender on `worker_threads`; a 1 s maintenance timer on the io context.

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/api.h"
#include "common/daemon.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "common/version.h"
#include "scheduler/checkpoints.h"
#include "scheduler/config.h"
#include "scheduler/extender.h"
#include "scheduler/failures.h"
#include "scheduler/index.h"
#include "scheduler/jobs.h"
#include "scheduler/network.h"
#include "scheduler/placement.h"
#include "scheduler/prewarm.h"
#include "scheduler/resolver.h"
#include "scheduler/shared_state.h"
#include "scheduler/tracker.h"

namespace shoal::scheduler {

// The libraries shoal-scheduler links and their versions (--version, shoal_build_info).
[[nodiscard]] std::vector<version::library> linked_libraries();

class app {
 public:
  [[nodiscard]] static result<std::unique_ptr<app>> build(const scheduler_config& cfg);
  ~app();
  app(const app&) = delete;
  app& operator=(const app&) = delete;
  int run();
  void stop();
  [[nodiscard]] std::uint16_t http_port() const { return server_ ? server_->port() : 0; }

 private:
  explicit app(const scheduler_config& cfg);
  [[nodiscard]] status init();
  // The outbound client (presenting the `tls` certificate to registry-proxy) and the server's
  // TLS context when tls.enabled (start-up fails on bad files); a loud warning when not.
  [[nodiscard]] status init_transport();
  // The operator token file (auth.operator_token_file), when set; a bad file stops start-up.
  [[nodiscard]] status init_auth();
  // The checkpoint catalog; with TLS the grant signer (a bad certificate or key stops start-up).
  [[nodiscard]] status init_checkpoints();
  void init_index(const std::string& epoch);
  void init_failover();
  // The job registry (jobs.h), after placement, prewarm and the extender it steers.
  void init_jobs();
  void init_tracker();
  // Shared state through Redis when the redis section names one (shared_state.h); a password
  // file that cannot be read stops start-up.
  [[nodiscard]] status init_shared();
  void handle(http::request&& req, http::responder resp);
  // The API's answer, marked Shoal-Stale while shared state cannot reach Redis.
  [[nodiscard]] http::response serve(const http::request& req);
  void register_metrics();
  void schedule_maintenance();
  void maintenance();

  scheduler_config cfg_;
  daemon::runtime rt_;
  named_thread_pool workers_;
  named_thread_pool heartbeat_pool_;
  std::shared_ptr<tls::tls_context> tls_;  // null when tls.enabled is false; outlives reg_
  metrics::registry reg_;
  std::unique_ptr<http::client> http_client_;
  std::unique_ptr<tracker> tracker_;
  std::unique_ptr<cluster_index> index_;
  std::unique_ptr<failure_detector> failures_;
  std::unique_ptr<registry_proxy_source> manifests_;
  std::unique_ptr<resolver> resolver_;
  std::unique_ptr<dataset_catalog> datasets_;
  std::unique_ptr<network_model> network_;
  std::unique_ptr<placer> placer_;
  std::unique_ptr<prewarm_manager> prewarm_;
  std::unique_ptr<extender> extender_;
  std::unique_ptr<job_registry> jobs_;
  std::unique_ptr<operator_token> token_;  // null without auth.operator_token_file; outlives api_
  std::unique_ptr<checkpoint_catalog> checkpoints_;
  checkpoint_grant_fn checkpoint_grant_for_;  // empty without TLS
  std::unique_ptr<shared_state> shared_;      // null without redis; stopped first
  std::unique_ptr<api> api_;
  std::unique_ptr<http::server> server_;
  boost::asio::steady_timer timer_;
  std::atomic<std::int64_t> tracker_expired_s_{0};  // steady seconds of the last tracker expiry
  metrics::gauge_family* prewarm_orders_ = nullptr;
  metrics::counter* dropped_ = nullptr;
  metrics::counter_family* node_failures_ = nullptr;
};

}  // namespace shoal::scheduler
