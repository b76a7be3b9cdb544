// Jobs and failover (scheduler/jobs.h) on real parts and one fake clock: the index fed
// heartbeats, the failure detector, placement, prewarm, the extender and the API router (no
// sockets). A gang of 4 with 1 standby loses node n2 to silence: the standby of its fabric
// replaces it (not a warmer node of another fabric), a new standby is prewarmed with the image,
// the dataset and the newest checkpoint, and the extender steers the job's pod to the
// replacement. A standby only in another fabric is refused with the reason; a restarting node and
// a stale view decide nothing; a new checkpoint is ordered onto the standbys.
#include "scheduler/jobs.h"

#include <gtest/gtest.h>

#include "scheduler/api.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;
const std::string image = "127.0.0.1:5000/team/app:v1";

class JobsTest : public ::testing::Test {
 protected:
  JobsTest()
      : trk_(tracker_options{}, clock_.fn()),
        idx_(index_opts(), "epoch-A", clock_.fn()),
        res_(src_, resolver_options{}, clock_.fn()),
        placer_(idx_, res_, ds_, net_, placer_opts(), clock_.fn()),
        pw_(idx_, prewarm_options{}, clock_.fn()),
        ext_(placer_, extender_options{}, reg_),
        fd_(fd_opts(), nullptr, clock_.fn()),
        jobs_(job_registry_deps{idx_, placer_, res_, ds_, pw_, fd_, reg_}, jobs_options{},
              clock_.fn()),
        api_(api_deps{cfg_,
                      idx_,
                      trk_,
                      placer_,
                      res_,
                      ds_,
                      pw_,
                      ext_,
                      reg_,
                      nullptr,
                      &fd_,
                      nullptr,
                      {},
                      &jobs_}) {
    src_.put("127.0.0.1:5000", "team/app",
             image_manifest({{"base", 100 * MiB}, {"top", 10 * MiB}}, "cfg", 500), "v1");
    ds_.sets["imagenet@1"] = {obj("shard-a", 50 * MiB), obj("shard-b", 50 * MiB)};
    ext_.set_job_preference([this](std::string_view j) { return jobs_.preferred_node(j); });
    jobs_.set_latest_checkpoint([this](const std::string& job)
                                    -> std::optional<std::pair<std::string, checkpoint_objects>> {
      if (job != "train" || ckpt_key_.empty()) return std::nullopt;
      return std::pair{ckpt_key_, checkpoint_objects{{dg("ck-0"), 40 * MiB}, {dg("ck-1"), 8}}};
    });
    auto warm = std::vector{held("cfg", 500), held("base", 100 * MiB), held("top", 10 * MiB),
                            held("shard-a", 50 * MiB), held("shard-b", 50 * MiB)};
    for (const char* n : {"n1", "n2", "n3", "n4"}) nodes_[n] = {"f1", warm};
    // The standby holds the image and the newest checkpoint; sb2 nothing; x1 everything, in f2.
    nodes_["sb1"] = {"f1",
                     {held("cfg", 500), held("base", 100 * MiB), held("top", 10 * MiB),
                      held("ck-0", 40 * MiB), held("ck-1", 8)}};
    nodes_["sb2"] = {"f1", {}};
    warm.push_back(held("ck-0", 40 * MiB));
    warm.push_back(held("ck-1", 8));
    nodes_["x1"] = {"f2", warm};
  }
  static index_options index_opts() {
    index_options o;
    o.unhealthy_after = 30s;
    o.drop_after = 600s;
    return o;
  }
  static failover_options fd_opts() {
    failover_options o;
    o.unhealthy_after = 30s;
    o.failed_after = 60s;
    o.restart_grace = 120s;
    return o;
  }
  static placer_options placer_opts() {
    placer_options o;
    o.cost = cost_model::from(cost_config{});
    o.reservation_ttl = 1s;  // the clock runs on; GPUs reserved by /v1/place must not linger
    return o;
  }
  struct node_def {
    std::string fabric;
    std::vector<heartbeat::held_object> objects;
    std::vector<heartbeat::dataset_presence> datasets;
  };
  // One heartbeat from `node`, reporting every order it was sent as queued (as peerd does);
  // returns the new orders its reply carries.
  std::vector<heartbeat::prewarm_order> beat(const std::string& node, bool leaving = false) {
    const auto& d = nodes_.at(node);
    auto m = full_hb(node, d.objects, {{"fabric", d.fabric}}, ++seq_[node], "epoch-A");
    m.gpus = {{"H100", 8}};
    m.leaving = leaving;
    m.datasets = d.datasets;
    m.orders = reports_[node];
    EXPECT_EQ(idx_.apply(m, "10.0.0.1").refused, 0u);
    auto orders = pw_.on_heartbeat(node, m.orders, m.schema);
    for (const auto& o : orders) reports_[node].push_back({o.id, heartbeat::order_state::queued});
    return orders;
  }
  // Every node but `silent` heartbeats; the clock moves `d`; the detector and the registry run
  // as the app's maintenance pass runs them.
  std::vector<failover_decision> tick(std::chrono::seconds d, std::set<std::string> silent = {}) {
    for (const auto& [n, def] : nodes_) {
      if (!silent.count(n)) beat(n);
    }
    clock_.advance(d);
    auto events = fd_.evaluate(idx_.nodes());
    if (!jobs_.on_node_events(events)) return {};
    return jobs_.decide_pending();
  }
  // Past the detector's start-up window, every node heard.
  void settle() {
    for (int i = 0; i < 7; ++i) EXPECT_TRUE(tick(10s).empty());
    ASSERT_FALSE(fd_.view_stale());
  }
  http::response call(http::verb method, const std::string& target, const std::string& body = "") {
    http::request r;
    r.method = method;
    r.target = target;
    auto q = target.find('?');
    r.path = target.substr(0, q);
    r.query = q == std::string::npos ? "" : target.substr(q + 1);
    r.body = body;
    r.remote = http::tcp::endpoint(http::net::ip::make_address("10.9.9.9"), 40000);
    return api_.serve(r);
  }
  static json js(const http::response& r) { return json::parse(std::get<std::string>(r.body)); }
  // The job "train": a gang of 4 × 8 GPUs with the image and the dataset, 1 standby.
  json place_train() {
    auto r = call(http::verb::post, "/v1/place",
                  R"({"id":"train","images":[")" + image +
                      R"("],"datasets":["imagenet@1"],"nodes":4,"gpus":8,"standby":1})");
    EXPECT_EQ(r.status, 200u) << std::get<std::string>(r.body);
    return js(r);
  }
  // Fails n2 by silence (61 s and more); returns the decisions made on the way.
  std::vector<failover_decision> fail_n2() {
    std::vector<failover_decision> out;
    for (int i = 0; i < 7 && out.empty(); ++i) out = tick(10s, {"n2"});
    return out;
  }
  static std::string pod(bool labelled, bool hard) {
    json md = {{"name", "train-0"}, {"namespace", "ml"}};
    if (labelled) md["labels"] = {{"shoal.io/job", "train"}, {"app", "trainer"}};
    md["annotations"] = {{"shoal.io/datasets", "imagenet@1"}};
    if (hard) md["annotations"]["shoal.io/placement"] = "hard";
    json p = {{"metadata", md}, {"spec", {{"containers", {{{"name", "c"}, {"image", image}}}}}}};
    return json{{"Pod", p}, {"NodeNames", {"n1", "n3", "n4", "sb1", "sb2", "x1"}}}.dump();
  }

  scheduler_config cfg_;
  fake_clock clock_;
  tracker trk_;
  cluster_index idx_;
  fake_source src_;
  resolver res_;
  fake_datasets ds_;
  document_network_model net_;
  placer placer_;
  prewarm_manager pw_;
  metrics::registry reg_;
  extender ext_;
  failure_detector fd_;
  job_registry jobs_;
  api api_;
  std::map<std::string, node_def> nodes_;
  std::map<std::string, std::uint64_t> seq_;
  std::map<std::string, std::vector<heartbeat::order_report>> reports_;
  std::string ckpt_key_ = "train@2";
};

TEST_F(JobsTest, PlacingWithAnIdRecordsTheJob) {
  settle();
  auto placed = place_train();
  ASSERT_TRUE(placed["feasible"].get<bool>()) << placed.dump();
  EXPECT_EQ(placed["chosen"].size(), 4u);
  EXPECT_EQ(placed["standby"], json({"sb1"}));
  auto r = call(http::verb::get, "/v1/jobs/train");
  ASSERT_EQ(r.status, 200u);
  auto j = js(r);
  EXPECT_EQ(j["source"], "place");
  EXPECT_EQ(j["segment"], "f1");
  EXPECT_EQ(j["members"].size(), 4u);
  EXPECT_EQ(j["members"][0]["state"], "healthy");
  EXPECT_EQ(j["standbys"][0]["node"], "sb1");
  EXPECT_EQ(j["standby_wanted"], 1);
  EXPECT_EQ(j["job"]["datasets"], json({"imagenet@1"}));
  EXPECT_TRUE(j["failover"].is_null());
  EXPECT_EQ(js(call(http::verb::get, "/v1/jobs"))["jobs"].size(), 1u);
  // Dry runs, anonymous jobs and infeasible ones are not recorded; a bad id is refused.
  call(http::verb::post, "/v1/place",
       R"({"id":"dry","images":[")" + image + R"("],"gpus":8,"dry_run":true})");
  call(http::verb::post, "/v1/place", R"({"images":[")" + image + R"("],"gpus":8})");
  call(http::verb::post, "/v1/place", R"({"id":"big","images":[")" + image + R"("],"gpus":80})");
  EXPECT_EQ(jobs_.size(), 1u);
  r = call(http::verb::post, "/v1/place", R"({"id":"Bad Name","images":[")" + image + R"("]})");
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("id must be a job name"), std::string::npos);
  EXPECT_EQ(call(http::verb::get, "/v1/jobs/train/failover").status, 404u);
  EXPECT_EQ(js(call(http::verb::get, "/v1/jobs/train/failover"))["error"],
            "no failover for job train");
  EXPECT_EQ(call(http::verb::get, "/v1/jobs/nope").status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/jobs/NO%20PE").status, 400u);
  EXPECT_EQ(call(http::verb::get, "/v1/jobs/train/other").status, 404u);
  EXPECT_EQ(call(http::verb::post, "/v1/jobs/train").status, 405u);
  // Forgetting it (DELETE needs an operator: authz).
  http::request del;
  del.method = http::verb::delete_;
  del.path = "/v1/jobs/train";
  EXPECT_EQ(access_of(del), route_access::operator_);
  EXPECT_EQ(call(http::verb::delete_, "/v1/jobs/train").status, 200u);
  EXPECT_EQ(call(http::verb::delete_, "/v1/jobs/train").status, 404u);
  EXPECT_EQ(jobs_.size(), 0u);
}

TEST_F(JobsTest, AFailedMemberIsReplacedByTheStandbyOfItsFabric) {
  settle();
  auto members = place_train()["chosen"].get<std::vector<std::string>>();
  *std::find(members.begin(), members.end(), "n2") = "sb1";  // in the failed node's place
  auto decisions = fail_n2();
  ASSERT_EQ(decisions.size(), 1u);
  const auto& d = decisions[0];
  EXPECT_EQ(d.failed_node, "n2");
  EXPECT_EQ(d.failed_cause, "heartbeat");
  // x1 holds more (the checkpoint and the dataset) but is in f2: the gang stays in f1.
  EXPECT_EQ(d.replacement, "sb1");
  EXPECT_EQ(d.replacement_role, "standby");
  EXPECT_EQ(d.segment, "f1");
  EXPECT_EQ(d.members, members);
  EXPECT_EQ(d.new_standbys, std::vector<std::string>{"sb2"});
  EXPECT_EQ(d.standbys, std::vector<std::string>{"sb2"});
  EXPECT_EQ(d.checkpoint_key, "train@2");
  EXPECT_TRUE(d.checkpoint_complete);
  // Decided once: the next passes find nothing pending.
  EXPECT_TRUE(tick(10s, {"n2"}).empty());

  auto r = call(http::verb::get, "/v1/jobs/train/failover");
  ASSERT_EQ(r.status, 200u);
  auto j = js(r);
  EXPECT_EQ(j["job"], "train");
  EXPECT_EQ(j["failed"]["node"], "n2");
  EXPECT_EQ(j["failed"]["cause"], "heartbeat");
  EXPECT_NE(j["failed"]["detail"].get<std::string>().find("no heartbeat"), std::string::npos);
  EXPECT_EQ(j["replacement"], "sb1");
  EXPECT_EQ(j["replacement_role"], "standby");
  EXPECT_EQ(j["segment"], "f1");
  EXPECT_EQ(j["members"], json(members));
  EXPECT_EQ(j["new_standbys"], json({"sb2"}));
  EXPECT_TRUE(j["prewarm"].is_string());
  EXPECT_FALSE(j.contains("reason"));
  EXPECT_EQ(j["bytes_held"]["image"]["held"], 110 * MiB + 500);
  EXPECT_EQ(j["bytes_held"]["image"]["total"], 110 * MiB + 500);
  EXPECT_EQ(j["bytes_held"]["datasets"]["held"], 0u);
  EXPECT_EQ(j["bytes_held"]["datasets"]["total"], 100 * MiB);
  EXPECT_EQ(j["bytes_held"]["checkpoint"]["held"], 40 * MiB + 8);
  EXPECT_EQ(j["checkpoint"], json({{"key", "train@2"},
                                   {"complete", true},
                                   {"bytes_held", 40 * MiB + 8},
                                   {"bytes_total", 40 * MiB + 8}}));
  EXPECT_EQ(j["resume"], json({{"checkpoint", "train@2"},
                               {"restore_command", "shoalctl checkpoint restore train@2 <dir>"},
                               {"path", "/var/lib/shoal/peerd/checkpoints/views/train@2"}}));
  EXPECT_EQ(j["extender_preference"]["active"], true);
  EXPECT_EQ(j["candidates"][0]["node"], "sb1");
  bool x1_refused = false;
  for (const auto& c : j["candidates"]) {
    if (c["node"] == "x1") {
      x1_refused =
          !c["eligible"].get<bool>() &&
          c["reasons"].dump().find("fabric segment f2, the job's is f1") != std::string::npos;
    }
  }
  EXPECT_TRUE(x1_refused) << j["candidates"].dump();

  // The job shows it, the event log has it, the metric counts it.
  auto job = js(call(http::verb::get, "/v1/jobs/train"));
  EXPECT_EQ(job["failover"]["replacement"], "sb1");
  EXPECT_EQ(job["standbys"][0]["node"], "sb2");
  auto ev = js(call(http::verb::get, "/v1/events?node=n2"))["events"];
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0]["event"], "failover");
  EXPECT_EQ(ev[0]["job"], "train");
  EXPECT_EQ(ev[0]["replacement"], "sb1");
  EXPECT_EQ(ev[1]["event"], "failed");
  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_failovers_total 1"), std::string::npos) << m;
  EXPECT_NE(m.find("shoal_scheduler_failover_no_replacement_total 0"), std::string::npos);
  EXPECT_NE(m.find("shoal_scheduler_jobs 1"), std::string::npos);
}

TEST_F(JobsTest, TheNewStandbyAndTheReplacementArePrewarmed) {
  settle();
  place_train();
  ASSERT_EQ(fail_n2().size(), 1u);
  // The new standby gets the image, the dataset and the newest checkpoint.
  auto orders = beat("sb2");
  ASSERT_EQ(orders.size(), 3u);
  EXPECT_EQ(orders[0].image, "127.0.0.1:5000/team/app:v1");
  EXPECT_EQ(orders[0].objects.size(), 3u);
  EXPECT_EQ(orders[1].dataset, "imagenet@1");
  EXPECT_EQ(orders[1].objects.size(), 2u);
  EXPECT_EQ(orders[2].checkpoint, "train@2");
  ASSERT_EQ(orders[2].objects.size(), 2u);
  EXPECT_EQ(orders[2].objects[0].id, dg("ck-0"));
  EXPECT_EQ(orders[2].pin_seconds, 7u * 24 * 3600);
  // The replacement lacks the dataset: it is warmed too, as a primary.
  orders = beat("sb1");
  ASSERT_EQ(orders.size(), 3u);
  EXPECT_EQ(orders[1].dataset, "imagenet@1");
  // The progress is counted from the index, the checkpoint like a dataset.
  auto id = js(call(http::verb::get, "/v1/jobs/train/failover"))["prewarm"].get<std::string>();
  EXPECT_EQ(jobs_.get("train")->prewarm, id);
  auto st = js(call(http::verb::get, "/v1/prewarm/" + id));
  ASSERT_EQ(st["nodes"].size(), 2u);
  EXPECT_EQ(st["nodes"][0]["node"], "sb1");
  EXPECT_EQ(st["nodes"][0]["role"], "primary");
  EXPECT_EQ(st["nodes"][1]["node"], "sb2");
  EXPECT_EQ(st["nodes"][1]["role"], "standby");
  EXPECT_EQ(st["nodes"][1]["orders"][2]["checkpoint"], "train@2");
  EXPECT_EQ(st["request"]["job"], "train");
  for (const char* n : {"sb1", "sb2"}) {
    nodes_[n].objects = nodes_["x1"].objects;
    nodes_[n].datasets = {{"imagenet@1", 100 * MiB, 100 * MiB, true}};
    EXPECT_TRUE(beat(n).empty());
  }
  pw_.tick();
  EXPECT_EQ(js(call(http::verb::get, "/v1/prewarm/" + id))["state"], "done");
}

TEST_F(JobsTest, AStandbyInAnotherFabricIsNotChosenAndTheDecisionSaysWhy) {
  nodes_.erase("sb1");
  nodes_.erase("sb2");
  settle();
  job_spec spec;
  spec.id = "train";
  spec.images = {image};
  spec.nodes = 4;
  spec.gpus = 8;
  jobs_.record(spec, {"n1", "n2", "n3", "n4"}, {"x1"}, "f1", 1, "place");
  auto decisions = fail_n2();
  ASSERT_EQ(decisions.size(), 1u);
  const auto& d = decisions[0];
  EXPECT_EQ(d.replacement, "");
  EXPECT_EQ(d.reason.rfind("no healthy standby in fabric segment f1", 0), 0u) << d.reason;
  EXPECT_NE(d.reason.find("standby x1: fabric segment f2, the job's is f1"), std::string::npos)
      << d.reason;
  EXPECT_NE(d.reason.find("no other eligible node in f1 (1 eligible in other segments)"),
            std::string::npos)
      << d.reason;
  EXPECT_EQ(d.members, (std::vector<std::string>{"n1", "n3", "n4"}));  // as recorded, less n2
  EXPECT_TRUE(d.new_standbys.empty());
  auto j = js(call(http::verb::get, "/v1/jobs/train/failover"));
  EXPECT_TRUE(j["replacement"].is_null());
  EXPECT_EQ(j["reason"], d.reason);
  EXPECT_TRUE(j["bytes_held"].is_null());
  EXPECT_EQ(j["extender_preference"]["active"], false);
  EXPECT_FALSE(jobs_.preferred_node("train"));
  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_failover_no_replacement_total 1"), std::string::npos) << m;
  auto ev = js(call(http::verb::get, "/v1/events?node=n2"))["events"];
  EXPECT_EQ(ev[0]["event"], "failover");
  EXPECT_TRUE(ev[0]["replacement"].is_null());
}

TEST_F(JobsTest, AFailedStandbyIsReplacedWithoutADecision) {
  settle();
  place_train();
  for (int i = 0; i < 7 && jobs_.get("train")->standbys[0] == "sb1"; ++i)
    EXPECT_TRUE(tick(10s, {"sb1"}).empty());
  auto job = jobs_.get("train");
  EXPECT_FALSE(job->failover);
  EXPECT_EQ(job->standbys, std::vector<std::string>{"sb2"});
  EXPECT_EQ(job->members.size(), 4u);
  auto orders = beat("sb2");
  ASSERT_EQ(orders.size(), 3u);  // image, dataset, checkpoint
  EXPECT_EQ(orders[2].checkpoint, "train@2");
  EXPECT_EQ(reg_.expose().find("shoal_scheduler_failovers_total 1"), std::string::npos);
}

TEST_F(JobsTest, ARestartingNodeDecidesNothing) {
  settle();
  place_train();
  beat("n2", /*leaving=*/true);
  for (int i = 0; i < 9; ++i) EXPECT_TRUE(tick(10s, {"n2"}).empty());  // 90 s < restart_grace
  auto job = js(call(http::verb::get, "/v1/jobs/train"));
  EXPECT_TRUE(job["failover"].is_null());
  bool restarting = false;
  for (const auto& m : job["members"]) restarting = restarting || m["state"] == "restarting";
  EXPECT_TRUE(restarting) << job["members"].dump();
  EXPECT_EQ(call(http::verb::get, "/v1/jobs/train/failover").status, 404u);
  EXPECT_TRUE(tick(1s).empty());  // back
}

TEST_F(JobsTest, NoDecisionWhileTheViewIsStale) {
  settle();
  place_train();
  // Most nodes silent at once: the scheduler is the one cut off; nobody is called failed.
  std::set<std::string> silent = {"n1", "n2", "n3", "n4", "sb1"};
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(tick(10s, silent).empty());
  ASSERT_TRUE(fd_.view_stale());
  // A failure reported meanwhile waits: nothing is decided while the view is stale...
  node_event failed{"t", "n2", "failed", "reported", "gpu 3: XID 79"};
  EXPECT_FALSE(jobs_.on_node_events({failed}));
  EXPECT_TRUE(jobs_.decide_pending().empty());
  EXPECT_FALSE(jobs_.get("train")->failover);
  // ...and dropped when the node turns out healthy once the view is fresh again.
  EXPECT_TRUE(tick(1s).empty());
  EXPECT_FALSE(fd_.view_stale());
  EXPECT_TRUE(tick(1s).empty());
  EXPECT_FALSE(jobs_.get("train")->failover);
  EXPECT_EQ(jobs_.get("train")->members.size(), 4u);
}

TEST_F(JobsTest, ANewCheckpointIsOrderedOntoTheStandbys) {
  settle();
  place_train();
  jobs_.on_checkpoint("train", "train@3", {{dg("ck3-0"), 64 * MiB}, {dg("ck3-1"), 12}});
  auto orders = beat("sb1");
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].checkpoint, "train@3");
  EXPECT_EQ(orders[0].objects.size(), 2u);
  EXPECT_EQ(orders[0].pin_seconds, 7u * 24 * 3600);
  EXPECT_TRUE(beat("n1").empty());  // members wrote it; only standbys are kept warm
  EXPECT_EQ(js(call(http::verb::get, "/v1/jobs/train"))["checkpoint"], "train@3");
  // Through the listener the catalog holds; a key of another job, or an unknown job: nothing.
  auto listener = jobs_.listener();
  listener("train", "other@4", {{dg("x"), 1}});
  listener("unknown", "unknown@1", {{dg("x"), 1}});
  listener("train", "train@latest", {{dg("x"), 1}});
  EXPECT_TRUE(beat("sb1").empty());
  listener("train", "train@4", {{dg("ck4"), 1}});
  orders = beat("sb1");
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].checkpoint, "train@4");
}

TEST_F(JobsTest, TheExtenderPrefersTheReplacementForTheJobsPods) {
  settle();
  place_train();
  auto score = [&](bool labelled, const std::string& node) {
    auto r = ext_.prioritize(pod(labelled, false));
    EXPECT_EQ(r.status, 200u);
    for (const auto& h : js(r)) {
      if (h["Host"] == node) return h["Score"].get<int>();
    }
    return -1;
  };
  auto filtered = [&](bool labelled) {
    auto r = js(ext_.filter(pod(labelled, true)));
    return r["NodeNames"].get<std::vector<std::string>>();
  };
  // Before any failover, sb1 (no dataset) scores below x1 and hard mode filters it out.
  EXPECT_LT(score(true, "sb1"), score(true, "x1"));
  auto before = filtered(true);
  EXPECT_EQ(std::count(before.begin(), before.end(), "sb1"), 0);
  ASSERT_EQ(fail_n2().size(), 1u);
  EXPECT_EQ(score(true, "sb1"), 10);
  EXPECT_LE(score(true, "x1"), 9);
  auto after = filtered(true);
  EXPECT_EQ(std::count(after.begin(), after.end(), "sb1"), 1);
  // Another pod is not steered; the preference ends after failover_preference_ttl.
  EXPECT_LT(score(false, "sb1"), 10);
  auto other = filtered(false);
  EXPECT_EQ(std::count(other.begin(), other.end(), "sb1"), 0);
  clock_.advance(31min);
  EXPECT_FALSE(jobs_.preferred_node("train"));
  EXPECT_LT(score(true, "sb1"), 10);
  // A label that is no job name is a warning, not an error.
  auto p = parse_pod(json{{"metadata", {{"labels", {{"shoal.io/job", "Not A Job"}}}}}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->job, "");
  EXPECT_EQ(p->warnings.size(), 1u);
}

// Jobs learned from the pods peerd reports (its CRI watch): a job nobody placed fails over too,
// a placed job keeps the nodes its pods run on, and pods that end take their nodes along.
TEST_F(JobsTest, JobsAreLearnedFromTheirPodsAndFailOver) {
  settle();
  // n2 and n3 report pods of "infer" through the heartbeat API, as peerd sends them.
  for (const char* n : {"n2", "n3"}) {
    auto m = full_hb(n, nodes_.at(n).objects, {{"fabric", "f1"}}, ++seq_[n], "epoch-A");
    m.pods_known = true;
    m.pods = {{"infer", std::string("ml/infer-") + n}};
    auto r = call(http::verb::post, "/v1/heartbeat", heartbeat::encode(m));
    ASSERT_EQ(r.status, 200u) << std::get<std::string>(r.body);
  }
  auto job = js(call(http::verb::get, "/v1/jobs/infer"));
  EXPECT_EQ(job["source"], "pods");
  EXPECT_EQ(job["segment"], "f1");
  EXPECT_EQ(job["pod_nodes"], json({"n2", "n3"}));
  EXPECT_EQ(job["job"]["nodes"], 2);
  ASSERT_EQ(job["members"].size(), 2u);
  // A heartbeat without "pods" (peerd's listing failed: unknown) changes nothing.
  {
    auto m = full_hb("n2", nodes_.at("n2").objects, {{"fabric", "f1"}}, ++seq_["n2"], "epoch-A");
    ASSERT_EQ(call(http::verb::post, "/v1/heartbeat", heartbeat::encode(m)).status, 200u);
    EXPECT_EQ(jobs_.get("infer")->pod_nodes, (std::vector<std::string>{"n2", "n3"}));
  }

  // A placed job keeps the node its pods run on beside the placement's members.
  place_train();
  jobs_.observe_pods("x1", "f2", {{"train", "ml/train-extra"}});
  auto train = *jobs_.get("train");
  EXPECT_EQ(train.source, "place");
  EXPECT_NE(std::find(train.members.begin(), train.members.end(), "x1"), train.members.end());
  place_train();  // placed again: x1 stays while its pod runs
  train = *jobs_.get("train");
  EXPECT_NE(std::find(train.members.begin(), train.members.end(), "x1"), train.members.end());
  jobs_.observe_pods("x1", "f2", {});  // the pod ended
  train = *jobs_.get("train");
  EXPECT_EQ(std::find(train.members.begin(), train.members.end(), "x1"), train.members.end());
  EXPECT_TRUE(train.pod_nodes.empty());

  // n2 dies: "infer" (never placed) gets a replacement in its fabric, as "train" does.
  auto decisions = fail_n2();
  bool infer_decided = false;
  for (const auto& d : decisions) {
    if (d.job != "infer") continue;
    infer_decided = true;
    EXPECT_EQ(d.failed_node, "n2");
    EXPECT_FALSE(d.replacement.empty()) << d.reason;
    EXPECT_EQ(d.segment, "f1");
  }
  EXPECT_TRUE(infer_decided);

  // The last pod of a pods-only job ends: the job is forgotten.
  jobs_.observe_pods("n3", "f1", {});
  jobs_.observe_pods("n2", "f1", {});
  EXPECT_FALSE(jobs_.get("infer"));
}

TEST_F(JobsTest, PrewarmingAJobRecordsItAndJobsAreBoundedAndExpire) {
  settle();
  auto r = call(http::verb::post, "/v1/prewarm",
                R"({"job":{"id":"pj","images":[")" + image + R"("],"gpus":8},"standby":1})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  auto job = jobs_.get("pj");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->source, "prewarm");
  EXPECT_EQ(job->members.size(), 1u);
  EXPECT_EQ(job->standbys.size(), 1u);
  EXPECT_EQ(job->prewarm, js(r)["id"]);
  EXPECT_EQ(job->spec.images, std::vector<std::string>{image});
  // Bounded: the least recently updated goes. Expiring: jobs.ttl after the last update.
  metrics::registry reg2;  // shoal_scheduler_jobs is the fixture's registry's already
  job_registry small(job_registry_deps{idx_, placer_, res_, ds_, pw_, fd_, reg2},
                     jobs_options{.max_jobs = 2, .ttl = 1h}, clock_.fn());
  job_spec s;
  for (const char* id : {"a", "b", "c"}) {
    s.id = id;
    small.record(s, {"n1"}, {}, "", 0, "place");
    clock_.advance(1s);
  }
  EXPECT_FALSE(small.get("a"));
  EXPECT_TRUE(small.get("b") && small.get("c"));
  s.id.clear();  // anonymous: not recorded
  small.record(s, {"n1"}, {}, "", 0, "place");
  EXPECT_EQ(small.size(), 2u);
  clock_.advance(59min);
  s.id = "c";
  small.record(s, {"n1"}, {}, "", 0, "place");
  clock_.advance(2min);
  small.expire();
  EXPECT_FALSE(small.get("b"));
  EXPECT_TRUE(small.get("c"));
}

// Replicas sharing state (shared_state.h): the replica that decides tells its sharer, and its
// snapshot of the job, put into another replica's registry, carries the whole decision (and adds
// the failover to that replica's events). A replica without the lease remembers failed nodes but
// never decides.
TEST_F(JobsTest, ADecisionTravelsWholeToAnotherReplica) {
  settle();
  std::vector<std::string> told;
  jobs_.set_sharer([&](const std::string& id) { told.push_back(id); });
  place_train();
  ASSERT_EQ(told, std::vector<std::string>{"train"});
  auto decisions = fail_n2();
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(told.back(), "train");
  auto snap = jobs_.snapshot("train");
  ASSERT_TRUE(snap);

  metrics::registry reg2;
  failure_detector fd2(fd_opts(), nullptr, clock_.fn());
  job_registry other(job_registry_deps{idx_, placer_, res_, ds_, pw_, fd2, reg2}, jobs_options{},
                     clock_.fn());
  ASSERT_TRUE(other.put(*snap));
  auto a = jobs_.get("train"), b = other.get("train");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->spec.images, a->spec.images);
  EXPECT_EQ(b->spec.datasets, a->spec.datasets);
  EXPECT_EQ(b->spec.nodes, a->spec.nodes);
  EXPECT_EQ(b->members, a->members);
  EXPECT_EQ(b->standbys, a->standbys);
  EXPECT_EQ(b->segment, a->segment);
  EXPECT_EQ(b->prewarm, a->prewarm);
  ASSERT_TRUE(b->failover);
  EXPECT_EQ(b->failover->replacement, "sb1");
  EXPECT_EQ(b->failover->checkpoint_key, "train@2");
  EXPECT_EQ(b->failover->candidates.size(), a->failover->candidates.size());
  EXPECT_EQ(b->failover->image.held, a->failover->image.held);
  EXPECT_EQ(other.preferred_node("train"), jobs_.preferred_node("train"));
  auto ev = fd2.events("n2", 10);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].event, "failover");
  EXPECT_EQ(ev[0].replacement, "sb1");
  // The same snapshot again adds no second event; a malformed one changes nothing.
  ASSERT_TRUE(other.put(*snap));
  EXPECT_EQ(fd2.events("n2", 10).size(), ev.size());
  EXPECT_FALSE(other.put(R"({"id":"train","spec":{"images":7}})"));
  EXPECT_EQ(other.get("train")->members, a->members);
  other.erase("train");
  EXPECT_FALSE(other.get("train"));

  node_event failed;
  failed.node = "n3";
  failed.event = "failed";
  EXPECT_FALSE(other.on_node_events({failed}, false));
}

}  // namespace
}  // namespace shoal::scheduler
