// peerd's blob_access on loopback against a scripted registry-proxy answering the confirming HEAD.
//
// What is pinned down here:
//   - a confirmation is a HEAD of /v2/<repo>/blobs/<digest>?ns= carrying the client's
//     Authorization; a 200 is remembered for that credential, ns, repository and digest only
//     (another credential, repository or ns asks again), and not after access.positive_ttl;
//   - a 200 saying Shoal-Visibility: public makes the digest known public for everybody;
//   - refusals pass on their status, challenge and Retry-After; an unreachable registry-proxy or
//     an unexpected status is a 502 naming the cause, never "allowed";
//   - both memories are bounded (cache_entries, public_entries).

#include "peerd/blob_access.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>

#include "../common/support/test_http_server.h"
#include "common/sha256.h"

namespace shoal::peerd {
namespace {

using namespace std::chrono_literals;
namespace ht = ::shoal::testing;

struct fixture {
  explicit fixture(const std::string& url) {
    cfg.upstream.registry_proxy = url;
    cfg.upstream.connect_timeout = config::duration(1s);
    cfg.upstream.request_timeout = config::duration(2s);
  }
  blob_access& make() {
    access = std::make_unique<blob_access>(blob_access::deps{cfg, http, reg});
    return *access;
  }
  double checks(const std::string& result) {
    return static_cast<double>(
        reg.counter("shoal_peerd_access_checks_total",
                    "Clients confirmed with registry-proxy before a blob held here was served to "
                    "them.",
                    {"result"})
            .with({result})
            .value());
  }
  ~fixture() { http.stop(); }

  peerd_config cfg;
  metrics::registry reg;
  http::client http;
  std::unique_ptr<blob_access> access;
};

// registry-proxy allowing "Basic good" (and the public digest to anyone), refusing the rest.
ht::reply verdict(const ht::recorded_request& r, const digest& pub) {
  ht::reply out;
  if (r.target.find(pub.str()) != std::string::npos) {
    out.headers.emplace_back("Shoal-Visibility", "public");
    return out;
  }
  auto auth = r.header("Authorization").value_or("");
  if (auth == "Basic good") return out;
  if (auth == "Basic busy") {
    out.status = 429;
    out.headers.emplace_back("Retry-After", "7");
    return out;
  }
  out.status = auth.empty() ? 401 : 403;
  if (auth.empty()) out.headers.emplace_back("WWW-Authenticate", R"(Basic realm="rp")");
  return out;
}

TEST(BlobAccess, ConfirmationIsPerCredentialRepositoryAndDigest) {
  auto pub = sha256_of("public"), priv = sha256_of("private");
  ht::test_http_server srv([&](const ht::recorded_request& r) { return verdict(r, pub); });
  fixture f(srv.url(""));
  auto& a = f.make();
  const origin::object_ref team{"r.example", "team/app"};
  EXPECT_FALSE(a.known_allowed(team, priv, "Basic good"));
  EXPECT_FALSE(a.check(team, priv, "Basic good"));  // allowed
  auto seen = srv.requests();
  ASSERT_EQ(seen.size(), 1u);
  const auto& head = seen[0];
  EXPECT_EQ(head.method, "HEAD");
  EXPECT_EQ(head.target, "/v2/team/app/blobs/" + priv.str() + "?ns=r.example");
  EXPECT_EQ(head.header("Authorization").value_or(""), "Basic good");
  // Remembered for exactly that key.
  EXPECT_TRUE(a.known_allowed(team, priv, "Basic good"));
  EXPECT_FALSE(a.known_allowed(team, priv, ""));
  EXPECT_FALSE(a.known_allowed(team, priv, "Basic other"));
  EXPECT_FALSE(a.known_allowed({"r.example", "other/app"}, priv, "Basic good"));
  EXPECT_FALSE(a.known_allowed({"", "team/app"}, priv, "Basic good"));
  EXPECT_FALSE(a.known_allowed(team, sha256_of("else"), "Basic good"));
  // Strangers: registry-proxy's refusal as it came.
  auto anon = a.check(team, priv, "");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401u);
  EXPECT_EQ(std::string(anon->headers["WWW-Authenticate"]), R"(Basic realm="rp")");
  auto bad = a.check(team, priv, "Basic bad");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 403u);
  auto busy = a.check(team, priv, "Basic busy");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 429u);
  EXPECT_EQ(std::string(busy->headers["Retry-After"]), "7");
  EXPECT_FALSE(a.known_allowed(team, priv, ""));  // a refusal is never remembered as a yes
  EXPECT_EQ(f.checks("allowed"), 1.0);
  EXPECT_EQ(f.checks("refused"), 3.0);
  // A public answer opens the digest to everybody, without asking again.
  EXPECT_FALSE(a.check(team, pub, ""));
  auto n = srv.requests().size();
  EXPECT_TRUE(a.known_allowed({"", "any/thing"}, pub, "Basic whoever"));
  EXPECT_FALSE(a.check({"x.example", "y"}, pub, ""));
  EXPECT_EQ(srv.requests().size(), n);
}

TEST(BlobAccess, NoAnswerIsNeverAYes) {
  fixture f("http://127.0.0.1:1");
  auto& a = f.make();
  auto d = sha256_of("x");
  auto r = a.check({"r.example", "team/app"}, d, "Basic good");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502u);
  EXPECT_EQ(f.checks("failed"), 1.0);
  ht::test_http_server srv([](const ht::recorded_request&) {
    ht::reply out;
    out.status = 500;
    return out;
  });
  fixture g(srv.url(""));
  auto odd = g.make().check({"r.example", "team/app"}, d, "Basic good");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->status, 502u);
  EXPECT_FALSE(g.access->known_allowed({"r.example", "team/app"}, d, "Basic good"));
}

TEST(BlobAccess, MemoriesExpireAndAreBounded) {
  auto pub = sha256_of("public");
  ht::test_http_server srv([&](const ht::recorded_request& r) { return verdict(r, pub); });
  fixture f(srv.url(""));
  f.cfg.access.positive_ttl = config::duration(0ms);
  auto& a = f.make();
  const origin::object_ref team{"r.example", "team/app"};
  auto d1 = sha256_of("one");
  EXPECT_FALSE(a.check(team, d1, "Basic good"));
  EXPECT_FALSE(a.known_allowed(team, d1, "Basic good"));  // ttl 0: asked every time

  fixture g(srv.url(""));
  g.cfg.access.cache_entries = 2;
  g.cfg.access.public_entries = 1;
  auto& b = g.make();
  auto d2 = sha256_of("two"), d3 = sha256_of("three");
  for (const auto& d : {d1, d2, d3}) b.note_confirmed(team, d, "Basic good");
  EXPECT_FALSE(b.known_allowed(team, d1, "Basic good"));  // least recently used, dropped
  EXPECT_TRUE(b.known_allowed(team, d2, "Basic good"));
  EXPECT_TRUE(b.known_allowed(team, d3, "Basic good"));
  b.note_public(d1);
  b.note_public(d2);
  EXPECT_FALSE(b.known_allowed(team, d1, ""));
  EXPECT_TRUE(b.known_allowed(team, d2, ""));
}

}  // namespace
}  // namespace shoal::peerd
