#include "registry-proxy/s3.h"

#include <gtest/gtest.h>

#include <random>

#include "../common/support/test_http_server.h"

namespace shoal::s3 {
namespace {

using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;

// AWS's published SigV4 test suite (aws-sig-v4-test-suite): credentials, date, region, service.
config aws_example_config(const std::string& endpoint) {
  config c;
  c.endpoint = endpoint;
  c.region = "us-east-1";
  c.creds.access_key = "AKIDEXAMPLE";
  c.creds.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  return c;
}

std::string signed_authorization(const std::string& method, const std::string& path_and_query) {
  test_http_server srv([](const recorded_request&) { return reply{}; });
  // The vectors sign exactly host and x-amz-date: no User-Agent here.
  http::client_options o;
  o.user_agent = "";
  http::client hc(o);
  client c(hc, aws_example_config(srv.base()));
  http::client_request r;
  r.method = method;
  r.url = srv.base() + path_and_query;
  r.headers.emplace_back("Host", "example.amazonaws.com");
  r.headers.emplace_back("X-Amz-Date", "20150830T123600Z");
  c.sign(r, "service");
  auto f = http::fetch(hc, std::move(r));
  EXPECT_TRUE(f) << (f ? "" : f.error().to_string());
  auto reqs = srv.requests();
  if (reqs.empty()) return {};
  return reqs.front().header("Authorization").value_or("");
}

TEST(S3SigV4, MatchesAwsGetVanilla) {
  EXPECT_EQ(signed_authorization("GET", "/"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(S3SigV4, MatchesAwsGetVanillaQueryOrderKeyCase) {
  EXPECT_EQ(signed_authorization("GET", "/?Param2=value2&Param1=value1"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

const char* kPage1 = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>ds</Name><Prefix>p/</Prefix>
<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<NextContinuationToken>tok&amp;1/+=</NextContinuationToken>
<Contents><Key>p/a&amp;b.txt</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&quot;abc&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>p/caf&#xE9;.bin</Key><ETag>"def"</ETag><Size>0</Size></Contents>
</ListBucketResult>)";

const char* kPage2 = R"(<ListBucketResult><IsTruncated>false</IsTruncated>
<Contents><Key>p/z</Key><Size>99999999999</Size></Contents></ListBucketResult>)";

TEST(S3List, ParsesPagesEntitiesAndErrors) {
  auto p = parse_list_page(kPage1);
  ASSERT_TRUE(p) << p.error().to_string();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].key, "p/a&b.txt");
  EXPECT_EQ(p->objects[0].etag, "abc");
  EXPECT_EQ(p->objects[0].size, 12u);
  EXPECT_EQ(p->objects[1].key, "p/caf\xc3\xa9.bin");
  EXPECT_TRUE(p->truncated);
  EXPECT_EQ(p->next_token, "tok&1/+=");
  auto e = parse_list_page(
      "<Error><Code>NoSuchBucket</Code><Message>The bucket does not exist</Message></Error>");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("NoSuchBucket"), std::string::npos);
  for (const char* bad :
       {"", "<ListBucketResult><Contents><Key>x</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>x</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>&bogus;</Key><Size>1</Size></Contents></"
        "ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><Contents><Key>x</Key><Size>1</Size>"}) {
    EXPECT_FALSE(parse_list_page(bad)) << bad;
  }
  std::mt19937_64 rng(3);
  std::string base = kPage1;
  for (int i = 0; i < 20000; ++i) {
    std::string t = base;
    for (int k = 0; k < 4; ++k) t[rng() % t.size()] = static_cast<char>(rng());
    (void)parse_list_page(t);
  }
}

TEST(S3List, FollowsContinuationTokensWithSortedParameters) {
  test_http_server srv([](const recorded_request& r) {
    reply rep;
    rep.headers.emplace_back("Content-Type", "application/xml");
    rep.body = r.target.find("continuation-token=") == std::string::npos ? kPage1 : kPage2;
    return rep;
  });
  http::client hc;
  config cfg = aws_example_config(srv.base());
  cfg.bucket = "ds";
  client c(hc, cfg);
  auto objs = c.list("p/");
  ASSERT_TRUE(objs) << objs.error().to_string();
  ASSERT_EQ(objs->size(), 3u);
  EXPECT_EQ((*objs)[2].size, 99999999999ull);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].target, "/ds?list-type=2&max-keys=1000&prefix=p%2F");
  EXPECT_EQ(reqs[1].target,
            "/ds?continuation-token=tok%261%2F%2B%3D&list-type=2&max-keys=1000&prefix=p%2F");
  ASSERT_TRUE(reqs[0].header("Authorization"));
  EXPECT_EQ(reqs[0].header("Authorization")->rfind("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 0),
            0u);
  EXPECT_EQ(reqs[0].header("x-amz-content-sha256").value_or(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(S3Url, EncodesKeys) {
  EXPECT_EQ(uri_encode("a b/c+d~e", true), "a%20b/c%2Bd~e");
  EXPECT_EQ(uri_encode("a/b", false), "a%2Fb");
  http::client hc;
  config cfg;
  cfg.endpoint = "http://h:1/";
  cfg.bucket = "bk";
  EXPECT_EQ(client(hc, cfg).object_url("dir/file name.txt"), "http://h:1/bk/dir/file%20name.txt");
}

TEST(S3Credentials, FromFileAndEnvironment) {
  char tmpl[] = "/tmp/shoal-s3-cred-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  std::string content = "AK123:SECRET/xyz\n";
  ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
  auto c = load_credentials(tmpl);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->access_key, "AK123");
  EXPECT_EQ(c->secret_key, "SECRET/xyz");
  ::unlink(tmpl);
  EXPECT_FALSE(load_credentials("/nonexistent/creds"));
  ::unsetenv("AWS_ACCESS_KEY_ID");
  EXPECT_FALSE(load_credentials(""));
  ::setenv("AWS_ACCESS_KEY_ID", "a", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  auto e = load_credentials("");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->access_key, "a");
}

}  // namespace
}  // namespace shoal::s3
