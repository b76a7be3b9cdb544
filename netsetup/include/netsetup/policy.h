#pragma once
// The RoCE policy a node is brought to: YAML declared once through common/config (defaults are
// the member initializers; `shoal-netsetup --print-policy-docs` prints the reference). The
// defaults are the convention every RoCE deployment we studied uses: ToS 106 → DSCP 26 →
// priority 3 with PFC on priority 3 only, trust dscp, ECN on priority 3, CNP on priority 6
// (DSCP 48), MTU 9000 (RoCE path MTU 4096).

#include <string>
#include <vector>

#include "common/config.h"

namespace shoal::netsetup {

// NCCL environment produced for each pod.
struct nccl_policy {
  // NCCL_NET_GDR_LEVEL: GPUDirect RDMA is used up to this GPU↔NIC distance.
  std::string gdr_level = "PXB";
  // NCCL_SOCKET_IFNAME; empty = the rail netdevs in the exact-match "=" form.
  std::string socket_ifname;
};

// Field values for the generated Kubernetes configs.
struct cluster_policy {
  std::string resource_prefix = "nvidia.com";
  // Resources are per rail: "<base><rail>", e.g. rdma_rail0 ... rdma_rail7.
  std::string sriov_resource_base = "rdma_rail";
  std::string shared_resource_base = "rdma_shared_rail";
  std::string network_name_base = "shoal-rdma-rail";
  std::string network_namespace = "default";
  std::string cni_version = "0.4.0";
  // CNI IPAM section of each NetworkAttachmentDefinition, as JSON. Required for cluster-config:
  // RoCE v2 needs an IP address on the pod's RDMA interface.
  std::string ipam;
  int rdma_hca_max = 64;
  int periodic_update_interval = 60;
};

struct policy {
  // Netdevs to manage and validate; empty = the netdev of every rail NIC.
  std::vector<std::string> interfaces;
  int mtu = 9000;
  std::string trust = "dscp";
  int pfc_priority = 3;
  int ecn_priority = 3;
  int cnp_priority = 6;
  int cnp_dscp = 48;
  // IP ToS byte of RoCE traffic (NCCL_IB_TC, verbs traffic_class): DSCP = tc >> 2.
  int traffic_class = 106;
  // RDMA-CM default ToS (cma_roce_tos); -1 leaves it alone.
  int rdma_cm_tos = 106;
  bool set_verbs_traffic_class = true;
  bool disable_global_pause = true;
  // SR-IOV VFs per rail PF; 0 leaves SR-IOV alone.
  int vfs_per_pf = 8;
  // Free VFs (netdev still in the host namespace) each rail PF must have to pass validation.
  int min_free_vfs = 1;
  // Validation warns when a GPU's rail NIC is farther than this (PIX, PXB, PHB, SYS).
  std::string max_gpu_nic_distance = "PXB";
  // Cross-node check: the RoCE v2 IPv4 GIDs of one rail share a subnet of this prefix length;
  // 0 disables the subnet check (addresses must still be unique and present).
  int gid_subnet_prefix = 0;
  nccl_policy nccl;
  cluster_policy cluster;

  // DSCP and priority the traffic class maps to, as the NIC classifies it under trust dscp.
  [[nodiscard]] int data_dscp() const { return traffic_class >> 2; }
};

void describe(config::binder& b, nccl_policy& p);
void describe(config::binder& b, cluster_policy& p);
void describe(config::binder& b, policy& p);

}  // namespace shoal::netsetup
