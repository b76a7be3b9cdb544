// The cache's public paths (store.h "paths"): where a committed object lives, a single-object
// torrent's save directory, a pack's place and its member paths, and the filesystem check. The
// layout is spelled out literally here on purpose: it is the on-disk format existing caches
// have, and these tests fail if it moves.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;

TEST(CachePaths, ObjectPathOfACommittedObject) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  std::string content = random_bytes(10000, 1);
  auto info = put(*s, content);
  ASSERT_TRUE(info) << info.error().to_string();
  std::string hex = info->id.hex();
  std::string path = s->object_path(info->id);
  EXPECT_EQ(path, dir.path() + "/objects/sha256/" + hex.substr(0, 2) + "/" + hex);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), content.size());
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  // A single-object torrent (its file is named by the hex) saved in shard_dir seeds from it.
  EXPECT_EQ(s->shard_dir(info->id) + "/" + hex, path);
}

// A pack torrent lays its files out as sha256/<hh>/<hex> under its save path; saved at
// pack_dir() every member is its committed object.
TEST(CachePaths, APackPlacesEveryMemberOnItsObjectPath) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->pack_dir(), dir.path() + "/objects");
  for (int i = 0; i < 64; ++i) {
    auto info = put(*s, random_bytes(100 + i, 100 + i), object_kind::dataset_file);
    ASSERT_TRUE(info);
    std::string hex = info->id.hex();
    EXPECT_EQ(store::pack_member_path(info->id), "sha256/" + hex.substr(0, 2) + "/" + hex);
    std::string member = s->pack_dir() + "/" + store::pack_member_path(info->id);
    EXPECT_EQ(member, s->object_path(info->id));
    EXPECT_EQ(::access(member.c_str(), R_OK), 0) << member;
  }
}

// Trailing slashes on the configured root do not leak into the paths.
TEST(CachePaths, RootWithTrailingSlashes) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path() + "//"));
  auto id = sha256_of("x");
  EXPECT_EQ(s->pack_dir(), dir.path() + "/objects");
  EXPECT_EQ(s->object_path(id), dir.path() + "/objects/" + store::pack_member_path(id));
}

// A cache written by an earlier release (only files, laid out by hand here) keeps working: its
// objects are found at the same paths.
TEST(CachePaths, ACacheLaidOutByAnEarlierReleaseIsRead) {
  temp_dir dir;
  std::string content = random_bytes(5000, 7);
  auto id = sha256_of(content);
  std::string hex = id.hex();
  std::string shard = dir.path() + "/objects/sha256/" + hex.substr(0, 2);
  std::filesystem::create_directories(shard);
  write_file(shard + "/" + hex, content, 0444);
  auto s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().orphans_adopted, 1u);
  ASSERT_TRUE(s->contains(id));
  EXPECT_EQ(s->object_path(id), shard + "/" + hex);
  EXPECT_EQ(read_all(*s, id), content);
}

TEST(CachePaths, SameFilesystemCheck) {
  temp_dir dir;
  auto s = open_store(test_options(dir.path() + "/cache"));
  std::filesystem::create_directories(dir.path() + "/views");
  EXPECT_TRUE(s->check_same_filesystem(dir.path() + "/views"));
  EXPECT_TRUE(s->check_same_filesystem(s->pack_dir()));
  // What does not exist (yet) cannot be judged: the rename or link that needs it will tell.
  EXPECT_TRUE(s->check_same_filesystem(dir.path() + "/not-there"));
  // /proc is never the cache's filesystem.
  auto other = s->check_same_filesystem("/proc");
  ASSERT_FALSE(other);
  EXPECT_TRUE(other.error().is(errc::config_error));
  EXPECT_EQ(other.error().message,
            "/proc is not on the cache's filesystem (" + s->pack_dir() + ")");
}

}  // namespace
}  // namespace shoal::cache
