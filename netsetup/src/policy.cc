#include "netsetup/policy.h"

#include <nlohmann/json.hpp>

#include "netsetup/affinity.h"

namespace shoal::netsetup {

void describe(config::binder& b, nccl_policy& p) {
  b.field("gdr_level", p.gdr_level,
          "NCCL_NET_GDR_LEVEL: largest GPU-NIC distance at which NCCL uses GPUDirect RDMA.",
          {.one_of = {"PIX", "PXB", "PHB", "SYS"}});
  b.field("socket_ifname", p.socket_ifname,
          "NCCL_SOCKET_IFNAME for bootstrap traffic; empty uses the rail netdevs in the "
          "exact-match form (=ens1f0,...).");
}

void describe(config::binder& b, cluster_policy& p) {
  b.field("resource_prefix", p.resource_prefix,
          "Extended-resource prefix of the device-plugin resources (resourcePrefix).");
  b.field("sriov_resource_base", p.sriov_resource_base,
          "sriov-network-device-plugin resourceName per rail: <base><rail number>.");
  b.field("shared_resource_base", p.shared_resource_base,
          "k8s-rdma-shared-dev-plugin resourceName per rail: <base><rail number>.");
  b.field("network_name_base", p.network_name_base,
          "NetworkAttachmentDefinition name per rail: <base><rail number>.");
  b.field("network_namespace", p.network_namespace,
          "Namespace of the NetworkAttachmentDefinitions.");
  b.field("cni_version", p.cni_version, "cniVersion of the generated CNI configs.");
  b.field("ipam", p.ipam,
          "CNI IPAM object (JSON) of the RDMA networks, e.g. {\"type\": \"whereabouts\", "
          "\"range\": \"10.10.0.0/16\"}. Required by cluster-config: RoCE v2 needs an IP on the "
          "pod interface.");
  b.field("rdma_hca_max", p.rdma_hca_max,
          "k8s-rdma-shared-dev-plugin rdmaHcaMax: pods that may share one rail device.",
          {.min = 1, .max = 65535});
  b.field("periodic_update_interval", p.periodic_update_interval,
          "k8s-rdma-shared-dev-plugin periodicUpdateInterval in seconds (0 disables).",
          {.min = 0, .max = 86400});
  if (!p.ipam.empty()) {
    auto j = nlohmann::json::parse(p.ipam, nullptr, false);
    b.check(!j.is_discarded() && j.is_object(), "cluster.ipam must be a JSON object");
  }
}

void describe(config::binder& b, policy& p) {
  b.field("interfaces", p.interfaces,
          "Netdevs to manage and validate; empty means the netdev of every rail NIC.");
  b.field("mtu", p.mtu, "Netdev MTU on every RDMA interface (9000 gives RoCE path MTU 4096).",
          {.min = 1280, .max = 9216});
  b.field("trust", p.trust, "QoS trust mode: classify by DSCP or by 802.1p PCP.",
          {.one_of = {"dscp", "pcp"}});
  b.field("pfc_priority", p.pfc_priority,
          "The one priority with PFC enabled (lossless RoCE); all others have PFC off.",
          {.min = 0, .max = 7});
  b.field("ecn_priority", p.ecn_priority,
          "Priority on which ECN (DCQCN notification and reaction points) is enabled.",
          {.min = 0, .max = 7});
  b.field("cnp_priority", p.cnp_priority, "Priority of congestion notification packets.",
          {.min = 0, .max = 7});
  b.field("cnp_dscp", p.cnp_dscp, "DSCP of congestion notification packets.",
          {.min = 0, .max = 63});
  b.field("traffic_class", p.traffic_class,
          "IP ToS byte of RoCE traffic (NCCL_IB_TC, verbs traffic class). DSCP = value >> 2; "
          "the DSCP maps to priority DSCP >> 3, which must be pfc_priority.",
          {.min = 0, .max = 255});
  b.field("rdma_cm_tos", p.rdma_cm_tos,
          "RDMA-CM default ToS for applications that do not set one (cma_roce_tos); -1 leaves "
          "it alone.",
          {.min = -1, .max = 255});
  b.field("set_verbs_traffic_class", p.set_verbs_traffic_class,
          "Also set the mlx5 verbs default traffic class (tc/<port>/traffic_class) where the "
          "driver exposes it.");
  b.field("disable_global_pause", p.disable_global_pause,
          "Turn 802.3x global pause off (PFC and global pause exclude each other).");
  b.field("vfs_per_pf", p.vfs_per_pf, "SR-IOV VFs per rail PF; 0 leaves SR-IOV alone.",
          {.min = 0, .max = 1024});
  b.field("min_free_vfs", p.min_free_vfs,
          "VFs each rail PF must still have free (netdev in the host namespace) to pass "
          "validation.",
          {.min = 0, .max = 1024});
  b.field("max_gpu_nic_distance", p.max_gpu_nic_distance,
          "Validation warns when a GPU's rail NIC is farther than this.",
          {.one_of = {"PIX", "PXB", "PHB", "SYS"}});
  b.field("gid_subnet_prefix", p.gid_subnet_prefix,
          "Cross-node check: RoCE v2 IPv4 GIDs of one rail share a subnet of this prefix length; "
          "0 disables the subnet check.",
          {.min = 0, .max = 32});
  b.section("nccl", p.nccl, "NCCL environment generated for each pod.");
  b.section("cluster", p.cluster, "Generated device-plugin and Multus configs.");
  b.check((p.data_dscp() >> 3) == p.pfc_priority,
          "traffic_class " + std::to_string(p.traffic_class) + " is DSCP " +
              std::to_string(p.data_dscp()) + " which classifies to priority " +
              std::to_string(p.data_dscp() >> 3) + ", not pfc_priority " +
              std::to_string(p.pfc_priority));
  b.check(p.cnp_dscp != p.data_dscp(), "cnp_dscp must differ from the data DSCP");
}

}  // namespace shoal::netsetup
