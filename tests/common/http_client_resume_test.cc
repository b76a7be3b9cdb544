// http_client: resuming a cut body, redirects and what crosses them, HTTPS.
#include "common/http_client.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "http_client_test_util.h"
#include "support/test_http_server.h"
#include "support/test_tls.h"

namespace shoal::http {
namespace {

using namespace std::chrono_literals;
using namespace shoal::http::client_test;
using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;
using shoal::testing::test_tls_identity;
using steady = std::chrono::steady_clock;

test_http_server::handler resumable_blob(const std::string& body, std::size_t cut,
                                         bool answer_range_with_200 = false) {
  return [&body, cut, answer_range_with_200](const recorded_request& req) {
    reply r;
    r.headers.emplace_back("ETag", "\"v1\"");
    auto range = req.header("Range");
    if (req.index == 0) {
      r.body = body;
      if (range) {
        // The caller's own range: bytes=a-b.
        std::uint64_t a = range_start(req);
        std::uint64_t b = std::stoull(range->substr(range->find('-') + 1));
        r.status = 206;
        r.body = body.substr(a, b - a + 1);
        r.headers.emplace_back("Content-Range", "bytes " + std::to_string(a) + "-" +
                                                    std::to_string(b) + "/" +
                                                    std::to_string(body.size()));
      }
      r.close_after = cut;
      return r;
    }
    if (!range || answer_range_with_200) {
      r.body = body;
      return r;
    }
    std::uint64_t a = range_start(req);
    std::uint64_t last = body.size() - 1;
    auto dash = range->find('-');
    if (dash + 1 < range->size()) last = std::stoull(range->substr(dash + 1));
    r.status = 206;
    r.body = body.substr(a, last - a + 1);
    r.headers.emplace_back("Content-Range", "bytes " + std::to_string(a) + "-" +
                                                std::to_string(last) + "/" +
                                                std::to_string(body.size()));
    return r;
  };
}

TEST(HttpClient, ResumesAfterServerClosesMidBody) {
  const std::string body = random_bytes(200'000, 3);
  test_http_server srv(resumable_blob(body, 70'000));
  client c;
  collector col;
  client_request r = get(srv.url("/v2/blobs/x"));
  r.resume = true;
  c.submit(r, col.make());
  ASSERT_TRUE(col.wait());
  ASSERT_TRUE(col.done->has_value()) << col.done->error().to_string();
  EXPECT_TRUE(col.body == body) << "delivered " << col.body.size() << " bytes, not identical";
  const completion& done = **col.done;
  EXPECT_EQ(done.status, 200);  // seamless: the caller sees the first answer
  EXPECT_EQ(done.bytes, body.size());
  EXPECT_EQ(done.resumes, 1);
  EXPECT_EQ(done.attempts, 2);
  EXPECT_EQ(col.heads.size(), 1u);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_FALSE(reqs[0].header("Range").has_value());
  EXPECT_EQ(reqs[1].header("Range"), "bytes=70000-");
  EXPECT_EQ(reqs[1].header("If-Range"), "\"v1\"");
}

TEST(HttpClient, ResumeKeepsTheCallersRange) {
  const std::string body = random_bytes(200'000, 4);
  test_http_server srv(resumable_blob(body, 30'000));
  client c;
  client_request r = get(srv.url("/blob"));
  r.headers.emplace_back("Range", "bytes=1000-99999");
  r.resume = true;
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->status, 206);
  EXPECT_TRUE(res->body == body.substr(1000, 99'000));
  EXPECT_EQ(res->info.resumes, 1);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].header("Range"), "bytes=31000-99999");
}

TEST(HttpClient, ResumeAnswered200IsErrorWithoutDuplicatedBytes) {
  const std::string body = random_bytes(100'000, 5);
  test_http_server srv(resumable_blob(body, 40'000, /*answer_range_with_200=*/true));
  client c;
  collector col;
  client_request r = get(srv.url("/blob"));
  r.resume = true;
  c.submit(r, col.make());
  ASSERT_TRUE(col.wait());
  ASSERT_FALSE(col.done->has_value());
  EXPECT_TRUE(col.done->error().is(errc::protocol_error)) << col.done->error().to_string();
  EXPECT_NE(col.done->error().message.find("resume at byte 40000"), std::string::npos)
      << col.done->error().message;
  EXPECT_EQ(col.body.size(), 40'000u);
  EXPECT_TRUE(col.body == body.substr(0, 40'000));
  EXPECT_EQ(srv.request_count(), 2u);
}

TEST(HttpClient, ResumesRepeatedlyWhileMakingProgress) {
  // Every answer breaks after 20 000 bytes of its own body, alternately by closing and by
  // stalling: five pieces need four resumes, more than max_retries, which counts only
  // consecutive failures without progress.
  const std::string body = random_bytes(100'000, 8);
  test_http_server srv([&](const recorded_request& req) {
    reply r;
    std::uint64_t a = range_start(req);
    r.body = body.substr(a);
    if (a > 0) {
      r.status = 206;
      r.headers.emplace_back("Content-Range", "bytes " + std::to_string(a) + "-" +
                                                  std::to_string(body.size() - 1) + "/" +
                                                  std::to_string(body.size()));
    }
    if (r.body.size() > 20'000) {
      if (req.index % 2 == 0)
        r.close_after = 20'000;
      else
        r.stall_after = 20'000;
    }
    return r;
  });
  client c;
  client_request r = get(srv.url("/blob"));
  r.resume = true;
  r.max_retries = 2;
  r.timeouts.stall = 200ms;
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_TRUE(res->body == body);
  EXPECT_EQ(res->info.resumes, 4);
  EXPECT_EQ(res->info.attempts, 5);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 5u);
  for (std::size_t i = 1; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].header("Range"), "bytes=" + std::to_string(i * 20'000) + "-");
  }
}

TEST(HttpClient, NoResumeWithoutOptIn) {
  const std::string body = random_bytes(50'000, 6);
  test_http_server srv(resumable_blob(body, 10'000));
  client c;
  auto res = fetch(c, get(srv.url("/blob")));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::io_error)) << res.error().to_string();
  EXPECT_EQ(srv.request_count(), 1u);
}

TEST(HttpClient, RedirectSameOriginKeepsAuthorization) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target == "/a") {
      r.status = 302;
      r.headers.emplace_back("Location", "/b");
    } else {
      r.body = "at b";
    }
    return r;
  });
  client c;
  client_request r = get(srv.url("/a"));
  r.headers.emplace_back("Authorization", "Bearer secret");
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->body, "at b");
  EXPECT_EQ(res->info.redirects, 1);
  EXPECT_EQ(res->info.url, srv.url("/b"));
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].target, "/b");
  EXPECT_EQ(reqs[1].header("Authorization"), "Bearer secret");
}

void expect_credentials_dropped(const std::string& other_address) {
  test_http_server storage(
      [](const recorded_request&) {
        reply r;
        r.body = "blob bytes";
        return r;
      },
      other_address);
  test_http_server registry([&](const recorded_request&) {
    reply r;
    r.status = 307;
    r.headers.emplace_back("Location", storage.url("/bucket/blob?X-Signature=abc"));
    return r;
  });
  client c;
  client_request r = get(registry.url("/v2/x/blobs/sha256:1"));
  r.headers.emplace_back("Authorization", "Bearer secret");
  r.headers.emplace_back("X-Registry-Token", "also secret");
  r.headers.emplace_back("X-Trace", "kept");
  r.redirects.credential_headers = {"x-registry-token"};
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->body, "blob bytes");
  EXPECT_EQ(res->info.url, storage.url("/bucket/blob?X-Signature=abc"));
  ASSERT_EQ(registry.request_count(), 1u);
  EXPECT_EQ(registry.requests()[0].header("Authorization"), "Bearer secret");
  auto got = storage.requests();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].target, "/bucket/blob?X-Signature=abc");
  EXPECT_FALSE(got[0].header("Authorization").has_value());
  EXPECT_FALSE(got[0].header("X-Registry-Token").has_value());
  EXPECT_EQ(got[0].header("X-Trace"), "kept");
}

TEST(HttpClient, RedirectToOtherPortDropsAuthorization) { expect_credentials_dropped("127.0.0.1"); }

TEST(HttpClient, RedirectToOtherHostDropsAuthorization) { expect_credentials_dropped("127.0.0.2"); }

TEST(HttpClient, RedirectLoopIsError) {
  test_http_server srv([](const recorded_request&) {
    reply r;
    r.status = 302;
    r.headers.emplace_back("Location", "/loop");
    return r;
  });
  client c;
  auto res = fetch(c, get(srv.url("/loop")));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::protocol_error)) << res.error().to_string();
  EXPECT_NE(res.error().message.find("too many redirects (5)"), std::string::npos)
      << res.error().message;
  EXPECT_EQ(srv.request_count(), 6u);  // the first request and 5 hops
}

TEST(HttpClient, RelativeRedirectIsResolved) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target == "/v2/lib/img/manifests/latest") {
      r.status = 301;
      r.headers.emplace_back("Location", "../blobs/sha256:abc?x=1");
    } else {
      r.body = req.target;
    }
    return r;
  });
  client c;
  auto res = fetch(c, get(srv.url("/v2/lib/img/manifests/latest")));
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(res->body, "/v2/lib/img/blobs/sha256:abc?x=1");
}

TEST(HttpClient, SeeOtherTurnsPostIntoGet) {
  test_http_server srv([](const recorded_request& req) {
    reply r;
    if (req.target == "/form") {
      r.status = 303;
      r.headers.emplace_back("Location", "/done");
    } else {
      r.body = "done";
    }
    return r;
  });
  client c;
  client_request r = get(srv.url("/form"));
  r.method = "POST";
  r.body = "a=1";
  r.headers.emplace_back("Content-Type", "application/x-www-form-urlencoded");
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].body, "a=1");
  EXPECT_EQ(reqs[1].method, "GET");
  EXPECT_EQ(reqs[1].body, "");
  EXPECT_FALSE(reqs[1].header("Content-Type").has_value());
}

TEST(HttpClient, CustomizeHookRunsOnSameOriginAttemptsOnly) {
  test_http_server other([](const recorded_request&) { return reply{}; });
  test_http_server srv([&](const recorded_request& req) {
    reply r;
    if (req.target == "/start") {
      r.status = 307;
      r.headers.emplace_back("Location", "/same");
    } else if (req.target == "/same") {
      r.status = 307;
      r.headers.emplace_back("Location", other.url("/elsewhere"));
    }
    return r;
  });
  client c;
  std::atomic<int> calls{0};
  client_request r = get(srv.url("/start"));
  r.customize = [&](CURL* e) {
    calls++;
    curl_easy_setopt(e, CURLOPT_REFERER, "from-customize");
  };
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_EQ(calls.load(), 2);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].header("Referer"), "from-customize");
  EXPECT_EQ(reqs[1].header("Referer"), "from-customize");
  ASSERT_EQ(other.request_count(), 1u);
  EXPECT_FALSE(other.requests()[0].header("Referer").has_value());
}

TEST(HttpClient, HttpsWithCaFileAndResume) {
  test_tls_identity id;
  const std::string body = random_bytes(300'000, 7);
  test_http_server srv(resumable_blob(body, 100'000), "127.0.0.1", id.server_ctx());
  client_options o;
  o.ca_file = id.ca_file();
  client c(o);
  client_request r = get(srv.url("/v2/blobs/y"));
  r.resume = true;
  auto res = fetch(c, r);
  ASSERT_TRUE(res.has_value()) << res.error().to_string();
  EXPECT_TRUE(res->body == body);
  EXPECT_EQ(res->info.resumes, 1);
  EXPECT_EQ(srv.requests().at(1).header("Range"), "bytes=100000-");
}

TEST(HttpClient, HttpsUntrustedCertificateIsRejectedWithoutRetry) {
  test_tls_identity id;
  test_http_server srv([](const recorded_request&) { return reply{}; }, "127.0.0.1",
                       id.server_ctx());
  client c;  // system CA store only
  auto res = fetch(c, get(srv.url("/")));
  ASSERT_FALSE(res.has_value());
  EXPECT_TRUE(res.error().is(errc::unauthorized)) << res.error().to_string();
  EXPECT_EQ(res.error().message.find("attempts"), std::string::npos) << res.error().message;
  EXPECT_EQ(srv.request_count(), 0u);

  client_options o;
  o.insecure = true;
  client lax(o);
  auto ok = fetch(lax, get(srv.url("/")));
  ASSERT_TRUE(ok.has_value()) << ok.error().to_string();
  EXPECT_EQ(ok->status, 200);
}

}  // namespace
}  // namespace shoal::http
