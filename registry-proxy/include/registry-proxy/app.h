#pragma once
// Wiring of the registry-proxy daemon: builds every part in dependency order from the config and
// runs it until a signal. Nothing here is global; tests build an app on temp dirs and port 0.

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "registry-proxy/access.h"
#include "registry-proxy/blobs.h"
#include "cache/store.h"
#include "common/daemon.h"
#include "common/grant.h"
#include "common/http_client.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/thread_name.h"
#include "common/tls.h"
#include "common/version.h"
#include "registry-proxy/config.h"
#include "registry-proxy/datasets.h"
#include "registry-proxy/handler.h"
#include "registry-proxy/manifests.h"
#include "registry-proxy/seeder.h"
#include "registry-proxy/state_db.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {

// The libraries shoal-registry-proxy links and their versions (--version, shoal_build_info).
[[nodiscard]] std::vector<version::library> linked_libraries();

class dataset_copies;

class app {
 public:
  [[nodiscard]] static result<std::unique_ptr<app>> build(const proxy_config& cfg);
  ~app();
  app(const app&) = delete;
  app& operator=(const app&) = delete;

  // Serves until SIGTERM/SIGINT or stop(); returns the process exit code.
  int run();
  void stop();

  [[nodiscard]] std::uint16_t http_port() const { return server_ ? server_->port() : 0; }
  [[nodiscard]] metrics::registry& metrics() { return reg_; }

 private:
  explicit app(const proxy_config& cfg);
  [[nodiscard]] status init();
  [[nodiscard]] status open_storage();
  [[nodiscard]] status init_upstreams();
  void init_services();
  [[nodiscard]] status init_seeder();
  [[nodiscard]] status init_grants();
  [[nodiscard]] status init_datasets();
  [[nodiscard]] handler_deps make_handler_deps();
  [[nodiscard]] status init_tls();
  [[nodiscard]] status start_server();
  void register_metrics();
  [[nodiscard]] status init_ring();

  proxy_config cfg_;
  daemon::runtime rt_;
  named_thread_pool pool_;
  metrics::registry reg_;
  std::unique_ptr<http::client> http_client_;
  std::unique_ptr<cache::store> store_;
  std::unique_ptr<state_db> state_;
  std::unique_ptr<upstream_set> ups_;
  std::unique_ptr<upstream_client> uc_;
  std::unique_ptr<access_checker> access_;
  std::unique_ptr<blob_service> blobs_;
  std::unique_ptr<manifest_service> manifests_;
  std::unique_ptr<seeder> seeder_;
  std::unique_ptr<dataset_service> datasets_;
  std::unique_ptr<proxy_handler> handler_;
  std::shared_ptr<tls::tls_context> tls_;  // the HTTP API's (server side); null with TLS off
  std::unique_ptr<http::server> server_;
  std::unique_ptr<ring> ring_;
  // Dataset records copied to the other ring members (src/dataset_copies.h); null without a ring.
  std::unique_ptr<dataset_copies> copies_;
  // Calls to other ring members only, with the cluster certificate (never to upstreams).
  std::unique_ptr<http::client> ring_client_;
  cache::subscription cache_events_;
  std::string salt_;
  // Grants (torrent.require_grants with TLS): signs one per metainfo answer to a node.
  std::shared_ptr<grant::signer> grant_signer_;
  std::function<std::string(const tls::peer_identity&, const std::string&)> grant_for_;
  std::atomic<std::uint64_t> grants_issued_{0}, grant_failures_{0};
};

}  // namespace shoal::proxy
