#pragma once
// Placement scores of one job kept current from the index's change log, so that a decision reads
// each node's score instead of evaluating every holder of the job's objects again.
//
// A healthy node's cost needs only six sums. Let H be the objects the node holds; R, Z and A
// those with a healthy holder in its rack, in its zone and anywhere; S those registry-proxy has
// had (held now, or remembered). Every object of the job counts in the first class that has it
// (cost.h), and for a healthy node whose rack lies in one zone H ⊆ R ⊆ Z ⊆ A ⊆ S, so with |X|
// the bytes of X:
//   local = |H|, rack = |R| − |H|, zone = |Z| − |R|, cluster = |A| − |Z|,
//   origin = |S| − |A|, upstream = total − |S|     (a node without rack or zone skips that term)
// The state keeps |H| per node, |R| per rack, |Z| per zone, |A| and |S|, and per object how many
// healthy holders it has in each rack, in each zone and in all. A holding change moves those by
// one: it touches its node, and its rack, its zone or every node only when an object's first
// holder there arrives or its last one leaves. Only the nodes touched are scored again.
//
// Unhealthy nodes score 0 (the extender's rule); their cost is not kept (neither verb reads it).
// A node list whose racks span zones (labels holding '/') is not kept: build() returns null and
// the extender evaluates such a request in full (evaluator, cost.h).
//
// Thread-safety: job_scores none; score_cache is thread-safe and hands a state out under the
// state's own lock.

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "scheduler/cost.h"
#include "scheduler/index.h"

namespace shoal::scheduler {

// extender_score() without a logarithm per node. The score, 10 (1 − ln(1 + t) / ln(1 + t_cold))
// rounded half away from zero, falls as t grows: it is at least j exactly when t is at most
// bound j = e^(ln(1 + t_cold) (10.5 − j) / 10) − 1, so it is the number of bounds t stays under.
// Within a relative 1e-9 of a bound the two computations could round apart, and there the
// logarithm decides, as in extender_score().
class score_bounds {
 public:
  explicit score_bounds(double cold_seconds);
  // The score of a node with a non-zero job size that needs `seconds`.
  [[nodiscard]] int score(double seconds) const;

 private:
  double cold_ = 0, log_cold_ = 0;
  std::array<double, 11> bound_{};
};

class job_scores {
 public:
  // From a view of the job's objects (cluster_index::view of their digests: its node list,
  // holders and change sequence). `objects` without duplicates (dedup); `m` must outlive the
  // state. Null when the view's racks span zones.
  [[nodiscard]] static std::unique_ptr<job_scores> build(const cluster_view& v,
                                                         std::span<const object_ref> objects,
                                                         const cost_model& m);

  // Applies the index's changes since the state's sequence. False when it cannot: the log no
  // longer reaches back, the node list changed in what scores depend on (a node came, went,
  // moved or changed health), or an object whose size the job did not give changed holders.
  // The state is then unusable: build it again.
  [[nodiscard]] bool catch_up(const cluster_index& idx);

  // Whether the state's positions are those of `nodes` (the index's list it was built on or
  // last caught up to). Positions are the node list's (sorted by name).
  [[nodiscard]] bool on(const node_list& nodes) const;
  [[nodiscard]] std::size_t size() const noexcept { return scores_.size(); }
  // 0..10, extender_score() of the node's cost; 0 for an unhealthy node.
  [[nodiscard]] int score(std::uint32_t node) const { return scores_[node]; }
  // evaluator::cost() of a healthy node; for an unhealthy one only bytes_total and present().
  [[nodiscard]] node_cost cost(std::uint32_t node) const;
  // Nodes scored again by the last catch_up (for tests).
  [[nodiscard]] std::size_t rescored() const noexcept { return rescored_; }

 private:
  job_scores(const cost_model& m) : m_(m) {}
  void rescore(std::uint32_t node);
  [[nodiscard]] std::uint32_t find(const digest& d) const;
  // One change; false when the state cannot follow it.
  bool apply(const holding_change& c);
  [[nodiscard]] bool same_nodes(const node_classes& c) const;

  const cost_model& m_;
  node_classes cls_;  // a copy: a state must not keep the index's node snapshot alive
  std::weak_ptr<const node_classes> list_;  // the index's list it is on (identity only)
  std::uint64_t seq_ = 0;
  std::uint64_t total_ = 0;
  score_bounds bounds_{0};
  // Per object k.
  std::vector<digest> ids_;
  std::vector<std::uint64_t> size_;
  std::vector<std::uint8_t> sized_by_view_;       // the job gave no size: the view's was used
  std::vector<std::uint32_t> all_, any_;          // holders; healthy holders
  std::vector<std::uint8_t> in_s_;                // in S (held, or remembered by the index)
  std::vector<std::uint32_t> in_rack_, in_zone_;  // healthy holders per (k, rack) and (k, zone)
  // Open-addressed digest → k (table size a power of two, ~npos when empty).
  std::vector<std::uint32_t> slots_;
  // Sums.
  std::vector<std::uint64_t> local_;                // per node: |H|
  std::vector<std::uint64_t> rack_sum_, zone_sum_;  // |R| per rack, |Z| per zone
  std::uint64_t any_sum_ = 0, seen_sum_ = 0;        // |A|, |S|
  // Members of each rack and zone (CSR), for scoring them again.
  std::vector<std::uint32_t> rack_start_, rack_nodes_, zone_start_, zone_nodes_;
  std::vector<std::uint8_t> scores_;
  // What the changes being applied touched.
  bool all_dirty_ = false;
  std::vector<std::uint32_t> dirty_nodes_, dirty_racks_, dirty_zones_;
  std::size_t rescored_ = 0;
};

// Kept job states by platform and object list, least recently used first out.
class score_cache {
 public:
  explicit score_cache(std::size_t capacity = 16) : capacity_(capacity) {}
  enum class outcome {
    caught_up,  // a kept state followed the change log
    built,      // none was kept: built from a view
    rebuilt,    // the kept one could not follow (scores.h): built again
    none,       // no state can be kept for the node list: fn was not called
  };
  // The state for `objects` on `platform`, current with the index, handed to `fn` under its
  // lock. On `none` the caller evaluates in full.
  outcome with(const cluster_index& idx, std::string_view platform,
               std::span<const object_ref> objects, const cost_model& m,
               const std::function<void(const job_scores&)>& fn);

 private:
  struct entry {
    std::mutex mu;
    std::unique_ptr<job_scores> state;  // guarded by mu
  };
  std::size_t capacity_;
  mutable std::mutex mu_;
  // Key: platform, then each object's digest and size (bytes); most recently used at the front.
  std::list<std::pair<std::string, std::shared_ptr<entry>>> lru_;
  std::unordered_map<std::string, decltype(lru_)::iterator, keyed_hash> by_key_;
};

}  // namespace shoal::scheduler
