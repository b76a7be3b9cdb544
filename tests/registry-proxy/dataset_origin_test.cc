// registry-proxy's dataset origin against a scripted HTTP origin: the nginx JSON listing walked
// recursively, objects streamed into the cache and verified, odd names refused with the rule they
// break, interrupted fetches resumed with Range from the staging file, an origin that ignores
// Range, and objects that changed under a version.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "test_util.h"
#include "../common/support/test_http_server.h"
#include "cache/store.h"
#include "common/sha256.h"
#include "registry-proxy/dataset_origin.h"

namespace shoal::proxy {
namespace {

namespace fs = std::filesystem;

using testing_util::bytes;

// A temporary directory of this test's own.
struct temp_dir : testing_util::temp_dir {
  temp_dir() : testing_util::temp_dir("shoal-origin") {}
};

// An HTTP origin: a map of paths to bodies, listings for directories, Range support that a test
// can switch off, and a hook to cut a body short.
struct origin_server {
  std::mutex mu;
  std::map<std::string, std::string> listings;  // "/dir/" → JSON
  std::map<std::string, std::string> files;     // "/dir/name" → bytes
  bool honour_range = true;
  std::optional<std::size_t> cut_after;   // close the first plain GET after this many bytes
  bool refuse_ranges = false;             // answer Range requests with 500
  bool ranges_unsatisfiable = false;      // answer Range requests with 416
  std::map<std::string, int> status_for;  // "/dir/name" → status answered instead of the file

  testing::reply operator()(const testing::recorded_request& r) {
    std::lock_guard lk(mu);
    std::string path = r.target.substr(0, r.target.find('?'));
    if (auto it = listings.find(path); it != listings.end())
      return {.status = 200, .body = it->second};
    if (auto st = status_for.find(path); st != status_for.end())
      return {.status = st->second, .body = "no"};
    auto it = files.find(path);
    if (it == files.end()) return {.status = 404, .body = "no"};
    auto range = r.header("Range");
    if (range && refuse_ranges) return {.status = 500, .body = "no ranges today"};
    if (range && ranges_unsatisfiable) return {.status = 416, .body = "not that range"};
    if (range && honour_range) {
      auto from = std::stoull(range->substr(6, range->find('-') - 6));
      testing::reply rep;
      rep.status = 206;
      rep.body = it->second.substr(from);
      rep.headers.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                                    std::to_string(it->second.size() - 1) + "/" +
                                                    std::to_string(it->second.size()));
      return rep;
    }
    testing::reply rep;
    rep.status = 200;
    rep.body = it->second;
    if (cut_after) {
      rep.close_after = *cut_after;
      cut_after.reset();
    }
    return rep;
  }
};

struct fixture : ::testing::Test {
  temp_dir tmp;
  origin_server os;
  std::unique_ptr<testing::test_http_server> srv;
  http::client http;
  std::unique_ptr<cache::store> store;
  std::string staging;
  std::atomic<bool> cancel{false};

  void SetUp() override {
    srv = std::make_unique<testing::test_http_server>(
        [this](const testing::recorded_request& r) { return os(r); });
    cache::options o;
    o.root = (tmp.path / "cache").string();
    o.quota_bytes = 256u << 20;
    o.scrub_bytes_per_sec = 0;
    auto s = cache::store::open(o);
    ASSERT_TRUE(s) << s.error().message;
    store = std::move(*s);
    staging = (tmp.path / "staging").string();
    fs::create_directories(staging);
  }

  std::unique_ptr<dataset_origin> origin(const std::string& include = "", int retries = 2) {
    std::string decl =
        R"({"name":"t","version":"v1","origin":{"url":")" + srv->url("/data/") + R"("}})";
    if (!include.empty()) decl.insert(decl.size() - 1, R"(,"include":[")" + include + R"("])");
    auto d = dataset::parse_declaration(decl);
    EXPECT_TRUE(d) << d.error().message;
    origin_options oo;
    oo.stall_timeout = std::chrono::milliseconds(1000);
    oo.max_retries = retries;
    auto o = dataset_origin::make(*d, http, oo);
    EXPECT_TRUE(o);
    return std::move(*o);
  }
};

using DatasetOrigin = fixture;

TEST_F(DatasetOrigin, ListsRecursivelyAndFetchesIntoTheCache) {
  os.listings["/data/"] =
      R"([{"name":"sub","type":"directory"},{"name":"a.txt","type":"file","size":5},
                              {"name":"skip.tmp","type":"file","size":1}])";
  os.listings["/data/sub/"] = R"([{"name":"b c.bin","type":"file","size":70000}])";
  os.files["/data/a.txt"] = "hello";
  os.files["/data/sub/b%20c.bin"] = bytes(70000, 1);
  auto o = origin("");
  auto l = o->list(cancel);
  ASSERT_TRUE(l) << l.error().message;
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0].path, "a.txt");
  EXPECT_EQ((*l)[2].path, "sub/b c.bin");
  for (std::size_t i : {0u, 2u}) {
    std::uint64_t seen = 0;
    auto r = o->fetch((*l)[i], *store, staging, std::nullopt, [&](std::uint64_t n) { seen += n; },
                      cancel);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(seen, (*l)[i].size);
    EXPECT_TRUE(store->contains(r->id));
    auto info = store->stat(r->id);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->kind, cache::object_kind::dataset_file);
  }
  EXPECT_TRUE(store->contains(sha256_of(std::string("hello"))));
  // The staging directory is empty again: every fetch was adopted.
  EXPECT_TRUE(fs::is_empty(staging));
  // Globs select.
  auto only = origin("**/*.bin")->list(cancel);
  ASSERT_TRUE(only);
  ASSERT_EQ(only->size(), 1u);
}

TEST_F(DatasetOrigin, RefusesNamesThatCannotBePaths) {
  struct c {
    std::string listing, rule;
  };
  for (const auto& k :
       {c{R"([{"name":"../../etc/passwd","type":"file","size":1}])", "'..'"},
        c{R"([{"name":"..","type":"directory"}])", "'..'"},
        c{R"([{"name":"/etc/passwd","type":"file","size":1}])", "absolute"},
        c{R"([{"name":"a\u0000b","type":"file","size":1}])", "NUL"},
        c{R"([{"name":"a\nb","type":"file","size":1}])", "control"},
        c{R"([{"name":")" + std::string(300, 'x') + R"(","type":"file","size":1}])", "longer"}}) {
    os.listings["/data/"] = k.listing;
    auto l = origin()->list(cancel);
    ASSERT_FALSE(l) << k.listing;
    EXPECT_NE(l.error().message.find(k.rule), std::string::npos) << l.error().message;
    EXPECT_NE(l.error().message.find("cannot be a dataset path"), std::string::npos)
        << l.error().message;
  }
}

TEST_F(DatasetOrigin, ResumesFromTheStagingFileWithRange) {
  std::string body = bytes(300000, 2);
  os.listings["/data/"] = R"([{"name":"big","type":"file","size":300000}])";
  os.files["/data/big"] = body;
  os.cut_after = 100000;
  os.refuse_ranges = true;  // the first fetch cannot resume: it fails with 100000 bytes staged
  auto o = origin("", 0);
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  auto first = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(first);
  // The bytes staged stay for the next fetch (the failure leaves a valid prefix).
  EXPECT_FALSE(fs::is_empty(staging)) << first.error().message;
  os.refuse_ranges = false;
  std::size_t before = srv->request_count();
  auto second = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->id, sha256_of(body));
  EXPECT_EQ(second->resumed_bytes, 100000u);
  EXPECT_EQ(second->origin_bytes, 200000u);
  auto reqs = srv->requests();
  ASSERT_GT(reqs.size(), before);
  EXPECT_EQ(reqs[before].header("Range").value_or(""), "bytes=100000-299999");
}

TEST_F(DatasetOrigin, StartsOverWhenTheOriginIgnoresRange) {
  std::string body = bytes(200000, 3);
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":200000}])";
  os.files["/data/f"] = body;
  os.cut_after = 50000;
  os.honour_range = false;
  auto o = origin("", 3);
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  auto r = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->id, sha256_of(body));
  EXPECT_TRUE(store->contains(sha256_of(body)));
}

TEST_F(DatasetOrigin, ChangedObjectsAreRefused) {
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":4}])";
  os.files["/data/f"] = "old!";
  auto o = origin();
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  auto first = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(first);
  // Same size, other bytes: the expected digest catches it.
  os.files["/data/f"] = "new!";
  auto again =
      o->fetch(origin_object{"f", 4, "refetch"}, *store, staging, first->id, nullptr, cancel);
  ASSERT_FALSE(again);
  EXPECT_TRUE(again.error().is(errc::digest_mismatch)) << again.error().message;
  // Longer than listed: refused while it streams.
  os.files["/data/f"] = "much longer now";
  auto longer =
      o->fetch(origin_object{"f", 4, "refetch2"}, *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(longer);
  EXPECT_TRUE(longer.error().is(errc::size_mismatch)) << longer.error().message;
  // Gone: not found, named.
  os.files.erase("/data/f");
  auto gone =
      o->fetch(origin_object{"f", 4, "refetch3"}, *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(gone);
  EXPECT_TRUE(gone.error().is(errc::not_found)) << gone.error().message;
}

// The staging file an earlier fetch left behind is longer than the object now listed: it is
// emptied and the object fetched from its first byte.
TEST_F(DatasetOrigin, StagingLongerThanTheObjectStartsOver) {
  std::string body = bytes(5000, 4);
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":5000}])";
  os.files["/data/f"] = body;
  auto o = origin();
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  std::string part = staging + "/" + staging_name(srv->url("/data/"), (*l)[0]) + ".part";
  {
    std::ofstream f(part, std::ios::binary);
    f << bytes(6000, 9);
  }
  std::size_t before = srv->request_count();
  auto r = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->id, sha256_of(body));
  EXPECT_EQ(r->resumed_bytes, 0u);
  EXPECT_EQ(r->origin_bytes, 5000u);
  EXPECT_EQ(r->requests, 1);
  auto reqs = srv->requests();
  ASSERT_EQ(reqs.size(), before + 1);
  EXPECT_FALSE(reqs[before].header("Range").has_value());
  EXPECT_FALSE(fs::exists(part));
}

// An origin that answers a resume with 416 (the object changed under us) makes the fetch start
// over from an empty staging file on the next request.
TEST_F(DatasetOrigin, UnsatisfiableRangeStartsOver) {
  std::string body = bytes(8000, 5);
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":8000}])";
  os.files["/data/f"] = body;
  os.ranges_unsatisfiable = true;
  auto o = origin("", 1);
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  std::string part = staging + "/" + staging_name(srv->url("/data/"), (*l)[0]) + ".part";
  {
    std::ofstream f(part, std::ios::binary);
    f << body.substr(0, 1000);
  }
  std::size_t before = srv->request_count();
  auto r = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->id, sha256_of(body));
  EXPECT_EQ(r->origin_bytes, 8000u);
  EXPECT_EQ(r->requests, 2);
  auto reqs = srv->requests();
  ASSERT_EQ(reqs.size(), before + 2);
  EXPECT_EQ(reqs[before].header("Range").value_or(""), "bytes=1000-7999");
  EXPECT_FALSE(reqs[before + 1].header("Range").has_value());
}

// Statuses the fetch does not retry, and the one it retries until it gives up.
TEST_F(DatasetOrigin, StatusesAreJudged) {
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":4}])";
  os.files["/data/f"] = "abcd";
  auto o = origin("", 1);
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  for (int status : {401, 403}) {
    os.status_for["/data/f"] = status;
    std::size_t before = srv->request_count();
    auto r = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().is(errc::unauthorized)) << r.error().message;
    EXPECT_NE(r.error().message.find("HTTP " + std::to_string(status)), std::string::npos)
        << r.error().message;
    EXPECT_EQ(srv->request_count(), before + 1);
  }
  os.status_for["/data/f"] = 410;
  auto gone = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(gone);
  EXPECT_TRUE(gone.error().is(errc::not_found)) << gone.error().message;
  EXPECT_NE(gone.error().message.find("HTTP 410"), std::string::npos) << gone.error().message;
  os.status_for["/data/f"] = 500;
  std::size_t before = srv->request_count();
  auto busy = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(busy);
  // Today the code is the transport's: on_response refused the status, so the request ended as
  // cancelled; only the message names the status.
  EXPECT_TRUE(busy.error().is(errc::cancelled)) << busy.error().message;
  EXPECT_NE(busy.error().message.find(": HTTP 500"), std::string::npos) << busy.error().message;
  EXPECT_EQ(srv->request_count(), before + 2);  // the first try and one retry
}

// A body that ends early without a transport error: the object shrank at the origin.
TEST_F(DatasetOrigin, ShortBodyIsASizeMismatch) {
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":10}])";
  os.files["/data/f"] = "abcd";
  auto o = origin();
  auto l = o->list(cancel);
  ASSERT_TRUE(l);
  auto r = o->fetch((*l)[0], *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().is(errc::size_mismatch)) << r.error().message;
  EXPECT_NE(r.error().message.find("is shorter than the listing said"), std::string::npos)
      << r.error().message;
}

// Fetching bytes the cache already holds succeeds, and leaves no staging file behind.
TEST_F(DatasetOrigin, AlreadyCachedContentIsNotAnError) {
  os.listings["/data/"] = R"([{"name":"f","type":"file","size":4}])";
  os.files["/data/f"] = "abcd";
  auto o = origin();
  auto first =
      o->fetch(origin_object{"f", 4, "v1"}, *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(first) << first.error().message;
  auto second =
      o->fetch(origin_object{"f", 4, "v2"}, *store, staging, std::nullopt, nullptr, cancel);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->id, first->id);
  EXPECT_TRUE(fs::is_empty(staging));
}

TEST_F(DatasetOrigin, CredentialsFilesStayInsideTheirDirectory) {
  auto d = dataset::parse_declaration(
      R"({"name":"t","version":"v1","origin":{"url":"s3://b/p","endpoint":"http://127.0.0.1:1","credentials_file":"../etc/shadow"}})");
  ASSERT_TRUE(d);
  origin_options oo;
  oo.credentials_dir = (tmp.path / "creds").string();
  auto o = dataset_origin::make(*d, http, oo);
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message.find("credentials_dir"), std::string::npos) << o.error().message;
  oo.credentials_dir.clear();
  d->origin.credentials_file = "x";
  auto none = dataset_origin::make(*d, http, oo);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("not configured"), std::string::npos) << none.error().message;
}

}  // namespace
}  // namespace shoal::proxy
