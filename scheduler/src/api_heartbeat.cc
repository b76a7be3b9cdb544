// The scheduler API's heartbeat route (POST /v1/heartbeat), beside api.cc.
#include "common/heartbeat.h"
#include "common/log.h"
#include "scheduler/api.h"
#include "scheduler/ingest.h"

namespace shoal::scheduler {

http::response api::on_heartbeat(const http::request& req) {
  // Mutual TLS (tls.enabled): only a node's own certificate may heartbeat for it. A caller
  // without a node certificate was refused by the authorizer before its body is decoded.
  heartbeat::decode_limits limits;
  limits.max_objects = d_.cfg.nodes.max_objects_per_node;
  auto m = heartbeat::decode(req.body, limits);
  if (!m) {
    bad_heartbeats_->inc();
    log::warn("bad heartbeat", log::kv("from", req.remote.address().to_string()),
              log::kv("error", m.error().message));
    return json_error(m.error().is(errc::too_large) ? 413 : 400, m.error().message);
  }
  if (req.peer.tls && !req.peer.is_node(m->node)) {
    if (auth_.refused_by_handler(req, route_access::node, "other_node")) {
      log::warn("heartbeat refused: certificate names another node", log::kv("node", m->node),
                log::kv("from", req.remote.address().to_string()),
                log::kv("certificate", req.peer.str()));
    }
    return json_error(403, "heartbeat for node \"" + m->node +
                               "\" refused: the client certificate is " + req.peer.str());
  }
  m->ip = node_address(req, m->ip);
  apply_outcome out;
  std::string epoch;
  if (d_.shared != nullptr) {
    auto res = d_.shared->heartbeat(*m);
    out = std::move(res.out);
    epoch = std::move(res.epoch);
  } else {
    out = ingest_heartbeat(d_.index, d_.trk, *m);
  }
  if (out.refused != 0) {
    log::warn("heartbeat refused", log::kv("node", m->node),
              log::kv("from", req.remote.address().to_string()),
              log::kv("reason", out.refused_reason));
    return json_error(out.refused, out.refused_reason);
  }
  if (out.resync) {
    resyncs_.with({out.resync_reason}).inc();
    log::info("heartbeat delta refused: resync", log::kv("node", m->node),
              log::kv("reason", out.resync_reason), log::kv("seq", m->seq));
  }
  auto label = [&](const char* k) {
    auto it = m->labels.find(k);
    return it == m->labels.end() ? std::string() : it->second;
  };
  heartbeat::reply r;
  r.epoch = epoch.empty() ? d_.index.epoch() : std::move(epoch);
  r.ack_seq = m->seq;
  r.resync = out.resync;
  r.keeps_netsetup = true;
  auto orders = d_.prewarm.on_heartbeat(m->node, m->orders, m->schema);
  // Replicas sharing state apply pods from the shared log, every one of them (shared_state.h).
  if (m->pods_known && d_.jobs != nullptr && d_.shared == nullptr)
    d_.jobs->observe_pods(m->node, label("fabric"), m->pods);
  if (m->schema >= 2) r.orders = std::move(orders);
  heartbeats_->inc();
  heartbeat_bytes_->inc(static_cast<double>(req.body.size()));
  return http::response::json(200, heartbeat::encode(r));
}

std::string api::node_address(const http::request& req, const std::string& claimed) const {
  std::string source = req.remote.address().to_string();
  if (claimed.empty() || claimed == source) return source;
  if (req.peer.tls) {
    log::debug("heartbeat ip ignored: TLS is on, the node is reached at the connection's address",
               log::kv("claimed", claimed), log::kv("from", source));
    return source;
  }
  return d_.cfg.tracker.trust_announced_ip ? claimed : source;
}

}  // namespace shoal::scheduler
