// The HTTP client's connect policy (http_client.h): checked for the request's URL, every redirect
// hop, and every address connected to; a refusal is final and nothing of the refused hop is
// fetched. Clients and requests without a policy keep going anywhere.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "common/http_client.h"
#include "common/utf8.h"
#include "support/test_http_server.h"

namespace shoal::http {
namespace {

using shoal::testing::recorded_request;
using shoal::testing::reply;
using shoal::testing::test_http_server;

client_request get(std::string url) {
  client_request r;
  r.url = std::move(url);
  r.max_retries = 2;
  return r;
}

std::string key(const endpoint& e) { return e.scheme + "://" + e.host + ":" + e.port; }

// Allows exactly the endpoints listed (and every address of them).
connect_policy only(std::vector<std::string> allowed) {
  connect_policy p;
  p.origin = [allowed](const endpoint& e) -> status {
    for (const auto& a : allowed) {
      if (a == key(e)) return {};
    }
    return fail(errc::unauthorized, key(e) + " is not allowed");
  };
  return p;
}

// A server answering 200 with `body` to everything.
test_http_server body_server(std::string body) {
  return test_http_server([body = std::move(body)](const recorded_request&) {
    reply r;
    r.body = body;
    return r;
  });
}

test_http_server redirector(const std::string& location) {
  return test_http_server([location](const recorded_request&) {
    reply r;
    r.status = 302;
    r.headers.emplace_back("Location", location);
    return r;
  });
}

TEST(HttpClientPolicy, RedirectToAnOriginNotAllowedIsRefused) {
  auto internal = body_server("internal secret");
  auto origin = redirector(internal.url("/latest/meta-data"));
  client_options o;
  o.policy = only({"http://127.0.0.1:" + std::to_string(origin.port())});
  client c(o);
  auto res = fetch(c, get(origin.url("/x")));
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.error().is(errc::unauthorized)) << res.error().message;
  EXPECT_NE(res.error().message.find("is not allowed"), std::string::npos) << res.error().message;
  EXPECT_EQ(internal.connections(), 0);
  EXPECT_EQ(origin.request_count(), 1u);  // refused, not retried
  // The request's URL itself is checked too.
  auto direct = fetch(c, get(internal.url("/latest/meta-data")));
  ASSERT_FALSE(direct);
  EXPECT_EQ(internal.connections(), 0);
}

TEST(HttpClientPolicy, AddressesAreCheckedAfterResolution) {
  test_http_server srv([](const recorded_request&) { return reply{}; });
  std::atomic<int> asked{0};
  connect_policy p;
  p.address = [&](const endpoint& e, const std::string& ip) -> status {
    ++asked;
    EXPECT_EQ(e.host, "localhost");
    if (ip == "127.0.0.1" || ip == "::1") return fail(errc::unauthorized, "loopback " + ip);
    return {};
  };
  client_request r = get("http://localhost:" + std::to_string(srv.port()) + "/x");
  r.policy = p;  // a request's own policy, on a client without one
  client c;
  auto res = fetch(c, r);
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.error().is(errc::unauthorized)) << res.error().message;
  EXPECT_NE(res.error().message.find("loopback"), std::string::npos) << res.error().message;
  EXPECT_GE(asked.load(), 1);
  EXPECT_EQ(srv.connections(), 0);
  // The same client without a policy goes anywhere, as before.
  auto ok = fetch(c, get(srv.url("/x")));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpClientPolicy, AllowedHopsAreFollowed) {
  auto storage = body_server("blob");
  auto origin = redirector(storage.url("/b"));
  client_options o;
  o.policy = only({"http://127.0.0.1:" + std::to_string(origin.port()),
                   "http://127.0.0.1:" + std::to_string(storage.port())});
  o.policy->address = [](const endpoint&, const std::string& ip) -> status {
    return ip == "127.0.0.1" ? status{} : fail(errc::unauthorized, "not 127.0.0.1");
  };
  client c(o);
  auto res = fetch(c, get(origin.url("/a")));
  ASSERT_TRUE(res) << res.error().message;
  EXPECT_EQ(res->body, "blob");
  EXPECT_EQ(res->info.redirects, 1);
}

// The review's crash input: a Location of raw non-UTF-8 bytes. Whatever the client says about it
// is valid UTF-8 (it goes into JSON records and answers).
TEST(HttpClientPolicy, NonUtf8LocationGivesAValidUtf8Error) {
  auto origin = redirector("http://\xff\xfe.invalid/x");
  for (bool with_policy : {false, true}) {
    client_options o;
    if (with_policy) o.policy = only({"http://127.0.0.1:" + std::to_string(origin.port())});
    client c(o);
    client_request r = get(origin.url("/x"));
    r.max_retries = 0;
    r.timeouts.connect = std::chrono::milliseconds(2000);
    auto res = fetch(c, r);
    ASSERT_FALSE(res);
    EXPECT_TRUE(utf8_valid(res.error().message)) << res.error().message;
  }
}

TEST(HttpClientPolicy, ParseEndpoint) {
  auto e = parse_endpoint("HTTPS://Example.COM/x?y");
  ASSERT_TRUE(e);
  EXPECT_EQ(key(*e), "https://example.com:443");
  e = parse_endpoint("http://[::1]:8080");
  ASSERT_TRUE(e);
  EXPECT_EQ(key(*e), "http://[::1]:8080");
  EXPECT_FALSE(parse_endpoint("s3://bucket/x"));
}

}  // namespace
}  // namespace shoal::http
