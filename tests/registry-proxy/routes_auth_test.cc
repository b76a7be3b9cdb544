#include <gtest/gtest.h>

#include <random>

#include "auth_challenge.h"
#include "routes.h"

namespace shoal::proxy {
namespace {

const std::string kDigest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(Routes, ParsesPullApi) {
  route_error err;
  auto base = parse_v2_path("/v2/", err);
  ASSERT_TRUE(base);
  EXPECT_EQ(base->kind, route_kind::base);
  auto m = parse_v2_path("/v2/library/nginx/manifests/latest", err);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->kind, route_kind::manifest);
  EXPECT_EQ(m->name, "library/nginx");
  EXPECT_EQ(m->manifest.str(), "latest");
  auto md = parse_v2_path("/v2/a/manifests/" + kDigest, err);
  ASSERT_TRUE(md);
  EXPECT_TRUE(md->manifest.is_digest());
  auto b = parse_v2_path("/v2/a/blobs/b/blobs/" + kDigest, err);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->kind, route_kind::blob);
  EXPECT_EQ(b->name, "a/blobs/b");
  EXPECT_EQ(b->blob.str(), kDigest);
  EXPECT_FALSE(parse_v2_path("/metrics", err));
}

TEST(Routes, RejectsMalformedWithSpecErrors) {
  struct c { std::string path; unsigned status; oci::error_code code; };
  for (const auto& k : {
           c{"/v2/UPPER/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/../etc/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/a/../b/blobs/" + kDigest, 400, oci::error_code::name_invalid},
           c{"/v2//a/manifests/latest", 400, oci::error_code::name_invalid},
           c{"/v2/a/blobs/sha256:xyz", 400, oci::error_code::digest_invalid},
           c{"/v2/a/blobs/md5:d41d8cd98f00b204e9800998ecf8427e", 400, oci::error_code::digest_invalid},
           c{"/v2/a/blobs/latest", 400, oci::error_code::digest_invalid},
           c{"/v2/a/manifests/-bad", 400, oci::error_code::manifest_invalid},
           c{"/v2/a/manifests/sha256:ABC", 400, oci::error_code::digest_invalid},
           c{"/v2/a/manifests/", 400, oci::error_code::manifest_invalid},
           c{"/v2/a/tags/list", 404, oci::error_code::unsupported},
           c{"/v2/" + std::string(300, 'a') + "/manifests/x", 400, oci::error_code::name_invalid},
       }) {
    route_error err;
    EXPECT_FALSE(parse_v2_path(k.path, err)) << k.path;
    EXPECT_EQ(err.status, k.status) << k.path;
    EXPECT_EQ(err.code, k.code) << k.path;
    EXPECT_FALSE(err.message.empty());
  }
}

TEST(Routes, RandomPathsNeverCrash) {
  std::mt19937_64 rng(11);
  const std::string alpha = "/v2abc:sha256manifestsblobs.-_%\x01";
  for (int i = 0; i < 100000; ++i) {
    std::string p = "/v2/";
    for (std::size_t j = 0, n = rng() % 60; j < n; ++j) p += alpha[rng() % alpha.size()];
    route_error err;
    auto r = parse_v2_path(p, err);
    if (r && r->kind != route_kind::base) {
      EXPECT_TRUE(oci::valid_name(r->name)) << p;
    }
  }
}

TEST(AuthChallenge, BearerAndBasic) {
  auto chs = parse_www_authenticate(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull")");
  ASSERT_EQ(chs.size(), 1u);
  EXPECT_EQ(chs[0].scheme, "bearer");
  EXPECT_EQ(chs[0].param("realm"), "https://auth.docker.io/token");
  EXPECT_EQ(chs[0].param("service"), "registry.docker.io");
  EXPECT_EQ(chs[0].param("scope"), "repository:library/nginx:pull");
  chs = parse_www_authenticate(R"(Basic realm="Registry \"Realm\"", Bearer realm=x, scope="a,b")");
  ASSERT_EQ(chs.size(), 2u);
  EXPECT_EQ(chs[0].scheme, "basic");
  EXPECT_EQ(chs[0].param("realm"), "Registry \"Realm\"");
  EXPECT_EQ(chs[1].param("realm"), "x");
  EXPECT_EQ(chs[1].param("scope"), "a,b");
  EXPECT_TRUE(parse_www_authenticate("").empty());
  chs = parse_www_authenticate(R"(Bearer realm="unterminated)");
  ASSERT_EQ(chs.size(), 1u);
  EXPECT_TRUE(chs[0].param("realm").empty());
}

TEST(AuthChallenge, RandomInputNeverCrashes) {
  std::mt19937_64 rng(12);
  const std::string alpha = "Bearer realm=\"\\,; basic\t";
  for (int i = 0; i < 100000; ++i) {
    std::string s;
    for (std::size_t j = 0, n = rng() % 80; j < n; ++j) s += alpha[rng() % alpha.size()];
    (void)parse_www_authenticate(s);
  }
}

}  // namespace
}  // namespace shoal::proxy
