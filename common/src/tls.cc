// TLS configuration and the reloading OpenSSL context (common/tls.h).
#include "common/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/ssl/context.hpp>

#include <array>
#include <condition_variable>
#include <ctime>
#include <thread>

#include "common/file.h"
#include "common/log.h"
#include "common/text.h"
#include "common/thread_name.h"

namespace shoal::tls {

namespace ssl = boost::asio::ssl;
using sys_clock = std::chrono::system_clock;

void describe(config::binder& b, tls_config& c) {
  b.field("enabled", c.enabled,
          "Serve (and call peers) over TLS with the cluster's certificates. false: plain HTTP, "
          "for a single-machine demo only (no peer is authenticated).");
  b.field("ca_file", c.ca_file,
          "PEM file of the cluster CA: peers' certificates must chain to it. Required when "
          "enabled.");
  b.field("cert_file", c.cert_file,
          "PEM file of this party's certificate (then any intermediates), presented to peers. "
          "Required when enabled.");
  b.field("key_file", c.key_file,
          "PEM file of the certificate's private key (unencrypted). Required when enabled.");
  b.field("swarm_extra_cert_file", c.swarm_extra_cert_file,
          "During a CA rotation only (registry-proxy and peerd; other daemons ignore it): PEM "
          "file of a second certificate of this party, signed by the other CA in ca_file, used "
          "for BitTorrent only. The party then seeds and joins the swarms of both CAs (each "
          "torrent gets the leaf its root issued). Empty: one swarm root, the issuer of "
          "cert_file. docs/certificates.md \"Rotating the CA\".");
  b.field("swarm_extra_key_file", c.swarm_extra_key_file,
          "The private key of swarm_extra_cert_file (unencrypted PEM). Set both or neither.");
  b.field("require_client_cert", c.require_client_cert,
          "Refuse a client that presents no certificate (mutual TLS). false: such clients are "
          "served as anonymous; a certificate that is presented must still verify.");
  b.field("reload_interval", c.reload_interval,
          "How often the three files are checked for a change (a new inode, size or mtime); a "
          "changed set is loaded for new connections without a restart. 0: never re-read.");
  b.field("expiry_warning", c.expiry_warning,
          "Log a warning (at load, then daily) when the certificate expires within this long.");
  b.check(!c.enabled || (!c.ca_file.empty() && !c.cert_file.empty() && !c.key_file.empty()),
          "tls.enabled needs tls.ca_file, tls.cert_file and tls.key_file");
  b.check(c.swarm_extra_cert_file.empty() == c.swarm_extra_key_file.empty(),
          "tls.swarm_extra_cert_file and tls.swarm_extra_key_file go together");
}

namespace {

using stamps = std::array<file_stamp, 3>;

stamps stamps_of(const tls_config& c) {
  return {stamp_of(c.ca_file), stamp_of(c.cert_file), stamp_of(c.key_file)};
}

// OpenSSL's error queue as text (and cleared), for messages asio's error_code does not carry.
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

std::string describe_ec(const boost::system::error_code& ec) {
  std::string m = ec.message();
  if (auto more = openssl_errors(); !more.empty()) m += " (" + more + ")";
  return m;
}

sys_clock::time_point to_time_point(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return {};
  return sys_clock::from_time_t(timegm(&tm));
}

certificate_info info_of(X509* cert) {
  certificate_info info;
  if (cert == nullptr) return info;
  if (BIO* bio = BIO_new(BIO_s_mem())) {
    X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    if (n > 0) info.subject.assign(data, static_cast<std::size_t>(n));
    BIO_free(bio);
  }
  if (BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)) {
    if (char* hex = BN_bn2hex(bn)) {
      info.serial = hex;
      OPENSSL_free(hex);
    }
    BN_free(bn);
  }
  info.not_before = to_time_point(X509_get0_notBefore(cert));
  info.not_after = to_time_point(X509_get0_notAfter(cert));
  std::string problem;
  auto id = identity_from_certificate(cert, &problem);
  if (id.role != peer_role::none) {
    info.identity_uri = "shoal://" + std::string(to_string(id.role));
    if (!id.name.empty()) info.identity_uri += "/" + id.name;
  }
  return info;
}

struct built {
  std::shared_ptr<ssl::context> ctx;
  certificate_info info;
};

// One step of building a context: `what` names the key and file in the error.
status check_step(const boost::system::error_code& ec, std::string_view what) {
  if (!ec) return {};
  return fail(errc::config_error, std::string(what) + ": " + describe_ec(ec));
}

status load_files(ssl::context& ctx, const tls_config& c, side s) {
  boost::system::error_code ec;
  SSL_CTX* h = ctx.native_handle();
  if (!c.ca_file.empty()) {
    ctx.load_verify_file(c.ca_file, ec);
    if (auto st = check_step(ec, "tls.ca_file " + c.ca_file); !st) return st;
    if (s == side::server) {
      // The CertificateRequest names the acceptable CAs, so a client holding several
      // certificates picks the cluster's.
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(c.ca_file.c_str()))
        SSL_CTX_set_client_CA_list(h, names);
    }
  }
  if (!c.cert_file.empty()) {
    ctx.use_certificate_chain_file(c.cert_file, ec);
    if (auto st = check_step(ec, "tls.cert_file " + c.cert_file); !st) return st;
  }
  if (!c.key_file.empty()) {
    ctx.use_private_key_file(c.key_file, ssl::context::pem, ec);
    if (ec &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
      // Typical of a rotation caught half-way: the certificate is new, the key is not yet.
      ERR_clear_error();
      return fail(errc::key_mismatch,
                  "tls.key_file " + c.key_file + " does not match tls.cert_file " + c.cert_file);
    }
    if (auto st = check_step(ec, "tls.key_file " + c.key_file); !st) return st;
    if (SSL_CTX_check_private_key(h) != 1) {
      return fail(errc::key_mismatch, "tls.key_file " + c.key_file +
                                          " does not match tls.cert_file " + c.cert_file + " (" +
                                          openssl_errors() + ")");
    }
  }
  if (s == side::server && (c.cert_file.empty() || c.key_file.empty()))
    return fail(errc::config_error, "tls: a server needs tls.cert_file and tls.key_file");
  return {};
}

result<built> build_context(const tls_config& c, side s) {
  std::shared_ptr<ssl::context> ctx;
  try {
    ctx = std::make_shared<ssl::context>(s == side::server ? ssl::context::tls_server
                                                           : ssl::context::tls_client);
  } catch (const std::exception& e) {
    return fail(errc::internal, std::string("tls: create OpenSSL context: ") + e.what());
  }
  SSL_CTX* h = ctx->native_handle();
  ERR_clear_error();
  SSL_CTX_set_min_proto_version(h, TLS1_2_VERSION);
  SSL_CTX_set_options(h, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                             SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_SINGLE_DH_USE);
  // TLS 1.2 suites: forward secret and AEAD only (TLS 1.3's are all of that already). AES-128-GCM
  // first in both: ten AES rounds against fourteen, so never dearer than AES-256-GCM and cheaper
  // wherever the rounds rather than GHASH bound the speed; bulk transfer is what TLS costs the
  // daemons. The server's order decides (SSL_OP_CIPHER_SERVER_PREFERENCE above); OpenSSL's
  // default order puts AES-256-GCM first.
  if (SSL_CTX_set_cipher_list(h, "ECDHE+AESGCM+AES128:ECDHE+AESGCM:ECDHE+CHACHA20") != 1)
    return fail(errc::internal, "tls: set cipher list: " + openssl_errors());
  if (SSL_CTX_set_ciphersuites(h,
                               "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                               "TLS_CHACHA20_POLY1305_SHA256") != 1)
    return fail(errc::internal, "tls: set TLS 1.3 cipher suites: " + openssl_errors());
  if (auto st = load_files(*ctx, c, s); !st) return std::unexpected(st.error());
  boost::system::error_code ec;
  if (s == side::server) {
    auto mode = ssl::verify_peer;
    if (c.require_client_cert) mode |= ssl::verify_fail_if_no_peer_cert;
    ctx->set_verify_mode(mode, ec);
    // Required with client verification, or resumed sessions fail ("session id context
    // uninitialized").
    static constexpr unsigned char sid[] = "shoal";
    SSL_CTX_set_session_id_context(h, sid, sizeof sid - 1);
  } else {
    ctx->set_verify_mode(ssl::verify_peer, ec);
  }
  if (auto st = check_step(ec, "tls: set verify mode"); !st) return std::unexpected(st.error());
  built b{std::move(ctx), info_of(SSL_CTX_get0_certificate(h))};
  if (!c.cert_file.empty() && b.info.not_after != sys_clock::time_point{} &&
      b.info.not_after <= sys_clock::now()) {
    return fail(errc::config_error, "tls.cert_file " + c.cert_file + " (" + b.info.subject +
                                        ") expired; its not-after has passed");
  }
  return b;
}

}  // namespace

struct tls_context::impl {
  tls_config cfg;
  side which;
  std::string name;
  mutable std::mutex mu;
  std::shared_ptr<ssl::context> ctx;  // under mu
  certificate_info info;              // under mu
  counters stats;                     // under mu
  // Watcher state (reload_if_changed is serialized by reload_mu).
  std::mutex reload_mu;
  stamps loaded{};  // stamps of the files the current context was built from
  stamps failed{};  // stamps of the last failed attempt
  bool have_failed = false;
  std::string failed_error;
  std::chrono::steady_clock::time_point failed_at{};
  std::chrono::steady_clock::time_point warned_at{};
  // The watcher thread.
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop = false;
  std::thread watcher;

  [[nodiscard]] result<bool> reload_if_changed();
  void warn_expiry();
  void watch();
};

void tls_context::impl::warn_expiry() {
  certificate_info i;
  {
    std::lock_guard lk(mu);
    i = info;
  }
  if (i.not_after == sys_clock::time_point{}) return;
  const auto left = i.not_after - sys_clock::now();
  if (left > cfg.expiry_warning.get()) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard rl(reload_mu);  // warned_at
  if (warned_at != std::chrono::steady_clock::time_point{} &&
      now - warned_at < std::chrono::hours(24))
    return;
  warned_at = now;
  const auto days = std::chrono::duration_cast<std::chrono::hours>(left).count() / 24.0;
  log::warn("tls certificate expires soon", log::kv("context", name),
            log::kv("cert_file", cfg.cert_file), log::kv("subject", i.subject),
            log::kv("not_after", utc_rfc3339(i.not_after)), log::kv("days_left", days));
}

void tls_context::impl::watch() {
  const auto every =
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg.reload_interval.get());
  std::unique_lock lk(stop_mu);
  while (!stop) {
    stop_cv.wait_for(lk, every, [this] { return stop; });
    if (stop) break;
    lk.unlock();
    try {
      // The outcome is logged inside; the watcher just goes on.
      (void)reload_if_changed();
      warn_expiry();
    } catch (const std::exception& e) {
      log::error("tls watcher failed", log::kv("context", name), log::kv("error", e.what()));
    } catch (...) {
      log::error("tls watcher failed", log::kv("context", name));
    }
    lk.lock();
  }
}

result<bool> tls_context::impl::reload_if_changed() {
  std::lock_guard rl(reload_mu);
  const stamps now_stamps = stamps_of(cfg);
  const auto now = std::chrono::steady_clock::now();
  if (now_stamps == loaded && !have_failed) return false;
  // A failed set is tried again when a file changes, or after a minute (a clock that was behind,
  // a transient read error); it is logged again only when the error changes.
  if (have_failed && now_stamps == failed && now - failed_at < std::chrono::minutes(1)) {
    return false;
  }
  if (have_failed && now_stamps == loaded) {
    // Back to the files in use (a rotation undone): nothing to load.
    have_failed = false;
    return false;
  }
  auto b = build_context(cfg, which);
  if (!b && b.error().code == errc::key_mismatch &&
      changed_within(now_stamps, key_rotation_settle)) {
    // Half-way through a rotation (one file replaced, the other not yet): looked at again on the
    // next check, a failure only if it stays so.
    log::info("tls certificate and key do not match yet; waiting for the other file",
              log::kv("context", name), log::kv("cert_file", cfg.cert_file));
    return false;
  }
  if (!b) {
    const bool repeat = have_failed && now_stamps == failed && b.error().message == failed_error;
    {
      std::lock_guard lk(mu);
      ++stats.reload_failures;
    }
    have_failed = true;
    failed = now_stamps;
    failed_at = now;
    failed_error = b.error().message;
    if (!repeat) {
      log::error("tls reload failed; keeping the previous certificate", log::kv("context", name),
                 log::kv("error", b.error().message));
    }
    return std::unexpected(b.error().wrap("tls reload"));
  }
  certificate_info info_copy = b->info;
  {
    std::lock_guard lk(mu);
    ctx = std::move(b->ctx);
    info = b->info;
    ++stats.reloads;
  }
  loaded = now_stamps;
  have_failed = false;
  warned_at = {};
  log::info("tls certificate reloaded", log::kv("context", name),
            log::kv("cert_file", cfg.cert_file), log::kv("subject", info_copy.subject),
            log::kv("serial", info_copy.serial),
            log::kv("not_after", utc_rfc3339(info_copy.not_after)));
  return true;
}

tls_context::tls_context(const tls_config& c, side s, std::string name)
    : cfg_(c), side_(s), impl_(std::make_unique<impl>()) {
  impl_->cfg = c;
  impl_->which = s;
  impl_->name = std::move(name);
}

result<std::shared_ptr<tls_context>> tls_context::create(const tls_config& c, side s,
                                                         std::string name) {
  std::shared_ptr<tls_context> t(new tls_context(c, s, std::move(name)));
  auto& i = *t->impl_;
  i.loaded = stamps_of(c);
  auto b = build_context(c, s);
  if (!b) return std::unexpected(b.error());
  i.ctx = std::move(b->ctx);
  i.info = b->info;
  log::info("tls certificate loaded", log::kv("context", i.name), log::kv("cert_file", c.cert_file),
            log::kv("subject", i.info.subject), log::kv("identity", i.info.identity_uri),
            log::kv("not_after", utc_rfc3339(i.info.not_after)),
            log::kv("client_cert",
                    s == side::server ? (c.require_client_cert ? "required" : "optional") : "-"));
  i.warn_expiry();
  if (c.reload_interval.get().count() > 0) {
    i.watcher = std::thread([&i] {
      name_this_thread("tls-reload");
      i.watch();
    });
  }
  return t;
}

tls_context::~tls_context() {
  {
    std::lock_guard lk(impl_->stop_mu);
    impl_->stop = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->watcher.joinable()) impl_->watcher.join();
}

std::shared_ptr<ssl::context> tls_context::current() const {
  std::lock_guard lk(impl_->mu);
  return impl_->ctx;
}

result<bool> tls_context::reload_if_changed() { return impl_->reload_if_changed(); }

certificate_info tls_context::certificate() const {
  std::lock_guard lk(impl_->mu);
  return impl_->info;
}

tls_context::counters tls_context::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->stats;
}

void register_metrics(metrics::registry& reg, const tls_context& ctx, std::string_view prefix) {
  const std::string p(prefix);
  reg.gauge_fn(p + "_tls_certificate_expiry_timestamp_seconds",
               "Unix time at which the TLS certificate in use expires (its not-after).", [&ctx] {
                 auto t = ctx.certificate().not_after;
                 return static_cast<double>(sys_clock::to_time_t(t));
               });
  reg.counter_fn(p + "_tls_reloads_total",
                 "TLS certificate reloads after a change on disk (successful).",
                 [&ctx] { return static_cast<double>(ctx.stats().reloads); });
  reg.counter_fn(p + "_tls_reload_failures_total",
                 "TLS certificate reloads that failed (the previous certificate stayed).",
                 [&ctx] { return static_cast<double>(ctx.stats().reload_failures); });
}

std::string certificate_fingerprint(const x509_st* cert) {
  if (cert == nullptr) return {};
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  if (X509_digest(cert, EVP_sha256(), md.data(), &n) != 1) return {};
  static constexpr char hx[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    out += hx[md[i] >> 4];
    out += hx[md[i] & 15];
  }
  return out;
}

role_and_name identity_from_certificate(const x509_st* cert, std::string* problem) {
  auto set_problem = [problem](std::string p) {
    if (problem != nullptr) *problem = std::move(p);
  };
  if (cert == nullptr) {
    set_problem("no certificate");
    return {};
  }
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) {
    set_problem("no subjectAltName");
    return {};
  }
  std::optional<role_and_name> found;
  int shoal_uris = 0;
  std::string bad;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names, i);
    if (gn->type != GEN_URI) continue;
    const ASN1_IA5STRING* s = gn->d.uniformResourceIdentifier;
    std::string_view uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         static_cast<std::size_t>(ASN1_STRING_length(s)));
    if (!uri.starts_with("shoal://")) continue;
    ++shoal_uris;
    if (auto id = parse_identity_uri(uri)) {
      found = std::move(id);
    } else if (bad.empty()) {
      bad = std::string(uri.substr(0, 200));
    }
  }
  GENERAL_NAMES_free(names);
  if (shoal_uris == 0) {
    set_problem("no shoal:// URI subjectAltName");
    return {};
  }
  if (shoal_uris > 1) {
    set_problem("more than one shoal:// URI subjectAltName");
    return {};
  }
  if (!found) {
    set_problem("malformed identity URI \"" + bad + "\"");
    return {};
  }
  return *found;
}

}  // namespace shoal::tls
