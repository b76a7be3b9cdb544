#include "common/oci.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "common/platform.h"

namespace shoal::oci {
namespace {

TEST(OciName, ValidAndInvalid) {
  for (const char* ok : {"a", "library/nginx", "a/b/c", "my-app", "my--app", "my_app", "my__app",
                         "my.app", "a0/b1.c2_d3__e4-f5", "test/app"}) {
    EXPECT_TRUE(valid_name(ok)) << ok;
  }
  for (const char* bad : {"",    "A",     "Library/nginx", "a//b", "/a",     "a/",  "-a",
                          "a-",  "a___b", "a..b",          "a._b", "a/../b", "..",  "a/./b",
                          "a b", "a\nb",  "a:b",           "a@b",  "%2e%2e", "a/B", "é"}) {
    EXPECT_FALSE(valid_name(bad)) << bad;
  }
  EXPECT_TRUE(valid_name(std::string(255, 'a')));
  EXPECT_FALSE(valid_name(std::string(256, 'a')));
}

TEST(OciTag, ValidAndInvalid) {
  for (const char* ok : {"latest", "v1", "V1.2.3", "_x", "a-b.c_d", "1"})
    EXPECT_TRUE(valid_tag(ok)) << ok;
  for (const char* bad : {"", "-x", ".x", "a/b", "a:b", "a b", "a\x01", "a@b"})
    EXPECT_FALSE(valid_tag(bad)) << bad;
  EXPECT_TRUE(valid_tag(std::string(128, 'a')));
  EXPECT_FALSE(valid_tag(std::string(129, 'a')));
}

TEST(OciHost, Forms) {
  for (const char* ok : {"docker.io", "localhost", "127.0.0.1:5000", "[::1]:5000", "[::1]",
                         "registry.example.com", "a-b.example:443"}) {
    EXPECT_TRUE(valid_registry_host(ok)) << ok;
  }
  for (const char* bad : {"", "a..b", "-a.com", "a.com:", "a.com:0", "a.com:70000", "a.com:x",
                          "a_b.com", "[::1", "[]:5", "a/b", "a.com/"}) {
    EXPECT_FALSE(valid_registry_host(bad)) << bad;
  }
}

TEST(OciManifestRef, TagOrDigest) {
  auto t = parse_manifest_ref("v1");
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->is_digest());
  auto d =
      parse_manifest_ref("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->is_digest());
  EXPECT_FALSE(parse_manifest_ref("sha512:abc"));
  EXPECT_FALSE(parse_manifest_ref("../etc"));
  EXPECT_FALSE(parse_manifest_ref(""));
}

TEST(OciImageRef, Normalization) {
  struct c {
    const char* in;
    const char* out;
  };
  for (auto [in, out] : {
           c{"nginx", "docker.io/library/nginx:latest"},
           c{"nginx:1.25", "docker.io/library/nginx:1.25"},
           c{"user/app", "docker.io/user/app:latest"},
           c{"docker.io/nginx", "docker.io/library/nginx:latest"},
           c{"index.docker.io/library/nginx", "docker.io/library/nginx:latest"},
           c{"localhost/app", "localhost/app:latest"},
           c{"127.0.0.1:5000/test/app:v1", "127.0.0.1:5000/test/app:v1"},
           c{"registry.example.com/team/app", "registry.example.com/team/app:latest"},
           c{"nginx@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
             "docker.io/library/"
             "nginx@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
           c{"h:1/a:t@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
             "h:1/a:t@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
       }) {
    auto r = parse_image_ref(in);
    ASSERT_TRUE(r) << in << ": " << r.error().to_string();
    EXPECT_EQ(r->str(), out) << in;
  }
  for (const char* bad :
       {"", "NGINX", "nginx:", "nginx@sha256:xyz", "a//b", "host:99999/app", "nginx:-bad", ":tag",
        "@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}) {
    EXPECT_FALSE(parse_image_ref(bad)) << bad;
  }
}

// The whole name is at most 255 characters, host and Docker Hub's "library/" included (as
// containerd and Docker count it), so every reference accepted is accepted again as it prints:
// a 250-character "ubuntu…" was accepted and its normalised form refused (found by fuzz_oci).
TEST(OciImageRef, TheWholeNameIsAtMost255CharactersOnceNormalised) {
  const std::string at_limit(255 - std::string("docker.io/library/").size(), 'a');
  auto ok = parse_image_ref(at_limit);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->str().size(), 255 + std::string(":latest").size());
  auto again = parse_image_ref(ok->str());
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->str(), ok->str());

  auto over = parse_image_ref(at_limit + "a");
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message.find("longer than 255 characters"), std::string::npos)
      << over.error().message;
  std::string host = "registry.example.com:5000/";
  EXPECT_TRUE(parse_image_ref(host + std::string(255 - host.size(), 'b')));
  EXPECT_FALSE(parse_image_ref(host + std::string(256 - host.size(), 'b')));
  // A name valid on its own (255 characters) is too long behind a host.
  EXPECT_TRUE(valid_name(std::string(255, 'c')));
  EXPECT_FALSE(parse_image_ref(host + std::string(255, 'c')));
}

TEST(OciImageRef, RandomInputNeverCrashes) {
  std::mt19937_64 rng(5);
  const std::string alpha = "abcAZ09:/@._-[]sha256:";
  for (int i = 0; i < 100000; ++i) {
    std::string s;
    for (std::size_t j = 0, n = rng() % 40; j < n; ++j) s += alpha[rng() % alpha.size()];
    auto r = parse_image_ref(s);
    if (r) {
      EXPECT_TRUE(valid_name(r->repository)) << s;
      EXPECT_TRUE(valid_registry_host(r->registry)) << s;
    }
    (void)valid_name(s);
    (void)valid_tag(s);
    (void)valid_registry_host(s);
  }
}

TEST(OciErrors, BodyShape) {
  auto b = error_body(error_code::blob_unknown, "blob unknown to registry");
  EXPECT_EQ(b, R"({"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]})");
  auto d = error_body(error_code::name_invalid, "bad \"name\"\n", R"({"name":"x"})");
  EXPECT_NE(d.find(R"("detail":{"name":"x"})"), std::string::npos);
  EXPECT_NE(d.find(R"(bad \"name\"\n)"), std::string::npos);
}

TEST(OciMediaType, FromBody) {
  EXPECT_EQ(manifest_media_type_of(
                R"({"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]})")
                .value(),
            media::oci_index);
  EXPECT_EQ(manifest_media_type_of(R"({"schemaVersion":2,"config":{},"layers":[]})").value(),
            media::oci_manifest);
  EXPECT_FALSE(manifest_media_type_of("not json"));
  EXPECT_FALSE(manifest_media_type_of("[]"));
}

TEST(OciIndex, ManifestForPlatformSkipsWhatIsMalformed) {
  using nlohmann::json;
  const std::string amd = "sha256:" + std::string(64, 'a'), arm = "sha256:" + std::string(64, 'b'),
                    v7 = "sha256:" + std::string(64, 'c');
  // Every shape a hostile or broken index may take is skipped, not thrown on: a platform that
  // is a string or null, os or architecture that are numbers, a digest that is not a string.
  auto index = json::parse(R"({"manifests":[
      7, null, "x",
      {"platform":"linux/amd64","digest":"sha256:bad"},
      {"platform":null,"digest":"sha256:bad"},
      {"platform":{"os":1,"architecture":"amd64"},"digest":"sha256:bad"},
      {"platform":{"os":"linux","architecture":["amd64"]},"digest":"sha256:bad"},
      {"platform":{"os":"linux","architecture":"amd64"},"digest":42},
      {"platform":{"os":"linux","architecture":"amd64"},"digest":")" +
                           amd + R"("},
      {"platform":{"os":"linux","architecture":"arm","variant":"v6"},"digest":"sha256:v6"},
      {"platform":{"os":"linux","architecture":"arm","variant":"v7"},"digest":")" +
                           v7 + R"("},
      {"platform":{"os":"linux","architecture":"arm64"},"digest":")" +
                           arm + R"("}]})");
  EXPECT_EQ(index_manifest_for(index, "linux/amd64"), amd);
  EXPECT_EQ(index_manifest_for(index, "linux/arm64"), arm);
  EXPECT_EQ(index_manifest_for(index, "linux/arm64/v8"), arm);  // no variant listed: it matches
  EXPECT_EQ(index_manifest_for(index, "linux/arm/v7"), v7);
  EXPECT_EQ(index_manifest_for(index, "linux/arm"), "sha256:v6");  // the first of os and arch
  EXPECT_EQ(index_manifest_for(index, "linux/s390x"), "");
  EXPECT_EQ(index_manifest_for(index, "windows"), "");
  EXPECT_EQ(index_manifest_for(index, ""), "");
  for (const char* bad : {R"({"manifests":{"a":1}})", R"({"manifests":"x"})", R"([1,2])", "null",
                          R"({"manifests":null})", "{}"}) {
    EXPECT_EQ(index_manifest_for(json::parse(bad), "linux/amd64"), "") << bad;
  }
}

}  // namespace
}  // namespace shoal::oci
