// Dataset helpers shared by registry-proxy and peerd: group objects, pack keys, the nginx JSON
// listing parser, URL escaping of dataset paths, and the heartbeat's dataset presence.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/dataset.h"
#include "common/heartbeat.h"
#include "common/sha256.h"

namespace shoal::dataset {
namespace {

manifest sample() {
  std::vector<file_entry> files;
  auto add = [&](std::string path, std::string content) {
    files.push_back(file_entry{std::move(path), content.size(), sha256_of(content)});
  };
  add("a/1.txt", "one");
  add("a/2.txt", "two");
  add("b/1-copy.txt", "one");  // same bytes as a/1.txt
  add("big.bin", std::string(5000, 'x'));
  add("empty", "");
  grouping_policy p;
  p.small_file_max = 1000;
  p.pack_target = 1 << 20;
  auto m = build_manifest("ds", "v1", "s3://b/p/", std::move(files), p);
  EXPECT_TRUE(m) << m.error().message;
  return *m;
}

TEST(DatasetGroups, ObjectsAreDistinctAndInPackOrder) {
  auto m = sample();
  ASSERT_EQ(m.groups.size(), 2u);  // one pack of the three small files, one single
  const group* pack = nullptr;
  for (const auto& g : m.groups) {
    if (g.type == group::kind::pack) pack = &g;
  }
  ASSERT_NE(pack, nullptr);
  EXPECT_EQ(pack->files.size(), 3u);
  auto objs = group_objects(m, *pack);
  ASSERT_EQ(objs.size(), 2u);  // "one" twice is one object
  EXPECT_LT(objs[0].first, objs[1].first);
  EXPECT_EQ(objs[0].second + objs[1].second, pack->bytes);
  auto all = manifest_objects(m);
  EXPECT_EQ(all.size(), 3u);  // the empty file is no object
}

TEST(DatasetGroups, PackKeyDependsOnMembersOnly) {
  auto a = sha256_of(std::string("a")), b = sha256_of(std::string("b"));
  std::vector<std::pair<digest, std::uint64_t>> x{{a, 1}, {b, 1}};
  std::vector<std::pair<digest, std::uint64_t>> y{{a, 1}, {b, 2}};
  EXPECT_EQ(pack_key(x), pack_key(x));
  EXPECT_NE(pack_key(x), pack_key(y));
}

TEST(DatasetListing, ParsesNginxAutoindexJson) {
  // What nginx 1.22 sends for `autoindex_format json`.
  auto r = parse_autoindex(R"([
    { "name":"train", "type":"directory", "mtime":"Sun, 29 Nov 2026 21:00:00 GMT" },
    { "name":"a b.txt", "type":"file", "mtime":"Sun, 29 Nov 2026 21:00:00 GMT", "size":12 },
    { "name":"link", "type":"other", "mtime":"Sun, 29 Nov 2026 21:00:00 GMT" }
  ])");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE((*r)[0].directory);
  EXPECT_EQ((*r)[0].name, "train");
  EXPECT_FALSE((*r)[1].directory);
  EXPECT_EQ((*r)[1].size, 12u);
}

TEST(DatasetListing, RefusesGarbage) {
  for (const char* bad :
       {"", "<html>", "{}", R"([{"name":1,"type":"file"}])", R"([{"name":"x","type":"file"}])",
        R"([{"name":"x","type":"file","size":-1}])", "[1]"}) {
    EXPECT_FALSE(parse_autoindex(bad)) << bad;
  }
  EXPECT_FALSE(
      parse_autoindex(R"([{"name":"a","type":"directory"},{"name":"b","type":"directory"}])", 1));
}

TEST(DatasetListing, NamesGoThroughPathRules) {
  // The parser hands names over as sent; the caller's check_path() refuses the bad ones.
  auto r = parse_autoindex(
      R"([{"name":"..","type":"directory"},{"name":"a\u0000b","type":"file","size":1}])");
  ASSERT_TRUE(r);
  EXPECT_FALSE(check_path((*r)[0].name));
  auto s = check_path((*r)[1].name);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("NUL"), std::string::npos);
}

TEST(DatasetUrl, EscapesPathsButKeepsSlashes) {
  EXPECT_EQ(url_path_escape("a/b c/ü?#%.txt"), "a/b%20c/%C3%BC%3F%23%25.txt");
  EXPECT_EQ(url_path_escape("plain/name-1_2.~x"), "plain/name-1_2.~x");
}

}  // namespace
}  // namespace shoal::dataset

namespace shoal::heartbeat {
namespace {

TEST(HeartbeatDatasets, RoundTripAndBounds) {
  message m;
  m.node = "n1";
  m.seq = 1;
  m.datasets.push_back(dataset_presence{"imagenet@v1", 50, 100, false});
  m.datasets.push_back(dataset_presence{"coco@2017", 10, 10, true});
  auto d = decode(encode(m));
  ASSERT_TRUE(d) << d.error().message;
  ASSERT_EQ(d->datasets.size(), 2u);
  EXPECT_EQ(d->datasets[0].dataset, "imagenet@v1");
  EXPECT_EQ(d->datasets[0].bytes, 50u);
  EXPECT_DOUBLE_EQ(d->datasets[0].share(), 0.5);
  EXPECT_TRUE(d->datasets[1].view);
  // Messages without the field (older nodes) decode with none.
  message plain;
  plain.node = "n2";
  plain.seq = 1;
  auto p = decode(encode(plain));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->datasets.empty());
  // More bytes than the total, or no version, are refused.
  std::string text = encode(m);
  auto bad = text;
  bad.replace(bad.find("\"bytes\":50"), 10, "\"bytes\":500");
  EXPECT_FALSE(decode(bad));
  bad = text;
  bad.replace(bad.find("imagenet@v1"), 11, "imagenet___");
  EXPECT_FALSE(decode(bad));
}

}  // namespace
}  // namespace shoal::heartbeat

namespace shoal::dataset {
namespace {

// canonical_json() writes the bytes itself; they must stay exactly nlohmann's dump() of the
// document (manifest digests are computed over them).
TEST(DatasetManifest, CanonicalFormIsTheDocumentsDump) {
  std::vector<file_entry> files;
  for (int i = 0; i < 300; ++i) {
    std::string content(static_cast<std::size_t>(i * 37 % 5000), static_cast<char>(i));
    std::string path = "d" + std::to_string(i % 9) + "/f \"q\" \xc3\xbc\t" + std::to_string(i);
    if (i % 50 == 0) path = "\xe2\x82\xac/" + std::to_string(i);
    files.push_back(file_entry{path, content.size(), sha256_of(content)});
  }
  // A tab is a control character: not a valid path. Replace it so build_manifest accepts them.
  for (auto& f : files) std::replace(f.path.begin(), f.path.end(), '\t', '_');
  grouping_policy p;
  p.small_file_max = 3000;
  p.pack_target = 20000;
  auto m = build_manifest("n", "V1.0", "https://h/b\"a\"se/", files, p);
  ASSERT_TRUE(m) << m.error().message;
  nlohmann::json jf = nlohmann::json::array(), jg = nlohmann::json::array();
  for (const auto& f : m->files)
    jf.push_back({{"digest", f.id.str()}, {"path", f.path}, {"size", f.size}});
  for (const auto& g : m->groups) {
    jg.push_back({{"bytes", g.bytes},
                  {"files", g.files},
                  {"kind", g.type == group::kind::pack ? "pack" : "single"}});
  }
  nlohmann::json doc = {{"files", jf},         {"groups", jg},        {"name", m->name},
                        {"origin", m->origin}, {"schema", m->schema}, {"version", m->version}};
  EXPECT_EQ(canonical_json(*m), doc.dump());
  auto back = parse_manifest(canonical_json(*m), manifest_digest(*m));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->files.size(), m->files.size());
}

}  // namespace
}  // namespace shoal::dataset
