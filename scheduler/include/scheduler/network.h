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
// Threading: implementations are immutable and safe from any thread.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

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

}  // namespace shoal::scheduler
