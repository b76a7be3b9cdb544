// Plan and apply against a writable fixture tree and the simulated tools: ordered ops with
// reasons, convergence, idempotence, dry run, stop-at-first-failure, verification and journal.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "netsetup/plan.h"
#include "topologies.h"

namespace shoal::netsetup {
namespace {

using namespace testing;

// Every file's content and every link's target under the root.
std::map<std::string, std::string> snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  for (auto it = std::filesystem::recursive_directory_iterator(root);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    const auto& p = it->path();
    if (it->is_symlink()) {
      out[p.string()] = "-> " + std::filesystem::read_symlink(p).string();
    } else if (it->is_regular_file()) {
      std::ifstream in(p);
      out[p.string()] = std::string(std::istreambuf_iterator<char>(in), {});
    } else {
      out[p.string()] = "<dir>";
    }
  }
  return out;
}

std::vector<std::string> whats_for(const plan& p, const std::string& subject) {
  std::vector<std::string> w;
  for (const auto& op : p.ops) {
    if (op.subject == subject) w.push_back(op.what);
  }
  return w;
}

TEST(NetsetupPlan, FreshNodeGetsEveryChangeInOrderWithReasons) {
  auto f = h100(node_state::fresh);
  plan p = make_plan(f.discover(), policy{});
  EXPECT_TRUE(p.problems.empty()) << p.problems.front();
  EXPECT_EQ(p.node, "h100-0");
  EXPECT_EQ(whats_for(p, f.pfs[0]), std::vector<std::string>{"create 8 VFs"});
  EXPECT_EQ(whats_for(p, "ens0np0"),
            (std::vector<std::string>{
                "set MTU 9000", "set trust dscp", "map 26:3 48:6 (dscp:priority)",
                "enable PFC on priority 3 only", "turn global pause off",
                "enable ECN roce_np on priority 3", "enable ECN roce_rp on priority 3"}));
  EXPECT_EQ(
      whats_for(p, "mlx5_0 port 1"),
      (std::vector<std::string>{"set verbs traffic class 106", "set RDMA-CM default ToS 106"}));
  EXPECT_EQ(p.ops.size(), 8u * 10u);
  // SR-IOV first, then link, QoS, ECN, RDMA defaults: the order of the first netdev's ops.
  EXPECT_EQ(p.ops[0].subject, f.pfs[0]);
  EXPECT_EQ(p.ops[1].what, "set MTU 9000");
  const plan_op& mtu = p.ops[1];
  EXPECT_EQ(mtu.k, plan_op::kind::command);
  EXPECT_EQ(mtu.argv,
            (std::vector<std::string>{"ip", "link", "set", "dev", "ens0np0", "mtu", "9000"}));
  EXPECT_NE(mtu.why.find("MTU is 1500"), std::string::npos);
  EXPECT_EQ(mtu.before, "1500");
  const plan_op& pfc = p.ops[4];
  EXPECT_EQ(pfc.argv, (std::vector<std::string>{"dcb", "pfc", "set", "dev", "ens0np0", "prio-pfc",
                                                "all:off", "3:on"}));
  EXPECT_EQ(p.ops[0].k, plan_op::kind::write);
  EXPECT_EQ(p.ops[0].path, "/sys/bus/pci/devices/" + f.pfs[0] + "/sriov_numvfs");
  EXPECT_EQ(p.ops[0].value, "8");
  EXPECT_FALSE(p.ops[0].disruptive);
  EXPECT_NE(describe_op(pfc).find("dcb pfc set dev ens0np0 prio-pfc all:off 3:on"),
            std::string::npos);
  auto j = to_json(p);
  EXPECT_EQ(j["ops"].size(), p.ops.size());
  EXPECT_EQ(j["ops"][1]["command"][0], "ip");
  EXPECT_EQ(j["ops"][0]["write"]["value"], "8");
}

TEST(NetsetupPlan, ConvergedNodeNeedsNothing) {
  for (auto* make : {+[] { return h100(node_state::converged); },
                     +[] { return dgx_a100(node_state::converged); }}) {
    auto f = make();
    plan p = make_plan(f.discover(), policy{});
    EXPECT_TRUE(p.ops.empty()) << f.name << ": " << describe_op(p.ops.front());
    EXPECT_TRUE(p.problems.empty()) << f.name;
  }
}

TEST(NetsetupPlan, ChangingAVfCountResetsFirstAndSaysItIsDisruptive) {
  auto f = dgx_a100(node_state::converged);
  f.tree->write("/sys/bus/pci/devices/" + f.pfs[3] + "/sriov_numvfs", "4\n");
  plan p = make_plan(f.discover(), policy{});
  ASSERT_EQ(p.ops.size(), 2u);
  EXPECT_EQ(p.ops[0].value, "0");
  EXPECT_TRUE(p.ops[0].disruptive);
  EXPECT_NE(p.ops[0].why.find("refuses to change a non-zero VF count"), std::string::npos);
  EXPECT_EQ(p.ops[1].value, "8");
}

TEST(NetsetupPlan, WhatCannotBeDoneHereIsAProblemNotAnOp) {
  auto f = h100(node_state::fresh);
  f.tree->write("/sys/bus/pci/devices/" + f.pfs[1] + "/sriov_totalvfs", "4\n");
  f.tools->devs.erase("ens2np0");  // no DCB on this netdev
  f.tree->remove(f.tree->netdev_dir("ens3np0") + "/ecn");
  policy pol;
  pol.interfaces = {"ens1np0", "ens2np0", "ens3np0", "nosuch0"};
  plan p = make_plan(f.discover(), pol);
  auto has = [&](const std::string& needle) {
    for (const auto& pr : p.problems) {
      if (pr.find(needle) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(f.pfs[1] + ": firmware allows 4 VFs, policy wants 8"));
  EXPECT_TRUE(has("ens2np0: PFC state unreadable"));
  EXPECT_TRUE(has("ens2np0: trust mode unreadable"));
  EXPECT_TRUE(has("ens3np0: no ECN knobs"));
  EXPECT_TRUE(has("nosuch0: no such netdev"));
  EXPECT_TRUE(whats_for(p, f.pfs[1]).empty());
  // Without DCB the netdev still gets what does not need it.
  EXPECT_EQ(whats_for(p, "ens2np0"),
            (std::vector<std::string>{"set MTU 9000", "enable ECN roce_np on priority 3",
                                      "enable ECN roce_rp on priority 3"}));
}

TEST(NetsetupPlan, VmWithVfsOnlyLeavesQosToTheHost) {
  auto f = vela_vm();
  plan p = make_plan(f.discover(), policy{});
  for (const auto& op : p.ops) {
    EXPECT_EQ(op.what, "set RDMA-CM default ToS 106") << describe_op(op);
  }
  EXPECT_EQ(p.ops.size(), 4u);
  ASSERT_EQ(p.problems.size(), 4u);
  EXPECT_NE(p.problems[0].find("a VF"), std::string::npos);
}

class NetsetupApply : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = h100(node_state::fresh);
    journal_ = f_.tree->root() + "/var/lib/shoal/journal.jsonl";
  }
  std::vector<nlohmann::json> journal_lines() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(journal_);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  apply_report run(const plan& p, bool dry_run = false) {
    apply_options o;
    o.dry_run = dry_run;
    o.journal_path = journal_;
    auto r = apply(p, f_.fs(), *f_.tools, o);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : apply_report{};
  }
  node_fixture f_;
  std::string journal_;
};

TEST_F(NetsetupApply, ConvergesAndASecondApplyDoesNothing) {
  plan p = make_plan(f_.discover(), policy{});
  ASSERT_EQ(p.ops.size(), 80u);
  std::vector<std::string> progress;
  apply_options o;
  o.journal_path = journal_;
  o.progress = [&](const op_outcome& out) { progress.push_back(out.op->what); };
  auto rep = apply(p, f_.fs(), *f_.tools, o);
  ASSERT_TRUE(rep) << rep.error().message;
  EXPECT_TRUE(rep->ok) << rep->failure;
  EXPECT_EQ(rep->changed, 80);
  EXPECT_EQ(progress.size(), 80u);
  for (const auto& out : rep->outcomes) {
    EXPECT_EQ(out.s, op_outcome::state::changed) << describe_op(*out.op);
  }
  // The node now matches the policy: a fresh discovery plans nothing.
  auto after = f_.discover();
  plan again = make_plan(after, policy{});
  EXPECT_TRUE(again.ops.empty()) << describe_op(again.ops.front());
  EXPECT_EQ(after.find_netdev("ens5np0")->mtu, 9000);
  EXPECT_EQ(f_.tools->devs["ens5np0"].trust, std::vector<std::string>{"dscp"});
  EXPECT_EQ(f_.tree->read("/sys/kernel/config/rdma_cm/mlx5_5/ports/1/default_roce_tos"), "106\n");
  EXPECT_EQ(journal_lines().size(), 80u);
  // And applying that empty plan, or the old one again, changes nothing.
  const auto calls_before = f_.tools->mutating_calls().size();
  const auto tree_before = snapshot(f_.tree->root() + "/sys");
  EXPECT_EQ(run(again).changed, 0);
  auto rerun = run(p);
  EXPECT_TRUE(rerun.ok);
  EXPECT_EQ(rerun.changed, 0);
  for (const auto& out : rerun.outcomes) EXPECT_EQ(out.s, op_outcome::state::already);
  EXPECT_EQ(f_.tools->mutating_calls().size(), calls_before);
  EXPECT_EQ(snapshot(f_.tree->root() + "/sys"), tree_before);
  EXPECT_EQ(journal_lines().size(), 80u);  // nothing changed, nothing recorded
}

TEST_F(NetsetupApply, DryRunChangesNothing) {
  plan p = make_plan(f_.discover(), policy{});
  const auto before = snapshot(f_.tree->root());
  auto rep = run(p, true);
  EXPECT_TRUE(rep.ok);
  EXPECT_EQ(rep.changed, 0);
  ASSERT_EQ(rep.outcomes.size(), p.ops.size());
  for (const auto& out : rep.outcomes) EXPECT_EQ(out.s, op_outcome::state::would_change);
  EXPECT_TRUE(f_.tools->mutating_calls().empty()) << f_.tools->mutating_calls().front();
  EXPECT_EQ(snapshot(f_.tree->root()), before);
  EXPECT_FALSE(std::filesystem::exists(journal_));
}

TEST_F(NetsetupApply, StopsAtTheFirstFailureWithItsMessageAndARecord) {
  f_.tools->fail_with["dcb pfc set dev ens2np0"] = 1;
  plan p = make_plan(f_.discover(), policy{});
  auto rep = run(p);
  EXPECT_FALSE(rep.ok);
  EXPECT_NE(rep.failure.find("ens2np0: enable PFC on priority 3 only"), std::string::npos)
      << rep.failure;
  EXPECT_NE(rep.failure.find("exit 1: injected failure"), std::string::npos) << rep.failure;
  ASSERT_FALSE(rep.outcomes.empty());
  EXPECT_EQ(rep.outcomes.back().s, op_outcome::state::failed);
  // Nothing after the failing op ran: ens2np0's pause is still on, ens3np0 untouched.
  EXPECT_TRUE(f_.tools->devs["ens2np0"].pause.rx);
  EXPECT_EQ(f_.tree->read(f_.tree->netdev_dir("ens3np0") + "/mtu"), "1500\n");
  // The journal records every change made before it, then the failure.
  auto lines = journal_lines();
  ASSERT_EQ(lines.size(), rep.outcomes.size());
  EXPECT_EQ(lines.back()["result"], "failed");
  EXPECT_EQ(lines.back()["subject"], "ens2np0");
  EXPECT_EQ(lines.back()["command"][1], "pfc");
  EXPECT_EQ(lines.front()["result"], "changed");
  EXPECT_EQ(lines.front()["write"]["value"], "8");
  EXPECT_EQ(lines.front()["before"], "0");
  EXPECT_EQ(lines.front()["after"], "8");
  EXPECT_EQ(lines.front()["node"], "h100-0");
  // Fixing the cause and applying again finishes the job, skipping what is done.
  f_.tools->fail_with.clear();
  auto rep2 = run(make_plan(f_.discover(), policy{}));
  EXPECT_TRUE(rep2.ok) << rep2.failure;
  EXPECT_TRUE(make_plan(f_.discover(), policy{}).ops.empty());
}

TEST_F(NetsetupApply, VerifyCatchesAChangeThatDidNotTakeEffect) {
  f_.tools->no_effect.insert("ip link set dev ens0np0 mtu");
  auto rep = run(make_plan(f_.discover(), policy{}));
  EXPECT_FALSE(rep.ok);
  EXPECT_NE(rep.failure.find("ens0np0: set MTU 9000: did not take effect: reads back \"1500\", "
                             "expected \"9000\""),
            std::string::npos)
      << rep.failure;
  EXPECT_EQ(rep.outcomes.size(), 2u);  // the VFs of the first PF, then the MTU
}

TEST_F(NetsetupApply, AMissingToolFailsTheOpThatNeedsIt) {
  plan p = make_plan(f_.discover(), policy{});
  f_.tools->not_installed.insert("cma_roce_tos");
  auto rep = run(p);
  EXPECT_FALSE(rep.ok);
  EXPECT_NE(rep.failure.find("cma_roce_tos -d mlx5_0 -t 106: cannot run"), std::string::npos)
      << rep.failure;
}

TEST(NetsetupApplyDisruptive, ResettingVfsNeedsExplicitPermission) {
  auto f = dgx_a100(node_state::converged);
  const std::string numvfs = "/sys/bus/pci/devices/" + f.pfs[3] + "/sriov_numvfs";
  f.tree->write(numvfs, "4\n");
  plan p = make_plan(f.discover(), policy{});
  ASSERT_EQ(p.ops.size(), 2u);
  apply_options o;
  auto refused = apply(p, f.fs(), *f.tools, o);
  ASSERT_TRUE(refused);
  EXPECT_FALSE(refused->ok);
  EXPECT_NE(refused->failure.find("refused, disruptive"), std::string::npos) << refused->failure;
  EXPECT_NE(refused->failure.find("--allow-disruptive"), std::string::npos);
  EXPECT_EQ(f.tree->read(numvfs), "4\n");
  o.allow_disruptive = true;
  auto done = apply(p, f.fs(), *f.tools, o);
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->ok) << done->failure;
  EXPECT_EQ(done->changed, 2);
  EXPECT_EQ(f.tree->read(numvfs), "8\n");
}

TEST_F(NetsetupApply, JournalErrorsAreErrors) {
  plan p = make_plan(f_.discover(), policy{});
  apply_options o;
  o.journal_path = f_.tree->root() + "/sys/bus/pci/devices/" + f_.pfs[0] + "/vendor/journal";
  auto r = apply(p, f_.fs(), *f_.tools, o);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("journal"), std::string::npos);
  EXPECT_TRUE(f_.tools->mutating_calls().empty());
}

}  // namespace
}  // namespace shoal::netsetup
