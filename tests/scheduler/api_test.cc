// The REST API through the router (no sockets): heartbeats with resync and the tracker fed from
// them, nodes, objects, images, datasets, place, prewarm end to end (orders in heartbeat
// replies, progress, completion), and malformed or oversized requests.
#include "scheduler/api.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

class ApiTest : public ::testing::Test {
 protected:
  ApiTest()
      : trk_(tracker_options{}, clock_.fn()),
        idx_(index_options{}, "epoch-A", clock_.fn()),
        res_(src_, resolver_options{}, clock_.fn()),
        placer_(idx_, res_, ds_, net_, placer_opts(), clock_.fn()),
        pw_(idx_, prewarm_options{}, clock_.fn()),
        ext_(placer_, extender_options{}, reg_),
        api_(api_deps{cfg_, idx_, trk_, placer_, res_, ds_, pw_, ext_, reg_}) {
    body_ = image_manifest({{"base", 100 * MiB}, {"top", 10 * MiB}}, "cfg", 500);
    src_.put("127.0.0.1:5000", "team/app", body_, "v1");
  }
  static placer_options placer_opts() {
    placer_options o;
    o.cost = cost_model::from(cost_config{});
    return o;
  }
  http::response call(http::verb method, const std::string& target, const std::string& body = "",
                      const tls::peer_identity& peer = {},
                      const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    http::request r;
    for (const auto& [k, v] : headers) r.headers.set(k, v);
    r.method = method;
    r.target = target;
    auto q = target.find('?');
    r.path = target.substr(0, q);
    r.query = q == std::string::npos ? "" : target.substr(q + 1);
    r.body = body;
    r.remote = http::tcp::endpoint(http::net::ip::make_address("10.9.9.9"), 40000);
    r.peer = peer;
    return api_.serve(r);
  }
  static json js(const http::response& r) { return json::parse(std::get<std::string>(r.body)); }
  heartbeat::reply beat(heartbeat::message m) {
    auto r = call(http::verb::post, "/v1/heartbeat", heartbeat::encode(m));
    EXPECT_EQ(r.status, 200u) << std::get<std::string>(r.body);
    auto rep = heartbeat::decode_reply(std::get<std::string>(r.body));
    EXPECT_TRUE(rep) << (rep ? "" : rep.error().message);
    return rep ? *rep : heartbeat::reply{};
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
  api api_;
  std::string body_;
};

TEST_F(ApiTest, HeartbeatsFeedTheIndexAndTheTrackerWithDeltasAndResync) {
  auto rep = beat(full_hb("n1", {held("base", 100 * MiB)}, {{"zone", "z"}}, 1, ""));
  EXPECT_EQ(rep.epoch, "epoch-A");
  EXPECT_FALSE(rep.resync);
  EXPECT_EQ(rep.ack_seq, 1u);
  info_hash ih;
  ASSERT_TRUE(parse_info_hash(ih_of("base"), ih));
  EXPECT_EQ(trk_.nodes_in(ih), std::vector<std::string>{"n1"});
  // A delta in the right epoch adds and removes, in the tracker too.
  rep = beat(delta_hb("n1", 2, "epoch-A", {held("top", 10 * MiB)}, {dg("base")}));
  EXPECT_FALSE(rep.resync);
  EXPECT_TRUE(trk_.nodes_in(ih).empty());
  info_hash ih2;
  ASSERT_TRUE(parse_info_hash(ih_of("top"), ih2));
  EXPECT_EQ(trk_.nodes_in(ih2), std::vector<std::string>{"n1"});
  // A delta from a previous scheduler's epoch: resync, nothing applied.
  rep = beat(delta_hb("n1", 3, "epoch-OLD", {held("base", 100 * MiB)}));
  EXPECT_TRUE(rep.resync);
  EXPECT_TRUE(trk_.nodes_in(ih).empty());
  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_resyncs_total{reason=\"epoch\"} 1"), std::string::npos) << m;
}

TEST_F(ApiTest, HeartbeatErrors) {
  auto r = call(http::verb::post, "/v1/heartbeat", "{not json");
  EXPECT_EQ(r.status, 400u);
  EXPECT_TRUE(js(r).contains("error"));
  EXPECT_EQ(call(http::verb::get, "/v1/heartbeat").status, 405u);
  auto m = full_hb("n1", {});
  m.bt_port = 0;
  auto j = json::parse(heartbeat::encode(m));
  j["bt_port"] = 123456;
  r = call(http::verb::post, "/v1/heartbeat", j.dump());
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("bt_port"), std::string::npos);
}

TEST_F(ApiTest, NodesObjectsImagesAndDatasets) {
  auto m = full_hb("n1", {held("base", 100 * MiB)}, {{"zone", "z"}, {"rack", "r"}}, 1);
  m.gpus = {{"L40S", 4}};
  m.netsetup = R"({"schema":1,"validation":{"passed":true,"settings":{"mtu":9000}}})";
  beat(m);
  beat(full_hb("n2", {}, {}, 1));
  auto r = call(http::verb::get, "/v1/nodes");
  ASSERT_EQ(r.status, 200u);
  auto nodes = js(r);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["node"], "n1");
  EXPECT_EQ(nodes[0]["gpus_total"], 4);
  EXPECT_EQ(nodes[0]["objects"], 1);
  EXPECT_EQ(nodes[0]["healthy"], true);
  EXPECT_EQ(nodes[0]["network"]["validation"], "passed");
  // The list leaves the documents out unless asked; one node has them.
  EXPECT_TRUE(nodes[0]["netsetup"].is_null());
  EXPECT_EQ(js(call(http::verb::get, "/v1/nodes?documents=1"))[0]["netsetup"]["schema"], 1);
  EXPECT_EQ(js(call(http::verb::get, "/v1/nodes/n1"))["netsetup"]["schema"], 1);
  EXPECT_EQ(call(http::verb::get, "/v1/nodes?documents=yes").status, 400u);
  EXPECT_EQ(nodes[0]["platform"], "linux/amd64");
  EXPECT_EQ(js(call(http::verb::get, "/v1/nodes/n2"))["node"], "n2");
  EXPECT_EQ(call(http::verb::get, "/v1/nodes/nope").status, 404u);

  r = call(http::verb::get, "/v1/objects/" + dg("base").str());
  ASSERT_EQ(r.status, 200u);
  auto o = js(r);
  EXPECT_EQ(o["size"], 100 * MiB);
  EXPECT_EQ(o["holder_count"], 1);
  EXPECT_EQ(o["holders"][0]["node"], "n1");
  EXPECT_EQ(o["holders"][0]["rack"], "r");
  EXPECT_EQ(call(http::verb::get, "/v1/objects/sha256:nothex").status, 400u);
  EXPECT_EQ(call(http::verb::get, "/v1/objects/" + dg("nobody").str()).status, 404u);

  r = call(http::verb::get, "/v1/images/127.0.0.1:5000/team/app:v1");
  ASSERT_EQ(r.status, 200u) << std::get<std::string>(r.body);
  auto img = js(r);
  EXPECT_EQ(img["ref"], "127.0.0.1:5000/team/app:v1");
  EXPECT_EQ(img["manifest"], sha256_of(body_).str());
  EXPECT_EQ(img["bytes"], 110 * MiB + 500);
  ASSERT_EQ(img["nodes"].size(), 2u);
  EXPECT_EQ(img["nodes"][0]["bytes_present"], 100 * MiB);
  EXPECT_EQ(img["nodes"][1]["bytes_present"], 0);
  // Percent-encoded references work too; bad ones and unknown tags do not.
  EXPECT_EQ(call(http::verb::get, "/v1/images/127.0.0.1%3A5000%2Fteam%2Fapp%3Av1").status, 200u);
  EXPECT_EQ(call(http::verb::get, "/v1/images/Bad..Ref").status, 400u);
  EXPECT_EQ(call(http::verb::get, "/v1/images/127.0.0.1:5000/team/app:v9").status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/images/127.0.0.1:5000/team/app:v1?platform=amd64").status,
            400u);

  r = call(http::verb::get, "/v1/datasets/imagenet@1");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("unknown dataset"), std::string::npos);
  EXPECT_EQ(call(http::verb::get, "/v1/datasets/noversion").status, 400u);
  ds_.sets["imagenet@1"] = {obj("base", 100 * MiB)};
  r = call(http::verb::get, "/v1/datasets/imagenet@1");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(js(r)["nodes"][0]["fraction"], 1.0);
  EXPECT_EQ(call(http::verb::get, "/v1/nowhere").status, 404u);
}

TEST_F(ApiTest, PlaceAnswersAndRefusesBadBodies) {
  beat(full_hb("warm", {held("base", 100 * MiB)}, {}, 1));
  beat(full_hb("cold", {}, {}, 1));
  auto r = call(http::verb::post, "/v1/place",
                R"({"images":["127.0.0.1:5000/team/app:v1"],"dry_run":true})");
  ASSERT_EQ(r.status, 200u) << std::get<std::string>(r.body);
  auto j = js(r);
  EXPECT_EQ(j["feasible"], true);
  EXPECT_EQ(j["chosen"], json({"warm"}));
  EXPECT_TRUE(j["reservation"].is_null());
  EXPECT_EQ(j["objects"]["linux/amd64"]["count"], 3);
  EXPECT_EQ(call(http::verb::post, "/v1/place", "[]").status, 400u);
  EXPECT_EQ(call(http::verb::post, "/v1/place", R"({"image":["x"]})").status, 400u);
  EXPECT_EQ(call(http::verb::post, "/v1/place", R"({"dry_run":"yes"})").status, 400u);
  EXPECT_EQ(call(http::verb::post, "/v1/place", std::string(2u << 20, ' ')).status, 413u);
  EXPECT_EQ(call(http::verb::get, "/v1/place").status, 405u);
  r = call(http::verb::post, "/v1/place", R"({"datasets":["imagenet@1"]})");
  EXPECT_EQ(r.status, 404u);
  EXPECT_NE(js(r)["error"].get<std::string>().find("unknown dataset"), std::string::npos);
}

TEST_F(ApiTest, PrewarmOnNodesEndToEnd) {
  beat(full_hb("n1", {}, {}, 1));
  beat(full_hb("n2", {held("base", 100 * MiB)}, {}, 1));
  auto r = call(http::verb::post, "/v1/prewarm",
                R"({"images":["127.0.0.1:5000/team/app:v1"],"nodes":["n1","n2"]})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  auto j = js(r);
  std::string id = j["id"];
  EXPECT_EQ(j["status_url"], "/v1/prewarm/" + id);
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["bytes_total"], 2 * (110 * MiB + 500));
  // The order rides on n1's next heartbeat reply, resolved for its platform.
  auto rep = beat(full_hb("n1", {}, {}, 2));
  ASSERT_EQ(rep.orders.size(), 1u);
  EXPECT_EQ(rep.orders[0].id, id + ".0");
  EXPECT_EQ(rep.orders[0].image, "127.0.0.1:5000/team/app:v1");
  EXPECT_EQ(rep.orders[0].registry, "127.0.0.1:5000");
  EXPECT_EQ(rep.orders[0].repository, "team/app");
  EXPECT_EQ(rep.orders[0].objects.size(), 3u);
  EXPECT_EQ(rep.orders[0].pin_seconds, 3600u);
  auto all = std::vector<heartbeat::held_object>{held("cfg", 500), held("base", 100 * MiB),
                                                 held("top", 10 * MiB)};
  auto done = full_hb("n1", all, {}, 3);
  done.orders = {{id + ".0", heartbeat::order_state::done, 110 * MiB + 500, 110 * MiB + 500, ""}};
  EXPECT_TRUE(beat(done).orders.empty());
  beat(full_hb("n2", all, {}, 2));
  r = call(http::verb::get, "/v1/prewarm/" + id);
  ASSERT_EQ(r.status, 200u);
  j = js(r);
  EXPECT_EQ(j["state"], "done") << j.dump(2);
  EXPECT_EQ(j["bytes_done"], j["bytes_total"]);
  // The index agrees: both nodes hold the top layer.
  auto o = js(call(http::verb::get, "/v1/objects/" + dg("top").str()));
  EXPECT_EQ(o["holder_count"], 2);
  auto list = js(call(http::verb::get, "/v1/prewarm"));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["nodes_done"], 2);
}

// A client that lost the answer sends the request again with the same Idempotency-Key: the same
// prewarm (200, Idempotent-Replayed), not a second one; another key, or another caller with the
// same key, makes a new one; a malformed key is refused.
TEST_F(ApiTest, PrewarmIdempotencyKey) {
  beat(full_hb("n1", {}, {}, 1));
  const std::string body = R"({"images":["127.0.0.1:5000/team/app:v1"],"nodes":["n1"]})";
  auto first = call(http::verb::post, "/v1/prewarm", body, {}, {{"Idempotency-Key", "run-42"}});
  ASSERT_EQ(first.status, 202u) << std::get<std::string>(first.body);
  std::string id = js(first)["id"];
  auto again = call(http::verb::post, "/v1/prewarm", body, {}, {{"Idempotency-Key", "run-42"}});
  ASSERT_EQ(again.status, 200u) << std::get<std::string>(again.body);
  EXPECT_EQ(js(again)["id"], id);
  EXPECT_EQ(js(again)["status_url"], "/v1/prewarm/" + id);
  EXPECT_EQ(again.headers["Idempotent-Replayed"], "true");
  EXPECT_EQ(js(call(http::verb::get, "/v1/prewarm")).size(), 1u);
  auto other = call(http::verb::post, "/v1/prewarm", body, {}, {{"Idempotency-Key", "run-43"}});
  ASSERT_EQ(other.status, 202u);
  EXPECT_NE(js(other)["id"], id);
  tls::peer_identity op;
  op.tls = op.verified = true;
  op.role = tls::peer_role::operator_;
  op.name = "alice";
  auto theirs = call(http::verb::post, "/v1/prewarm", body, op, {{"Idempotency-Key", "run-42"}});
  ASSERT_EQ(theirs.status, 202u) << std::get<std::string>(theirs.body);
  EXPECT_NE(js(theirs)["id"], id);
  for (std::string bad : {std::string(), std::string(129, 'k'), std::string("a\x01b")}) {
    auto r = call(http::verb::post, "/v1/prewarm", body, {}, {{"Idempotency-Key", bad}});
    EXPECT_EQ(r.status, 400u) << bad;
  }
  EXPECT_EQ(js(call(http::verb::get, "/v1/prewarm")).size(), 3u);
}

TEST_F(ApiTest, PrewarmTargetsAndErrors) {
  beat(full_hb("a1", {}, {{"pool", "a"}}, 1));
  beat(full_hb("a2", {held("base", 100 * MiB)}, {{"pool", "a"}}, 1));
  beat(full_hb("b1", {}, {{"pool", "b"}}, 1));
  auto r = call(http::verb::post, "/v1/prewarm",
                R"({"images":["127.0.0.1:5000/team/app:v1"],"selector":{"pool":"a"}})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  EXPECT_EQ(js(r)["nodes"].size(), 2u);
  // A job: placed (a2 first: it has the base), plus one standby.
  r = call(http::verb::post, "/v1/prewarm",
           R"({"job":{"images":["127.0.0.1:5000/team/app:v1"],"nodes":1},"standby":1})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  auto j = js(r);
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][0]["node"], "a2");
  EXPECT_EQ(j["nodes"][0]["role"], "primary");
  EXPECT_EQ(j["nodes"][1]["role"], "standby");
  EXPECT_EQ(j["placement"]["chosen"], json({"a2"}));
  struct tc {
    const char* body;
    unsigned status;
    const char* needle;
  };
  for (auto c : std::vector<tc>{
           {R"({"images":["127.0.0.1:5000/team/app:v1"]})", 400, "exactly one of"},
           {R"({"images":["127.0.0.1:5000/team/app:v1"],"nodes":["a1"],"selector":{"pool":"a"}})",
            400, "exactly one of"},
           {R"({"images":["127.0.0.1:5000/team/app:v1"],"nodes":["ghost"]})", 404,
            "unknown node(s): ghost"},
           {R"({"images":["127.0.0.1:5000/team/app:v1"],"selector":{"pool":"zzz"}})", 404,
            "matches no healthy node"},
           {R"({"nodes":["a1"]})", 400, "nothing to prewarm"},
           {R"({"images":["127.0.0.1:5000/team/app:v404"],"nodes":["a1"]})", 502, "not found"},
           {R"({"datasets":["imagenet@1"],"nodes":["a1"]})", 404, "unknown dataset"},
           {R"({"images":["127.0.0.1:5000/team/app:v1"],"job":{"nodes":2,"gpus":8}})", 409,
            "cannot be placed"},
           {R"({"images":["x"],"nodes":["a1"],"colour":"red"})", 400, "unknown prewarm field"},
       }) {
    r = call(http::verb::post, "/v1/prewarm", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " → " << std::get<std::string>(r.body);
    EXPECT_NE(js(r)["error"].get<std::string>().find(c.needle), std::string::npos)
        << std::get<std::string>(r.body);
  }
  EXPECT_EQ(call(http::verb::get, "/v1/prewarm/pw-nope").status, 404u);
  EXPECT_EQ(call(http::verb::get, "/v1/prewarm/bad id").status, 400u);
}

TEST_F(ApiTest, PrewarmOrdersCoverImagesAndDatasetsAndTheRequestIsKept) {
  beat(full_hb("n1", {}, {}, 1));
  ds_.sets["imagenet@1"] = {obj("base", 100 * MiB), obj("top", 10 * MiB)};
  // A node named twice is one target; the dataset gets its own order after the image's.
  auto r = call(http::verb::post, "/v1/prewarm",
                R"({"images":["127.0.0.1:5000/team/app:v1"],"datasets":["imagenet@1"],)"
                R"("nodes":["n1","n1"]})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  auto j = js(r);
  std::string id = j["id"];
  EXPECT_EQ(j["nodes"].size(), 1u);
  EXPECT_EQ(j["request"], json::parse(R"({"images":["127.0.0.1:5000/team/app:v1"],)"
                                      R"("datasets":["imagenet@1"],"nodes":["n1","n1"]})"));
  EXPECT_FALSE(j.contains("placement"));
  auto rep = beat(full_hb("n1", {}, {}, 2));
  ASSERT_EQ(rep.orders.size(), 2u);
  EXPECT_EQ(rep.orders[0].id, id + ".0");
  EXPECT_EQ(rep.orders[0].image, "127.0.0.1:5000/team/app:v1");
  EXPECT_EQ(rep.orders[1].id, id + ".d0");
  EXPECT_EQ(rep.orders[1].dataset, "imagenet@1");
  EXPECT_EQ(rep.orders[1].image, "");
  EXPECT_EQ(rep.orders[1].registry, "");
  EXPECT_FALSE(rep.orders[1].platform.empty());
  EXPECT_EQ(rep.orders[1].platform, rep.orders[0].platform);
  EXPECT_EQ(rep.orders[1].pin_seconds, 3600u);
  ASSERT_EQ(rep.orders[1].objects.size(), 2u);
  EXPECT_EQ(rep.orders[1].objects[0].id, dg("base"));
  EXPECT_EQ(rep.orders[1].objects[1].size, 10 * MiB);
  // A job without top-level images prewarms the job's own; the request keeps job and standby.
  r = call(http::verb::post, "/v1/prewarm",
           R"({"job":{"images":["127.0.0.1:5000/team/app:v1"],"nodes":1}})");
  ASSERT_EQ(r.status, 202u) << std::get<std::string>(r.body);
  j = js(r);
  EXPECT_EQ(j["request"]["images"], json({"127.0.0.1:5000/team/app:v1"}));
  EXPECT_EQ(j["request"]["datasets"], json::array());
  EXPECT_EQ(j["request"]["standby"], 0);
  EXPECT_TRUE(j["request"].contains("job"));
  EXPECT_EQ(j["placement"]["chosen"], json({"n1"}));
  EXPECT_EQ(j["status_url"], "/v1/prewarm/" + j["id"].get<std::string>());
}

TEST_F(ApiTest, RoutesOnTheirPools) {
  http::request r;
  r.path = "/v1/place";
  EXPECT_TRUE(api::heavy(r));
  r.path = "/v1/extender/filter";
  EXPECT_TRUE(api::heavy(r));
  r.path = "/v1/nodes";  // every node's JSON
  EXPECT_TRUE(api::heavy(r));
  r.path = "/v1/nodes/n1";
  EXPECT_FALSE(api::heavy(r));
  r.path = "/v1/prewarm";
  r.method = http::verb::get;
  EXPECT_FALSE(api::heavy(r));
  r.method = http::verb::post;
  EXPECT_TRUE(api::heavy(r));
  r.path = "/v1/origins";  // a Redis call with replicas: never on the io threads
  EXPECT_TRUE(api::heavy(r));
  r.path = "/v1/heartbeat";
  EXPECT_TRUE(api::is_heartbeat(r));
  EXPECT_EQ(call(http::verb::get, "/v1/extender/filter").status, 405u);
  EXPECT_EQ(call(http::verb::post, "/v1/extender/prioritize", "nope").status, 400u);
}

// With TLS on (req.peer.tls), a heartbeat is accepted only from the certificate of the node it
// names; without TLS (every test above) nothing is checked.
TEST_F(ApiTest, WithTlsAHeartbeatNeedsTheNodesOwnCertificate) {
  auto as = testing::verified_peer;
  auto hb = heartbeat::encode(full_hb("n1", {held("base", 100 * MiB)}, {}, 1, ""));
  auto own = call(http::verb::post, "/v1/heartbeat", hb, as(tls::peer_role::node, "n1"));
  EXPECT_EQ(own.status, 200u) << std::get<std::string>(own.body);

  auto forged = call(http::verb::post, "/v1/heartbeat", hb, as(tls::peer_role::node, "n2"));
  EXPECT_EQ(forged.status, 403u);
  EXPECT_EQ(js(forged)["error"],
            "heartbeat for node \"n1\" refused: the client certificate is node/n2");
  EXPECT_NE(reg_.expose().find(
                "shoal_scheduler_auth_refused_total{need=\"node\",reason=\"other_node\"} 1"),
            std::string::npos);

  auto op = call(http::verb::post, "/v1/heartbeat", hb, as(tls::peer_role::operator_, "n1"));
  EXPECT_EQ(op.status, 403u);
  tls::peer_identity anonymous;
  anonymous.tls = true;
  auto anon = call(http::verb::post, "/v1/heartbeat", hb, anonymous);
  EXPECT_EQ(anon.status, 401u);
  EXPECT_EQ(js(anon)["error"],
            "this route needs a node certificate (shoal://node/<name>); the client certificate is "
            "anonymous (tls)");
  EXPECT_EQ(js(call(http::verb::get, "/v1/nodes")).size(), 1u);  // n1 only, once
}

// With TLS on, every route but the tracker's checks the caller's role before it runs.
TEST_F(ApiTest, WithTlsRoutesNeedTheirRole) {
  auto as = testing::verified_peer;
  beat(full_hb("n1", {held("base", 100 * MiB)}));
  tls::peer_identity anonymous;
  anonymous.tls = true;
  const std::string body = R"({"images":["127.0.0.1:5000/team/app:v1"],"nodes":["n1"]})";

  auto by_node = call(http::verb::post, "/v1/prewarm", body, as(tls::peer_role::node, "n1"));
  EXPECT_EQ(by_node.status, 403u);
  EXPECT_EQ(js(by_node)["presented"], "node/n1");
  EXPECT_EQ(call(http::verb::post, "/v1/prewarm", body, anonymous).status, 401u);
  auto by_rp = call(http::verb::post, "/v1/place", R"({"images":[]})",
                    as(tls::peer_role::registry_proxy, ""));
  EXPECT_EQ(by_rp.status, 403u);
  auto by_op = call(http::verb::post, "/v1/prewarm", body, as(tls::peer_role::operator_, "alice"));
  EXPECT_EQ(by_op.status, 202u) << std::get<std::string>(by_op.body);
  EXPECT_EQ(call(http::verb::get, "/v1/prewarm", "", as(tls::peer_role::node, "n1")).status, 200u);

  // The holders of an object are no one's business without a cluster certificate.
  const std::string object = "/v1/objects/" + dg("base").str();
  auto anon_read = call(http::verb::get, object, "", anonymous);
  EXPECT_EQ(anon_read.status, 401u);
  EXPECT_EQ(std::get<std::string>(anon_read.body).find("n1"), std::string::npos);
  EXPECT_EQ(call(http::verb::get, object, "", as(tls::peer_role::node, "n2")).status, 200u);
  EXPECT_EQ(call(http::verb::get, "/v1/nodes", "", anonymous).status, 401u);
  EXPECT_EQ(call(http::verb::get, "/v1/no-such-route", "", anonymous).status, 401u);

  auto filter =
      call(http::verb::post, "/v1/extender/filter", "nope", as(tls::peer_role::node, "n1"));
  EXPECT_EQ(filter.status, 403u);
  // kube-scheduler's certificate gets through to the extender (which finds the body bad).
  EXPECT_EQ(
      call(http::verb::post, "/v1/extender/filter", "nope", as(tls::peer_role::kube_scheduler, ""))
          .status,
      400u);
  auto m = reg_.expose();
  EXPECT_NE(m.find("shoal_scheduler_auth_refused_total{need=\"operator\",reason=\"wrong_role\"} 2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("shoal_scheduler_api_requests_total{route=\"/v1/objects\",code=\"401\"} 1"),
            std::string::npos);
}

// The node's address is the connection's; what the heartbeat claims counts only in plain mode
// with tracker.trust_announced_ip (one machine).
TEST_F(ApiTest, TheNodeAddressIsTheConnections) {
  auto ip_of = [&](const std::string& node) {
    return js(call(http::verb::get, "/v1/nodes/" + node))["ip"].get<std::string>();
  };
  beat(full_hb("plain", {}));  // claims 10.0.0.1, connects from 10.9.9.9
  EXPECT_EQ(ip_of("plain"), "10.9.9.9");
  cfg_.tracker.trust_announced_ip = true;
  beat(full_hb("trusted", {}));
  EXPECT_EQ(ip_of("trusted"), "10.0.0.1");
  auto hb = heartbeat::encode(full_hb("tls", {held("base", 100 * MiB)}));
  auto r = call(http::verb::post, "/v1/heartbeat", hb,
                testing::verified_peer(tls::peer_role::node, "tls"));
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(ip_of("tls"), "10.9.9.9");
}

}  // namespace
}  // namespace shoal::scheduler
