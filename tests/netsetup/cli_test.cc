// The shoal-netsetup binary end to end on fixture trees and discovery documents: output shapes,
// exit codes, and that a dry run changes nothing. (Real apply is in veth_test: a fixture tree
// with the real `ip` would reach the host's interfaces.)

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "netsetup/command_runner.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;
using namespace std::chrono_literals;

const std::string cli = std::string(SHOAL_BINARY_DIR) + "/netsetup/shoal-netsetup";

command_result run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), cli);
  process_runner r;
  auto res = r.run(args, 30s);
  EXPECT_TRUE(res) << (res ? "" : res.error().message);
  return res ? *res : command_result{-1, {}, {}};
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

class NetsetupCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(cli)) << cli;
    a_ = h100(node_state::converged, 0);
    b_ = h100(node_state::converged, 1);
    doc_a_ = write_file(a_.tree->root() + "/a.json", to_json(a_.discover()).dump());
    doc_b_ = write_file(a_.tree->root() + "/b.json", to_json(b_.discover()).dump());
  }
  node_fixture a_, b_;
  std::string doc_a_, doc_b_;
};

TEST_F(NetsetupCli, DiscoverPrintsTheDocument) {
  auto r =
      run_cli({"--sysfs-root", a_.tree->root(), "--node-name", "n1", "--no-tools", "discover"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["schema"], 1);
  EXPECT_EQ(doc["node"], "n1");
  EXPECT_EQ(doc["gpus"].size(), 8u);
  EXPECT_EQ(doc["rails"][7]["netdev"], "ens7np0");
  EXPECT_TRUE(doc["netdevs"][0]["qos"]["pfc"].is_null());  // --no-tools
}

TEST_F(NetsetupCli, DiscoverReportsGarbageAndExitsNonZero) {
  a_.tree->write(a_.tree->netdev_dir("ens1np0") + "/mtu", "nine thousand\n");
  auto r = run_cli({"--sysfs-root", a_.tree->root(), "--no-tools", "discover"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/sys/class/net/ens1np0/mtu: expected an integer, got \"nine thousand\""),
            std::string::npos)
      << r.err;
}

TEST_F(NetsetupCli, ValidateAcrossPeers) {
  auto r = run_cli({"--from", doc_a_, "validate", "--peer", doc_b_});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("cluster.gid"), std::string::npos);
  EXPECT_NE(r.out.find("PASSED"), std::string::npos);
  // A peer with a different MTU fails the cross-node check.
  auto c = h100(node_state::converged, 2);
  for (const auto& nd : c.netdevs) c.tree->write(c.tree->netdev_dir(nd) + "/mtu", "1500\n");
  const std::string doc_c = write_file(a_.tree->root() + "/c.json", to_json(c.discover()).dump());
  auto bad = run_cli({"--from", doc_a_, "validate", "--peer", doc_b_, "--peer", doc_c, "--json"});
  EXPECT_EQ(bad.exit_code, 1);
  auto j = nlohmann::json::parse(bad.out);
  EXPECT_EQ(j["passed"], false);
  bool mtu_failed = false;
  for (const auto& ch : j["checks"]) {
    mtu_failed = mtu_failed || (ch["name"] == "cluster.mtu" && ch["status"] == "fail");
  }
  EXPECT_TRUE(mtu_failed);
  // A malformed peer document is a usage error naming the file.
  const std::string junk = write_file(a_.tree->root() + "/junk.json", R"({"schema":1})");
  auto u = run_cli({"--from", doc_a_, "validate", "--peer", junk});
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.err.find("junk.json: discovery document: $.node: missing"), std::string::npos)
      << u.err;
}

TEST_F(NetsetupCli, PlanApplyDryRunAndNcclEnv) {
  auto fresh = h100(node_state::fresh);
  const std::string doc =
      write_file(fresh.tree->root() + "/fresh.json", to_json(fresh.discover()).dump());
  auto plan = run_cli({"--from", doc, "plan"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("plan for h100-0: 80 operation(s)"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("  2. ens0np0: set MTU 9000 [ip link set dev ens0np0 mtu 9000] -- "
                          "MTU is 1500"),
            std::string::npos)
      << plan.out;
  auto pj = run_cli({"--from", doc, "plan", "--json"});
  EXPECT_EQ(nlohmann::json::parse(pj.out)["ops"].size(), 80u);

  // Dry run on the live tree (no tools: only the file-backed ops are planned).
  const std::string journal = fresh.tree->root() + "/journal.jsonl";
  const std::string mtu_before = fresh.tree->read(fresh.tree->netdev_dir("ens0np0") + "/mtu");
  auto dry = run_cli({"--sysfs-root", fresh.tree->root(), "--no-tools", "apply", "--dry-run",
                      "--journal", journal});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("[dry-run] ens0np0: set MTU 9000 -- MTU is 1500"), std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("0 change(s) (dry run)"), std::string::npos) << dry.out;
  EXPECT_EQ(fresh.tree->read(fresh.tree->netdev_dir("ens0np0") + "/mtu"), mtu_before);
  EXPECT_FALSE(std::filesystem::exists(journal));

  auto env = run_cli({"--from", doc_a_, "nccl-env", "--gpus", "0,1"});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.out.find("export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'"), std::string::npos) << env.out;
  EXPECT_NE(env.out.find("export NCCL_IB_GID_INDEX='3'"), std::string::npos);
  auto bad_gpu = run_cli({"--from", doc_a_, "nccl-env", "--gpus", "12"});
  EXPECT_EQ(bad_gpu.exit_code, 2);
  auto env_json = run_cli({"--from", doc_a_, "nccl-env", "--gpus", "0,1", "--json"});
  ASSERT_EQ(env_json.exit_code, 0) << env_json.err;
  EXPECT_EQ(nlohmann::json::parse(env_json.out)["NCCL_IB_GID_INDEX"], "3") << env_json.out;
  // apply changes the live node only: a document is a usage error.
  auto from_apply = run_cli({"--from", doc, "apply", "--dry-run"});
  EXPECT_EQ(from_apply.exit_code, 2);
  EXPECT_NE(from_apply.err.find("apply needs live discovery, not --from"), std::string::npos)
      << from_apply.err;
}

TEST_F(NetsetupCli, ClusterConfigNeedsIpamAndPolicyErrorsAreUsageErrors) {
  auto no_ipam = run_cli({"--from", doc_a_, "cluster-config"});
  EXPECT_EQ(no_ipam.exit_code, 2);
  EXPECT_NE(no_ipam.err.find("cluster.ipam is empty"), std::string::npos);
  const std::string pol =
      write_file(a_.tree->root() + "/policy.yaml", "cluster:\n  ipam: '{\"type\": \"dhcp\"}'\n");
  auto cfg = run_cli({"--policy", pol, "--from", doc_a_, "cluster-config"});
  ASSERT_EQ(cfg.exit_code, 0) << cfg.err;
  auto j = nlohmann::json::parse(cfg.out);
  EXPECT_EQ(j["sriovDevicePlugin"]["resourceList"].size(), 8u);
  EXPECT_EQ(j["networkAttachmentDefinitions"][0]["kind"], "NetworkAttachmentDefinition");
  EXPECT_EQ(j["rdmaSharedDevicePlugin"]["configList"].size(), 8u);
  const std::string bad = write_file(a_.tree->root() + "/bad.yaml", "pfc_priority: 9\n");
  auto b = run_cli({"--policy", bad, "--from", doc_a_, "plan"});
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.err.find("pfc_priority: must be at most 7"), std::string::npos) << b.err;
  auto docs = run_cli({"--print-policy-docs"});
  EXPECT_EQ(docs.exit_code, 0);
  EXPECT_NE(docs.out.find("traffic_class"), std::string::npos);
  auto usage = run_cli({"frobnicate"});
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace shoal::netsetup
