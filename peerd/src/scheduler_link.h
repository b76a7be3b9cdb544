#pragma once
// peerd's door to the scheduler replicas (upstream.scheduler and upstream.schedulers): every
// call from peerd to the scheduler goes through it, so each one fails over the same way
// (common/endpoints.h, docs/scheduler.md "Clients fail over").
//
// Which calls are retried on the next replica inside the same call, and why that is safe:
//  - GETs (a checkpoint's record, manifest and group metainfo): they change nothing.
//  - The heartbeat POST: a full heartbeat replaces the node's list, so applying it twice is
//    applying it once; a delta carries `seq`, and a replica whose state already has that seq
//    (the first one applied it before hanging) answers `resync`, after which peerd sends a
//    full list at once (scheduler/src/index.cc). A failed heartbeat makes the next one full.
//  - The checkpoint registration POST: the same registration again is a "repeat", answered
//    like the first (scheduler/src/checkpoints.cc); only another manifest for a published key
//    is a conflict.
// So every call here is endpoints::call_kind::idempotent: refused, hung (no answer byte for
// upstream.scheduler_timeout) or a 502/503/504 moves the call to the next replica.
//
// Lifecycle: made once in app::start, lives as long as the app. Threading: safe from any thread.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/endpoints.h"
#include "common/http_client.h"
#include "peerd/config.h"

namespace shoal::peerd {

class scheduler_link {
 public:
  // Null when no scheduler is configured (scheduler_urls() is empty).
  [[nodiscard]] static result<std::unique_ptr<scheduler_link>> create(const upstream_config& c,
                                                                      http::client& http);

  // A small call's request: `path` (e.g. "/v1/heartbeat") and the scheduler timeouts.
  [[nodiscard]] http::client_request request(std::string method, std::string path) const;
  // Runs `req` (its url a path) on the replicas in order (see above).
  [[nodiscard]] result<http::full_response> call(http::client_request req,
                                                 std::size_t max_body = 64u << 20);
  // The same with the caller's own attempt (origin::call: version checks, long polls).
  [[nodiscard]] result<http::full_response> run(http::client_request req,
                                                const endpoints::attempt_fn& attempt);
  // Base URLs, the one that last answered first: the tracker list of every torrent.
  [[nodiscard]] std::vector<std::string> bases() { return set_->bases(); }
  // The configured URLs (for logs and checks).
  [[nodiscard]] const std::vector<std::string>& urls() const { return urls_; }

 private:
  scheduler_link(const upstream_config& c, http::client& http,
                 std::shared_ptr<endpoints::endpoint_set> s, std::vector<std::string> urls);

  const upstream_config& cfg_;
  http::client& http_;
  std::shared_ptr<endpoints::endpoint_set> set_;
  std::vector<std::string> urls_;
};

}  // namespace shoal::peerd
