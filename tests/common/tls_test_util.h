#pragma once
// TLS test helpers shared by the tls_* tests: the suite's PKI (made once with the openssl CLI),
// a server_fixture speaking TLS, the log file to look for refusal lines in, and probe(), a
// blocking OpenSSL client (5 s socket timeouts) that reports the server certificate's serial
// and the exact error a refused client sees.

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/http_client.h"
#include "common/log.h"
#include "common/tls.h"
#include "http_server_fixture.h"
#include "http_test_util.h"
#include "support/test_pki.h"

namespace shoal::testing {

// Made once per test program: CA "ca" and "other-ca"; "server" (shoal://scheduler/s1,
// IP:127.0.0.1) and "server2" (its replacement for rotation); clients "n1" (shoal://node/n1),
// "op" (shoal://operator/alice), "stranger" (n1 signed by other-ca), "expired" (n1, expired
// yesterday), "noid" (signed by ca, no shoal:// URI), "short" (a server certificate valid for 2
// days). Logs go to <dir>/log.txt.
inline test_pki& suite_pki() {
  static test_pki* pki = [] {
    auto* p = test_pki::process_wide();  // its directory is removed at exit
    log::init(log::format::text, log::level::debug, "test", p->dir() + "/log.txt");
    p->make_ca("ca");
    p->make_ca("other-ca");
    const std::string server_san = "URI:shoal://scheduler/s1,IP:127.0.0.1,DNS:localhost";
    p->issue("server", "ca", server_san);
    p->issue("server2", "ca", server_san);
    p->issue("n1", "ca", "URI:shoal://node/n1");
    p->issue("op", "ca", "URI:shoal://operator/alice");
    p->issue("stranger", "other-ca", "URI:shoal://node/n1");
    p->issue("expired", "ca", "URI:shoal://node/n1", -1);
    p->issue("noid", "ca", "DNS:n9.example");
    p->issue("short", "ca", "URI:shoal://scheduler/s1,IP:127.0.0.1", 2);
    return p;
  }();
  return *pki;
}

inline std::string read_log() {
  std::ifstream f(suite_pki().dir() + "/log.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Waits (up to 3 s) until the log holds `needle` after byte `from`.
inline bool log_has(const std::string& needle, std::size_t from = 0) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    auto text = read_log();
    if (text.size() > from && text.find(needle, from) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The server side of the suite's PKI, with files of its own so a test may rotate them.
inline tls::tls_config server_tls(const std::string& cert = "server", bool require = true) {
  auto& p = suite_pki();
  tls::tls_config c;
  c.enabled = true;
  c.ca_file = p.pem("ca");
  c.cert_file = p.pem(cert);
  c.key_file = p.key(cert);
  c.require_client_cert = require;
  c.reload_interval = std::chrono::seconds(0);  // tests call reload_if_changed()
  return c;
}

inline std::shared_ptr<tls::tls_context> make_ctx(const tls::tls_config& c, tls::side s) {
  auto r = tls::tls_context::create(c, s, "test");
  if (!r) ADD_FAILURE() << r.error().to_string();
  return r ? *r : nullptr;
}

// libcurl options presenting certificate `who` ("" for none), trusting `ca`.
inline http::client_options curl_tls(const std::string& who, const std::string& ca = "ca") {
  auto& p = suite_pki();
  http::client_options o;
  o.ca_file = p.pem(ca);
  if (!who.empty()) {
    o.cert_file = p.pem(who);
    o.key_file = p.key(who);
  }
  o.proxy = "";
  return o;
}

inline http::client_request get(std::uint16_t port, const std::string& path,
                                const std::string& scheme = "https") {
  http::client_request r;
  r.url = scheme + "://127.0.0.1:" + std::to_string(port) + path;
  r.max_retries = 0;
  r.timeouts.connect = std::chrono::seconds(3);
  r.timeouts.stall = std::chrono::seconds(5);
  return r;
}

struct probe_result {
  bool handshake = false;  // SSL_connect succeeded (TLS 1.3: before the server checked us)
  int status = 0;
  std::string body;
  std::string server_serial;  // hex, as `openssl x509 -serial`
  std::string cipher;         // the negotiated suite, as OpenSSL names it
  std::string error;          // what failed, with OpenSSL's reason
};

// What the probing client offers instead of its context's defaults ("": the context's).
struct probe_offer {
  std::string ciphersuites;  // TLS 1.3, in the client's order of preference
  std::string cipher_list;   // TLS 1.2
  int max_version = 0;       // e.g. TLS1_2_VERSION
};

inline std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += std::string(out.empty() ? "" : "; ") + buf;
  }
  return out;
}

// One request over a fresh TLS connection made with `ctx` (a tls_context of side::client),
// verifying the server as 127.0.0.1; reads until the server closes.
inline probe_result probe(std::uint16_t port, tls::tls_context& ctx, const std::string& path,
                          const probe_offer& offer = {}) {
  probe_result r;
  raw_conn c(port);
  if (!c.connected()) {
    r.error = "connect failed";
    return r;
  }
  timeval tv{5, 0};
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(c.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  auto sctx = ctx.current();
  SSL* ssl = SSL_new(sctx->native_handle());
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
  if (!offer.ciphersuites.empty()) SSL_set_ciphersuites(ssl, offer.ciphersuites.c_str());
  if (!offer.cipher_list.empty()) SSL_set_cipher_list(ssl, offer.cipher_list.c_str());
  if (offer.max_version != 0) SSL_set_max_proto_version(ssl, offer.max_version);
  SSL_set_fd(ssl, c.fd());
  ERR_clear_error();
  if (SSL_connect(ssl) != 1) {
    r.error = "handshake: " + ssl_errors();
    SSL_free(ssl);
    return r;
  }
  r.handshake = true;
  r.cipher = SSL_get_cipher_name(ssl);
  if (X509* cert = SSL_get1_peer_certificate(ssl)) {
    BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr);
    char* hex = BN_bn2hex(bn);
    r.server_serial = hex;
    OPENSSL_free(hex);
    BN_free(bn);
    X509_free(cert);
  }
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  std::string got;
  if (SSL_write(ssl, req.data(), static_cast<int>(req.size())) > 0) {
    char buf[16384];
    int n;
    while ((n = SSL_read(ssl, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  }
  if (got.empty()) r.error = "read: " + ssl_errors();
  SSL_free(ssl);
  if (got.size() >= 12 && got.starts_with("HTTP/1.1 ")) r.status = std::stoi(got.substr(9, 3));
  if (auto e = got.find("\r\n\r\n"); e != std::string::npos) r.body = got.substr(e + 4);
  return r;
}

}  // namespace shoal::testing
