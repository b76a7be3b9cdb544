// The resolver: normalization (short names, docker.io), tags with a TTL and stale use, digests
// verified and cached, multi-arch indexes narrowed to a platform, single flight, deadlines, and
// the manifest parser's strictness.
#include "scheduler/resolver.h"

#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using namespace testing;

class ResolverTest : public ::testing::Test {
 protected:
  ResolverTest() : res_(src_, opts(), clock_.fn()) {}
  static resolver_options opts() {
    resolver_options o;
    o.tag_ttl = 60s;
    o.max_manifests = 16;
    return o;
  }
  fake_clock clock_;
  fake_source src_;
  resolver res_;
};

TEST_F(ResolverTest, ShortNamesNormalizeToDockerHubLibrary) {
  auto body = image_manifest({{"l1", 100}, {"l2", 200}});
  src_.put("docker.io", "library/nginx", body, "latest");
  for (const char* ref :
       {"nginx", "nginx:latest", "docker.io/nginx", "index.docker.io/library/nginx:latest"}) {
    auto r = res_.resolve(ref, "linux/amd64");
    ASSERT_TRUE(r) << ref << ": " << r.error().message;
    EXPECT_EQ(r->ref, "docker.io/library/nginx:latest");
    EXPECT_EQ(r->registry, "docker.io");
    EXPECT_EQ(r->repository, "library/nginx");
    ASSERT_EQ(r->objects.size(), 3u);
    EXPECT_EQ(r->objects[0].id, dg("config"));
    EXPECT_EQ(r->objects[2].id, dg("l2"));
    EXPECT_EQ(r->bytes(), 1300u);
    EXPECT_EQ(r->manifest, sha256_of(body));
  }
  EXPECT_EQ(src_.fetches(), 1);  // tag cached, then the digest
}

TEST_F(ResolverTest, PrivateRegistryWithPortAndDigestReference) {
  auto body = image_manifest({{"p1", 5}});
  src_.put("registry.example.com:5000", "team/app", body);
  auto d = sha256_of(body).str();
  auto r = res_.resolve("registry.example.com:5000/team/app@" + d, "linux/amd64");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->registry, "registry.example.com:5000");
  EXPECT_EQ(r->repository, "team/app");
  EXPECT_EQ(r->objects.size(), 2u);
  // A digest is immutable: asked again, no fetch.
  int before = src_.fetches();
  ASSERT_TRUE(res_.resolve("registry.example.com:5000/team/app@" + d, "linux/amd64"));
  EXPECT_EQ(src_.fetches(), before);
}

TEST_F(ResolverTest, IndexIsNarrowedToThePlatform) {
  auto amd = image_manifest({{"amd", 1}}, "c-amd");
  auto arm = image_manifest({{"arm", 2}}, "c-arm");
  src_.put("docker.io", "library/multi", amd);
  src_.put("docker.io", "library/multi", arm);
  src_.put("docker.io", "library/multi",
           index_manifest({{"linux/amd64", amd}, {"linux/arm64/v8", arm}}), "1.0");
  auto a = res_.resolve("multi:1.0", "linux/amd64");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_TRUE(a->index.has_value());
  EXPECT_EQ(a->objects[1].id, dg("amd"));
  auto b = res_.resolve("multi:1.0", "linux/arm64");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->objects[1].id, dg("arm"));
  auto v8 = res_.resolve("multi:1.0", "linux/arm64/v8");
  ASSERT_TRUE(v8);
  auto none = res_.resolve("multi:1.0", "linux/s390x");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("has no image for linux/s390x"), std::string::npos)
      << none.error().message;
  EXPECT_NE(none.error().message.find("linux/arm64/v8"), std::string::npos);
  EXPECT_EQ(none.error().message.find("unknown"), std::string::npos);  // attestations skipped
}

TEST_F(ResolverTest, TagsExpireAndStaleOnesServeWhenRegistryProxyIsDown) {
  auto v1 = image_manifest({{"v1", 1}});
  auto v2 = image_manifest({{"v2", 1}});
  src_.put("docker.io", "library/app", v1, "stable");
  ASSERT_EQ(res_.resolve("app:stable", "linux/amd64")->objects[1].id, dg("v1"));
  src_.put("docker.io", "library/app", v2, "stable");
  clock_.advance(30s);
  EXPECT_EQ(res_.resolve("app:stable", "linux/amd64")->objects[1].id, dg("v1"));  // within TTL
  clock_.advance(31s);
  EXPECT_EQ(res_.resolve("app:stable", "linux/amd64")->objects[1].id, dg("v2"));  // re-resolved
  clock_.advance(61s);
  src_.fail_all(true);
  auto stale = res_.resolve("app:stable", "linux/amd64");
  ASSERT_TRUE(stale) << stale.error().message;
  EXPECT_EQ(stale->objects[1].id, dg("v2"));
  EXPECT_EQ(res_.stats().stale, 1u);
  auto unknown = res_.resolve("app:never", "linux/amd64");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("down"), std::string::npos);
}

// resolve_many answers from the caches without the pool when it can: the same answers as
// resolve() (an index narrowed per platform, a tag's TTL), no fetch, and a tag past its TTL or a
// platform the index lacks still takes the full path (a fetch, the worded error).
TEST_F(ResolverTest, ResolveManyAnswersCachedImagesLikeResolve) {
  auto amd = image_manifest({{"amd", 1}}, "c-amd");
  auto arm = image_manifest({{"arm", 2}}, "c-arm");
  src_.put("docker.io", "library/multi", amd);
  src_.put("docker.io", "library/multi", arm);
  auto idx = index_manifest({{"linux/amd64", amd}, {"linux/arm64/v8", arm}});
  src_.put("docker.io", "library/multi", idx, "1.0");
  const std::vector<std::pair<std::string, std::string>> asks = {
      {"multi:1.0", "linux/amd64"},
      {"multi:1.0", "linux/arm64"},
      {"docker.io/library/multi@" + sha256_of(idx).str(), "linux/arm64/v8"}};
  std::vector<resolved_image> full;
  for (const auto& [ref, plat] : asks) {
    auto r = res_.resolve(ref, plat);
    ASSERT_TRUE(r) << r.error().message;
    full.push_back(*r);
  }
  const int fetched = src_.fetches();
  const auto hits = res_.stats().hits;
  auto many = res_.resolve_many(asks, 2s);
  ASSERT_EQ(many.size(), asks.size());
  for (std::size_t i = 0; i < asks.size(); ++i) {
    ASSERT_TRUE(many[i]) << many[i].error().message;
    EXPECT_EQ(many[i]->ref, full[i].ref);
    EXPECT_EQ(many[i]->platform, full[i].platform);
    EXPECT_EQ(many[i]->manifest, full[i].manifest);
    EXPECT_EQ(many[i]->index, full[i].index);
    EXPECT_EQ(many[i]->objects, full[i].objects);
  }
  EXPECT_EQ(src_.fetches(), fetched);
  EXPECT_GT(res_.stats().hits, hits);
  // Past the tag's TTL the cache does not answer: the tag is fetched again.
  clock_.advance(61s);
  auto later = res_.resolve_many({asks[0]}, 2s);
  ASSERT_TRUE(later[0]) << later[0].error().message;
  EXPECT_EQ(later[0]->objects, full[0].objects);
  EXPECT_EQ(src_.fetches(), fetched + 1);
  // A platform the cached index lacks gets resolve()'s error, not a silent miss.
  auto none = res_.resolve_many({{"multi:1.0", "linux/s390x"}}, 2s);
  ASSERT_FALSE(none[0]);
  EXPECT_NE(none[0].error().message.find("has no image for linux/s390x"), std::string::npos)
      << none[0].error().message;
}

TEST_F(ResolverTest, ManifestNotMatchingItsDigestIsRefused) {
  auto body = image_manifest({{"x", 1}});
  auto fake_digest = dg("something else");
  src_.put_raw("docker.io/library/app@" + fake_digest.str(), body);
  auto r = res_.resolve("app@" + fake_digest.str(), "linux/amd64");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::digest_mismatch)) << r.error().message;
}

TEST_F(ResolverTest, ConcurrentResolutionsOfOneRefShareOneFetch) {
  src_.put("docker.io", "library/slow", image_manifest({{"s", 1}}), "v1");
  src_.delay(200ms);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] { ok += res_.resolve("slow:v1", "linux/amd64").has_value() ? 1 : 0; });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(src_.fetches(), 1);
}

TEST_F(ResolverTest, ResolveManyAnswersByTheDeadlineAndFinishesInTheBackground) {
  src_.put("docker.io", "library/slow", image_manifest({{"s", 1}}), "v1");
  src_.put("docker.io", "library/fast", image_manifest({{"f", 1}}), "v1");
  src_.delay(400ms);
  auto t0 = std::chrono::steady_clock::now();
  auto r = res_.resolve_many({{"slow:v1", "linux/amd64"}}, 100ms);
  auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.size(), 1u);
  ASSERT_FALSE(r[0]);
  EXPECT_TRUE(r[0].error().is(errc::timeout));
  EXPECT_LT(waited, 350ms);
  // It went on: shortly after, the answer is in the cache.
  bool done = false;
  for (int i = 0; i < 100 && !done; ++i) {
    std::this_thread::sleep_for(20ms);
    done = res_.stats().fetches >= 1;
  }
  ASSERT_TRUE(done);
  src_.delay(0ms);
  auto again = res_.resolve_many({{"slow:v1", "linux/amd64"}, {"fast:v1", "linux/amd64"}}, 2s);
  ASSERT_TRUE(again[0]);
  ASSERT_TRUE(again[1]);
}

TEST_F(ResolverTest, ManifestCacheIsBounded) {
  for (int i = 0; i < 40; ++i) {
    src_.put("docker.io", "library/a" + std::to_string(i),
             image_manifest({{"l" + std::to_string(i), 1}}), "v");
    ASSERT_TRUE(res_.resolve("a" + std::to_string(i) + ":v", "linux/amd64"));
  }
  int before = src_.fetches();
  // The first ones were evicted (LRU of 16): resolving again fetches.
  ASSERT_TRUE(res_.resolve("a0:v", "linux/amd64"));
  EXPECT_GT(src_.fetches(), before);
}

TEST(ParseManifest, StrictAboutShapes) {
  EXPECT_TRUE(parse_manifest(image_manifest({{"a", 1}})));
  struct tc {
    const char* body;
    const char* needle;
  };
  for (auto c : std::vector<tc>{
           {"[]", "not a JSON object"},
           {R"({"schemaVersion":1,"fsLayers":[]})", "schema 1"},
           {R"({"schemaVersion":2})", "neither config nor manifests"},
           {R"({"schemaVersion":2,"config":{"digest":"sha256:00","size":1}})", "config.digest"},
           {R"({"schemaVersion":2,"manifests":{}})", "not a list"}}) {
    auto r = parse_manifest(c.body);
    ASSERT_FALSE(r) << c.body;
    EXPECT_NE(r.error().message.find(c.needle), std::string::npos) << r.error().message;
  }
  auto j = nlohmann::json::parse(image_manifest({{"a", 1}}));
  j["layers"][0]["size"] = -5;
  EXPECT_FALSE(parse_manifest(j.dump()));
  EXPECT_TRUE(platform_matches("linux/arm64", "linux/arm64/v8"));
  EXPECT_TRUE(platform_matches("linux/arm/v7", "linux/arm/v7"));
  EXPECT_FALSE(platform_matches("linux/arm/v6", "linux/arm/v7"));
  EXPECT_FALSE(platform_matches("linux/amd64", "windows/amd64"));
}

}  // namespace
}  // namespace shoal::scheduler
