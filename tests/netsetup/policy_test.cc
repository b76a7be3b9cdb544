// The policy YAML: documented defaults, loading, and the rules that tie its fields together.

#include "netsetup/policy.h"

#include <gtest/gtest.h>

namespace shoal::netsetup {
namespace {

TEST(NetsetupPolicy, DefaultsAreTheRoceConvention) {
  policy p;
  EXPECT_EQ(p.mtu, 9000);
  EXPECT_EQ(p.trust, "dscp");
  EXPECT_EQ(p.pfc_priority, 3);
  EXPECT_EQ(p.ecn_priority, 3);
  EXPECT_EQ(p.cnp_priority, 6);
  EXPECT_EQ(p.traffic_class, 106);
  EXPECT_EQ(p.data_dscp(), 26);
  EXPECT_EQ(p.rdma_cm_tos, 106);
  EXPECT_EQ(p.vfs_per_pf, 8);
  EXPECT_TRUE(config::validate(p));
  const std::string docs = config::to_markdown<policy>("policy");
  for (const char* key : {"mtu", "pfc_priority", "traffic_class", "vfs_per_pf", "gdr_level", "ipam",
                          "rdma_hca_max"}) {
    EXPECT_NE(docs.find(key), std::string::npos) << key;
  }
}

TEST(NetsetupPolicy, LoadsYamlAndPrintsItBack) {
  policy p;
  auto st = config::load_string(R"(
interfaces: [ens1f0np0, ens2f0np0]
mtu: 4200
vfs_per_pf: 4
nccl:
  gdr_level: PHB
cluster:
  ipam: '{"type": "whereabouts", "range": "10.10.0.0/16"}'
)",
                                "policy.yaml", p);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(p.interfaces, (std::vector<std::string>{"ens1f0np0", "ens2f0np0"}));
  EXPECT_EQ(p.mtu, 4200);
  EXPECT_EQ(p.vfs_per_pf, 4);
  EXPECT_EQ(p.nccl.gdr_level, "PHB");
  policy back;
  ASSERT_TRUE(config::load_string(config::to_yaml(p), "printed", back));
  EXPECT_EQ(back.cluster.ipam, p.cluster.ipam);
  EXPECT_EQ(back.interfaces, p.interfaces);
}

TEST(NetsetupPolicy, RefusesInconsistentOrOutOfRangeValues) {
  struct bad_case {
    const char* yaml;
    const char* message;
  };
  for (const auto& c : std::vector<bad_case>{
           {"traffic_class: 160\n", "traffic_class 160 is DSCP 40 which classifies to priority 5"},
           {"pfc_priority: 4\n", "not pfc_priority 4"},
           {"pfc_priority: 8\n", "pfc_priority: must be at most 7"},
           {"trust: both\n", "must be one of"},
           {"mtu: 100\n", "must be at least 1280"},
           {"cnp_dscp: 26\n", "cnp_dscp must differ"},
           {"nccl: {gdr_level: NODE}\n", "must be one of"},
           {"cluster: {ipam: 'not json'}\n", "cluster.ipam must be a JSON object"},
           {"mtuu: 9000\n", "unknown key"},
       }) {
    policy p;
    auto st = config::load_string(c.yaml, "policy.yaml", p);
    ASSERT_FALSE(st) << c.yaml;
    EXPECT_NE(st.error().message.find(c.message), std::string::npos)
        << c.yaml << " -> " << st.error().message;
  }
}

}  // namespace
}  // namespace shoal::netsetup
