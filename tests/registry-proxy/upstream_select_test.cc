// Unit tests of the pure parts of registry-proxy's request handling: upstream selection (ns=,
// aliases, path prefixes, Docker Hub names), client credentials, the tag cache key's Accept
// normalization, metrics route labels and the gateway status of upstream failures.

#include <gtest/gtest.h>

#include "registry-proxy/handler.h"
#include "registry-proxy/manifests.h"
#include "registry-proxy/upstream.h"

namespace shoal::proxy {
namespace {

upstream_config up(std::string name, std::string prefix = {}, bool hub = false,
                   std::vector<std::string> aliases = {}) {
  upstream_config c;
  c.name = std::move(name);
  c.url = "http://" + c.name;
  c.prefix = std::move(prefix);
  c.docker_hub = hub;
  c.aliases = std::move(aliases);
  return c;
}

upstream_set make_set(const std::string& default_name = {}) {
  auto s = upstream_set::build({up("127.0.0.1:5000", {}, false, {"alias.test:5000"}),
                                up("docker.io", "hub", true), up("second.test", "second")},
                               default_name);
  EXPECT_TRUE(s) << s.error().message;
  return std::move(*s);
}

TEST(UpstreamSelect, NsWinsAndAliasesSelectTheSameUpstream) {
  auto s = make_set();
  for (const char* ns : {"127.0.0.1:5000", "alias.test:5000"}) {
    auto sel = s.select(std::string(ns), "team/app");
    ASSERT_TRUE(sel) << ns;
    EXPECT_EQ(sel->up->cfg.name, "127.0.0.1:5000");
    EXPECT_EQ(sel->repo, "team/app");
  }
  // ns wins over a path that looks like another upstream's prefix.
  auto sel = s.select(std::string("127.0.0.1:5000"), "second/app");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "127.0.0.1:5000");
  EXPECT_EQ(sel->repo, "second/app");
}

TEST(UpstreamSelect, PrefixWithoutNsAndTheDefault) {
  auto s = make_set();
  auto sel = s.select(std::nullopt, "second/team/app");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "second.test");
  EXPECT_EQ(sel->repo, "team/app");
  // The first upstream is the default; its prefix (its name) cannot be a repository name.
  sel = s.select(std::nullopt, "team/app");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "127.0.0.1:5000");
  // A name equal to a prefix has nothing after it: a repository of the default upstream.
  sel = s.select(std::nullopt, "second");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "127.0.0.1:5000");
  EXPECT_EQ(sel->repo, "second");
  auto other = make_set("second.test");
  sel = other.select(std::nullopt, "team/app");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "second.test");
}

TEST(UpstreamSelect, DockerHubNamesGetLibrary) {
  auto s = make_set();
  auto sel = s.select(std::string("docker.io"), "alpine");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->repo, "library/alpine");
  sel = s.select(std::string("docker.io"), "user/app");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->repo, "user/app");
  sel = s.select(std::nullopt, "hub/alpine");
  ASSERT_TRUE(sel);
  EXPECT_EQ(sel->up->cfg.name, "docker.io");
  EXPECT_EQ(sel->repo, "library/alpine");
}

TEST(UpstreamSelect, UnknownAndInvalidNs) {
  auto s = make_set();
  auto sel = s.select(std::string("unknown.example"), "team/app");
  ASSERT_FALSE(sel);
  EXPECT_TRUE(sel.error().is(errc::not_found));
  for (const char* bad : {"", "bad host", "a/b", "x:99999999", "-x.example"}) {
    sel = s.select(std::string(bad), "team/app");
    ASSERT_FALSE(sel) << bad;
    EXPECT_TRUE(sel.error().is(errc::invalid_argument)) << bad;
  }
}

TEST(UpstreamSet, ConfigErrorsNameTheUpstream) {
  EXPECT_FALSE(upstream_set::build({}, {}));
  auto dup = upstream_set::build({up("a.test"), up("a.test")}, {});
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("a.test"), std::string::npos);
  auto nodef = upstream_set::build({up("a.test")}, "b.test");
  ASSERT_FALSE(nodef);
  EXPECT_NE(nodef.error().message.find("b.test"), std::string::npos);
  auto basic = up("c.test");
  basic.auth = "basic";
  basic.credentials_file = "/nonexistent/creds";
  auto nocreds = upstream_set::build({basic}, {});
  ASSERT_FALSE(nocreds);
  EXPECT_NE(nocreds.error().message.find("credentials_file"), std::string::npos);
}

TEST(Credential, HashIsSaltedAndBasicIsDecoded) {
  auto anon = credential_from("", "salt");
  EXPECT_TRUE(anon.anonymous());
  EXPECT_TRUE(anon.hash.empty());
  auto a = credential_from("Basic " + base64_encode("alice:pw:with:colons"), "salt");
  ASSERT_TRUE(a.basic);
  EXPECT_EQ(a.basic->first, "alice");
  EXPECT_EQ(a.basic->second, "pw:with:colons");
  EXPECT_EQ(a.hash.size(), 64u);
  EXPECT_EQ(a.hash.find("alice"), std::string::npos);
  auto b = credential_from("Basic " + base64_encode("alice:pw:with:colons"), "other-salt");
  EXPECT_NE(a.hash, b.hash);
  auto bearer = credential_from("Bearer abc.def", "salt");
  EXPECT_FALSE(bearer.anonymous());
  EXPECT_FALSE(bearer.basic);
  auto garbage = credential_from("Basic !!!not-base64", "salt");
  EXPECT_FALSE(garbage.anonymous());
  EXPECT_FALSE(garbage.basic);
  auto lower = credential_from("basic " + base64_encode("u:p"), "salt");
  ASSERT_TRUE(lower.basic);
  EXPECT_EQ(lower.basic->first, "u");
}

TEST(Base64, RoundTripsEveryLength) {
  std::string s;
  for (int i = 0; i < 300; ++i) {
    auto enc = base64_encode(s);
    EXPECT_EQ(enc.size() % 4, 0u);
    auto dec = base64_decode(enc);
    ASSERT_TRUE(dec);
    EXPECT_EQ(*dec, s);
    s += static_cast<char>(i * 37);
  }
  EXPECT_FALSE(base64_decode("a"));
  EXPECT_FALSE(base64_decode("ab$d"));
}

TEST(ManifestAccept, NormalizedForTheTagCacheKey) {
  EXPECT_EQ(manifest_service::normalize_accept(""), "");
  // Unknown types are ignored: they would make a cache key (and an upstream request) each.
  EXPECT_EQ(manifest_service::normalize_accept(" b ;q=0.5, a,b"), "");
  EXPECT_EQ(manifest_service::normalize_accept("*/*"), "");
  EXPECT_EQ(manifest_service::normalize_accept("x/y1, application/vnd.oci.image.manifest.v1+json"),
            manifest_service::normalize_accept("application/vnd.oci.image.manifest.v1+json ;q=1, "
                                               "x/y2"));
  EXPECT_EQ(manifest_service::normalize_accept("application/vnd.docker.distribution.manifest.v2+"
                                               "json, application/vnd.oci.image.index.v1+json"),
            "application/vnd.oci.image.index.v1+json, "
            "application/vnd.docker.distribution.manifest.v2+json");
  EXPECT_EQ(manifest_service::normalize_accept("application/vnd.oci.image.index.v1+json;q=0.9, "
                                               "application/vnd.oci.image.manifest.v1+json"),
            manifest_service::normalize_accept("application/vnd.oci.image.manifest.v1+json,"
                                               "application/vnd.oci.image.index.v1+json"));
  EXPECT_NE(manifest_service::normalize_accept("application/vnd.oci.image.index.v1+json"),
            manifest_service::normalize_accept("application/vnd.oci.image.manifest.v1+json"));
}

TEST(RouteLabel, BoundedSet) {
  EXPECT_EQ(route_of("/v2/"), "base");
  EXPECT_EQ(route_of("/v2"), "base");
  EXPECT_EQ(route_of("/v2/a/b/manifests/v1?ns=x"), "manifest");
  EXPECT_EQ(route_of("/v2/a/blobs/sha256:00"), "blob");
  EXPECT_EQ(route_of("/v2/a/manifests/blobs/x"), "blob");
  EXPECT_EQ(route_of("/shoal/v1/metainfo/sha256:00?repo=a"), "metainfo");
  EXPECT_EQ(route_of("/metrics"), "ops");
  EXPECT_EQ(route_of("/v2/_catalog"), "v2_other");
  EXPECT_EQ(route_of("/anything/else"), "other");
  EXPECT_EQ(route_of(""), "other");
}

TEST(GatewayStatus, RefusedCredentialsTimeoutsAndTheRest) {
  EXPECT_EQ(gateway_status(error{errc::unauthorized, "token realm refused"}), 401u);
  EXPECT_EQ(gateway_status(error{errc::timeout, "stalled"}), 504u);
  EXPECT_EQ(gateway_status(error{errc::io_error, "refused"}), 502u);
}

}  // namespace
}  // namespace shoal::proxy
