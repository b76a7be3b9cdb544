// registry-proxy's route table with TLS on (handler.h authorize, docs/registry-proxy.md "Who may
// call what"): which certificate role may call which route, and what a refusal says.
#include <gtest/gtest.h>

#include <string>

#include "registry-proxy/handler.h"

namespace shoal::proxy {
namespace {

using tls::peer_role;

http::request req(http::verb method, std::string path, peer_role role, bool verified = true) {
  http::request r;
  r.method = method;
  r.path = std::move(path);
  r.target = r.path;
  r.peer.tls = true;
  r.peer.verified = verified;
  r.peer.role = verified ? role : peer_role::none;
  r.peer.name = role == peer_role::node ? "node1" : "";
  return r;
}

bool allowed(peer_role role, std::string path, http::verb m = http::verb::get) {
  return authorize(req(m, std::move(path), role)).empty();
}

constexpr const char* kManifest = "/v2/team/app/manifests/v1";
constexpr const char* kBlob =
    "/v2/team/app/blobs/sha256:0000000000000000000000000000000000000000000000000000000000000000";
constexpr const char* kMetainfo =
    "/shoal/v1/metainfo/sha256:0000000000000000000000000000000000000000000000000000000000000000";
constexpr const char* kChunks =
    "/shoal/v1/chunks/sha256:0000000000000000000000000000000000000000000000000000000000000000";
constexpr const char* kObject =
    "/shoal/v1/datasets/d@v1/objects/"
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

TEST(RouteAuthz, NodesPullAndReadDatasetsButDoNotDeclare) {
  for (const char* p : {kManifest, kBlob, kMetainfo, kChunks, kObject, "/shoal/v1/datasets",
                        "/shoal/v1/datasets/d@v1", "/shoal/v1/datasets/d@v1/manifest",
                        "/shoal/v1/dataset-metainfo/d@v1/0", "/metrics", "/healthz"}) {
    EXPECT_TRUE(allowed(peer_role::node, p)) << p;
  }
  auto why = authorize(req(http::verb::post, "/shoal/v1/datasets", peer_role::node));
  EXPECT_EQ(why,
            "declaring datasets: needs a certificate with role operator; the client certificate "
            "is node/node1");
  EXPECT_FALSE(allowed(peer_role::node, "/shoal/v1/datasets/", http::verb::post));
}

TEST(RouteAuthz, SchedulerReadsManifestsAndDatasetRecordsOnly) {
  for (const char* p : {kManifest, "/shoal/v1/datasets", "/shoal/v1/datasets/d@v1",
                        "/shoal/v1/datasets/d@v1/manifest", "/metrics"}) {
    EXPECT_TRUE(allowed(peer_role::scheduler, p)) << p;
  }
  for (const char* p : {kMetainfo, kChunks, kObject, "/shoal/v1/dataset-metainfo/d@v1/0"}) {
    EXPECT_FALSE(allowed(peer_role::scheduler, p)) << p;
  }
  EXPECT_FALSE(allowed(peer_role::scheduler, "/shoal/v1/datasets", http::verb::post));
  EXPECT_NE(authorize(req(http::verb::get, kMetainfo, peer_role::scheduler))
                .find("needs a certificate with role node, operator"),
            std::string::npos);
}

TEST(RouteAuthz, OperatorMayDoEverything) {
  for (const char* p : {kManifest, kBlob, kMetainfo, kChunks, kObject, "/shoal/v1/datasets",
                        "/shoal/v1/dataset-metainfo/d@v1/0", "/metrics", "/nowhere"}) {
    EXPECT_TRUE(allowed(peer_role::operator_, p)) << p;
  }
  EXPECT_TRUE(allowed(peer_role::operator_, "/shoal/v1/datasets", http::verb::post));
}

// Another ring replica (ring.h) streams blobs from a digest's owner through the pull API, and
// nothing else.
TEST(RouteAuthz, RingReplicasPullAndProbeOnly) {
  for (const char* p : {kManifest, kBlob, "/metrics", "/readyz"})
    EXPECT_TRUE(allowed(peer_role::registry_proxy, p)) << p;
  for (const char* p : {kMetainfo, kChunks, kObject, "/shoal/v1/dataset-metainfo/d@v1/0"})
    EXPECT_FALSE(allowed(peer_role::registry_proxy, p)) << p;
  EXPECT_FALSE(allowed(peer_role::registry_proxy, "/shoal/v1/datasets", http::verb::post));
  // Members merge each other's dataset lists and keep copies of each other's records.
  for (const char* p :
       {"/shoal/v1/datasets", "/shoal/v1/datasets/d@v1", "/shoal/v1/datasets/d@v1/manifest"})
    EXPECT_TRUE(allowed(peer_role::registry_proxy, p)) << p;
  EXPECT_TRUE(allowed(peer_role::registry_proxy, "/shoal/v1/datasets/d@v1/copy", http::verb::put));
  for (auto role : {peer_role::node, peer_role::scheduler, peer_role::operator_})
    EXPECT_FALSE(allowed(role, "/shoal/v1/datasets/d@v1/copy", http::verb::put));
}

TEST(RouteAuthz, OtherRolesReachOnlyOpsAndUnknownPaths) {
  for (auto role : {peer_role::kube_scheduler, peer_role::none}) {
    EXPECT_TRUE(allowed(role, "/metrics"));
    EXPECT_TRUE(allowed(role, "/healthz"));
    EXPECT_TRUE(allowed(role, "/readyz"));
    for (const char* p : {kManifest, kBlob, kMetainfo, kObject, "/shoal/v1/datasets"}) {
      EXPECT_FALSE(allowed(role, p)) << p;
    }
  }
  EXPECT_NE(authorize(req(http::verb::get, kManifest, peer_role::none))
                .find("the client certificate is verified (no role)"),
            std::string::npos);
}

TEST(RouteAuthz, NoCertificateIsRefusedEverywhereWithTls) {
  // require_client_cert false lets such a client through the handshake: it still has no role.
  for (const char* p : {"/metrics", kManifest, "/nowhere"}) {
    auto why = authorize(req(http::verb::get, p, peer_role::node, /*verified=*/false));
    EXPECT_NE(why.find("needs a client certificate of the cluster CA"), std::string::npos) << p;
  }
}

TEST(RouteAuthz, PlainModeAllowsEverything) {
  http::request r;
  r.method = http::verb::post;
  r.path = "/shoal/v1/datasets";
  EXPECT_EQ(authorize(r), "");
}

TEST(RouteAuthz, LookAlikePathsDoNotBorrowARouteRights) {
  // "/shoal/v1/datasetsX" is not the dataset list; dataset-metainfo is not the datasets family.
  EXPECT_TRUE(allowed(peer_role::kube_scheduler, "/shoal/v1/datasetsX"));  // 404 later
  EXPECT_FALSE(allowed(peer_role::scheduler, "/shoal/v1/dataset-metainfo/d@v1/0"));
  // An objects segment anywhere below a dataset is treated as objects (stricter).
  EXPECT_FALSE(allowed(peer_role::scheduler, "/shoal/v1/datasets/d@v1/objects/x"));
}

}  // namespace
}  // namespace shoal::proxy
