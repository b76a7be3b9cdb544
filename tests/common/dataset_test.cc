#include "common/dataset.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "common/sha256.h"

namespace shoal::dataset {
namespace {

TEST(DatasetRef, Parses) {
  auto r = parse_ref("imagenet@v1.2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, "imagenet");
  EXPECT_EQ(r->second, "v1.2");
  for (const char* bad :
       {"", "x", "@v1", "x@", "X@v1", "a b@v1", "a@v 1", "a@v/1", "../x@v1", "a@-v"}) {
    EXPECT_FALSE(parse_ref(bad)) << bad;
  }
}

TEST(DatasetPath, Rules) {
  for (const char* ok :
       {"a", "a/b.jpg", "train/class 1/img_001.JPEG", "ünïcødé/ok.txt", ".hidden", "a..b"}) {
    EXPECT_TRUE(check_path(ok)) << ok;
  }
  struct c {
    std::string path;
    std::string why;
  };
  for (const auto& k :
       {c{"", "empty"}, c{"/etc/passwd", "absolute"}, c{"../x", "'..'"}, c{"a/../../x", "'..'"},
        c{"a/./b", "'.'"}, c{"a//b", "empty component"}, c{"a/", "empty component"},
        c{std::string("a\0b", 3), "NUL"}, c{"a\nb", "control"}, c{"a\\b", "backslash"},
        c{"\xff\xfe", "UTF-8"}, c{"\xc0\xaf", "UTF-8"}, c{std::string(256, 'x'), "longer"},
        c{std::string(5000, 'x'), "longer"}}) {
    auto s = check_path(k.path);
    ASSERT_FALSE(s) << k.why;
    EXPECT_NE(s.error().message.find(k.why), std::string::npos) << s.error().message;
  }
}

TEST(DatasetGlob, Matches) {
  EXPECT_TRUE(glob_match("*.jpg", "a/b/c.jpg"));
  EXPECT_FALSE(glob_match("*.jpg", "a/b/c.png"));
  EXPECT_TRUE(glob_match("train/**", "train/x/y.jpg"));
  EXPECT_TRUE(glob_match("train/**/y.jpg", "train/y.jpg"));
  EXPECT_TRUE(glob_match("train/**/y.jpg", "train/a/b/y.jpg"));
  EXPECT_FALSE(glob_match("train/*", "train/a/b"));
  EXPECT_TRUE(glob_match("img_00[0-4].jpg", "x/img_003.jpg"));
  EXPECT_FALSE(glob_match("img_00[!0-4].jpg", "x/img_003.jpg"));
  EXPECT_TRUE(glob_match("a?c", "abc"));
  declaration d;
  d.include = {"train/**"};
  d.exclude = {"*.tmp"};
  EXPECT_TRUE(selected(d, "train/a.jpg"));
  EXPECT_FALSE(selected(d, "train/a.tmp"));
  EXPECT_FALSE(selected(d, "val/a.jpg"));
  std::mt19937_64 rng(9);
  const std::string alpha = "ab*?/[]!-.";
  for (int i = 0; i < 50000; ++i) {
    std::string p, s;
    for (std::size_t j = 0, n = rng() % 16; j < n; ++j) p += alpha[rng() % alpha.size()];
    for (std::size_t j = 0, n = rng() % 16; j < n; ++j) s += alpha[rng() % 3 == 0 ? 4 : rng() % 2];
    (void)glob_match(p, s);
  }
}

// The review's input (finding 12): many "**" against one deep path that does not match. A
// backtracking matcher takes C(path + k, k) steps (11 CPU-s at k = 7 and 60 levels); the dynamic
// programme takes |pattern| x |path| component matches.
TEST(DatasetGlob, ManyDoubleStarsStayLinear) {
  std::string path;
  for (int i = 0; i < 60; ++i) path += "d" + std::to_string(i) + "/";
  path += "file";
  std::string pattern;
  for (int i = 0; i < 7; ++i) pattern += "**/";
  pattern += "nomatch";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(glob_match(pattern, path));
  EXPECT_TRUE(glob_match(pattern.substr(0, pattern.size() - 7) + "file", path));
  EXPECT_TRUE(glob_match("**/d59/**", path));
  EXPECT_FALSE(glob_match("**/d59/**/d1/**", path));
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_LT(secs, 0.5) << "glob matching took " << secs << " s";
  // The longest pattern a declaration may hold (1024 bytes of "**/") against the longest path
  // (a backtracking matcher would not finish: hence the assertion above first).
  std::string longest;
  while (longest.size() + 3 <= 1024) longest += "**/";
  longest.pop_back();
  std::string deep;
  while (deep.size() + 3 <= max_path_bytes) deep += "a/";
  deep += "b";
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(glob_match(longest, deep));
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 0.5) << "glob matching took " << secs << " s";
}

TEST(DatasetDeclaration, ParsesOrigins) {
  auto d = parse_declaration(
      R"({"name":"ds","version":"v1","origin":{"url":"s3://bucket/some/prefix","endpoint":"http://127.0.0.1:4568"},"include":["**/*.jpg"]})");
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(d->origin.type, origin::kind::s3);
  EXPECT_EQ(d->origin.bucket, "bucket");
  EXPECT_EQ(d->origin.prefix, "some/prefix/");
  auto h =
      parse_declaration(R"({"name":"ds","version":"v1","origin":{"url":"http://10.0.0.1/data"}})");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->origin.type, origin::kind::http);
  EXPECT_EQ(h->origin.prefix, "http://10.0.0.1/data/");
  for (const char* bad :
       {"", "[]", R"({"name":"ds"})", R"({"name":"DS","version":"v1","origin":{"url":"s3://b"}})",
        R"({"name":"ds","version":"v1","origin":{"url":"ftp://x"}})",
        R"({"name":"ds","version":"v1","origin":{"url":"s3://Bad_Bucket/x"}})",
        R"({"name":"ds","version":"v1","origin":{"url":"s3://b"},"include":"x"})",
        R"({"name":"ds","version":1,"origin":{"url":"s3://b"}})"}) {
    EXPECT_FALSE(parse_declaration(bad)) << bad;
  }
}

file_entry file(const std::string& path, std::uint64_t size) {
  return file_entry{path, size, sha256_of(path + std::to_string(size))};
}

TEST(DatasetManifest, GroupsSmallFilesIntoPacksAndRoundTrips) {
  std::vector<file_entry> files;
  for (int i = 0; i < 100; ++i) files.push_back(file("small/" + std::to_string(i), 100000));
  files.push_back(file("big/a.bin", 50u << 20));
  files.push_back(file("empty", 0));
  grouping_policy p;
  p.small_file_max = 1u << 20;
  p.pack_target = 2u << 20;
  auto m = build_manifest("ds", "v1", "s3://b/p/", files, p);
  ASSERT_TRUE(m) << m.error().to_string();
  std::size_t packs = 0, singles = 0;
  for (const auto& g : m->groups) (g.type == group::kind::pack ? packs : singles)++;
  EXPECT_EQ(singles, 1u);
  EXPECT_EQ(packs, 5u);  // 100 × 100 kB in packs that close at 2 MiB
  auto text = canonical_json(*m);
  auto back = parse_manifest(text, manifest_digest(*m));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(canonical_json(*back), text);
  // A tampered byte breaks the digest check; a tampered group breaks coverage.
  std::string t2 = text;
  t2[t2.find("100000")] = '2';
  EXPECT_FALSE(parse_manifest(t2, manifest_digest(*m)));
  EXPECT_FALSE(parse_manifest(t2));  // sizes no longer add up
  // Duplicate or bad paths are refused.
  files.push_back(file("small/1", 5));
  EXPECT_FALSE(build_manifest("ds", "v1", "o", files, p));
  EXPECT_FALSE(build_manifest("ds", "v1", "o", {file("../etc/passwd", 1)}, p));
}

TEST(DatasetManifest, RandomInputNeverCrashes) {
  std::mt19937_64 rng(10);
  auto m = build_manifest("ds", "v1", "o", {file("a", 10), file("b", 5u << 20)});
  ASSERT_TRUE(m);
  std::string base = canonical_json(*m);
  for (int i = 0; i < 5000; ++i) {
    std::string t = base;
    for (int k = 0; k < 3; ++k) t[rng() % t.size()] = static_cast<char>(rng());
    (void)parse_manifest(t);
  }
}

}  // namespace
}  // namespace shoal::dataset
