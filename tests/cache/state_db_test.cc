// cache::state_db, the side index both daemons keep their records in: reads, writes, atomic
// batches, prefix scans, what survives a reopen, open errors, and rows written by the RocksDB
// code the daemons had before (their on-disk state must still read).

#include "cache/state_db.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace shoal::cache {
namespace {

using testing::temp_dir;
using rows = std::vector<std::pair<std::string, std::string>>;

rows scan_all(const state_db& db, std::string_view prefix) {
  rows out;
  auto st =
      db.scan(prefix, [&](std::string_view k, std::string_view v) { out.emplace_back(k, v); });
  EXPECT_TRUE(st) << st.error().message;
  return out;
}

TEST(StateDb, PutGetAndAbsent) {
  temp_dir t;
  auto db = state_db::open(t.path() + "/a/b/state");
  ASSERT_TRUE(db) << db.error().message;
  ASSERT_TRUE((*db)->put("k/1", "one"));
  auto v = (*db)->get("k/1");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, "one");
  auto none = (*db)->get("k/2");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  // Values are bytes, NULs included.
  std::string bin("a\0b\xff", 4);
  ASSERT_TRUE((*db)->put("bin", bin));
  EXPECT_EQ(*(*db)->get("bin"), bin);
}

TEST(StateDb, BatchAppliesInOrder) {
  temp_dir t;
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db);
  ASSERT_TRUE((*db)->put("x/old", "1"));
  state_db::batch b;
  EXPECT_TRUE(b.empty());
  b.put("x/new", "2");
  b.remove("x/old");
  b.put("x/tmp", "3");
  b.remove("x/tmp");
  b.remove("x/never");
  EXPECT_FALSE(b.empty());
  ASSERT_TRUE((*db)->write(b));
  EXPECT_EQ(scan_all(**db, "x/"), (rows{{"x/new", "2"}}));
  ASSERT_TRUE((*db)->write(state_db::batch{}));
}

TEST(StateDb, ScanIsBoundedByItsPrefixInKeyOrder) {
  temp_dir t;
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db);
  for (const char* k : {"h/b", "h/a", "g/z", "h0", "i/a", "h/c"})
    ASSERT_TRUE((*db)->put(k, std::string(k) + "!"));
  EXPECT_EQ(scan_all(**db, "h/"), (rows{{"h/a", "h/a!"}, {"h/b", "h/b!"}, {"h/c", "h/c!"}}));
  EXPECT_TRUE(scan_all(**db, "q/").empty());
  EXPECT_EQ(scan_all(**db, "").size(), 6u);
}

TEST(StateDb, SurvivesReopen) {
  temp_dir t;
  {
    auto db = state_db::open(t.path());
    ASSERT_TRUE(db);
    ASSERT_TRUE((*db)->put("a", "1"));
    state_db::batch b;
    b.put("b", "2");
    ASSERT_TRUE((*db)->write(b));
  }
  auto db = state_db::open(t.path());
  ASSERT_TRUE(db) << db.error().message;
  EXPECT_EQ(scan_all(**db, ""), (rows{{"a", "1"}, {"b", "2"}}));
}

TEST(StateDb, OpenOnAFileNamesTheLabelAndThePath) {
  temp_dir t;
  std::string f = t.path() + "/file";
  std::ofstream(f) << "x";
  auto db = state_db::open(f, state_db_options{.label = "peerd state"});
  ASSERT_FALSE(db);
  EXPECT_EQ(db.error().message.rfind("open peerd state " + f + ": ", 0), 0u) << db.error().message;
}

TEST(StateDb, ASecondOpenOfTheSameDirectoryFails) {
  temp_dir t;
  auto first = state_db::open(t.path());
  ASSERT_TRUE(first);
  auto second = state_db::open(t.path());
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find(t.path()), std::string::npos) << second.error().message;
}

// Both daemons opened their state with plain RocksDB before this type existed; what they wrote
// reads back unchanged, and what this type writes reads back with plain RocksDB.
TEST(StateDb, CompatibleWithTheDaemonsEarlierDatabases) {
  temp_dir t;
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.max_open_files = 256;
    o.keep_log_file_num = 2;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, t.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> old(raw);
    ASSERT_TRUE(old->Put({}, "t/registry/repo:tag", R"({"v":1})").ok());
    ASSERT_TRUE(old->Put({}, "h/" + std::string(40, 'a'), std::string(64, 'b')).ok());
  }
  {
    auto db =
        state_db::open(t.path(), state_db_options{.label = "state index", .max_open_files = 256});
    ASSERT_TRUE(db) << db.error().message;
    EXPECT_EQ(*(*db)->get("t/registry/repo:tag"), R"({"v":1})");
    EXPECT_EQ(scan_all(**db, "h/"), (rows{{"h/" + std::string(40, 'a'), std::string(64, 'b')}}));
    ASSERT_TRUE((*db)->put("i/new", "written by state_db"));
  }
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), t.path(), &raw).ok());
  std::unique_ptr<rocksdb::DB> old(raw);
  std::string v;
  ASSERT_TRUE(old->Get({}, "i/new", &v).ok());
  EXPECT_EQ(v, "written by state_db");
}

}  // namespace
}  // namespace shoal::cache
