// Start-up reconciliation of every kind of debris a crash, a power cut or a stray process can
// leave: temp files, rows without files, rows with the wrong size, orphans (valid, corrupt, with
// adoption off), malformed names, undecodable index records and labels of missing objects.

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "codec.h"
#include "index.h"
#include "test_util.h"

namespace shoal::cache {
namespace {

using namespace testing;

struct CacheReconcile : ::testing::Test {
  temp_dir dir;
  std::string objects() const { return dir.path() + "/objects/sha256"; }
  std::string path_of(const digest& d) const {
    return objects() + "/" + d.hex().substr(0, 2) + "/" + d.hex();
  }
  // Creates the layout and index once, with some real objects.
  std::vector<std::string> seed(int n) {
    std::vector<std::string> contents;
    auto s = open_store(test_options(dir.path()));
    for (int i = 0; i < n; ++i) {
      contents.push_back(random_bytes(1000 + static_cast<std::size_t>(i), 300 + i));
      EXPECT_TRUE(put(*s, contents.back()));
    }
    return contents;
  }
  // Every invariant a reader relies on, checked from the outside.
  void expect_consistent(store& s) {
    auto all = s.list();
    std::vector<std::string> indexed;
    for (const auto& info : all) {
      std::string data = read_all(s, info.id);
      EXPECT_EQ(data.size(), info.size) << info.id.str();
      EXPECT_EQ(sha256_of(data), info.id);
      indexed.push_back(info.id.hex().substr(0, 2) + "/" + info.id.hex());
    }
    // What heartbeats list (list_held) is the same objects with the same sizes and kinds.
    auto key = [](const digest& id, std::uint64_t size, object_kind kind) {
      return id.str() + " " + std::to_string(size) + " " + std::string(to_string(kind));
    };
    std::vector<std::string> full, held;
    for (const auto& info : all) full.push_back(key(info.id, info.size, info.kind));
    for (const auto& h : s.list_held()) held.push_back(key(h.id, h.size, h.kind));
    std::sort(full.begin(), full.end());
    std::sort(held.begin(), held.end());
    EXPECT_EQ(held, full);
    auto files = object_files(dir.path());
    std::sort(files.begin(), files.end());
    std::sort(indexed.begin(), indexed.end());
    EXPECT_EQ(files, indexed);
    EXPECT_TRUE(list_dir(dir.path() + "/tmp").empty());
  }
};

TEST_F(CacheReconcile, CleanStartChangesNothing) {
  auto c = seed(3);
  auto s = open_store(test_options(dir.path()));
  const auto& rep = s->last_reconcile();
  EXPECT_EQ(rep.rows_loaded, 3u);
  EXPECT_EQ(rep.temp_files_removed + rep.rows_dropped + rep.orphans_adopted + rep.orphans_removed +
                rep.malformed_removed + rep.bad_rows_dropped,
            0u);
  expect_consistent(*s);
}

TEST_F(CacheReconcile, TempFilesAreRemoved) {
  auto c = seed(1);
  std::string content = random_bytes(5000, 1);
  write_file(dir.path() + "/tmp/" + sha256_of(content).hex() + ".0123456789abcdef.part", content);
  write_file(dir.path() + "/tmp/" + sha256_of(content).hex() + ".fedcba9876543210.part", "half");
  write_file(dir.path() + "/tmp/garbage", "x");
  auto s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().temp_files_removed, 3u);
  // A complete, valid temp file is still not an object: it never committed.
  EXPECT_FALSE(s->contains(sha256_of(content)));
  expect_consistent(*s);
}

TEST_F(CacheReconcile, RowsWithoutFileOrWithWrongSizeAreDropped) {
  auto c = seed(3);
  ASSERT_EQ(::unlink(path_of(sha256_of(c[0])).c_str()), 0);
  // Truncate the second object (a torn file that still carries the name).
  ASSERT_EQ(::chmod(path_of(sha256_of(c[1])).c_str(), 0644), 0);
  ASSERT_EQ(::truncate(path_of(sha256_of(c[1])).c_str(), 10), 0);
  auto s = open_store(test_options(dir.path()));
  const auto& rep = s->last_reconcile();
  EXPECT_EQ(rep.rows_dropped, 2u);
  EXPECT_EQ(rep.orphans_removed, 1u);  // the truncated file does not hash to its name
  EXPECT_FALSE(s->contains(sha256_of(c[0])));
  EXPECT_FALSE(s->contains(sha256_of(c[1])));
  EXPECT_TRUE(s->contains(sha256_of(c[2])));
  expect_consistent(*s);
  // The rows are gone for good (the next start finds nothing to fix).
  s.reset();
  s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().rows_loaded, 1u);
  EXPECT_EQ(s->last_reconcile().rows_dropped, 0u);
}

TEST_F(CacheReconcile, ValidOrphansAreAdoptedCorruptOnesRemoved) {
  auto c = seed(1);
  std::string good = random_bytes(7000, 2);
  write_file(path_of(sha256_of(good)), good);
  std::string bad = random_bytes(7000, 3);
  write_file(path_of(sha256_of("a different content")), bad);
  auto s = open_store(test_options(dir.path()));
  const auto& rep = s->last_reconcile();
  EXPECT_EQ(rep.orphans_adopted, 1u);
  EXPECT_EQ(rep.orphans_removed, 1u);
  auto info = s->stat(sha256_of(good));
  ASSERT_TRUE(info);
  EXPECT_EQ(info->size, good.size());
  EXPECT_EQ(info->kind, object_kind::blob);
  struct stat st {};
  ASSERT_EQ(::stat(path_of(sha256_of(good)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  EXPECT_FALSE(s->contains(sha256_of("a different content")));
  expect_consistent(*s);
  // Adopted rows persist.
  s.reset();
  s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().orphans_adopted, 0u);
  EXPECT_TRUE(s->contains(sha256_of(good)));
}

TEST_F(CacheReconcile, OrphansAreRemovedWhenAdoptionIsOff) {
  auto c = seed(1);
  std::string good = random_bytes(7000, 4);
  write_file(path_of(sha256_of(good)), good);
  options o = test_options(dir.path());
  o.adopt_orphans = false;
  auto s = open_store(o);
  EXPECT_EQ(s->last_reconcile().orphans_adopted, 0u);
  EXPECT_EQ(s->last_reconcile().orphans_removed, 1u);
  EXPECT_FALSE(s->contains(sha256_of(good)));
  EXPECT_TRUE(s->contains(sha256_of(c[0])));  // indexed objects are untouched
  expect_consistent(*s);
}

TEST_F(CacheReconcile, MalformedNamesAreRemovedDirectoriesLeftAlone) {
  auto c = seed(1);
  std::string hex = sha256_of("x").hex();  // 2d711642...
  std::string shard = objects() + "/" + hex.substr(0, 2);
  std::vector<std::string> names = {
      hex.substr(0, 63),                        // short
      hex + "0",                                // long
      std::string(1, 'D') + hex.substr(1),      // wrong shard and upper case
      hex.substr(0, 2) + std::string(62, 'F'),  // upper case
      hex.substr(0, 63) + "g",                  // non-hex
      hex + ".0123456789abcdef.part",           // a temp name in the wrong place
      "sha256:" + hex,                          // prefixed
      "README",
  };
  for (const auto& n : names) write_file(shard + "/" + n, "junk");
  // A valid name in the wrong shard.
  std::string other = sha256_of("y").hex();
  ASSERT_NE(other.substr(0, 2), hex.substr(0, 2));
  write_file(shard + "/" + other, "y");
  // A symlink carrying a valid name: objects are regular files only.
  std::string good = "z";
  ASSERT_EQ(::symlink("/etc/passwd", path_of(sha256_of(good)).c_str()), 0);
  // An unexpected directory is reported and left alone (it is not ours to delete).
  ASSERT_EQ(::mkdir((shard + "/subdir").c_str(), 0755), 0);

  auto s = open_store(test_options(dir.path()));
  EXPECT_EQ(s->last_reconcile().malformed_removed, names.size() + 2);
  for (const auto& n : list_dir(shard)) {
    EXPECT_TRUE(n == "subdir" || n == sha256_of(c[0]).hex()) << n;
  }
  EXPECT_EQ(::access((shard + "/subdir").c_str(), F_OK), 0);
  EXPECT_FALSE(s->contains(sha256_of(good)));
  EXPECT_TRUE(s->contains(sha256_of(c[0])));
}

TEST_F(CacheReconcile, UndecodableIndexRecordsAndStrayLabelsAreDropped) {
  auto c = seed(2);
  digest gone = sha256_of("never stored");
  {
    auto idx = detail::index::open(dir.path() + "/index", {});
    ASSERT_TRUE(idx) << idx.error().to_string();
    detail::index::batch b;
    b.put("Zunknown-type", "x");                                       // unknown record type
    b.put(std::string("O") + "short", "x");                            // short key
    b.put(detail::object_key(sha256_of("bad value")), "\x07garbage");  // unknown version
    b.put(detail::object_key(sha256_of("short value")), std::string(1, '\x01'));
    std::string bad_kind = detail::encode(detail::object_row{1, object_kind::blob, 1, 1, 1, 0});
    bad_kind[1] = 9;
    b.put(detail::object_key(sha256_of("bad kind")), bad_kind);
    b.put(detail::pin_key(gone, "owner"), "\x01");  // pin too short
    b.put(detail::label_key(gone, "image:x"), detail::encode_label(1));
    b.put(detail::label_key(sha256_of("no row"), "image:z"), detail::encode_label(1));
    b.put(detail::label_key(sha256_of(c[0]), "image:y"), detail::encode_label(1));
    // A labelled row whose file does not exist (deleted by hand, or a restored backup).
    b.put(detail::object_key(gone),
          detail::encode(detail::object_row{5, object_kind::blob, 1, 1, 1, 0}));
    ASSERT_TRUE(idx.value()->write(b, true));
  }
  auto s = open_store(test_options(dir.path()));
  ASSERT_TRUE(s);
  const auto& rep = s->last_reconcile();
  EXPECT_EQ(rep.bad_rows_dropped, 6u);
  EXPECT_EQ(rep.labels_dropped, 2u);  // one without a row, one going with its row
  EXPECT_EQ(rep.rows_dropped, 1u);
  EXPECT_EQ(s->stat(sha256_of(c[0]))->labels, std::vector<std::string>{"image:y"});
  expect_consistent(*s);
  s.reset();
  s = open_store(test_options(dir.path()));
  const auto& rep2 = s->last_reconcile();
  EXPECT_EQ(rep2.bad_rows_dropped + rep2.labels_dropped + rep2.rows_dropped, 0u);
}

TEST_F(CacheReconcile, ForeignSchemaVersionIsRefused) {
  auto c = seed(1);
  {
    auto idx = detail::index::open(dir.path() + "/index", {});
    ASSERT_TRUE(idx);
    ASSERT_TRUE(idx.value()->put(detail::schema_key, "99", true));
  }
  auto s = store::open(test_options(dir.path()));
  ASSERT_FALSE(s);
  EXPECT_TRUE(s.error().is(errc::config_error));
  EXPECT_NE(s.error().message.find("schema version"), std::string::npos);
}

TEST_F(CacheReconcile, CorruptIndexIsMovedAsideAndRebuiltFromFiles) {
  auto c = seed(3);
  // Destroy the index: every file in it is overwritten with garbage.
  std::string idx = dir.path() + "/index";
  for (const auto& f : list_dir(idx)) {
    if (f.rfind("LOG", 0) == 0 || f == "LOCK") continue;
    write_file(idx + "/" + f, "this is not a rocksdb file");
  }
  auto s = open_store(test_options(dir.path()));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->last_reconcile().orphans_adopted, 3u);
  for (const auto& content : c) EXPECT_EQ(read_all(*s, sha256_of(content)), content);
  bool moved_aside = false;
  for (const auto& f : list_dir(dir.path())) moved_aside |= f.rfind("index.corrupt.", 0) == 0;
  EXPECT_TRUE(moved_aside);
}

}  // namespace
}  // namespace shoal::cache
