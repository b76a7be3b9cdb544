// The registry-proxy ring's membership (scheduler/origins.h): announcements kept for the TTL,
// bounded, URLs validated; the route's authorization. The Redis-backed list is in
// shared_state_redis_test.cc.
#include "scheduler/origins.h"

#include <gtest/gtest.h>

#include "scheduler/authz.h"
#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

TEST(OriginMembers, AnnouncedMembersAreListedForTheTtlThenForgotten) {
  fake_clock clock;
  origin_members o(5s, nullptr, clock.fn());
  ASSERT_TRUE(o.announce("https://rp-1.ns.svc:5050").has_value());
  clock.advance(3s);
  auto l = o.announce("http://10.0.0.2:5050");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->members,
            (std::vector<std::string>{"http://10.0.0.2:5050", "https://rp-1.ns.svc:5050"}));
  EXPECT_FALSE(l->stale);
  clock.advance(3s);  // rp-1 silent for 6 s
  EXPECT_EQ(o.list().members, std::vector<std::string>{"http://10.0.0.2:5050"});
  // Announcing again brings it back.
  ASSERT_TRUE(o.announce("https://rp-1.ns.svc:5050").has_value());
  EXPECT_EQ(o.list().members.size(), 2u);
}

TEST(OriginMembers, AtMostMaxMembersAndKnownOnesStillRefresh) {
  fake_clock clock;
  origin_members o(60s, nullptr, clock.fn());
  for (std::size_t i = 0; i < origin_members::max_members; ++i)
    ASSERT_TRUE(o.announce("http://10.0.0." + std::to_string(i) + ":5050").has_value());
  auto full = o.announce("http://10.0.1.1:5050");
  ASSERT_FALSE(full.has_value());
  EXPECT_TRUE(full.error().is(errc::too_large)) << full.error().message;
  EXPECT_TRUE(o.announce("http://10.0.0.7:5050").has_value());
  EXPECT_EQ(o.list().members.size(), origin_members::max_members);
}

TEST(OriginMembers, OnlyBaseUrlsAreMembers) {
  for (const char* ok : {"http://a:1", "https://rp-0.svc.cluster.local:5050", "http://[::1]:80"})
    EXPECT_TRUE(origin_members::valid_url(ok)) << ok;
  for (const char* bad :
       {"", "ftp://a:1", "http://", "http://a:1/", "http://a:1/x", "http://a:1?x",
        "http://user@a:1", "http://a b:1", "http://a:1#f", "a:1", "http://a\x01:1"}) {
    EXPECT_FALSE(origin_members::valid_url(bad)) << bad;
  }
  EXPECT_FALSE(origin_members::valid_url("http://" + std::string(300, 'a') + ":1"));
}

TEST(OriginMembers, OnlyRegistryProxyCertificatesAnnounce) {
  http::request post;
  post.method = http::verb::post;
  post.path = "/v1/origins";
  EXPECT_EQ(access_of(post), route_access::registry_proxy);
  http::request get;
  get.method = http::verb::get;
  get.path = "/v1/origins";
  EXPECT_EQ(access_of(get), route_access::member);
  EXPECT_EQ(to_string(route_access::registry_proxy), "registry-proxy");
}

}  // namespace
}  // namespace shoal::scheduler
