#pragma once
// TLS for Shoal's daemons: the `tls` config section every daemon shares,
// and tls_context, the OpenSSL context its HTTP server (or an asio client) hands to each new
// connection, kept fresh when the certificate, key or CA files change on disk.
//
//   // config.h of a daemon:  tls::tls_config tls;   describe(): b.section("tls", c.tls, "...");
//   auto ctx = tls::tls_context::create(cfg.tls, tls::side::server, "scheduler");
//   if (!ctx) return fail(ctx.error());                       // start-up: bad files exit
//   tls::register_metrics(reg, **ctx, "shoal_scheduler");     // expiry gauge, reload counters
//   http::server_options o = ...;  o.tls = *ctx;                // the server now speaks TLS only
//   // in a handler:  if (!req.peer.is_node(hb.node)) return resp.send(403 ...);
//
// Outbound calls on libcurl take the same files: http::client_options{.ca_file, .cert_file,
// .key_file} (http::client_options_with_tls in common/http_client.h).
//
// Policy: TLS 1.2 at least, 1.3 preferred (negotiated whenever the peer has it); TLS 1.2 only
// with forward-secret AEAD suites; no compression, no renegotiation. Server side: client
// certificates are verified against ca_file, and required when require_client_cert is set; a
// presented certificate that does not verify (another CA, expired) fails the handshake either
// way. Client side: the server's certificate is verified against ca_file; the caller names the
// host it expects per connection (SSL_set1_host, or X509_VERIFY_PARAM_set1_ip_asc for an IP;
// libcurl does this itself from the URL).
//
// Rotation: a watcher thread stats the three files every reload_interval (inode, size, mtime,
// ctime: an atomic rename and Kubernetes' symlink swap are both seen) and, when one changed,
// builds a whole new context. Connections accepted afterwards use it; connections already open
// keep theirs until they close. A reload that fails (a half-written file, a key that does not
// match the certificate, an expired certificate) keeps the previous context, logs why once per
// change, and is tried again when a file changes or a minute has passed.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/config.h"
#include "common/error.h"
#include "common/metrics.h"
#include "common/peer_identity.h"

namespace boost::asio::ssl {
class context;
}
struct x509_st;  // OpenSSL's X509

namespace shoal::tls {

struct tls_config {
  bool enabled = false;
  std::string ca_file;    // PEM: the cluster CA (verifies peers)
  std::string cert_file;  // PEM: this party's certificate, then any intermediates
  std::string key_file;   // PEM: its private key (unencrypted)
  // A second certificate pair for BitTorrent only, during a CA rotation: a leaf from the other CA
  // in ca_file, so this party also serves and joins the swarms rooted at that CA (swarm/swarm.h).
  // Both empty: one pair (cert_file), one root. Not used for HTTPS.
  std::string swarm_extra_cert_file;
  std::string swarm_extra_key_file;
  bool require_client_cert = true;  // server side: refuse clients without a certificate
  config::duration reload_interval = std::chrono::seconds(5);  // 0: never re-read
  config::duration expiry_warning = std::chrono::hours(24 * 14);
};
void describe(config::binder& b, tls_config& c);

enum class side : std::uint8_t { server, client };

// What the loaded certificate says (for logs, the expiry metric and tests).
struct certificate_info {
  std::string subject;       // one-line RFC 2253 form
  std::string serial;        // hex
  std::string identity_uri;  // its shoal:// URI SAN, empty if none
  std::chrono::system_clock::time_point not_before;
  std::chrono::system_clock::time_point not_after;
};

// Owns the current OpenSSL context and the watcher thread that replaces it. Created once per
// daemon and side (server, and client for asio clients); shared by the server and every
// connection (std::shared_ptr). Thread-safe: current() is called on accept from any io thread.
// Non-copyable, non-movable; destroying it stops the watcher (open connections keep their
// context alive through the shared_ptr current() returned).
class tls_context {
 public:
  // Loads the files (errors name the key and the file) and starts the watcher unless
  // reload_interval is 0. `name` goes into log lines ("scheduler").
  [[nodiscard]] static result<std::shared_ptr<tls_context>> create(const tls_config& c, side s,
                                                                   std::string name = "tls");
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  // The context a new connection uses. Cheap (a mutex and a shared_ptr copy).
  [[nodiscard]] std::shared_ptr<boost::asio::ssl::context> current() const;
  // Checks the files now and reloads when one changed (or a failed reload may be retried):
  // true when a new context was installed, false when nothing changed, an error when the reload
  // failed (the previous context stays). The watcher calls it; tests and a SIGHUP may too.
  // Blocking file I/O: never on an event loop.
  [[nodiscard]] result<bool> reload_if_changed();

  [[nodiscard]] certificate_info certificate() const;
  [[nodiscard]] const tls_config& config() const noexcept { return cfg_; }
  [[nodiscard]] side which() const noexcept { return side_; }
  struct counters {
    std::uint64_t reloads = 0;          // successful reloads after the first load
    std::uint64_t reload_failures = 0;  // failed reload attempts
  };
  [[nodiscard]] counters stats() const;

  struct impl;

 private:
  tls_context(const tls_config& c, side s, std::string name);
  tls_config cfg_;
  side side_;
  std::unique_ptr<impl> impl_;
};

// Registers <prefix>_tls_certificate_expiry_timestamp_seconds (Unix time of the certificate's
// not-after: alert on it minus time()), <prefix>_tls_reloads_total and
// <prefix>_tls_reload_failures_total. `ctx` must outlive `reg`'s scrapes.
void register_metrics(metrics::registry& reg, const tls_context& ctx, std::string_view prefix);

// The identity a verified certificate carries (its one shoal:// URI SAN); role none, with the
// reason in `problem`, when it has none, a malformed one or several.
[[nodiscard]] role_and_name identity_from_certificate(const x509_st* cert, std::string* problem);

// SHA-256 of a certificate's DER, 64 lowercase hex: how a CA is named when comparing the root a
// client's certificate verified to (peer_identity::ca_fingerprint) with the roots of a swarm.
// Empty for a null certificate.
[[nodiscard]] std::string certificate_fingerprint(const x509_st* cert);

}  // namespace shoal::tls
