// The TLS side of swarm::session (swarm.h): BitTorrent between members. The daemon's tls section
// turned into session settings and the process's metainfo root, the certificate pair loaded,
// checked, given to each SSL torrent and re-read when its files change.
#include "swarm_tls.h"

#include <libtorrent/torrent_handle.hpp>
#include <libtorrent/torrent_info.hpp>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/file.h"
#include "common/log.h"
#include "swarm/swarm.h"

namespace shoal::swarm {

namespace {

// RFC 7919 ffdhe2048 (`openssl genpkey -genparam -algorithm DH -pkeyopt group:ffdhe2048`):
// libtorrent's set_ssl_certificate wants DH parameters (without them it posts an error); a fixed,
// published group needs no generation and no file.
constexpr std::string_view ffdhe2048_pem =
    "-----BEGIN DH PARAMETERS-----\n"
    "MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz\n"
    "+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a\n"
    "87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7\n"
    "YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi\n"
    "7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD\n"
    "ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==\n"
    "-----END DH PARAMETERS-----\n";

std::optional<std::string> read_whole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

namespace detail {

// "a:1,b:2" → "a:1s,b:2s": every listen socket an SSL one.
std::string ssl_listen(const std::string& listen) {
  std::string out;
  std::size_t start = 0;
  while (start <= listen.size()) {
    auto comma = listen.find(',', start);
    std::string part =
        listen.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) {
      if (!out.empty()) out += ',';
      out += part;
      if (part.back() != 's') out += 's';
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace detail

namespace {

// The root (index into `bundle`) that issued the leaf in `cert_file`; `key` names the setting.
result<std::size_t> root_of(const std::string& cert_file, const std::vector<std::string>& bundle,
                            std::string_view key) {
  auto leaf = read_whole(cert_file);
  if (!leaf) return fail_errno(errno, "read " + std::string(key) + " " + cert_file);
  auto i = issuing_root(*leaf, bundle);
  if (!i) return fail(i.error().wrap(std::string(key) + " " + cert_file + " (tls.ca_file)"));
  return i;
}

}  // namespace

status enable_members_only(const tls::tls_config& tls) {
  if (!tls.enabled) {
    set_metainfo_root("");
    return {};
  }
  auto bundle = load_root_bundle(tls.ca_file);
  if (!bundle) return fail(bundle.error().wrap("tls.ca_file (the root of every torrent)"));
  std::vector<std::string> roots;
  auto primary = root_of(tls.cert_file, *bundle, "tls.cert_file");
  if (primary) {
    roots.push_back((*bundle)[*primary]);
  } else if (bundle->size() == 1) {
    // One CA: it roots every torrent, as before the issuer mattered (a leaf it did not sign gets
    // nothing from anyone, which the swarm's own handshakes say).
    log::warn("tls.cert_file is not signed by the CA in tls.ca_file; that CA roots the torrents",
              log::kv("error", primary.error().message));
    roots.push_back(bundle->front());
  } else {
    return fail(primary.error().wrap("the primary swarm root"));
  }
  if (!tls.swarm_extra_cert_file.empty()) {
    auto extra = root_of(tls.swarm_extra_cert_file, *bundle, "tls.swarm_extra_cert_file");
    if (!extra) return fail(extra.error().wrap("the second swarm root"));
    if ((*bundle)[*extra] == roots.front())
      return fail(errc::config_error,
                  "tls.swarm_extra_cert_file is from the same CA as tls.cert_file: a second pair "
                  "is for the other CA of a rotation");
    roots.push_back((*bundle)[*extra]);
  }
  log::info("swarm roots", log::kv("roots", roots.size()),
            log::kv("primary", root_fingerprint(roots.front())),
            log::kv("second", roots.size() > 1 ? root_fingerprint(roots[1]) : std::string()));
  set_metainfo_roots(std::move(roots));
  return {};
}

void apply_tls(settings& s, const tls::tls_config& tls) {
  s.ssl = tls.enabled;
  if (!tls.enabled) return;
  s.cert_file = tls.cert_file;
  s.key_file = tls.key_file;
  s.ca_file = tls.ca_file;
  s.extra_certs.clear();
  if (!tls.swarm_extra_cert_file.empty())
    s.extra_certs.push_back({tls.swarm_extra_cert_file, tls.swarm_extra_key_file});
  s.roots = metainfo_roots();
  s.reload_interval =
      std::chrono::duration_cast<std::chrono::milliseconds>(tls.reload_interval.get());
}

// The stamps of both files (common/file.h): any change is a new pair.
std::array<file_stamp, 2> session::file_stamps(const cert_slot& slot) {
  return {stamp_of(slot.cert_file), stamp_of(slot.key_file)};
}

result<session::cert_pair> session::load_certificate(const cert_slot& slot) const {
  const auto& cert_file = slot.cert_file;
  const auto& key_file = slot.key_file;
  auto cert = read_whole(cert_file);
  if (!cert) return fail_errno(errno, "read tls.cert_file " + cert_file);
  auto key = read_whole(key_file);
  if (!key) return fail_errno(errno, "read tls.key_file " + key_file);
  std::unique_ptr<BIO, decltype(&BIO_free)> cb(
      BIO_new_mem_buf(cert->data(), static_cast<int>(cert->size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> x(
      cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr, &X509_free);
  if (!x) return fail(errc::invalid_argument, "tls.cert_file " + cert_file + ": no certificate");
  std::unique_ptr<BIO, decltype(&BIO_free)> kb(
      BIO_new_mem_buf(key->data(), static_cast<int>(key->size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k(
      kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr, &EVP_PKEY_free);
  if (!k) return fail(errc::invalid_argument, "tls.key_file " + key_file + ": no private key");
  if (X509_check_private_key(x.get(), k.get()) != 1)
    return fail(errc::key_mismatch,
                "tls.key_file " + key_file + " does not match tls.cert_file " + cert_file);
  cert_pair out{std::move(*cert), std::move(*key), {}};
  if (!roots_.empty()) {
    auto i = issuing_root(out.cert, roots_);
    if (i) {
      out.root = roots_[*i];
    } else if (&slot != &slots_.front() || roots_.size() > 1) {
      // A second pair must be from a root of its own; the primary one may only be off with a
      // single root (enable_members_only's one-CA fallback).
      return fail(i.error().wrap("tls.cert_file " + cert_file));
    }
  }
  return out;
}

std::shared_ptr<const session::cert_pair> session::pair_for(std::string_view root) const {
  std::lock_guard lk(cert_mu_);
  for (const auto& s : slots_) {
    if (s.pair && !s.pair->root.empty() && s.pair->root == root) return s.pair;
  }
  return slots_.empty() ? nullptr : slots_.front().pair;
}

std::vector<std::string> session::roots() const {
  std::vector<std::string> out;
  if (!ssl_) return out;
  std::lock_guard lk(cert_mu_);
  for (const auto& s : slots_) {
    if (s.pair && !s.pair->root.empty() &&
        std::find(out.begin(), out.end(), s.pair->root) == out.end())
      out.push_back(s.pair->root);
  }
  return out;
}

std::string session::root_for_ca(std::string_view ca_fingerprint) const {
  return root_with_fingerprint(ca_fingerprint, roots());
}

void session::set_certificate(const lt::torrent_handle& h) {
  if (!ssl_ || !h.is_valid()) return;
  std::string root;
  if (slots_.size() > 1) {
    try {
      auto ti = h.torrent_file();
      if (ti) root = std::string(ti->ssl_cert());
    } catch (const std::exception&) {
      return;  // the torrent went away meanwhile
    }
  }
  set_certificate(h, root);
}

void session::set_certificate(const lt::torrent_handle& h, std::string_view root) {
  if (!ssl_ || !h.is_valid()) return;
  auto c = pair_for(root);
  if (!c) return;
  try {
    lt::torrent_handle th = h;
    th.set_ssl_certificate_buffer(c->cert, c->key, std::string(ffdhe2048_pem));
  } catch (const std::exception&) {
    // The torrent went away meanwhile.
  }
}

result<bool> session::reload_certificate_if_changed() {
  if (!ssl_) return false;
  bool changed = false;
  std::optional<error> failed;
  for (auto& slot : slots_) {
    auto stamp = file_stamps(slot);
    {
      std::lock_guard lk(cert_mu_);
      if (stamp == slot.stamp) continue;
    }
    auto pair = load_certificate(slot);
    if (!pair && pair.error().code == errc::key_mismatch &&
        changed_within(stamp, key_rotation_settle)) {
      // Half-way through a rotation: looked at again next time, a failure only if it stays so.
      log::info("swarm certificate and key do not match yet; waiting for the other file",
                log::kv("cert_file", slot.cert_file));
      continue;
    }
    std::lock_guard lk(cert_mu_);
    slot.stamp = stamp;  // a failed load is not retried until the files change again
    if (!pair) {
      ++tls_stats_.reload_failures;
      failed = pair.error().wrap("swarm certificate reload (the previous one stays)");
      continue;
    }
    slot.pair = std::make_shared<const cert_pair>(std::move(*pair));
    ++tls_stats_.reloads;
    changed = true;
  }
  if (changed) {
    std::vector<lt::torrent_handle> all;
    try {
      all = ses_->get_torrents();
    } catch (const std::exception& e) {
      return fail(errc::internal, std::string("list torrents: ") + e.what());
    }
    for (const auto& h : all) set_certificate(h);
    log::info("swarm certificate reloaded", log::kv("cert_file", slots_.front().cert_file),
              log::kv("pairs", slots_.size()), log::kv("torrents", all.size()));
  }
  if (failed) return fail(*failed);
  return changed;
}

session::tls_counters session::tls_stats() const {
  std::lock_guard lk(cert_mu_);
  return tls_stats_;
}

void register_tls_metrics(metrics::registry& reg, const session& s, std::string_view prefix) {
  if (!s.ssl()) return;
  const std::string p(prefix);
  const session* ps = &s;
  reg.counter_fn(p + "_swarm_tls_reloads_total",
                 "Swarm certificates re-read from disk and installed on every torrent.",
                 [ps] { return static_cast<double>(ps->tls_stats().reloads); });
  reg.counter_fn(p + "_swarm_tls_reload_failures_total",
                 "Changed swarm certificate files that did not load (the previous pair stays).",
                 [ps] { return static_cast<double>(ps->tls_stats().reload_failures); });
  if (const grant_counters* g = s.grant_stats()) {
    reg.counter_fn(p + "_swarm_grants_accepted_total",
                   "Connections whose grant (registry-proxy's, for the node and the swarm) "
                   "verified.",
                   [g] { return static_cast<double>(g->accepted.load()); });
    reg.counter_fn(p + "_swarm_grant_refusals_total",
                   "Connections refused pieces: no grant, or one that did not verify (the log "
                   "says why).",
                   [g] { return static_cast<double>(g->refused.load()); });
  }
}

void session::set_grant(const lt::sha1_hash& swarm, std::string grant,
                        std::chrono::system_clock::time_point expires) {
  if (grants_) grants_->put(swarm, std::move(grant), expires);
}

}  // namespace shoal::swarm
