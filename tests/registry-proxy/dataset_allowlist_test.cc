// Where dataset origins may go (datasets.allowed_origins): the address classes refused unless
// named, declarations checked against the list, and S3 credentials chosen by the configuration,
// never by the declaration (dataset_origin.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "registry-proxy/dataset_origin.h"

namespace shoal::proxy {
namespace {

namespace fs = std::filesystem;

TEST(DatasetAllowlist, AddressClasses) {
  for (const char* ip : {"127.0.0.1",
                         "127.5.6.7",
                         "10.1.2.3",
                         "172.16.0.1",
                         "172.31.255.255",
                         "192.168.1.1",
                         "169.254.169.254",
                         "100.64.0.1",
                         "0.0.0.0",
                         "224.0.0.1",
                         "255.255.255.255",
                         "::1",
                         "::",
                         "fe80::1",
                         "fd00::1",
                         "fc00::2",
                         "::ffff:127.0.0.1",
                         "::ffff:169.254.169.254",
                         "64:ff9b::a9fe:a9fe",
                         "2002:7f00:1::1",
                         "ff02::1",
                         "not an address"}) {
    EXPECT_FALSE(public_address(ip)) << ip;
  }
  for (const char* ip : {"8.8.8.8", "172.32.0.1", "100.128.0.1", "52.216.1.2",
                         "2606:4700:4700::1111", "::ffff:8.8.8.8"}) {
    EXPECT_TRUE(public_address(ip)) << ip;
  }
}

allowed_origin entry(const std::string& url) {
  auto e = http::parse_endpoint(url);
  EXPECT_TRUE(e) << url;
  allowed_origin a;
  a.at = *e;
  return a;
}

TEST(DatasetAllowlist, PolicyChecksOriginAndAddress) {
  auto allowed = std::make_shared<std::vector<allowed_origin>>();
  allowed->push_back(entry("http://127.0.0.1:8080"));
  allowed->push_back(entry("http://origin.example:80"));
  allowed->push_back(entry("http://internal.example"));
  allowed->back().private_addresses = true;
  auto p = dataset_connect_policy(allowed);
  auto hop = [](const std::string& url) { return *http::parse_endpoint(url); };
  EXPECT_TRUE(p.origin(hop("http://127.0.0.1:8080/x")));
  // Same host, another port: nothing.
  auto other = p.origin(hop("http://127.0.0.1:9000/x"));
  ASSERT_FALSE(other);
  EXPECT_TRUE(other.error().is(errc::unauthorized));
  EXPECT_FALSE(p.origin(hop("https://127.0.0.1:8080/x")));
  EXPECT_FALSE(p.origin(hop("http://169.254.169.254/latest")));
  // An IP literal names its own address; a host name may not resolve to a private one unless
  // its entry says so.
  EXPECT_TRUE(p.address(hop("http://127.0.0.1:8080"), "127.0.0.1"));
  EXPECT_FALSE(p.address(hop("http://127.0.0.1:8080"), "127.0.0.2"));
  EXPECT_TRUE(p.address(hop("http://origin.example"), "93.184.216.34"));
  auto rebound = p.address(hop("http://origin.example"), "169.254.169.254");
  ASSERT_FALSE(rebound);
  EXPECT_NE(rebound.error().message.find("link-local"), std::string::npos);
  EXPECT_TRUE(p.address(hop("http://internal.example"), "10.0.0.5"));
}

struct creds_dir {
  fs::path path;
  creds_dir() {
    std::string t = (fs::temp_directory_path() / "shoal-allow-XXXXXX").string();
    path = ::mkdtemp(t.data());
    std::ofstream(path / "bound.creds") << "BOUNDKEY:bound-secret\n";
    std::ofstream(path / "teamA.creds") << "TEAMAKEY:team-a-secret\n";
  }
  ~creds_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(DatasetAllowlist, DeclarationsUseOnlyListedOriginsAndBoundCredentials) {
  creds_dir dir;
  http::client http;
  origin_options oo;
  oo.credentials_dir = dir.path.string();
  auto allowed = std::make_shared<std::vector<allowed_origin>>();
  allowed->push_back(entry("http://127.0.0.1:8080"));
  allowed->push_back(entry("http://127.0.0.1:4568"));
  allowed->back().credentials_file = "bound.creds";
  allowed->back().buckets = {"team-b"};
  oo.allowed = allowed;
  auto make = [&](const std::string& json) {
    auto d = dataset::parse_declaration(json);
    EXPECT_TRUE(d) << json;
    return dataset_origin::make(*d, http, oo);
  };
  EXPECT_TRUE(make(R"({"name":"a","version":"v1","origin":{"url":"http://127.0.0.1:8080/x/"}})"));
  auto port = make(R"({"name":"a","version":"v1","origin":{"url":"http://127.0.0.1:9000/x/"}})");
  ASSERT_FALSE(port);
  EXPECT_TRUE(port.error().is(errc::unauthorized)) << port.error().message;
  EXPECT_NE(port.error().message.find("allowed_origins"), std::string::npos);
  // S3: the endpoint must be listed, the bucket among the entry's, and credentials the bound ones.
  const std::string s3 = R"({"name":"a","version":"v1","origin":{"url":"s3://)";
  EXPECT_TRUE(make(s3 + R"(team-b/p","endpoint":"http://127.0.0.1:4568"}})"));
  EXPECT_TRUE(make(
      s3 + R"(team-b/p","endpoint":"http://127.0.0.1:4568","credentials_file":"bound.creds"}})"));
  auto chosen = make(
      s3 + R"(team-b/p","endpoint":"http://127.0.0.1:4568","credentials_file":"teamA.creds"}})");
  ASSERT_FALSE(chosen);
  EXPECT_TRUE(chosen.error().is(errc::unauthorized)) << chosen.error().message;
  auto bucket = make(s3 + R"(other-teams-bucket/","endpoint":"http://127.0.0.1:4568"}})");
  ASSERT_FALSE(bucket);
  EXPECT_NE(bucket.error().message.find("bucket"), std::string::npos);
  auto endpoint = make(s3 + R"(team-b/","endpoint":"http://attacker.example:80"}})");
  ASSERT_FALSE(endpoint);
  EXPECT_TRUE(endpoint.error().is(errc::unauthorized));
  auto aws = make(s3 + R"(team-b/"}})");  // the AWS default endpoint is not listed either
  ASSERT_FALSE(aws);
}

}  // namespace
}  // namespace shoal::proxy
