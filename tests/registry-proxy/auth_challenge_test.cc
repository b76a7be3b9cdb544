// registry-proxy's WWW-Authenticate parser (auth_challenge.h): the challenges upstreams send.
#include <gtest/gtest.h>

#include <random>

#include "registry-proxy/auth_challenge.h"

namespace shoal::proxy {
namespace {

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
