// http::server over TLS with real certificates (made by the openssl CLI at test time): mutual
// TLS and the peer identity a handler sees, and each refusal (no client certificate, another
// CA, an expired certificate, a plaintext client, a handshake that never finishes) with the
// error the client gets and the log line that says why.

#include <fcntl.h>
#include <unistd.h>

#include <future>

#include "tls_test_util.h"

namespace shoal {
namespace {

using namespace std::chrono_literals;
using namespace shoal::testing;
using http::request;
using http::responder;
using http::response;

// Answers "<peer.str()> verified=<0|1>" for any request.
http::handler who_am_i() {
  return [](request&& req, responder resp) {
    resp.send(response::text(200, req.peer.str() +
                                      " verified=" + std::to_string(req.peer.verified ? 1 : 0) +
                                      " tls=" + std::to_string(req.peer.tls ? 1 : 0)));
  };
}

http::server_options tls_options(std::shared_ptr<tls::tls_context> ctx) {
  http::server_options o;
  o.tls = std::move(ctx);
  return o;
}

TEST(TlsServer, MutualTlsHandlerSeesRoleAndName) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  tls::peer_identity seen;
  server_fixture f(
      [&](request&& req, responder resp) {
        seen = req.peer;
        resp.send(response::text(200, "hello " + req.peer.str()));
      },
      tls_options(ctx));
  http::client c(curl_tls("n1"));
  auto r = http::fetch(c, get(f.port(), "/v1/heartbeat"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello node/n1");
  EXPECT_TRUE(seen.tls);
  EXPECT_TRUE(seen.verified);
  EXPECT_EQ(seen.role, tls::peer_role::node);
  EXPECT_EQ(seen.name, "n1");
  EXPECT_TRUE(seen.is_node("n1"));
  EXPECT_FALSE(seen.is_node("n2"));
  EXPECT_FALSE(seen.is(tls::peer_role::operator_));
  ASSERT_TRUE(f.wait_logs(1));
  EXPECT_EQ(f.logs[0].peer.name, "n1");

  // Another role, on a second connection of another client.
  http::client c2(curl_tls("op"));
  auto r2 = http::fetch(c2, get(f.port(), "/x"));
  ASSERT_TRUE(r2) << r2.error().to_string();
  EXPECT_EQ(r2->body, "hello operator/alice");
  EXPECT_EQ(f.srv->tls_refused().handshake_failed, 0u);
}

TEST(TlsServer, KeepAliveRequestsShareTheHandshake) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  http::client c(curl_tls("n1"));
  for (int i = 0; i < 3; ++i) {
    auto r = http::fetch(c, get(f.port(), "/" + std::to_string(i)));
    ASSERT_TRUE(r) << r.error().to_string();
    EXPECT_EQ(r->body, "node/n1 verified=1 tls=1");
  }
  EXPECT_EQ(f.srv->connections(), 1u);
}

TEST(TlsServer, NoClientCertificateRefusedWhenRequired) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  const auto from = read_log().size();
  http::client c(curl_tls(""));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_FALSE(r) << "served without a client certificate: " << r->body;
  EXPECT_NE(r.error().message.find("certificate required"), std::string::npos)
      << r.error().to_string();
  EXPECT_TRUE(log_has("no client certificate: this server requires one", from)) << read_log();
  EXPECT_EQ(f.srv->tls_refused().handshake_failed, 1u);
}

TEST(TlsServer, NoClientCertificateServedAsAnonymousWhenOptional) {
  auto ctx = make_ctx(server_tls("server", /*require=*/false), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  http::client c(curl_tls(""));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->body, "anonymous (tls) verified=0 tls=1");
  // A certificate that is presented must still verify.
  http::client bad(curl_tls("stranger"));
  EXPECT_FALSE(http::fetch(bad, get(f.port(), "/")));
}

TEST(TlsServer, CertificateFromAnotherCaRefused) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  const auto from = read_log().size();
  http::client c(curl_tls("stranger"));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_FALSE(r) << "served another CA's certificate: " << r->body;
  EXPECT_NE(r.error().message.find("unknown ca"), std::string::npos) << r.error().to_string();
  EXPECT_TRUE(log_has("not signed by the cluster CA", from)) << read_log();
  EXPECT_EQ(f.srv->tls_refused().handshake_failed, 1u);
}

TEST(TlsServer, ExpiredCertificateRefused) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  const auto from = read_log().size();
  http::client c(curl_tls("expired"));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_FALSE(r) << "served an expired certificate: " << r->body;
  EXPECT_NE(r.error().message.find("certificate expired"), std::string::npos)
      << r.error().to_string();
  EXPECT_TRUE(log_has("client certificate rejected: certificate has expired", from)) << read_log();
}

TEST(TlsServer, CertificateWithoutIdentityIsVerifiedButHasNoRole) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  const auto from = read_log().size();
  http::client c(curl_tls("noid"));
  auto r = http::fetch(c, get(f.port(), "/"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->body, "verified (no role) verified=1 tls=1");
  EXPECT_TRUE(log_has("no shoal:// URI subjectAltName", from)) << read_log();
}

TEST(TlsServer, PlaintextClientGetsAClearRefusal) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  server_fixture f(who_am_i(), tls_options(ctx));
  const auto from = read_log().size();
  http::client c(curl_tls("n1"));
  auto r = http::fetch(c, get(f.port(), "/v1/nodes", "http"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("this port speaks HTTPS only"), std::string::npos) << r->body;
  EXPECT_TRUE(log_has("GET /v1/nodes HTTP/1.1", from)) << read_log();
  EXPECT_TRUE(log_has("instead of a TLS hello: it must use https://", from)) << read_log();
  EXPECT_EQ(f.srv->tls_refused().plaintext, 1u);
  EXPECT_TRUE(f.wait_connections(0));
}

TEST(TlsServer, HandshakeThatNeverFinishesIsClosedAtTheHeaderDeadline) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  http::server_options o = tls_options(ctx);
  o.header_timeout = 300ms;
  server_fixture f(who_am_i(), o);
  raw_conn silent(f.port());
  raw_conn partial(f.port());
  ASSERT_TRUE(partial.send_all(std::string("\x16\x03\x01\x02\x00\x01", 6)));  // half a hello
  ASSERT_TRUE(f.wait_connections(2));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(silent.wait_closed(3s));
  EXPECT_TRUE(partial.wait_closed(3s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(f.wait_connections(0));
  EXPECT_EQ(f.srv->tls_refused().handshake_failed, 2u);
}

TEST(TlsServer, FileAndStreamedBodiesGoThroughTls) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  std::string content(3 * 1024 * 1024 + 17, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 131 % 251);
  const std::string path = suite_pki().dir() + "/body.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << content;
  }
  server_fixture f(
      [&](request&& req, responder resp) {
        auto fd = std::make_shared<unique_fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        response r;
        r.rangeable = true;
        r.body = http::file_body{fd, 0, content.size()};
        if (req.path == "/chunked") {
          // A streamed body of unknown length, from file regions: chunked over TLS.
          auto open = [fd, n = content.size()](std::uint64_t, std::uint64_t) {
            struct src : http::body_source {
              std::shared_ptr<unique_fd> fd;
              std::uint64_t off = 0, n = 0;
              void next(std::size_t max, std::function<void(result<http::chunk>)> done) override {
                if (off >= n) return done(http::chunk::end());
                auto len = std::min<std::uint64_t>(max, n - off);
                done(http::chunk::file_region(fd->get(), off, len));
                off += len;
              }
            };
            auto s = std::make_unique<src>();
            s->fd = fd;
            s->n = n;
            return std::unique_ptr<http::body_source>(std::move(s));
          };
          r.body = http::stream_body{std::nullopt, open};
          r.rangeable = false;
        }
        resp.send(std::move(r));
      },
      tls_options(ctx));
  http::client c(curl_tls("n1"));
  auto whole = http::fetch(c, get(f.port(), "/file"));
  ASSERT_TRUE(whole) << whole.error().to_string();
  EXPECT_EQ(whole->body.size(), content.size());
  EXPECT_TRUE(whole->body == content);
  auto ranged_req = get(f.port(), "/file");
  ranged_req.headers.emplace_back("Range", "bytes=1000000-1000099");
  auto ranged = http::fetch(c, ranged_req);
  ASSERT_TRUE(ranged) << ranged.error().to_string();
  EXPECT_EQ(ranged->status, 206);
  EXPECT_EQ(ranged->body, content.substr(1000000, 100));
  // Several ranges: a multipart body, each part's bytes from the file through TLS records.
  auto multi_req = get(f.port(), "/file");
  multi_req.headers.emplace_back("Range", "bytes=2000000-2999999,5-9");
  auto multi = http::fetch(c, multi_req);
  ASSERT_TRUE(multi) << multi.error().to_string();
  EXPECT_EQ(multi->status, 206);
  auto type = std::string(multi->header("Content-Type").value_or(""));
  ASSERT_EQ(type.rfind("multipart/byteranges; boundary=", 0), 0u) << type;
  const std::string delim = "--" + type.substr(type.find('=') + 1);
  const std::string size = std::to_string(content.size());
  EXPECT_TRUE(multi->body ==
              delim + "\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes " +
                  "2000000-2999999/" + size + "\r\n\r\n" + content.substr(2000000, 1000000) +
                  "\r\n" + delim + "\r\nContent-Type: application/octet-stream\r\n" +
                  "Content-Range: bytes 5-9/" + size + "\r\n\r\n" + content.substr(5, 5) + "\r\n" +
                  delim + "--\r\n");
  auto chunked = http::fetch(c, get(f.port(), "/chunked"));
  ASSERT_TRUE(chunked) << chunked.error().to_string();
  EXPECT_TRUE(chunked->body == content);
}

// The server picks AES-128-GCM over a client's first choice of AES-256-GCM in TLS 1.3 and 1.2,
// and a file body larger than one batch of TLS records (256 KiB) arrives whole in either
// version (their records differ in size: 22 and 29 bytes of overhead).
TEST(TlsServer, PrefersAes128GcmAndSendsFilesInTls13And12) {
  auto ctx = make_ctx(server_tls(), tls::side::server);
  std::string content(1024 * 1024 + 4099, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 151 % 241);
  const std::string path = suite_pki().dir() + "/body-versions.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << content;
  }
  server_fixture f(
      [&](request&&, responder resp) {
        auto fd = std::make_shared<unique_fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
        response r;
        r.body = http::file_body{fd, 0, content.size()};
        resp.send(std::move(r));
      },
      tls_options(ctx));
  tls::tls_config n1;
  n1.enabled = true;
  n1.ca_file = suite_pki().pem("ca");
  n1.cert_file = suite_pki().pem("n1");
  n1.key_file = suite_pki().key("n1");
  n1.reload_interval = 0s;
  auto client = make_ctx(n1, tls::side::client);
  probe_offer v13;
  v13.ciphersuites = "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256";
  auto a = probe(f.port(), *client, "/file", v13);
  ASSERT_TRUE(a.handshake) << a.error;
  EXPECT_EQ(a.cipher, "TLS_AES_128_GCM_SHA256");
  EXPECT_EQ(a.status, 200) << a.error;
  EXPECT_EQ(a.body.size(), content.size());
  EXPECT_TRUE(a.body == content);
  probe_offer v12;
  v12.cipher_list = "ECDHE+AESGCM+AES256:ECDHE+AESGCM+AES128";
  v12.max_version = TLS1_2_VERSION;
  auto b = probe(f.port(), *client, "/file", v12);
  ASSERT_TRUE(b.handshake) << b.error;
  EXPECT_NE(b.cipher.find("AES128-GCM"), std::string::npos) << b.cipher;
  EXPECT_EQ(b.status, 200) << b.error;
  EXPECT_EQ(b.body.size(), content.size());
  EXPECT_TRUE(b.body == content);
}

TEST(TlsServer, PlainServerIsUnchanged) {
  server_fixture f(who_am_i());
  http::client_options o;
  o.proxy = "";
  http::client c(o);
  auto r = http::fetch(c, get(f.port(), "/", "http"));
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->body, "anonymous verified=0 tls=0");
}

}  // namespace
}  // namespace shoal
