#include "scheduler/ingest.h"

#include "common/log.h"

namespace shoal::scheduler {

apply_outcome ingest_heartbeat(cluster_index& index, tracker& trk, const heartbeat::message& m,
                               const apply_decision* decided) {
  auto out = index.apply(m, m.ip, decided);
  if (out.refused != 0) return out;
  if (out.moved_from_port != 0) trk.drop_holder(out.moved_from_ip, out.moved_from_port);
  if (m.bt_port == 0) return out;
  auto label = [&](const char* k) {
    auto it = m.labels.find(k);
    return it == m.labels.end() ? std::string() : it->second;
  };
  std::string zone = label("zone"), rack = label("rack");
  std::size_t skipped = 0;
  if (out.full) {
    skipped = trk.set_holdings(m.node, out.ip, m.bt_port, zone, rack, out.added, true);
  } else {
    skipped = trk.set_holdings(m.node, out.ip, m.bt_port, zone, rack,
                               out.resync ? std::vector<info_hash>{} : out.added, false);
    if (!out.removed.empty()) trk.remove_holdings(out.ip, m.bt_port, out.removed);
  }
  if (skipped != 0) {
    log::warn("tracker full: holdings not recorded", log::kv("node", m.node),
              log::kv("skipped", skipped));
  }
  return out;
}

}  // namespace shoal::scheduler
