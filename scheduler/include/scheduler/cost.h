#pragma once
// The cost model of placement: how long a node would take to be ready for a job, from the bytes
// it still lacks and where each missing object would come from.
//
// For every object of the job (image layers and configs, dataset objects; an object shared by
// several images counts once) a node either holds it (source `local`, no cost) or fetches it from
// the best source that has it: a healthy holder in the same rack, else in the same zone, else
// anywhere in the cluster; when no healthy node holds it, registry-proxy (`origin`) if the object
// has been in the cluster before (every object enters through registry-proxy, which keeps it),
// else the upstream registry. Each source class has a bandwidth; the estimate is
//   serial (default): sum over classes of bytes_c / bandwidth_c
//   parallel:         max( max over classes of bytes_c / bandwidth_c, missing / node_ingress )
// docs/scheduler.md says why serial is the default and works an example through.
//
// Everything here is a pure function over a `cluster_view` (a snapshot of the index's state for
// the objects of one job: its node list is shared and immutable, the objects are copied), so it
// is tested without daemons. Thread-safety: values only.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/digest.h"
#include "common/siphash.h"
#include "scheduler/config.h"

namespace shoal::scheduler {

struct object_ref {
  digest id;
  std::uint64_t size = 0;
  friend bool operator==(const object_ref&, const object_ref&) = default;
};

// Objects of a job without duplicates (first occurrence kept, order preserved).
[[nodiscard]] std::vector<object_ref> dedup(std::span<const object_ref> objects);

enum class source : std::uint8_t { local, rack, zone, cluster, origin, upstream };
inline constexpr std::size_t source_count = 6;
[[nodiscard]] std::string_view to_string(source s) noexcept;
using bytes_by_source = std::array<std::uint64_t, source_count>;

// Text shared between copies: a node's netsetup document (some 22 KB for an H100 node) is in
// every node snapshot, which is built again whenever a node's labels, health or document change
// (77 ms at 5,000 such nodes when each snapshot copied every document). Copying one copies a
// pointer; the text never changes.
class shared_text {
 public:
  shared_text() = default;
  shared_text(std::string s)  // NOLINT(google-explicit-constructor): a string is its text
      : p_(s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s))) {}
  shared_text(const char* s) : shared_text(std::string(s)) {}  // NOLINT
  [[nodiscard]] const std::string& str() const noexcept {
    static const std::string none;
    return p_ ? *p_ : none;
  }
  [[nodiscard]] bool empty() const noexcept { return !p_ || p_->empty(); }
  friend bool operator==(const shared_text& a, std::string_view b) noexcept {
    return std::string_view(a.str()) == b;
  }

 private:
  std::shared_ptr<const std::string> p_;
};

// A node as placement sees it.
struct node_view {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string zone, rack, fabric;
  std::string platform;  // os/arch[/variant]
  bool healthy = true;   // heartbeating and not failing
  std::string health = "ok";
  std::uint32_t gpus = 0;  // capacity from the heartbeat
  std::string gpu_model;
  shared_text netsetup;  // the node's netsetup document (JSON text), "" when none
  // The index's version of that document: another number whenever it changes; 0 when there is
  // none or the view was built by hand (cached_network_model keeps verdicts by it).
  std::uint64_t netsetup_rev = 0;
};

// One object of a job and its holders (indexes into cluster_view::nodes, sorted).
struct object_view {
  object_ref ref;
  std::vector<std::uint32_t> holders;
  bool seen_before = false;  // some node held it at some point: registry-proxy has it
};

// What the cost model and the extender need of every node as small integers, so that a request
// compares no strings per node: its rack ("zone/rack"), zone and platform, each numbered in order
// of first appearance. The index builds it once with its node snapshot and shares it like the
// node list; for a view built by hand it is computed when needed (classes_of).
struct node_classes {
  static constexpr std::uint32_t npos = ~std::uint32_t{0};
  std::vector<std::uint32_t> rack, zone, platform;  // per node (npos: no rack / no zone)
  std::vector<std::uint8_t> healthy;                // per node: node_view::healthy
  std::uint32_t racks = 0, zones = 0;
  std::vector<std::string> platforms;  // platform id → name
  // The index's node id → position in the list (npos: not in it); empty for a list built by
  // hand. The index's change log names nodes by id.
  std::vector<std::uint32_t> index_of_id;
};

// The nodes of a view: a read-only, shared list. The index keeps one immutable list of every node
// and hands the same list to every view until a node's inventory or liveness changes, so taking a
// view does not copy 5,000 nodes' labels per request (issue #5). Reads look like a vector's.
class node_list {
 public:
  node_list() = default;
  explicit node_list(std::shared_ptr<const std::vector<node_view>> nodes,
                     std::shared_ptr<const node_classes> classes = nullptr)
      : nodes_(std::move(nodes)), classes_(std::move(classes)) {}
  [[nodiscard]] std::size_t size() const noexcept { return nodes_ ? nodes_->size() : 0; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] const node_view& operator[](std::size_t i) const { return (*nodes_)[i]; }
  [[nodiscard]] const node_view& at(std::size_t i) const {
    if (!nodes_) throw std::out_of_range("node_list::at");
    return nodes_->at(i);
  }
  [[nodiscard]] const node_view* begin() const noexcept {
    return nodes_ ? nodes_->data() : nullptr;
  }
  [[nodiscard]] const node_view* end() const noexcept { return begin() + size(); }
  // The classes the index built with the list; null for a list built by hand.
  [[nodiscard]] const std::shared_ptr<const node_classes>& classes() const noexcept {
    return classes_;
  }

 private:
  std::shared_ptr<const std::vector<node_view>> nodes_;
  std::shared_ptr<const node_classes> classes_;
};

// Numbers the racks, zones and platforms of `nodes` (O(nodes), strings hashed once each).
[[nodiscard]] node_classes make_classes(std::span<const node_view> nodes);
// The list's own classes, else make_classes() of it.
[[nodiscard]] std::shared_ptr<const node_classes> classes_of(const node_list& nodes);

struct cluster_view {
  node_list nodes;  // sorted by name
  // The index's change-log sequence this view shows (cluster_index::changes_since); 0 for a
  // view built by hand.
  std::uint64_t changes = 0;
  // Keyed by a job's digests (from manifests and dataset lists others wrote): a keyed hash.
  std::unordered_map<digest, object_view, keyed_hash> objects;
};

// Bandwidths per source class (bytes/s) and how classes combine.
struct cost_model {
  std::array<double, source_count> bandwidth{0, 1, 1, 1, 1, 1};
  double ingress = 1;
  bool parallel = false;

  [[nodiscard]] static cost_model from(const cost_config& c);
  // Estimated seconds to fetch these missing bytes (the `local` entry is ignored).
  [[nodiscard]] double seconds(const bytes_by_source& b) const;
  // Seconds for `bytes` all from upstream: the cold start the extender score is relative to.
  [[nodiscard]] double cold_seconds(std::uint64_t bytes) const;
};

struct node_cost {
  std::uint64_t bytes_total = 0;
  bytes_by_source by_source{};  // by_source[local] = bytes present
  double seconds = 0;
  [[nodiscard]] std::uint64_t present() const { return by_source[0]; }
  [[nodiscard]] std::uint64_t missing() const { return bytes_total - present(); }
};

// Evaluates nodes of one view against one object list. Construction does the per-object work
// once: for each object, which nodes hold it and which racks and zones have a healthy holder, as
// bit sets over the job's objects (one bit per object, `words_` 64-bit words per set). A node's
// cost is then a few word operations per 64 objects plus a sum over set bits, with no lookups or
// allocation, which matters when the extender scores 5,000 nodes per request (issue #5).
class evaluator {
 public:
  evaluator(const cluster_view& v, std::span<const object_ref> objects, const cost_model& m);
  [[nodiscard]] node_cost cost(std::uint32_t node) const;
  // Whether the node holds any of the objects (else its cost is that of any node of its rack and
  // zone holding none).
  [[nodiscard]] bool holds_any(std::uint32_t node) const noexcept {
    return node < slot_of_.size() && slot_of_[node] != npos;
  }

 private:
  // Bit k of a set is object k of objs_.
  [[nodiscard]] const std::uint64_t* set(const std::vector<std::uint64_t>& sets,
                                         std::uint32_t i) const {
    return sets.data() + static_cast<std::size_t>(i) * words_;
  }

  const cluster_view& v_;
  const cost_model& m_;
  std::vector<std::uint64_t> sizes_;  // per object (the view's size when the job gave none)
  std::size_t words_ = 0;
  // Rack and zone of every node (node_classes: the index's, shared, or made for this view).
  std::shared_ptr<const node_classes> classes_;
  // Per node: the slot of its set in held_, or npos when it holds none of the objects. Holders
  // are few next to the nodes, so only they get a set (the rest share a zero set).
  std::vector<std::uint32_t> slot_of_;
  std::vector<std::uint64_t> held_;      // per slot: objects the node holds
  std::vector<std::uint64_t> in_rack_;   // per rack id: objects with a healthy holder there
  std::vector<std::uint64_t> in_zone_;   // per zone id: objects with a healthy holder there
  std::vector<std::uint64_t> anywhere_;  // objects with a healthy holder
  std::vector<std::uint64_t> seen_;      // objects registry-proxy has had
  // Per word and byte of a set: the summed sizes of each of the 256 bit patterns (cost()).
  std::vector<std::uint64_t> byte_sums_;
  static constexpr std::uint32_t npos = ~std::uint32_t{0};
};

// The extender's 0..10: 10 × (1 − ln(1 + t) / ln(1 + t_cold)) rounded, t the node's estimated
// seconds, t_cold the seconds to fetch everything from upstream: 10 when everything is here,
// 0 when everything comes from upstream.
[[nodiscard]] int extender_score(const node_cost& c, const cost_model& m);

// "Missing more than" for hard mode: a share of the job's bytes or a byte count.
struct threshold {
  bool is_share = true;
  double share = 0.1;
  std::uint64_t bytes = 0;
  [[nodiscard]] bool exceeded(const node_cost& c) const;
  [[nodiscard]] std::string str() const;
};
// "10%", "0%", "2GiB", "500MB", "0".
[[nodiscard]] std::optional<threshold> parse_threshold(std::string_view s);

}  // namespace shoal::scheduler
