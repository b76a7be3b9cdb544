// peerd's records in its side index (state_db over cache::state_db): what it remembers across
// restarts, what forget() removes, and how it treats damaged rows. The side index itself
// (batches, scans, open errors) is tested in tests/cache/state_db_test.cc.

#include "peerd/state_db.h"

#include <gtest/gtest.h>

#include <fstream>

#include "cache/state_db.h"
#include "common/sha256.h"
#include "test_util.h"

namespace shoal::peerd {
namespace {

using testing::temp_dir;

std::string ih(char c) { return std::string(40, c); }

TEST(StateDb, PutThenLookUpEveryWay) {
  temp_dir t;
  auto db = state_db::open(t.path() + "/state");
  ASSERT_TRUE(db) << db.error().message;
  auto d = sha256_of("object one");
  ASSERT_TRUE((*db)->put(d, ih('a'), "torrent bytes"));
  EXPECT_EQ((*db)->torrent(d), "torrent bytes");
  EXPECT_EQ((*db)->by_info_hash(ih('a')), d);
  EXPECT_EQ((*db)->info_hash(d), ih('a'));
  EXPECT_FALSE((*db)->by_info_hash(ih('b')));
  EXPECT_FALSE((*db)->torrent(sha256_of("other")));
  auto all = (*db)->all();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].first, d);
  EXPECT_EQ(all[0].second, ih('a'));
}

TEST(StateDb, SurvivesReopen) {
  temp_dir t;
  auto d1 = sha256_of("one"), d2 = sha256_of("two");
  {
    auto db = state_db::open(t.path());
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->put(d1, ih('1'), "t1"));
    ASSERT_TRUE((*db)->put(d2, ih('2'), "t2"));
  }
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db) << db.error().message;
  EXPECT_EQ((*db)->by_info_hash(ih('1')), d1);
  EXPECT_EQ((*db)->by_info_hash(ih('2')), d2);
  EXPECT_EQ((*db)->torrent(d2), "t2");
  EXPECT_EQ((*db)->all().size(), 2u);
}

TEST(StateDb, ForgetRemovesBothDirectionsDurably) {
  temp_dir t;
  auto d1 = sha256_of("one"), d2 = sha256_of("two");
  {
    auto db = state_db::open(t.path());
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->put(d1, ih('1'), "t1"));
    ASSERT_TRUE((*db)->put(d2, ih('2'), "t2"));
    ASSERT_TRUE((*db)->forget(d1));
    EXPECT_FALSE((*db)->by_info_hash(ih('1')));
    EXPECT_FALSE((*db)->info_hash(d1));
    EXPECT_FALSE((*db)->torrent(d1));
    // Forgetting what is not there is not an error.
    EXPECT_TRUE((*db)->forget(sha256_of("never stored")));
  }
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db);
  EXPECT_FALSE((*db)->by_info_hash(ih('1')));
  EXPECT_FALSE((*db)->torrent(d1));
  EXPECT_EQ((*db)->by_info_hash(ih('2')), d2);
  ASSERT_EQ((*db)->all().size(), 1u);
}

// generation() moves with what all() lists (a put, a forget of a held object) and with nothing
// else (heartbeats compare it to skip listing).
TEST(StateDb, TheGenerationMovesWithEveryChangeOnly) {
  temp_dir t;
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db);
  auto d = sha256_of("one");
  auto g = (*db)->generation();
  ASSERT_TRUE((*db)->put(d, ih('1'), "t1"));
  EXPECT_NE((*db)->generation(), g);
  g = (*db)->generation();
  EXPECT_TRUE((*db)->torrent(d));
  EXPECT_EQ((*db)->by_info_hash(ih('1')), d);
  EXPECT_TRUE((*db)->forget(sha256_of("never stored")));
  EXPECT_EQ((*db)->generation(), g);
  ASSERT_TRUE((*db)->forget(d));
  EXPECT_NE((*db)->generation(), g);
}

// The info-hash of an object changes only if the piece-size rule does (a new version); the old
// mapping must not keep pointing at the object, in memory or after a restart.
TEST(StateDb, PutWithANewInfoHashReplacesTheOldOne) {
  temp_dir t;
  auto d = sha256_of("object");
  {
    auto db = state_db::open(t.path());
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->put(d, ih('a'), "old"));
    ASSERT_TRUE((*db)->put(d, ih('b'), "new"));
    EXPECT_FALSE((*db)->by_info_hash(ih('a')));
    EXPECT_EQ((*db)->by_info_hash(ih('b')), d);
    EXPECT_EQ((*db)->all().size(), 1u);
  }
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db);
  EXPECT_FALSE((*db)->by_info_hash(ih('a')));
  EXPECT_EQ((*db)->by_info_hash(ih('b')), d);
  EXPECT_EQ((*db)->torrent(d), "new");
  ASSERT_TRUE((*db)->forget(d));
  EXPECT_TRUE((*db)->all().empty());
}

// Rows written by something else (a bug, a bad disk) are skipped at load, not trusted.
TEST(StateDb, DamagedRowsAreIgnoredAtOpen) {
  temp_dir t;
  auto good = sha256_of("good");
  {
    auto db = cache::state_db::open(t.path());
    ASSERT_TRUE(db) << db.error().message;
    ASSERT_TRUE((*db)->put("h/" + ih('1'), good.hex()));
    ASSERT_TRUE((*db)->put("h/" + ih('2'), "not hex"));
    ASSERT_TRUE((*db)->put("h/short", good.hex()));
    ASSERT_TRUE((*db)->put("t/" + good.hex(), "torrent"));
  }
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db) << db.error().message;
  EXPECT_EQ((*db)->by_info_hash(ih('1')), good);
  EXPECT_FALSE((*db)->by_info_hash(ih('2')));
  EXPECT_FALSE((*db)->by_info_hash("short"));
  EXPECT_EQ((*db)->all().size(), 1u);
}

TEST(StateDb, OpenOnAFileIsAnError) {
  temp_dir t;
  std::string f = t.path() + "/file";
  std::ofstream(f) << "x";
  auto db = state_db::open(f);
  ASSERT_FALSE(db);
  EXPECT_NE(db.error().message.find(f), std::string::npos) << db.error().message;
}

}  // namespace
}  // namespace shoal::peerd
