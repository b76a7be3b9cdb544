#pragma once
// What a job gets from netsetup: the NCCL environment of each pod (from the GPUs it was given and
// their rails) and the cluster configs that expose the rails to pods: sriov-network-device-plugin
// `resourceList`, Multus NetworkAttachmentDefinitions, k8s-rdma-shared-dev-plugin `configList`.
// Field names are spelled exactly as those projects read them (sources in docs/netsetup.md).

#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "netsetup/inventory.h"
#include "netsetup/policy.h"

namespace shoal::netsetup {

struct nccl_env {
  std::vector<std::pair<std::string, std::string>> vars;  // in a stable order
  std::vector<std::string> notes;                         // why a variable was left to NCCL

  [[nodiscard]] const std::string* get(std::string_view name) const;
};

// `gpus` are GPU BDFs, or decimal indices into inv.gpus ("0", "3"); empty means every GPU.
// Errors: an unknown GPU, or a GPU without an RDMA rail (errc::bad_request).
[[nodiscard]] result<nccl_env> make_nccl_env(const node_inventory& inv,
                                             std::span<const std::string> gpus, const policy& pol);
// "export NAME='value'" lines for a shell; values are single-quoted.
[[nodiscard]] std::string to_shell(const nccl_env& env);

// {"resourceList": [...]}: one resource per rail, selecting that rail's RDMA VFs (by pfNames on
// a host, by pciAddresses for the VFs a virtual machine was given).
[[nodiscard]] nlohmann::json sriov_device_plugin_config(const node_inventory& inv,
                                                        const policy& pol);
// One k8s.cni.cncf.io/v1 NetworkAttachmentDefinition per rail, bound to the rail's resource.
// Error when policy.cluster.ipam is empty.
[[nodiscard]] result<nlohmann::json> network_attachment_definitions(const node_inventory& inv,
                                                                    const policy& pol);
// {"periodicUpdateInterval": N, "configList": [...]}: one shared resource per rail PF.
[[nodiscard]] nlohmann::json rdma_shared_device_plugin_config(const node_inventory& inv,
                                                              const policy& pol);
// All three: {"sriovDevicePlugin": ..., "networkAttachmentDefinitions": [...],
// "rdmaSharedDevicePlugin": ...}.
[[nodiscard]] result<nlohmann::json> cluster_configs(const node_inventory& inv, const policy& pol);

}  // namespace shoal::netsetup
