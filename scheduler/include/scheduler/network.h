#pragma once
// The seam between placement and netsetup (RoCE discovery, validation and per-job plans).
//
// Gang placement asks three questions of a `network_model`: did this node's network validation
// pass (and with which settings), can these nodes run one job together (consistent settings across
// nodes), and what is a node's network plan for a job (the NIC/VF for each GPU and the NCCL
// environment). netsetup's library answers them from the discovery document peerd attaches to its
// heartbeat (`netsetup`, schema 1): validate_node, validate_cluster, make_nccl_env
// (`netsetup_network_model`, what the daemon runs). A node whose document is no netsetup
// inventory is judged by `document_network_model`, which the tests and the benchmark also use on
// their own: it reads only an optional `validation` member ({"passed": bool, "settings": {...},
// "error": "..."}), calls every other node "unknown", checks consistency by comparing `settings`,
// and returns no plan (JSON null).
//
// `cached_network_model` keeps each node's verdict until its document changes: a verdict parses
// and validates the node's whole discovery document, and the failure detector asks for every node
// every second, a placement for every candidate.
//
// Threading: implementations are safe from any thread (the cache behind its own lock).

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "scheduler/cost.h"
#include "netsetup/policy.h"

namespace shoal::scheduler {

enum class validation : std::uint8_t { unknown, passed, failed };
[[nodiscard]] std::string_view to_string(validation v) noexcept;

struct network_verdict {
  validation state = validation::unknown;
  // Nodes whose keys differ cannot be in one gang ("" = unknown: compatible with any key when
  // unvalidated nodes are allowed).
  std::string settings_key;
  std::string detail;  // why, for the answer
};

class network_model {
 public:
  virtual ~network_model() = default;
  [[nodiscard]] virtual network_verdict verdict(const node_view& n) const = 0;
  // Whether these nodes can form one gang; the error says why not.
  [[nodiscard]] virtual status gang_consistent(std::span<const node_view* const> nodes) const = 0;
  // The node's plan for a job using `gpus` GPUs per node; null when there is none.
  [[nodiscard]] virtual nlohmann::json plan(const node_view& n, std::uint32_t gpus) const = 0;
};

class document_network_model final : public network_model {
 public:
  [[nodiscard]] network_verdict verdict(const node_view& n) const override;
  [[nodiscard]] status gang_consistent(std::span<const node_view* const> nodes) const override;
  [[nodiscard]] nlohmann::json plan(const node_view& n, std::uint32_t gpus) const override;
};

// netsetup's own answers, from the discovery document (schema 1) the node attaches to its
// heartbeat: validate_node for the verdict, validate_cluster for a gang, and the rails (GPU →
// NIC) plus make_nccl_env for the plan. A node whose document is not a netsetup inventory but
// carries a `validation` member is judged by document_network_model (older nodes, tests).
class netsetup_network_model final : public network_model {
 public:
  explicit netsetup_network_model(netsetup::policy pol) : pol_(std::move(pol)) {}
  [[nodiscard]] network_verdict verdict(const node_view& n) const override;
  [[nodiscard]] status gang_consistent(std::span<const node_view* const> nodes) const override;
  [[nodiscard]] nlohmann::json plan(const node_view& n, std::uint32_t gpus) const override;

 private:
  netsetup::policy pol_;
  document_network_model fallback_;
};

// Verdicts kept per node and document version (node_view::netsetup_rev, which the index bumps
// when a node's document changes). Judging an 8-NIC H100 node's 22 KB netsetup inventory takes
// about 0.6 ms here (nlohmann parse, inventory_from_json, validate_node): 3 s of CPU a second
// for the failure detector at 5,000 nodes, and as much for every placement that evaluates them
// all. A view without a version (netsetup_rev 0: no document, or built by hand) is judged each
// time. Gang checks and plans look at the chosen nodes only and go straight to `inner`.
class cached_network_model final : public network_model {
 public:
  explicit cached_network_model(std::unique_ptr<network_model> inner,
                                std::size_t max_entries = std::size_t{1} << 17);
  [[nodiscard]] network_verdict verdict(const node_view& n) const override;
  [[nodiscard]] status gang_consistent(std::span<const node_view* const> nodes) const override {
    return inner_->gang_consistent(nodes);
  }
  [[nodiscard]] nlohmann::json plan(const node_view& n, std::uint32_t gpus) const override {
    return inner_->plan(n, gpus);
  }
  // The kept verdict of this version of the node's document, if any (no document needed).
  [[nodiscard]] std::optional<network_verdict> known(std::string_view node,
                                                     std::uint64_t rev) const;
  // Documents judged (a version not kept yet), for the tests and a metric.
  [[nodiscard]] std::uint64_t judged() const;

 private:
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  struct entry {
    std::uint64_t rev = 0;
    network_verdict v;
  };
  std::unique_ptr<network_model> inner_;
  std::size_t max_entries_;
  mutable std::shared_mutex mu_;
  mutable std::unordered_map<std::string, entry, name_hash, std::equal_to<>> by_node_;
  mutable std::uint64_t judged_ = 0;
};

}  // namespace shoal::scheduler
