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
// Everything here is a pure function over a `cluster_view` (a copy of the index's state for the
// objects of one job), so it is tested without daemons. Thread-safety: values only.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/digest.h"
#include "config.h"

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
  std::string netsetup;  // the node's netsetup document (JSON text), "" when none
};

// One object of a job and its holders (indexes into cluster_view::nodes, sorted).
struct object_view {
  object_ref ref;
  std::vector<std::uint32_t> holders;
  bool seen_before = false;  // some node held it at some point: registry-proxy has it
};

struct cluster_view {
  std::vector<node_view> nodes;  // sorted by name
  std::unordered_map<digest, object_view> objects;
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

// Evaluates nodes of one view against one object list. Construction prepares, per object, the
// racks and zones of its healthy holders, so each node costs O(objects).
class evaluator {
 public:
  evaluator(const cluster_view& v, std::span<const object_ref> objects, const cost_model& m);
  [[nodiscard]] node_cost cost(std::uint32_t node) const;

 private:
  struct prepared {
    object_ref ref;
    const std::vector<std::uint32_t>* holders = nullptr;
    std::vector<std::string> racks;  // "zone/rack" of healthy holders, sorted
    std::vector<std::string> zones;  // of healthy holders, sorted
    bool any_healthy = false;
    bool seen_before = false;
  };
  const cluster_view& v_;
  const cost_model& m_;
  std::vector<prepared> objs_;
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
