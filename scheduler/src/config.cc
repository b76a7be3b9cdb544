#include "config.h"

namespace shoal::scheduler {

void describe(config::binder& b, tracker_config& c) {
  b.field("interval", c.interval, "Re-announce interval answered to downloading peers.", {.min = 1s});
  b.field("seed_interval", c.seed_interval, "Re-announce interval answered to complete holders.", {.min = 1s});
  b.field("min_interval", c.min_interval, "Minimum re-announce interval (peerd sets libtorrent's to match).",
          {.min = 1s});
  b.field("peer_timeout", c.peer_timeout, "Forget peers and heartbeat holders silent for this long.", {.min = 5s});
  b.field("default_numwant", c.default_numwant, "Peers handed out when the announce does not say.", {.min = 1, .max = 1000});
  b.field("max_numwant", c.max_numwant, "Most peers handed out per announce.", {.min = 1, .max = 5000});
  b.field("trust_announced_ip", c.trust_announced_ip,
          "Use the ip= parameter of announces (peerd's data-plane address) instead of the source address.");
}

void describe(config::binder& b, scheduler_config& c) {
  b.section("http", c.http, "The HTTP API (tracker /announce, heartbeats, REST).");
  b.section("log", c.log, "Logging.");
  b.field("io_threads", c.io_threads, "Threads running the network event loop.", {.min = 1, .max = 64});
  b.section("tracker", c.tracker, "The BitTorrent tracker.");
  b.field("node_timeout", c.node_timeout, "A node without a heartbeat this long is reported unhealthy.", {.min = 1s});
}

}  // namespace shoal::scheduler
