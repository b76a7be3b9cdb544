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

// Strict UTF-8, as nlohmann's dump() wants it (an error ends up in a persisted JSON record).
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;
    if (n == 4 || i + n >= s.size() + (n == 0 ? 1 : 0)) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

// Review F2: the server's <Code> and <Message> went raw into the error, so non-UTF-8 bytes made
// the resolver's persist() throw. They are now quoted (ASCII), bounded, and the XML is checked.
TEST(S3List, ErrorCodeAndMessageAreQuotedBoundedAndUtf8) {
  auto raw = parse_list_page(
      "<Error><Code>\xff\xfe"
      "Bad</Code><Message>m</Message></Error>");
  ASSERT_FALSE(raw);
  EXPECT_TRUE(valid_utf8(raw.error().message)) << raw.error().message;
  std::string long_doc = "<Error><Code>Slow\"Down\n\xc3\xa9</Code><Message>" +
                         std::string(10000, 'A') + "</Message></Error>";
  auto big = parse_list_page(long_doc);
  ASSERT_FALSE(big);
  EXPECT_TRUE(big.error().is(errc::upstream_error)) << big.error().to_string();
  EXPECT_LE(big.error().message.size(), 400u);
  EXPECT_TRUE(valid_utf8(big.error().message));
  EXPECT_EQ(big.error().message.find('\n'), std::string::npos);
  EXPECT_NE(big.error().message.find("Slow\\x22Down\\x0a\\xc3\\xa9"), std::string::npos)
      << big.error().message;
}

// No DTD: nothing can declare entities (billion laughs) or name external ones.
TEST(S3List, RefusesDoctypes) {
  std::string laughs = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">";
  laughs += "<!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">";
  for (int i = 2; i <= 9; ++i) {
    laughs += "<!ENTITY lol" + std::to_string(i) + " \"";
    for (int k = 0; k < 10; ++k) laughs += "&lol" + std::to_string(i - 1) + ";";
    laughs += "\">";
  }
  laughs +=
      "]><ListBucketResult><Contents><Key>&lol9;</Key><Size>1</Size></Contents>"
      "</ListBucketResult>";
  auto bomb = parse_list_page(laughs);
  ASSERT_FALSE(bomb);
  EXPECT_NE(bomb.error().message.find("DOCTYPE refused"), std::string::npos)
      << bomb.error().message;
  auto plain = parse_list_page(
      "<!DOCTYPE x [<!ENTITY k \"v\">]><ListBucketResult><Contents><Key>a</Key><Size>1</Size>"
      "</Contents></ListBucketResult>");
  EXPECT_FALSE(plain);
  EXPECT_FALSE(parse_list_page(
      "<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><ListBucketResult></ListBucketResult>"));
}

// Found by fuzz_s3_xml: a 20-digit Size passed the digit check and std::stoull threw
// std::out_of_range out of the parser (an uncaught exception in the resolver thread).
TEST(S3List, RefusesSizesBeyond64Bits) {
  auto p = parse_list_page(
      "<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("bad Size"), std::string::npos) << p.error().message;
}

// XML is parsed as XML: CDATA, comments, attributes, nested elements of the same name, other
// encodings; a key that looks like markup is a key.
TEST(S3List, ParsesXmlAsXml) {
  auto p = parse_list_page(
      "<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<ListBucketResult xmlns=\"x\">"
      "<!-- a comment --><Contents><Size>3</Size><Owner><Key>not-this</Key></Owner>"
      "<Key><![CDATA[a</Key><Size>5</Size>]]></Key></Contents>"
      "<Contents><Key xml:space=\"preserve\">caf\xe9</Key><Size>0</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_TRUE(p) << p.error().to_string();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].key, "a</Key><Size>5</Size>");
  EXPECT_EQ(p->objects[0].size, 3u);
  EXPECT_EQ(p->objects[1].key, "caf\xc3\xa9");
  // S3 writes a key's control characters as references XML 1.0 forbids: refused, and said so.
  auto ctl = parse_list_page(
      "<ListBucketResult><Contents><Key>a&#1;b</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_FALSE(ctl);
  EXPECT_NE(ctl.error().message.find("control character"), std::string::npos);
  std::string deep = "<ListBucketResult>";
  for (int i = 0; i < 100; ++i) deep += "<a>";
  for (int i = 0; i < 100; ++i) deep += "</a>";
  EXPECT_FALSE(parse_list_page(deep + "</ListBucketResult>"));
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
