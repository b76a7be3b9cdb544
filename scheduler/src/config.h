#pragma once
// The scheduler's configuration: every key declared once with its default and doc string.

#include "common/config.h"
#include "common/daemon.h"

namespace shoal::scheduler {

using namespace std::chrono_literals;

struct tracker_config {
  config::duration interval = 15s;       // re-announce interval for downloaders
  config::duration seed_interval = 60s;  // re-announce interval for complete holders
  config::duration min_interval = 5s;
  config::duration peer_timeout = 180s;  // drop peers (and heartbeat holders) silent this long
  int default_numwant = 50;
  int max_numwant = 200;
  bool trust_announced_ip = true;        // use ip= from peerd (its data-plane address)
};
void describe(config::binder& b, tracker_config& c);

struct scheduler_config {
  daemon::http_config http{.listen = "0.0.0.0:7070", .max_body_bytes = config::byte_size::mib(64)};
  daemon::log_config log;
  int io_threads = 2;
  tracker_config tracker;
  config::duration node_timeout = 60s;  // a node without heartbeat this long is unhealthy
};
void describe(config::binder& b, scheduler_config& c);

}  // namespace shoal::scheduler
