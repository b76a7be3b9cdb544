// registry-proxy's records in its side index (state_db over cache::state_db): tags, media
// types, visibility merging, metainfo, what forget() removes, and that rows keep the keys and
// JSON an existing state directory already holds.

#include "registry-proxy/state_db.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cache/state_db.h"
#include "common/sha256.h"

namespace shoal::proxy {
namespace {

namespace fs = std::filesystem;

struct temp_dir {
  std::string path;
  temp_dir() {
    std::string t = (fs::temp_directory_path() / "shoal-proxy-state-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(ProxyStateDb, TagsMediaTypesAndMetainfoRoundTrip) {
  temp_dir t;
  auto db = state_db::open(t.path + "/state");
  ASSERT_TRUE(db) << db.error().message;
  auto d = sha256_of("manifest");
  EXPECT_FALSE((*db)->get_tag("up/repo:latest"));
  ASSERT_TRUE((*db)->put_tag("up/repo:latest", tag_entry{d, "application/x", 1234, true}));
  auto tag = (*db)->get_tag("up/repo:latest");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->dig, d);
  EXPECT_EQ(tag->media_type, "application/x");
  EXPECT_EQ(tag->fetched_ms, 1234);
  EXPECT_TRUE(tag->is_public);
  ASSERT_TRUE((*db)->put_media_type(d, "application/vnd.oci.image.manifest.v1+json"));
  EXPECT_EQ((*db)->get_media_type(d), "application/vnd.oci.image.manifest.v1+json");
  ASSERT_TRUE((*db)->put_metainfo(d, "info dict"));
  EXPECT_EQ((*db)->get_metainfo(d), "info dict");
  EXPECT_FALSE((*db)->get_metainfo(sha256_of("other")));
}

TEST(ProxyStateDb, VisibilityMerges) {
  temp_dir t;
  auto db = state_db::open(t.path);
  ASSERT_TRUE(db);
  auto d = sha256_of("blob");
  EXPECT_FALSE((*db)->get_visibility(d));
  ASSERT_TRUE((*db)->add_visibility(d, false, "up/a"));
  ASSERT_TRUE((*db)->add_visibility(d, false, "up/a"));
  ASSERT_TRUE((*db)->add_visibility(d, false, "up/b"));
  auto v = (*db)->get_visibility(d);
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->is_public);
  EXPECT_EQ(v->repos, (std::vector<std::string>{"up/a", "up/b"}));
  ASSERT_TRUE((*db)->add_visibility(d, true, ""));
  ASSERT_TRUE((*db)->add_visibility(d, false, ""));
  EXPECT_TRUE((*db)->get_visibility(d)->is_public) << "public stays public";
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE((*db)->add_visibility(d, false, "up/r" + std::to_string(i)));
  v = (*db)->get_visibility(d);
  ASSERT_EQ(v->repos.size(), 256u);
  EXPECT_EQ(v->repos.back(), "up/r299");
}

TEST(ProxyStateDb, ForgetDropsTheObjectsRowsNotTheTags) {
  temp_dir t;
  auto d = sha256_of("blob");
  {
    auto db = state_db::open(t.path);
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->put_tag("up/repo:v1", tag_entry{d, "mt", 1, false}));
    ASSERT_TRUE((*db)->put_media_type(d, "mt"));
    ASSERT_TRUE((*db)->add_visibility(d, true, "up/repo"));
    ASSERT_TRUE((*db)->put_metainfo(d, "info"));
    ASSERT_TRUE((*db)->forget(d));
    ASSERT_TRUE((*db)->forget(sha256_of("never stored")));
  }
  auto db = state_db::open(t.path);
  ASSERT_TRUE(db) << db.error().message;
  EXPECT_FALSE((*db)->get_media_type(d));
  EXPECT_FALSE((*db)->get_visibility(d));
  EXPECT_FALSE((*db)->get_metainfo(d));
  ASSERT_TRUE((*db)->get_tag("up/repo:v1"));
}

// Tag rows expire: a sweep deletes those fetched before the cut-off (and junk), nothing else.
TEST(ProxyStateDb, SweepDeletesOldTagRows) {
  temp_dir t;
  auto d = sha256_of("manifest");
  {
    auto raw = cache::state_db::open(t.path);
    ASSERT_TRUE(raw);
    ASSERT_TRUE((*raw)->put("t/up/repo:junk", "not json"));
    ASSERT_TRUE((*raw)->put("t/up/repo:future", R"({"v":2,"at":1})"));
  }
  auto db = state_db::open(t.path);
  ASSERT_TRUE(db);
  for (int i = 0; i < 50; ++i)
    ASSERT_TRUE((*db)->put_tag("up/repo:old" + std::to_string(i), tag_entry{d, "mt", 1000, true}));
  ASSERT_TRUE((*db)->put_tag("up/repo:new", tag_entry{d, "mt", 5000, true}));
  ASSERT_TRUE((*db)->put_media_type(d, "mt"));
  auto n = (*db)->sweep_tags(2000);
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, 51u);
  EXPECT_FALSE((*db)->get_tag("up/repo:old7"));
  EXPECT_TRUE((*db)->get_tag("up/repo:new"));
  EXPECT_EQ((*db)->get_media_type(d), "mt");
  auto again = (*db)->sweep_tags(2000);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0u) << "the newer release's row is kept";
}

// The rows of a state directory written before the side index was shared: same keys, same JSON.
TEST(ProxyStateDb, ReadsTheRowsAnExistingStateDirectoryHolds) {
  temp_dir t;
  auto d = sha256_of("manifest");
  {
    auto raw = cache::state_db::open(t.path);
    ASSERT_TRUE(raw);
    nlohmann::json tag = {{"v", 1}, {"digest", d.str()}, {"mt", "m"}, {"at", 7}, {"pub", true}};
    ASSERT_TRUE((*raw)->put("t/up/repo:tag", tag.dump()));
    ASSERT_TRUE((*raw)->put("m/" + d.hex(), "m"));
    ASSERT_TRUE((*raw)->put("v/" + d.hex(), R"({"pub":false,"repos":["up/repo"]})"));
    ASSERT_TRUE((*raw)->put("i/" + d.hex(), "info"));
    ASSERT_TRUE((*raw)->put("t/up/repo:future", R"({"v":2})"));
  }
  auto db = state_db::open(t.path);
  ASSERT_TRUE(db) << db.error().message;
  auto tag = (*db)->get_tag("up/repo:tag");
  ASSERT_TRUE(tag);
  EXPECT_EQ(tag->dig, d);
  EXPECT_EQ(tag->fetched_ms, 7);
  EXPECT_FALSE((*db)->get_tag("up/repo:future")) << "an unknown row version is not trusted";
  EXPECT_EQ((*db)->get_media_type(d), "m");
  EXPECT_EQ((*db)->get_visibility(d)->repos, std::vector<std::string>{"up/repo"});
  EXPECT_EQ((*db)->get_metainfo(d), "info");
}

}  // namespace
}  // namespace shoal::proxy
