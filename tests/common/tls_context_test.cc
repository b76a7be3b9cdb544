// common/tls.h: the config section, loading errors, the identity in a certificate, and rotation
// of the files under a running server (new connections get the new certificate, an in-flight
// request finishes, a bad rotation keeps the old certificate), with real certificates made by
// the openssl CLI.

#include <fstream>
#include <future>
#include <thread>

#include "common/file.h"
#include "common/metrics.h"
#include "tls_test_util.h"

namespace shoal {
namespace {

using namespace std::chrono_literals;
using namespace shoal::testing;
using http::request;
using http::responder;
using http::response;

TEST(TlsIdentity, ParsesShoalUris) {
  auto n = tls::parse_identity_uri("shoal://node/gpu-node-7.rack2");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->role, tls::peer_role::node);
  EXPECT_EQ(n->name, "gpu-node-7.rack2");
  EXPECT_EQ(tls::parse_identity_uri("shoal://registry-proxy/rp")->role,
            tls::peer_role::registry_proxy);
  EXPECT_EQ(tls::parse_identity_uri("shoal://kube-scheduler/ks")->role,
            tls::peer_role::kube_scheduler);
  EXPECT_EQ(tls::parse_identity_uri("shoal://operator/alice")->role, tls::peer_role::operator_);
  // Single-instance parties need no name (docs/security.md); a node does.
  auto rp = tls::parse_identity_uri("shoal://registry-proxy");
  ASSERT_TRUE(rp);
  EXPECT_EQ(rp->role, tls::peer_role::registry_proxy);
  EXPECT_EQ(rp->name, "");
  EXPECT_EQ(tls::parse_identity_uri("shoal://kube-scheduler")->role,
            tls::peer_role::kube_scheduler);
  for (const char* bad :
       {"shoal://node/", "shoal://node", "shoal://registry-proxy/", "shoal://", "shoal://root/x",
        "shoal://none/x", "http://node/n1", "shoal://node/n1/extra", "shoal://node/n1?x=1",
        "shoal://node/n%31", "shoal://node/a b", "SHOAL://node/n1", "shoal://node/n1#f",
        "shoal://user@node/n1"}) {
    EXPECT_FALSE(tls::parse_identity_uri(bad)) << bad;
  }
  EXPECT_FALSE(tls::parse_identity_uri("shoal://node/" + std::string(254, 'a')));
  EXPECT_EQ(tls::to_string(tls::peer_role::registry_proxy), "registry-proxy");
  EXPECT_EQ(tls::peer_identity{}.str(), "anonymous");
  EXPECT_EQ((tls::peer_identity{true, true, tls::peer_role::registry_proxy, ""}.str()),
            "registry-proxy");
}

struct with_tls {
  tls::tls_config tls;
};
void describe(config::binder& b, with_tls& c) { b.section("tls", c.tls, "TLS."); }

TEST(TlsConfig, DefaultsDocsAndChecks) {
  with_tls c;
  EXPECT_FALSE(c.tls.enabled);
  EXPECT_TRUE(c.tls.require_client_cert);
  auto docs = config::to_markdown<with_tls>("t");
  for (const char* key : {"tls.enabled", "tls.ca_file", "tls.cert_file", "tls.key_file",
                          "tls.require_client_cert", "tls.reload_interval", "tls.expiry_warning"})
    EXPECT_NE(docs.find(key), std::string::npos) << key;
  auto st = config::load_string("tls:\n  enabled: true\n  ca_file: /x/ca.pem\n", "t.yaml", c);
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message.find("tls.enabled needs"), std::string::npos) << st.error().message;
  ASSERT_TRUE(config::load_string(
      "tls: {enabled: true, ca_file: a, cert_file: b, key_file: c, reload_interval: 2s}", "t.yaml",
      c));
  EXPECT_EQ(c.tls.reload_interval, config::duration(2s));
}

TEST(TlsContext, LoadErrorsNameTheFile) {
  auto& p = suite_pki();
  auto c = server_tls();
  c.cert_file = p.dir() + "/missing.pem";
  auto r = tls::tls_context::create(c, tls::side::server);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("tls.cert_file " + c.cert_file), std::string::npos)
      << r.error().message;

  c = server_tls();
  c.key_file = p.key("n1");  // another certificate's key
  r = tls::tls_context::create(c, tls::side::server);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not match"), std::string::npos) << r.error().message;

  c = server_tls("expired");
  r = tls::tls_context::create(c, tls::side::server);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("expired"), std::string::npos) << r.error().message;
}

TEST(TlsContext, ReportsTheCertificateAndItsExpiry) {
  auto& p = suite_pki();
  auto ctx = make_ctx(server_tls(), tls::side::server);
  ASSERT_TRUE(ctx);
  auto info = ctx->certificate();
  EXPECT_EQ(info.serial, p.serial("server"));
  EXPECT_EQ(info.identity_uri, "shoal://scheduler/s1");
  EXPECT_NE(info.subject.find("CN=server"), std::string::npos) << info.subject;
  const auto left = info.not_after - std::chrono::system_clock::now();
  EXPECT_GT(left, std::chrono::hours(24 * 29));
  EXPECT_LT(left, std::chrono::hours(24 * 31));

  metrics::registry reg;
  tls::register_metrics(reg, *ctx, "shoal_test");
  auto text = reg.expose();
  const auto want = "shoal_test_tls_certificate_expiry_timestamp_seconds " +
                    std::to_string(std::chrono::system_clock::to_time_t(info.not_after));
  EXPECT_NE(text.find(want), std::string::npos) << text;
  EXPECT_NE(text.find("shoal_test_tls_reload_failures_total 0"), std::string::npos) << text;
  // Within expiry_warning (default 14 days) of a 30-day certificate: no warning yet.
  EXPECT_EQ(read_log().find("tls certificate expires soon"), std::string::npos);
}

TEST(TlsContext, WarnsWhenTheCertificateExpiresSoon) {
  const auto from = read_log().size();
  auto c = server_tls("short");
  auto quiet = c;
  quiet.expiry_warning = std::chrono::hours(24);  // 2 days left: not yet
  ASSERT_TRUE(make_ctx(quiet, tls::side::server));
  EXPECT_EQ(read_log().find("tls certificate expires soon", from), std::string::npos);
  ASSERT_TRUE(make_ctx(c, tls::side::server));  // default 14 days: warn
  EXPECT_TRUE(log_has("tls certificate expires soon", from)) << read_log().substr(from);
  EXPECT_TRUE(log_has("days_left=", from));
}

// The server's files, copied so the test can replace them under the running server.
tls::tls_config live_files(const std::string& tag) {
  auto& p = suite_pki();
  p.install("server", tag);
  auto c = server_tls(tag);
  return c;
}

tls::tls_config client_cfg() {
  auto& p = suite_pki();
  tls::tls_config c;
  c.enabled = true;
  c.ca_file = p.pem("ca");
  c.cert_file = p.pem("n1");
  c.key_file = p.key("n1");
  c.reload_interval = 0s;
  return c;
}

TEST(TlsRotation, NewConnectionsUseTheNewCertificateInFlightRequestFinishes) {
  auto& p = suite_pki();
  auto ctx = make_ctx(live_files("live1"), tls::side::server);
  auto client_ctx = make_ctx(client_cfg(), tls::side::client);
  ASSERT_TRUE(ctx && client_ctx);
  std::promise<responder> parked;
  server_fixture f(
      [&](request&& req, responder resp) {
        if (req.path == "/slow") return parked.set_value(resp);
        resp.send(response::text(200, "fast " + req.peer.str()));
      },
      [&] {
        http::server_options o;
        o.tls = ctx;
        return o;
      }());
  EXPECT_EQ(probe(f.port(), *client_ctx, "/").server_serial, p.serial("server"));

  // A request in flight on a connection made with the old certificate.
  http::client c(curl_tls("n1"));
  std::promise<result<http::full_response>> slow_done;
  std::thread slow([&] { slow_done.set_value(http::fetch(c, get(f.port(), "/slow"))); });
  auto park = parked.get_future();
  ASSERT_EQ(park.wait_for(5s), std::future_status::ready);

  p.install("server2", "live1");
  auto reloaded = ctx->reload_if_changed();
  ASSERT_TRUE(reloaded) << reloaded.error().to_string();
  EXPECT_TRUE(*reloaded);
  EXPECT_EQ(ctx->certificate().serial, p.serial("server2"));
  auto fresh = probe(f.port(), *client_ctx, "/");
  EXPECT_EQ(fresh.server_serial, p.serial("server2"));
  EXPECT_EQ(fresh.status, 200);
  EXPECT_EQ(fresh.body, "fast node/n1");

  park.get().send(response::text(200, "slow but fine"));
  slow.join();
  auto done = slow_done.get_future().get();
  ASSERT_TRUE(done) << done.error().to_string();
  EXPECT_EQ(done->body, "slow but fine");
  EXPECT_EQ(ctx->stats().reloads, 1u);
  auto again = ctx->reload_if_changed();
  ASSERT_TRUE(again);
  EXPECT_FALSE(*again);  // nothing changed since
}

TEST(TlsRotation, BrokenRotationKeepsTheOldCertificate) {
  auto& p = suite_pki();
  auto ctx = make_ctx(live_files("live2"), tls::side::server);
  auto client_ctx = make_ctx(client_cfg(), tls::side::client);
  ASSERT_TRUE(ctx && client_ctx);
  http::server_options o;
  o.tls = ctx;
  server_fixture f([](request&&, responder resp) { resp.send(response::text(200, "ok")); }, o);
  const auto from = read_log().size();

  // The new certificate arrives before its key: they do not match.
  {
    std::ofstream out(p.pem("live2") + ".tmp");
    std::ifstream in(p.pem("server2"));
    out << in.rdbuf();
  }
  std::rename((p.pem("live2") + ".tmp").c_str(), p.pem("live2").c_str());
  // Just replaced: taken for a rotation half-way, not a failure yet.
  auto pending = ctx->reload_if_changed();
  ASSERT_TRUE(pending) << pending.error().to_string();
  EXPECT_FALSE(*pending);
  EXPECT_EQ(ctx->stats().reload_failures, 0u);
  EXPECT_TRUE(log_has("tls certificate and key do not match yet", from));
  // Still so after the settle time: a failure.
  std::this_thread::sleep_for(key_rotation_settle + 200ms);
  auto r = ctx->reload_if_changed();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("does not match"), std::string::npos) << r.error().message;
  EXPECT_TRUE(log_has("tls reload failed; keeping the previous certificate", from));
  auto still = probe(f.port(), *client_ctx, "/");
  EXPECT_EQ(still.status, 200) << still.error;
  EXPECT_EQ(still.server_serial, p.serial("server"));
  // Unchanged files are not retried at once (nor logged again).
  auto quiet = ctx->reload_if_changed();
  ASSERT_TRUE(quiet);
  EXPECT_FALSE(*quiet);
  EXPECT_EQ(ctx->stats().reload_failures, 1u);

  // The key follows: the pair loads.
  p.install("server2", "live2");
  auto ok = ctx->reload_if_changed();
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_TRUE(*ok);
  EXPECT_EQ(probe(f.port(), *client_ctx, "/").server_serial, p.serial("server2"));
}

TEST(TlsRotation, WatcherPicksUpAChangeWithoutBeingAsked) {
  auto& p = suite_pki();
  auto cfg = live_files("live3");
  cfg.reload_interval = 100ms;
  auto ctx = make_ctx(cfg, tls::side::server);
  ASSERT_TRUE(ctx);
  p.install("server2", "live3");
  const auto want = p.serial("server2");
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (ctx->certificate().serial != want && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ctx->certificate().serial, want);
}

TEST(TlsClient, ServerFromAnotherCaIsRefusedByTheClient) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  http::server_options o;
  o.tls = ctx;
  server_fixture f([](request&&, responder resp) { resp.send(response::text(200, "ok")); }, o);
  // The client trusts other-ca only: the server's certificate does not verify.
  http::client c(curl_tls("n1", "other-ca"));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("certificate"), std::string::npos) << r.error().to_string();
}

}  // namespace
}  // namespace shoal
