// Who may call what: each route's access class, the operator token file (validation, rotation,
// fail-closed on a bad file), and the authorizer's 401/403 decisions with TLS on and off, their
// JSON errors and the refusal metric.
#include "scheduler/authz.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace shoal::scheduler {
namespace {

using nlohmann::json;
using testing::verified_peer;
using tls::peer_role;

const std::string good_token = "0123456789abcdef0123456789abcdef";

http::request make(http::verb v, std::string path, const tls::peer_identity& peer = {},
                   std::string bearer = "", std::uint16_t port = 40000) {
  http::request r;
  r.method = v;
  r.path = r.target = std::move(path);
  r.peer = peer;
  r.remote = http::tcp::endpoint(http::net::ip::make_address("10.9.9.9"), port);
  if (!bearer.empty()) r.headers.set("Authorization", bearer);
  return r;
}

tls::peer_identity anonymous_tls() {
  tls::peer_identity p;
  p.tls = true;
  return p;
}

json js(const http::response& r) { return json::parse(std::get<std::string>(r.body)); }

class TokenDir : public ::testing::Test {
 protected:
  TokenDir() {
    std::string tmpl = ::testing::TempDir() + "authz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    dir_ = tmpl;
  }
  ~TokenDir() override { std::filesystem::remove_all(dir_); }
  // Written beside and renamed over, as a Secret update or `mv` does.
  std::string put(const std::string& text, const std::string& name = "token") {
    auto tmp = dir_ / (name + ".tmp");
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, dir_ / name);
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

TEST(RouteAccess, EachRouteHasItsClass) {
  auto at = [](http::verb v, const char* p) { return access_of(make(v, p)); };
  EXPECT_EQ(at(http::verb::get, "/announce"), route_access::open);
  EXPECT_EQ(at(http::verb::get, "/healthz"), route_access::open);
  EXPECT_EQ(at(http::verb::post, "/v1/heartbeat"), route_access::node);
  EXPECT_EQ(at(http::verb::get, "/v1/heartbeat"), route_access::node);
  EXPECT_EQ(at(http::verb::post, "/v1/place"), route_access::operator_);
  EXPECT_EQ(at(http::verb::get, "/v1/place"), route_access::operator_);
  EXPECT_EQ(at(http::verb::post, "/v1/prewarm"), route_access::operator_);
  EXPECT_EQ(at(http::verb::get, "/v1/prewarm"), route_access::member);
  EXPECT_EQ(at(http::verb::get, "/v1/prewarm/pw-1"), route_access::member);
  EXPECT_EQ(at(http::verb::post, "/v1/extender/filter"), route_access::kube_scheduler);
  EXPECT_EQ(at(http::verb::post, "/v1/extender/prioritize"), route_access::kube_scheduler);
  for (const char* p : {"/v1/nodes", "/v1/objects/sha256:00", "/v1/images/a", "/v1/datasets/d@1",
                        "/v1/nope", "/", "/v1/extender/other", "/v1/placement"}) {
    EXPECT_EQ(at(http::verb::get, p), route_access::member) << p;
  }
}

TEST_F(TokenDir, TheTokenFileIsValidatedAndOnlyItsHashCompared) {
  auto t = operator_token::load(put(good_token + "\n"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE((*t)->matches(good_token));
  EXPECT_FALSE((*t)->matches(good_token + "\n"));
  EXPECT_FALSE((*t)->matches(good_token.substr(1)));
  EXPECT_FALSE((*t)->matches(""));

  for (const std::string& bad : {std::string("short"), std::string(1025, 'a'),
                                 std::string("0123456789 abcdef0123"), std::string("")}) {
    auto b = operator_token::load(put(bad, "bad"));
    ASSERT_FALSE(b) << bad;
    EXPECT_NE(b.error().message.find("auth.operator_token_file"), std::string::npos);
    // The error never repeats the file's content.
    if (bad.size() > 3) {
      EXPECT_EQ(b.error().message.find(bad), std::string::npos);
    }
  }
  auto missing = operator_token::load((dir_ / "none").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("No such file"), std::string::npos);
}

TEST_F(TokenDir, ARotatedTokenReplacesTheOldOneAndABadFileAcceptsNone) {
  auto t = operator_token::load(put(good_token));
  ASSERT_TRUE(t);
  auto& tok = **t;
  EXPECT_FALSE(tok.reload_if_changed());  // unchanged
  const std::string next = "fedcba9876543210fedcba9876543210";
  put(next + "\n");
  EXPECT_TRUE(tok.reload_if_changed());
  EXPECT_TRUE(tok.matches(next));
  EXPECT_FALSE(tok.matches(good_token));
  put("tiny");  // half-written or wrong: fail closed
  EXPECT_TRUE(tok.reload_if_changed());
  EXPECT_FALSE(tok.matches(next));
  EXPECT_FALSE(tok.matches("tiny"));
  std::filesystem::remove(dir_ / "token");
  EXPECT_TRUE(tok.reload_if_changed());
  EXPECT_FALSE(tok.matches(next));
  put(next);
  EXPECT_TRUE(tok.reload_if_changed());
  EXPECT_TRUE(tok.matches(next));
  EXPECT_EQ(tok.reloads(), 4u);
}

class AuthorizerTest : public TokenDir {
 protected:
  AuthorizerTest() {
    auto t = operator_token::load(put(good_token));
    if (!t) std::abort();
    token_ = std::move(*t);
  }
  metrics::registry reg_;
  std::unique_ptr<operator_token> token_;
};

TEST_F(AuthorizerTest, WithTlsEachRouteNeedsItsRole) {
  authorizer az(nullptr, reg_);
  auto prewarm = [&](const tls::peer_identity& p) {
    return az.check(make(http::verb::post, "/v1/prewarm", p));
  };
  EXPECT_FALSE(prewarm(verified_peer(peer_role::operator_, "alice")));
  auto node = prewarm(verified_peer(peer_role::node, "n1"));
  ASSERT_TRUE(node);
  EXPECT_EQ(node->status, 403u);
  EXPECT_EQ(js(*node)["error"],
            "this route needs an operator certificate (shoal://operator/<user>); the client "
            "certificate is node/n1");
  EXPECT_EQ(js(*node)["presented"], "node/n1");
  auto anon = prewarm(anonymous_tls());
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401u);
  EXPECT_EQ(anon->headers["WWW-Authenticate"], "Bearer realm=\"shoal-scheduler\"");
  EXPECT_EQ(js(*anon)["presented"], "anonymous (tls)");

  // Reads: any role; a verified certificate without a shoal:// role is authenticated but has
  // none (403).
  for (auto role : {peer_role::node, peer_role::registry_proxy, peer_role::operator_,
                    peer_role::kube_scheduler, peer_role::scheduler}) {
    EXPECT_FALSE(az.check(make(http::verb::get, "/v1/objects/x", verified_peer(role, "a"))));
  }
  auto norole =
      az.check(make(http::verb::get, "/v1/objects/x", verified_peer(peer_role::none, "")));
  ASSERT_TRUE(norole);
  EXPECT_EQ(norole->status, 403u);
  auto objects = az.check(make(http::verb::get, "/v1/objects/x", anonymous_tls()));
  ASSERT_TRUE(objects);
  EXPECT_EQ(objects->status, 401u);

  // The extender: kube-scheduler only, not even an operator.
  auto ks = verified_peer(peer_role::kube_scheduler, "");
  EXPECT_FALSE(az.check(make(http::verb::post, "/v1/extender/filter", ks)));
  EXPECT_FALSE(az.check(make(http::verb::post, "/v1/extender/prioritize", ks)));
  for (auto role : {peer_role::node, peer_role::operator_}) {
    auto r = az.check(make(http::verb::post, "/v1/extender/filter", verified_peer(role, "a")));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403u);
  }
  // Heartbeats: a node certificate (its name is the handler's business).
  EXPECT_FALSE(
      az.check(make(http::verb::post, "/v1/heartbeat", verified_peer(peer_role::node, "x"))));
  auto hb = az.check(make(http::verb::post, "/v1/heartbeat", ks));
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->status, 403u);

  // Ring announcements: a registry-proxy certificate only; the list is a read.
  EXPECT_FALSE(az.check(
      make(http::verb::post, "/v1/origins", verified_peer(peer_role::registry_proxy, ""))));
  for (auto role : {peer_role::node, peer_role::operator_}) {
    auto r = az.check(make(http::verb::post, "/v1/origins", verified_peer(role, "a")));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403u);
    EXPECT_NE(js(*r)["error"].get<std::string>().find("registry-proxy's certificate"),
              std::string::npos);
  }
  EXPECT_FALSE(
      az.check(make(http::verb::get, "/v1/origins", verified_peer(peer_role::node, "n1"))));

  auto text = reg_.expose();
  EXPECT_NE(
      text.find("shoal_scheduler_auth_refused_total{need=\"operator\",reason=\"wrong_role\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("shoal_scheduler_auth_refused_total{need=\"member\",reason=\"unauthenticated\"} 1"),
      std::string::npos);
  EXPECT_NE(
      text.find(
          "shoal_scheduler_auth_refused_total{need=\"kube-scheduler\",reason=\"wrong_role\"} 2"),
      std::string::npos);
}

TEST_F(AuthorizerTest, TheBearerTokenStandsForAnOperatorCertificate) {
  authorizer az(token_.get(), reg_);
  const std::string bearer = "Bearer " + good_token;
  // TLS without a client certificate (tls.require_client_cert: false): the token suffices for
  // operator verbs and reads, never for the extender or heartbeats.
  EXPECT_FALSE(az.check(make(http::verb::post, "/v1/prewarm", anonymous_tls(), bearer)));
  EXPECT_FALSE(
      az.check(make(http::verb::post, "/v1/place", anonymous_tls(), "bearer  " + good_token)));
  EXPECT_FALSE(az.check(make(http::verb::get, "/v1/objects/x", anonymous_tls(), bearer)));
  auto ext = az.check(make(http::verb::post, "/v1/extender/filter", anonymous_tls(), bearer));
  ASSERT_TRUE(ext);
  EXPECT_EQ(ext->status, 401u);
  // A wrong token is refused even beside a certificate that would do.
  auto wrong = az.check(make(http::verb::post, "/v1/prewarm",
                             verified_peer(peer_role::operator_, "alice"), "Bearer nope"));
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401u);
  EXPECT_EQ(js(*wrong)["error"], "the bearer token is not the operator token");
  EXPECT_EQ(std::get<std::string>(wrong->body).find(good_token), std::string::npos);
  // Another scheme is not a token.
  auto basic =
      az.check(make(http::verb::post, "/v1/prewarm", anonymous_tls(), "Basic " + good_token));
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->status, 401u);
  auto need = js(*basic)["error"].get<std::string>();
  EXPECT_NE(need.find("or the operator bearer token"), std::string::npos) << need;
}

TEST_F(AuthorizerTest, PlainModeChecksNothingUnlessATokenFileIsConfigured) {
  authorizer plain(nullptr, reg_);
  for (const char* p : {"/v1/prewarm", "/v1/place", "/v1/extender/filter", "/v1/heartbeat"})
    EXPECT_FALSE(plain.check(make(http::verb::post, p))) << p;
  EXPECT_FALSE(plain.check(make(http::verb::get, "/v1/objects/x")));
  // Without a token file a bearer header is simply not looked at.
  EXPECT_FALSE(plain.check(make(http::verb::post, "/v1/prewarm", {}, "Bearer whatever")));

  authorizer guarded(token_.get(), reg_);
  auto none = guarded.check(make(http::verb::post, "/v1/prewarm"));
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401u);
  EXPECT_EQ(js(*none)["error"],
            "this route needs the operator bearer token (Authorization: Bearer <token>); none "
            "was presented");
  EXPECT_FALSE(guarded.check(make(http::verb::post, "/v1/place", {}, "Bearer " + good_token)));
  auto bad = guarded.check(make(http::verb::post, "/v1/place", {}, "Bearer " + good_token + "x"));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 401u);
  // Reads, heartbeats and the extender stay as they were in plain mode.
  EXPECT_FALSE(guarded.check(make(http::verb::get, "/v1/nodes")));
  EXPECT_FALSE(guarded.check(make(http::verb::post, "/v1/heartbeat")));
  EXPECT_FALSE(guarded.check(make(http::verb::post, "/v1/extender/filter")));
}

}  // namespace
}  // namespace shoal::scheduler
