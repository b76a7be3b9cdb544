#pragma once
// One heartbeat's effect on the scheduler's soft state: the index records the node and its
// objects, the tracker makes it a holder of their swarms. A lone scheduler runs it for each
// heartbeat it receives; replicas sharing state (shared_state.h) run it for each heartbeat of the
// shared log, in the log's order, with the verdict Redis gave.
//
// Threading: as thread-safe as the index and the tracker (both are).

#include "common/heartbeat.h"
#include "scheduler/index.h"
#include "scheduler/tracker.h"

namespace shoal::scheduler {

// `m.ip` is the node's BitTorrent address (the API resolved it from the connection). Refused by
// a cap (undecided only): nothing is applied and the outcome says why.
apply_outcome ingest_heartbeat(cluster_index& index, tracker& trk, const heartbeat::message& m,
                               const apply_decision* decided = nullptr);

}  // namespace shoal::scheduler
