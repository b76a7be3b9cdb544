// The prewarm manager: orders delivered through heartbeat replies (and re-sent when a node
// forgets them), progress and completion from the index, failures reported by nodes, nodes that
// disappear mid-prewarm, standby replacement for job prewarms, timeouts, retention.
#include "scheduler/prewarm.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using heartbeat::order_state;

class PrewarmTest : public ::testing::Test {
 protected:
  PrewarmTest() : idx_(iopts(), "epoch", clock_.fn()), pw_(idx_, popts(), clock_.fn()) {}
  static index_options iopts() {
    index_options o;
    o.unhealthy_after = 10s;
    o.drop_after = 60s;
    return o;
  }
  static prewarm_options popts() {
    prewarm_options o;
    o.timeout = 300s;
    o.retention = 600s;
    o.max_prewarms = 3;
    return o;
  }
  // A node heartbeats with these holdings and reports; returns the orders it is sent.
  std::vector<heartbeat::prewarm_order> beat(const std::string& node,
                                             std::vector<heartbeat::held_object> objs,
                                             std::vector<heartbeat::order_report> reports = {}) {
    auto m = full_hb(node, std::move(objs), {}, ++seq_[node], "epoch");
    m.orders = reports;
    (void)idx_.apply(m, "ip");
    return pw_.on_heartbeat(node, reports, m.schema);
  }
  static planned_node plan(const std::string& node, const std::string& role = "target") {
    return image_plan(node, "pw-1", role);
  }
  nlohmann::json status(const std::string& id = "pw-1") {
    auto s = pw_.progress(id);
    EXPECT_TRUE(s);
    return s ? *s : nlohmann::json();
  }
  nlohmann::json part(const nlohmann::json& s, const std::string& node) {
    for (const auto& p : s["nodes"]) {
      if (p["node"] == node) return p;
    }
    return {};
  }

  fake_clock clock_;
  cluster_index idx_;
  prewarm_manager pw_;
  std::map<std::string, std::uint64_t> seq_;
};

TEST_F(PrewarmTest, OrdersGoOutUntilReportedAndCompletionComesFromTheIndex) {
  beat("n1", {});
  beat("n2", {held("l1", 100)});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1"), plan("n2")}, {{"images", {"app:v1"}}}));
  auto s = status();
  EXPECT_EQ(s["state"], "running");
  EXPECT_EQ(part(s, "n1")["state"], "pending");
  EXPECT_EQ(part(s, "n2")["bytes_present"], 100);

  auto orders = beat("n1", {});
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].id, "pw-1.0");
  EXPECT_EQ(orders[0].objects.size(), 2u);
  // Not reported yet: sent again.
  EXPECT_EQ(beat("n1", {}).size(), 1u);
  // Reported: no longer sent; progress shows.
  EXPECT_TRUE(
      beat("n1", {held("l1", 100)}, {{"pw-1.0", order_state::running, 250, 400, ""}}).empty());
  s = status();
  EXPECT_EQ(part(s, "n1")["state"], "running");
  EXPECT_EQ(part(s, "n1")["bytes_done"], 250);
  // Reported done but the index does not show l2 yet: still running.
  beat("n1", {held("l1", 100)}, {{"pw-1.0", order_state::done, 400, 400, ""}});
  EXPECT_EQ(part(status(), "n1")["state"], "running");
  beat("n1", {held("l1", 100), held("l2", 300)}, {{"pw-1.0", order_state::done, 400, 400, ""}});
  EXPECT_EQ(part(status(), "n1")["state"], "done");
  EXPECT_EQ(status()["state"], "running");  // n2 still open
  beat("n2", {held("l1", 100), held("l2", 300)});
  s = status();
  EXPECT_EQ(s["state"], "done");
  EXPECT_EQ(s["bytes_done"], 800);
  EXPECT_EQ(s["bytes_total"], 800);
  // Terminal parts get no more orders.
  EXPECT_TRUE(beat("n2", {held("l1", 100), held("l2", 300)}).empty());
  auto c = pw_.counts();
  EXPECT_EQ(c.orders["done"], 2u);
}

TEST_F(PrewarmTest, ANodeThatForgetsItsOrdersGetsThemAgain) {
  beat("n1", {});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1")}, {}));
  (void)beat("n1", {});
  EXPECT_TRUE(beat("n1", {}, {{"pw-1.0", order_state::running, 0, 400, ""}}).empty());
  // peerd restarted: its heartbeat no longer reports the order.
  EXPECT_EQ(beat("n1", {}).size(), 1u);
}

TEST_F(PrewarmTest, AFailureReportedByTheNodeFailsItsPart) {
  beat("n1", {});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1")}, {}));
  beat("n1", {}, {{"pw-1.0", order_state::failed, 0, 400, "manifest unknown"}});
  auto s = status();
  EXPECT_EQ(s["state"], "failed");
  EXPECT_NE(part(s, "n1")["error"].get<std::string>().find("manifest unknown"), std::string::npos);
}

TEST_F(PrewarmTest, ANodeThatDisappearsMidPrewarmIsReportedLost) {
  beat("n1", {});
  beat("n2", {});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1"), plan("n2")}, {}));
  beat("n1", {held("l1", 100)}, {{"pw-1.0", order_state::running, 100, 400, ""}});
  beat("n2", {held("l1", 100)}, {{"pw-1.0", order_state::running, 100, 400, ""}});
  clock_.advance(6s);
  beat("n2", {held("l1", 100), held("l2", 300)}, {{"pw-1.0", order_state::done, 400, 400, ""}});
  clock_.advance(6s);  // n1 silent for 12 s > unhealthy_after
  pw_.tick();
  auto s = status();
  EXPECT_EQ(part(s, "n2")["state"], "done");
  EXPECT_EQ(part(s, "n1")["state"], "failed");
  EXPECT_NE(part(s, "n1")["error"].get<std::string>().find("node lost: no heartbeat for 12s"),
            std::string::npos)
      << part(s, "n1")["error"];
  EXPECT_EQ(s["state"], "failed");
  // Terminal stays terminal: the node coming back does not reopen it.
  beat("n1", {held("l1", 100)});
  EXPECT_EQ(part(status(), "n1")["state"], "failed");
}

TEST_F(PrewarmTest, ADroppedNodeIsReportedToo) {
  beat("n1", {});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1")}, {}));
  clock_.advance(61s);
  (void)idx_.expire();
  auto s = status();
  EXPECT_EQ(part(s, "n1")["state"], "failed");
  EXPECT_NE(part(s, "n1")["error"].get<std::string>().find("dropped"), std::string::npos);
}

TEST_F(PrewarmTest, FailedPrimaryIsReplacedByAWarmStandby) {
  for (const char* n : {"p1", "p2", "s1"}) beat(n, {});
  ASSERT_TRUE(pw_.create(
      "pw-1", {plan("p1", "primary"), plan("p2", "primary"), plan("s1", "standby")}, {}));
  beat("p2", {held("l1", 100), held("l2", 300)});
  beat("s1", {held("l1", 100), held("l2", 300)});
  clock_.advance(11s);
  beat("p2", {held("l1", 100), held("l2", 300)});
  beat("s1", {held("l1", 100), held("l2", 300)});
  pw_.tick();  // p1 lost
  auto s = status();
  EXPECT_EQ(part(s, "p1")["state"], "failed");
  EXPECT_EQ(s["state"], "done");
  EXPECT_EQ(s["replacements"]["p1"], "s1");
}

TEST_F(PrewarmTest, SchemaOneNodesCannotTakeOrders) {
  auto m = full_hb("old", {}, {}, 1);
  m.schema = 1;
  (void)idx_.apply(m, "ip");
  ASSERT_TRUE(pw_.create("pw-1", {plan("old")}, {}));
  auto s = status();
  EXPECT_EQ(part(s, "old")["state"], "failed");
  EXPECT_NE(part(s, "old")["error"].get<std::string>().find("schema 1"), std::string::npos);
}

TEST_F(PrewarmTest, TimeoutRetentionAndCapacity) {
  beat("n1", {});
  ASSERT_TRUE(pw_.create("pw-1", {plan("n1")}, {}));
  ASSERT_TRUE(pw_.create("pw-2", {plan("n1")}, {}));
  ASSERT_TRUE(pw_.create("pw-3", {plan("n1")}, {}));
  auto full = pw_.create("pw-4", {plan("n1")}, {});
  ASSERT_FALSE(full);
  EXPECT_TRUE(full.error().is(errc::busy));
  EXPECT_FALSE(pw_.create("pw-1", {plan("n1")}, {}));  // ids are unique
  // Keep n1 alive past the prewarm timeout.
  for (int i = 0; i < 31; ++i) {
    clock_.advance(10s);
    beat("n1", {});
  }
  pw_.tick();
  auto s = status("pw-1");
  EXPECT_EQ(s["state"], "failed");
  EXPECT_NE(part(s, "n1")["error"].get<std::string>().find("timed out"), std::string::npos);
  // Finished prewarms make room for new ones, and go after the retention period.
  ASSERT_TRUE(pw_.create("pw-4", {plan("n1")}, {}));
  clock_.advance(601s);
  pw_.tick();
  EXPECT_FALSE(pw_.progress("pw-2"));
  EXPECT_TRUE(pw_.progress("pw-4"));
}

}  // namespace
}  // namespace shoal::scheduler
