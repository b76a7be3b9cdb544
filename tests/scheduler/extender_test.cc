// The kube-scheduler extender with v1.Pod and v1.NodeList JSON as kube-scheduler sends them:
// init containers, digests, tags, short names, private registries with ports; both the NodeNames
// (nodeCacheCapable) and the Nodes forms; soft and hard modes; malformed and oversized bodies.
#include "scheduler/extender.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;
using nlohmann::json;

constexpr std::uint64_t MiB = 1 << 20;

// A pod as kube-scheduler serializes it (client-go's JSON of a v1.Pod fetched from the API).
json make_pod(const std::string& init_image, const std::vector<std::string>& images,
              const std::map<std::string, std::string>& annotations) {
  json containers = json::array();
  int i = 0;
  for (const auto& img : images) {
    containers.push_back(
        {{"name", "c" + std::to_string(i++)},
         {"image", img},
         {"command", {"/bin/sh", "-c", "sleep 3600"}},
         {"ports", {{{"containerPort", 8080}, {"protocol", "TCP"}}}},
         {"env", {{{"name", "MODE"}, {"value", "train"}}}},
         {"resources",
          {{"limits", {{"cpu", "4"}, {"memory", "16Gi"}, {"nvidia.com/gpu", "8"}}},
           {"requests", {{"cpu", "4"}, {"memory", "16Gi"}, {"nvidia.com/gpu", "8"}}}}},
         {"volumeMounts",
          {{{"name", "kube-api-access-x7k2p"},
            {"readOnly", true},
            {"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
         {"terminationMessagePath", "/dev/termination-log"},
         {"terminationMessagePolicy", "File"},
         {"imagePullPolicy", "IfNotPresent"}});
  }
  json ann = json::object();
  for (const auto& [k, v] : annotations) ann[k] = v;
  return {{"metadata",
           {{"name", "trainer-0"},
            {"generateName", "trainer-"},
            {"namespace", "ml"},
            {"uid", "5f1c3a52-9c1e-4d8e-a0f1-3b0d1f0b9e21"},
            {"resourceVersion", "884211"},
            {"creationTimestamp", "2026-11-30T10:00:00Z"},
            {"labels", {{"app", "trainer"}, {"controller-revision-hash", "trainer-7c9d"}}},
            {"annotations", ann},
            {"ownerReferences",
             {{{"apiVersion", "apps/v1"},
               {"kind", "StatefulSet"},
               {"name", "trainer"},
               {"uid", "0d3f"},
               {"controller", true},
               {"blockOwnerDeletion", true}}}},
            {"managedFields",
             {{{"manager", "kube-controller-manager"},
               {"operation", "Update"},
               {"apiVersion", "v1"},
               {"time", "2026-11-30T10:00:00Z"},
               {"fieldsType", "FieldsV1"},
               {"fieldsV1", {{"f:metadata", {{"f:labels", json::object()}}}}}}}}}},
          {"spec",
           {{"volumes",
             {{{"name", "kube-api-access-x7k2p"},
               {"projected",
                {{"sources",
                  {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}}}},
                 {"defaultMode", 420}}}}}},
            {"initContainers",
             {{{"name", "fetch"},
               {"image", init_image},
               {"resources", json::object()},
               {"terminationMessagePath", "/dev/termination-log"},
               {"terminationMessagePolicy", "File"},
               {"imagePullPolicy", "IfNotPresent"}}}},
            {"containers", containers},
            {"restartPolicy", "Always"},
            {"terminationGracePeriodSeconds", 30},
            {"dnsPolicy", "ClusterFirst"},
            {"nodeSelector", {{"nvidia.com/gpu.present", "true"}}},
            {"serviceAccountName", "default"},
            {"serviceAccount", "default"},
            {"securityContext", json::object()},
            {"schedulerName", "default-scheduler"},
            {"tolerations",
             {{{"key", "node.kubernetes.io/not-ready"},
               {"operator", "Exists"},
               {"effect", "NoExecute"},
               {"tolerationSeconds", 300}}}},
            {"priority", 0},
            {"enableServiceLinks", true},
            {"preemptionPolicy", "PreemptLowerPriority"}}},
          {"status", {{"phase", "Pending"}, {"qosClass", "Guaranteed"}}}};
}

json make_node(const std::string& name) {
  json n;
  n["metadata"] = {{"name", name}, {"uid", "uid-" + name}, {"resourceVersion", "1"}};
  n["metadata"]["labels"] = {{"kubernetes.io/hostname", name}, {"kubernetes.io/arch", "amd64"}};
  n["spec"] = {{"podCIDR", "10.244.0.0/24"}};
  n["status"]["capacity"] = {{"cpu", "64"}, {"nvidia.com/gpu", "8"}};
  n["status"]["allocatable"] = {{"cpu", "63"}, {"nvidia.com/gpu", "8"}};
  json image = {{"names", json::array({"docker.io/library/nginx:latest"})},
                {"sizeBytes", 70000000}};
  n["status"]["images"] = json::array({image});
  return n;
}

class ExtenderTest : public ::testing::Test {
 protected:
  ExtenderTest()
      : idx_(index_options{}, "e", clock_.fn()),
        res_(src_, resolver_options{}, clock_.fn()),
        placer_(idx_, res_, ds_, net_, placer_opts(), clock_.fn()),
        ext_(placer_, ext_opts(), reg_) {
    auto app =
        image_manifest({{"app-base", 800 * MiB}, {"app-top", 200 * MiB}}, "app-config", 1000);
    src_.put("registry.local:5000", "team/app", app, "v1.2");
    auto nginx = image_manifest({{"nginx-l1", 30 * MiB}}, "nginx-config", 1000);
    src_.put("docker.io", "library/nginx", nginx, "latest");
    init_body_ = image_manifest({{"init-l1", 50 * MiB}}, "init-config", 1000);
    src_.put("registry.local:5000", "tools/init", init_body_);
    auto label = [](const std::string& rack) {
      return std::map<std::string, std::string>{{"zone", "z1"}, {"rack", rack}};
    };
    (void)idx_.apply(
        full_hb("node-a",
                {held("app-base", 800 * MiB), held("app-top", 200 * MiB), held("app-config", 1000)},
                label("r1")),
        "ip");
    (void)idx_.apply(full_hb("node-b", {held("app-base", 800 * MiB)}, label("r1")), "ip");
    (void)idx_.apply(full_hb("node-c", {}, label("r2")), "ip");
    // nginx and the init image are on a fourth node: no node's estimate is dominated by an
    // upstream fetch all would share.
    (void)idx_.apply(full_hb("node-x",
                             {held("nginx-l1", 30 * MiB), held("nginx-config", 1000),
                              held("init-l1", 50 * MiB), held("init-config", 1000)},
                             label("r3")),
                     "ip");
  }
  static placer_options placer_opts() {
    placer_options o;
    o.cost = cost_model::from(cost_config{});
    return o;
  }
  static extender_options ext_opts() {
    extender_options o;
    o.mode = "soft";
    o.max_missing = *parse_threshold("10%");
    o.resolve_timeout = 2s;
    o.max_request_bytes = 1u << 20;
    return o;
  }
  json pod(const std::map<std::string, std::string>& ann = {}) {
    return make_pod("registry.local:5000/tools/init@" + sha256_of(init_body_).str(),
                    {"nginx", "registry.local:5000/team/app:v1.2"}, ann);
  }
  static json args_names(const json& pod, const std::vector<std::string>& names) {
    return {{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}};
  }
  static json args_nodes(const json& pod, const std::vector<std::string>& names) {
    json items = json::array();
    for (const auto& n : names) items.push_back(make_node(n));
    return {{"Pod", pod},
            {"Nodes", {{"metadata", {{"resourceVersion", "42"}}}, {"items", items}}},
            {"NodeNames", nullptr}};
  }
  static json body_of(const http::response& r) {
    return json::parse(std::get<std::string>(r.body));
  }
  double metric(const std::string& verb, const std::string& result) {
    return static_cast<double>(
        reg_.counter("shoal_scheduler_extender_requests_total",
                     "kube-scheduler extender calls by verb and result (ok, bad_request, error).",
                     {"verb", "result"})
            .with({verb, result})
            .value());
  }

  fake_clock clock_;
  cluster_index idx_;
  fake_source src_;
  resolver res_;
  fake_datasets ds_;
  document_network_model net_;
  placer placer_;
  metrics::registry reg_;
  extender ext_;
  std::string init_body_;
};

TEST_F(ExtenderTest, ParsesImagesAndAnnotationsFromAFullPod) {
  auto p = parse_pod(pod({{"shoal.io/datasets", " imagenet@2024, bad-one ,coco@1"},
                          {"shoal.io/placement", "hard"},
                          {"shoal.io/max-missing", "2GiB"}}));
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->name, "trainer-0");
  EXPECT_EQ(p->ns, "ml");
  ASSERT_EQ(p->images.size(), 3u);
  EXPECT_EQ(p->images[0].rfind("registry.local:5000/tools/init@sha256:", 0), 0u);  // init first
  EXPECT_EQ(p->images[1], "nginx");
  EXPECT_EQ(p->datasets, (std::vector<std::string>{"imagenet@2024", "coco@1"}));
  EXPECT_EQ(p->mode, "hard");
  ASSERT_TRUE(p->max_missing);
  EXPECT_EQ(p->max_missing->bytes, 2ull << 30);
  ASSERT_EQ(p->warnings.size(), 1u);
  EXPECT_NE(p->warnings[0].find("bad-one"), std::string::npos);
  // Duplicates (same normalized reference) count once; bad references become warnings.
  auto q = parse_pod(make_pod("nginx:latest", {"docker.io/library/nginx", "Bad//Ref", ""}, {}));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->images, std::vector<std::string>{"nginx:latest"});
  EXPECT_EQ(q->warnings.size(), 1u);
}

TEST_F(ExtenderTest, PrioritizeScoresEveryNodeWithExactGoFieldNames) {
  auto r =
      ext_.prioritize(args_names(pod(), {"node-c", "node-a", "node-b", "node-unknown"}).dump());
  ASSERT_EQ(r.status, 200u);
  auto j = body_of(r);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 4u);
  std::map<std::string, int> score;
  for (const auto& h : j) {
    ASSERT_EQ(h.size(), 2u) << h.dump();
    ASSERT_TRUE(h.contains("Host") && h.contains("Score")) << h.dump();
    int s = h["Score"].get<int>();
    EXPECT_GE(s, 0);
    EXPECT_LE(s, 10);
    score[h["Host"]] = s;
  }
  EXPECT_EQ(j[0]["Host"], "node-c");  // request order
  EXPECT_GT(score["node-a"], score["node-b"]);
  EXPECT_GT(score["node-b"], score["node-c"]);
  EXPECT_EQ(score["node-unknown"], 0);
  EXPECT_EQ(metric("prioritize", "ok"), 1);
}

TEST_F(ExtenderTest, SoftFilterPassesEveryNodeInBothForms) {
  auto r = ext_.filter(args_names(pod(), {"node-a", "node-c", "node-unknown"}).dump());
  ASSERT_EQ(r.status, 200u);
  auto j = body_of(r);
  EXPECT_TRUE(j["Nodes"].is_null());
  EXPECT_EQ(j["NodeNames"], json({"node-a", "node-c", "node-unknown"}));
  EXPECT_TRUE(j["FailedNodes"].is_object() && j["FailedNodes"].empty());
  EXPECT_TRUE(j["FailedAndUnresolvableNodes"].empty());
  EXPECT_EQ(j["Error"], "");

  auto in = args_nodes(pod(), {"node-a", "node-c"});
  r = ext_.filter(in.dump());
  ASSERT_EQ(r.status, 200u);
  j = body_of(r);
  EXPECT_TRUE(j["NodeNames"].is_null());
  ASSERT_TRUE(j["Nodes"].is_object());
  EXPECT_EQ(j["Nodes"]["items"], in["Nodes"]["items"]);  // whole v1.Node objects echoed
  EXPECT_EQ(j["Nodes"]["metadata"]["resourceVersion"], "42");
}

TEST_F(ExtenderTest, HardModeFiltersNodesMissingTooMuch) {
  // node-a lacks nginx (30 MiB + config) and init (50 MiB + config): ~7% of ~1.08 GiB.
  auto p = pod({{"shoal.io/placement", "hard"}});
  auto r = ext_.filter(args_names(p, {"node-a", "node-b", "node-c", "node-unknown"}).dump());
  ASSERT_EQ(r.status, 200u);
  auto j = body_of(r);
  EXPECT_EQ(j["Error"], "");
  EXPECT_EQ(j["NodeNames"], json({"node-a"}));
  auto failed = j["FailedAndUnresolvableNodes"];
  ASSERT_EQ(failed.size(), 3u) << j.dump();
  EXPECT_NE(failed["node-b"].get<std::string>().find("hard placement allows 10%"),
            std::string::npos);
  EXPECT_NE(failed["node-unknown"].get<std::string>().find("no heartbeat"), std::string::npos);
  EXPECT_TRUE(j["FailedNodes"].empty());
  // A looser per-pod threshold lets node-b through (it lacks ~26%).
  p = pod({{"shoal.io/placement", "hard"}, {"shoal.io/max-missing", "30%"}});
  j = body_of(ext_.filter(args_names(p, {"node-a", "node-b", "node-c"}).dump()));
  EXPECT_EQ(j["NodeNames"], json({"node-a", "node-b"}));
  // Nodes form: the failed node's item is not echoed.
  j = body_of(
      ext_.filter(args_nodes(pod({{"shoal.io/placement", "hard"}}), {"node-a", "node-c"}).dump()));
  ASSERT_EQ(j["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(j["Nodes"]["items"][0]["metadata"]["name"], "node-a");
  EXPECT_TRUE(j["FailedAndUnresolvableNodes"].contains("node-c"));
}

TEST_F(ExtenderTest, HardModeWithoutResolutionAnswersError) {
  src_.fail_all(true);
  auto p = make_pod("busybox:1.36", {"never-seen/image:v1"}, {{"shoal.io/placement", "hard"}});
  auto r = ext_.filter(args_names(p, {"node-a"}).dump());
  ASSERT_EQ(r.status, 200u);
  auto j = body_of(r);
  EXPECT_NE(j["Error"].get<std::string>().find("cannot check"), std::string::npos) << j.dump();
  EXPECT_EQ(metric("filter", "error"), 1);
  // Soft mode never errs: prioritize scores what it knows (nothing: all zero).
  r = ext_.prioritize(args_names(p, {"node-a"}).dump());
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(body_of(r)[0]["Score"], 0);
}

TEST_F(ExtenderTest, MalformedRequestsGetA400WithAJsonError) {
  auto big_nest = "{\"Pod\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
  std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "not a JSON object"},
      {"[1,2]", "not a JSON object"},
      {"{}", "no Pod"},
      {R"({"Pod":"x","NodeNames":["a"]})", "v1.Pod"},
      {R"({"Pod":{},"NodeNames":"a"})", "NodeNames must be a list"},
      {R"({"Pod":{},"NodeNames":[1]})", "NodeNames must be a list"},
      {R"({"Pod":{}})", "neither NodeNames nor Nodes"},
      {R"({"Pod":{},"Nodes":{"items":[{"metadata":{}}]}})", "metadata.name"},
      {R"({"Pod":{},"Nodes":[]})", "v1.NodeList"},
      {big_nest, "nests too deep"},
  };
  for (const auto& [body, needle] : cases) {
    auto r = ext_.filter(body);
    EXPECT_EQ(r.status, 400u) << body.substr(0, 60);
    auto j = body_of(r);
    ASSERT_TRUE(j.contains("Error")) << j.dump();
    EXPECT_NE(j["Error"].get<std::string>().find(needle), std::string::npos) << j["Error"];
    EXPECT_TRUE(j["Nodes"].is_null());
    auto p = ext_.prioritize(body);
    EXPECT_EQ(p.status, 400u);
    EXPECT_NE(body_of(p)["error"].get<std::string>().find(needle), std::string::npos);
  }
  EXPECT_EQ(metric("filter", "bad_request"), static_cast<double>(cases.size()));
}

TEST_F(ExtenderTest, OversizedRequestsGetA413) {
  auto p = pod();
  p["metadata"]["annotations"]["padding"] = std::string(2u << 20, 'x');
  auto r = ext_.filter(args_names(p, {"node-a"}).dump());
  EXPECT_EQ(r.status, 413u);
  EXPECT_NE(body_of(r)["Error"].get<std::string>().find("larger than"), std::string::npos);
  EXPECT_EQ(ext_.prioritize(args_names(p, {"node-a"}).dump()).status, 413u);
}

TEST_F(ExtenderTest, PodWithoutImagesScoresZeroAndPassesHardFilter) {
  json p = {{"metadata", {{"name", "empty"}, {"annotations", {{"shoal.io/placement", "hard"}}}}},
            {"spec", {{"containers", json::array()}}}};
  auto j = body_of(ext_.filter(args_names(p, {"node-a", "node-c"}).dump()));
  EXPECT_EQ(j["NodeNames"], json({"node-a", "node-c"}));
  auto s = body_of(ext_.prioritize(args_names(p, {"node-a", "node-c"}).dump()));
  EXPECT_EQ(s[0]["Score"], 0);
  EXPECT_EQ(s[1]["Score"], 0);
}

// The answers are written without building a json value per node; they must be the bytes
// nlohmann's dump() gives for the same answer, also for names that need escaping.
TEST_F(ExtenderTest, AnswersAreExactlyTheJsonDump) {
  auto dump = [](const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  std::vector<std::string> names = {"node-c",    "node-a", "we\"ird\\", "tab\there",
                                    "n\u00f6de", "node-b", "\x7f",      ""};
  auto r = ext_.prioritize(args_names(pod(), names).dump());
  ASSERT_EQ(r.status, 200u);
  auto got = body_of(r);
  ASSERT_EQ(got.size(), names.size());
  json want = json::array();
  for (std::size_t i = 0; i < names.size(); ++i)
    want.push_back({{"Host", names[i]}, {"Score", got[i]["Score"].get<int>()}});
  EXPECT_EQ(std::get<std::string>(r.body), dump(want));
  EXPECT_GT(got[1]["Score"].get<int>(), 0);  // node-a holds most of the pod's data

  r = ext_.filter(args_names(pod(), names).dump());
  ASSERT_EQ(r.status, 200u);
  want = {{"Nodes", nullptr},
          {"NodeNames", names},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", json::object()},
          {"Error", ""}};
  EXPECT_EQ(std::get<std::string>(r.body), dump(want));

  // Hard mode: node-a passes, the others fail with their reasons.
  r = ext_.filter(args_names(pod({{"shoal.io/placement", "hard"}}), names).dump());
  ASSERT_EQ(r.status, 200u);
  got = body_of(r);
  ASSERT_EQ(got["FailedAndUnresolvableNodes"].size(), names.size() - 1) << got.dump();
  want = {{"Nodes", nullptr},
          {"NodeNames", {"node-a"}},
          {"FailedNodes", json::object()},
          {"FailedAndUnresolvableNodes", got["FailedAndUnresolvableNodes"]},
          {"Error", ""}};
  EXPECT_EQ(std::get<std::string>(r.body), dump(want));
}

TEST_F(ExtenderTest, ManyNodesAnswerQuickly) {
  for (int i = 0; i < 2000; ++i)
    (void)idx_.apply(full_hb("bulk-" + std::to_string(i), {held("app-base", 800 * MiB)}), "ip");
  std::vector<std::string> names;
  for (int i = 0; i < 2000; ++i) names.push_back("bulk-" + std::to_string(i));
  auto body = args_names(pod(), names).dump();
  auto t0 = std::chrono::steady_clock::now();
  auto r = ext_.prioritize(body);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(body_of(r).size(), 2000u);
  EXPECT_LT(ms, 2000);
  std::printf("[ measure ] prioritize over 2000 nodes: %lld ms\n", static_cast<long long>(ms));
}

}  // namespace
}  // namespace shoal::scheduler

namespace shoal::scheduler {
namespace {

// The extender reads NodeNames with its own scanner and gives anything unusual to the generic
// parse: the names must be what a JSON parser reads, and malformed bodies stay errors.
TEST_F(ExtenderTest, ScannedNodeNamesMatchAJsonParse) {
  const std::string p = pod().dump();
  std::vector<std::string> good = {
      R"({"Pod":)" + p + R"(,"Nodes":null,"NodeNames":["node-a","node-b"]})",
      R"( { "NodeNames" : [ "node-b" , "node-a" ] , "Pod" : )" + p + " }\n",
      R"({"Pod":)" + p + R"(,"NodeNames":["n\u00e9","a\"b","x\\y","caf)" + "\xc3\xa9" + R"("]})",
      R"({"Extra":[1,{"a":"]}"},"\""],"Pod":)" + p + R"(,"NodeNames":[],"More":-1.5e3})",
      R"({"Pod":)" + p + R"(,"Nodes":{"items":[]},"NodeNames":["node-c"]})",
  };
  for (const auto& body : good) {
    auto a = parse_extender_args(body);
    ASSERT_TRUE(a) << body.substr(0, 80) << ": " << a.error().message;
    auto j = json::parse(body);
    EXPECT_EQ(a->names, j["NodeNames"].get<std::vector<std::string>>());
    EXPECT_TRUE(a->names_form);
    EXPECT_EQ(a->pod.images.size(), 3u);
  }
  std::vector<std::string> bad = {
      R"({"Pod":)" + p + R"(,"NodeNames":["a"]} x)",
      R"({"Pod":)" + p + R"(,"NodeNames":["a",]})",
      R"({"Pod":)" + p + R"(,"NodeNames":["a"],"Extra":[1,]})",
      R"({"Pod":)" + p + R"(,"NodeNames":["a)" + std::string("\x01") + R"("]})",
      R"({"Pod":)" + p + R"(,"NodeNames":["a)" + std::string("\xff") + R"("]})",
      R"({"Pod":)" + p + R"(,"NodeNames":["a","b"]})",  // over max_nodes = 1 below
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto a = parse_extender_args(bad[i], i + 1 == bad.size() ? 1 : 100);
    EXPECT_FALSE(a) << bad[i].substr(bad[i].size() - 30);
  }
  // A duplicate member goes to the generic parse, which keeps the last.
  auto dup = R"({"Pod":)" + p + R"(,"NodeNames":["a"],"NodeNames":["b"]})";
  auto a = parse_extender_args(dup);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->names, std::vector<std::string>{"b"});
}

// The extender evaluates holders one by one and shares one evaluation among the nodes alike
// (same platform and place, holding none of the job's objects): every node's cost must be what
// evaluate_nodes() finds for it.
TEST_F(ExtenderTest, ScoresMatchEvaluateNodesForHoldersAndNodesAlike) {
  auto labels = [](const std::string& zone, const std::string& rack) {
    std::map<std::string, std::string> l;
    if (!zone.empty()) l["zone"] = zone;
    if (!rack.empty()) l["rack"] = rack;
    return l;
  };
  (void)idx_.apply(full_hb("node-d", {}, labels("z1", "r1")), "ip");
  (void)idx_.apply(full_hb("node-e", {}, labels("z1", "r1")), "ip");
  (void)idx_.apply(full_hb("node-f", {}, labels("z2", "r1")), "ip");
  (void)idx_.apply(full_hb("node-g", {}, labels("z1", "")), "ip");
  (void)idx_.apply(full_hb("node-h", {}, labels("", "")), "ip");
  (void)idx_.apply(full_hb("node-i", {held("app-top", 200 * MiB)}, labels("z2", "r9")), "ip");
  std::vector<std::string> names = {"node-a", "node-b", "node-c", "node-d", "node-e", "node-f",
                                    "node-g", "node-h", "node-i", "node-x", "nobody"};
  auto a = parse_extender_args(args_names(pod(), names).dump());
  ASSERT_TRUE(a);
  std::vector<std::string> errors;
  auto verdicts = ext_.evaluate(*a, errors);
  ASSERT_TRUE(errors.empty()) << errors.front();
  job_spec job;
  job.images = a->pod.images;
  job.candidates = names;
  auto view0 = idx_.view({});
  auto objs = placer_.resolve(job, platforms_of(view0, job), 2s, false);
  ASSERT_TRUE(objs);
  std::vector<digest> all;
  for (const auto& [plat, list] : objs->by_platform) {
    for (const auto& o : list) all.push_back(o.id);
  }
  auto view = idx_.view(all);
  auto evals =
      evaluate_nodes(view, *objs, job, placer_.model(), net_, {},
                     {.require_validation = false, .strict_resolution = false, .rank = false});
  ASSERT_EQ(verdicts.size(), names.size());
  for (const auto& v : verdicts) {
    if (v.node == "nobody") {
      EXPECT_FALSE(v.known);
      continue;
    }
    auto e = std::find_if(evals.begin(), evals.end(),
                          [&](const node_eval& x) { return x.name == v.node; });
    ASSERT_NE(e, evals.end());
    EXPECT_EQ(v.cost.by_source, e->cost.by_source) << v.node;
    EXPECT_EQ(v.cost.bytes_total, e->cost.bytes_total) << v.node;
    EXPECT_DOUBLE_EQ(v.cost.seconds, e->cost.seconds) << v.node;
    EXPECT_EQ(v.score, extender_score(e->cost, placer_.model())) << v.node;
  }
}

}  // namespace
}  // namespace shoal::scheduler

namespace shoal::scheduler {
namespace {

// Long NodeNames lists are kept (names_cache) and decisions read kept job scores (scores.h):
// answers must be those of the full evaluation, before and after holdings change, in both verbs
// and both modes.
TEST_F(ExtenderTest, KeptScoresAnswerLikeAFullEvaluation) {
  auto labels = [](int i) {
    return std::map<std::string, std::string>{{"zone", "z" + std::to_string(i % 2)},
                                              {"rack", "r" + std::to_string(i / 8)}};
  };
  std::vector<std::string> names = {"node-a", "node-b", "node-c", "node-x", "nobody"};
  std::map<int, std::uint64_t> seq;
  for (int i = 0; i < 90; ++i) {
    std::vector<heartbeat::held_object> h;
    if (i % 3 == 0) h.push_back(held("app-base", 800 * MiB));
    if (i % 7 == 0) h.push_back(held("app-top", 200 * MiB));
    if (i % 5 == 0) h.push_back(held("nginx-l1", 30 * MiB));
    auto m = full_hb("bulk-" + std::to_string(i), h, labels(i));
    if (i == 11) m.health = "failing";
    (void)idx_.apply(m, "ip");
    seq[i] = 1;
    names.push_back("bulk-" + std::to_string(i));
  }
  auto kept = [&](const std::string& result) {
    return reg_
        .counter("shoal_scheduler_extender_kept_scores_total",
                 "Where an extender decision's scores came from, per platform: a kept job state "
                 "that followed the index's change log (caught_up), one built now (built, "
                 "rebuilt: the kept one could not follow), or a full evaluation (full: none can "
                 "be kept for these nodes).",
                 {"result"})
        .with({result})
        .value();
  };
  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (const char* mode : {"soft", "hard"}) {
      auto body = args_names(pod({{"shoal.io/placement", mode}}), names).dump();
      auto a = parse_extender_args(body);
      ASSERT_TRUE(a);
      std::vector<std::string> errors;
      auto verdicts = ext_.evaluate(*a, errors);
      ASSERT_TRUE(errors.empty()) << errors.front();
      auto scores = body_of(ext_.prioritize(body));
      ASSERT_EQ(scores.size(), names.size());
      std::size_t nonzero = 0;
      for (std::size_t k = 0; k < names.size(); ++k) {
        EXPECT_EQ(scores[k]["Host"], names[k]);
        EXPECT_EQ(scores[k]["Score"].get<int>(), verdicts[k].score) << names[k];
        nonzero += verdicts[k].score > 0 ? 1 : 0;
      }
      EXPECT_GT(nonzero, 10u);
      auto f = body_of(ext_.filter(body));
      if (std::string(mode) == "soft") {
        EXPECT_EQ(f["NodeNames"], json(names));
        continue;
      }
      json want_kept = json::array();
      std::size_t failed = 0;
      for (const auto& v : verdicts) {
        const bool pass = v.known && v.healthy &&
                          (v.cost.bytes_total == 0 || !ext_opts().max_missing.exceeded(v.cost));
        if (pass) {
          want_kept.push_back(std::string(v.node));
        } else {
          ++failed;
          EXPECT_TRUE(f["FailedAndUnresolvableNodes"].contains(std::string(v.node))) << v.node;
        }
      }
      EXPECT_EQ(f["NodeNames"], want_kept);
      EXPECT_EQ(f["FailedAndUnresolvableNodes"].size(), failed);
      EXPECT_GT(want_kept.size(), 0u);
      EXPECT_GT(failed, 0u);
    }
  };
  check("first");
  EXPECT_EQ(kept("built"), 1u);  // one job (soft and hard share it), one platform
  // Holdings change: some nodes gain the app's layers, one loses its only holder's copy.
  for (int i = 1; i < 90; i += 4) {
    auto m = delta_hb("bulk-" + std::to_string(i), ++seq[i], "e",
                      {held("app-top", 200 * MiB), held("app-config", 1000)});
    m.labels = labels(i);
    (void)idx_.apply(m, "ip");
  }
  auto m = delta_hb("bulk-0", ++seq[0], "e", {}, {dg("app-base")});
  m.labels = labels(0);
  (void)idx_.apply(m, "ip");
  check("after deltas");
  EXPECT_EQ(kept("built"), 1u);
  EXPECT_GE(kept("caught_up"), 4u);
  EXPECT_EQ(kept("rebuilt"), 0u);
  // A node turning unhealthy changes the node list: built again, same answers.
  m = full_hb("bulk-3", {held("app-base", 800 * MiB)}, labels(3), ++seq[3], "e");
  m.health = "failing";
  (void)idx_.apply(m, "ip");
  check("after a node failed");
  EXPECT_EQ(kept("rebuilt"), 1u);
}

TEST_F(ExtenderTest, KeptNodeNamesAreTheSameBytesOnly) {
  names_cache cache;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back("n-" + std::to_string(i));
  names.push_back("we\"ird\\ \u00e9");
  const std::string p = pod().dump();
  auto body = args_names(pod(), names).dump();
  auto a = parse_extender_args(body, 100'000, &cache);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->listed);
  EXPECT_TRUE(a->names.empty());
  EXPECT_EQ(a->node_names(), names);
  auto b = parse_extender_args(body, 100'000, &cache);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->listed.get(), a->listed.get());
  // The same list in another member order, with other whitespace: still a hit when the array's
  // bytes are the same; a list differing in its last name is not.
  auto names_json = json(names).dump();
  auto c = parse_extender_args(R"({"NodeNames": )" + names_json + R"(, "Pod":)" + p + "}", 100'000,
                               &cache);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->listed.get(), a->listed.get());
  auto other = names;
  other.back() = "n-x";
  auto d = parse_extender_args(args_names(pod(), other).dump(), 100'000, &cache);
  ASSERT_TRUE(d);
  EXPECT_NE(d->listed.get(), a->listed.get());
  EXPECT_EQ(d->node_names(), other);
  // A kept list longer than the request's limit is not used, and the limit still holds.
  EXPECT_FALSE(parse_extender_args(body, 50, &cache));
  // A truncated body is malformed whatever the cache holds.
  EXPECT_FALSE(parse_extender_args(body.substr(0, body.size() - 1), 100'000, &cache));
  // Short lists are read each time.
  auto e = parse_extender_args(args_names(pod(), {"node-a"}).dump(), 100'000, &cache);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->listed);
  // The answer lists every host with the kept bytes, including the escaped name.
  auto r = ext_.prioritize(body);
  ASSERT_EQ(r.status, 200u);
  auto got = body_of(r);
  ASSERT_EQ(got.size(), names.size());
  for (std::size_t k = 0; k < names.size(); ++k) EXPECT_EQ(got[k]["Host"], names[k]);
  r = ext_.prioritize(body);  // from the kept list now
  EXPECT_EQ(body_of(r), got);
}

}  // namespace
}  // namespace shoal::scheduler
