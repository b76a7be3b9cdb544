#include "common/grant.h"

#include "common/base64.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <ctime>
#include <list>
#include <system_error>
#include <mutex>
#include <utility>
#include <vector>

#include "common/bencode.h"
#include "common/file.h"
#include "common/peer_identity.h"
#include "common/text.h"
#include "common/tls.h"

namespace shoal::grant {
namespace {

using clock = std::chrono::system_clock;

struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct store_free {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct md_ctx_free {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct store_ctx_free {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using store_ptr = std::unique_ptr<X509_STORE, store_free>;
using bio_ptr = std::unique_ptr<BIO, bio_free>;

// Leaves the thread's OpenSSL error queue empty on every exit: the verifier runs on libtorrent's
// network thread, whose own SSL calls read the queue (a stale PEM "no start line" from the end of
// a bundle would be taken for their error).
struct clear_errors {
  clear_errors() = default;
  clear_errors(const clear_errors&) = delete;
  clear_errors& operator=(const clear_errors&) = delete;
  ~clear_errors() { ERR_clear_error(); }
};

std::int64_t unix_seconds(clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// The dict every grant is signed over: everything but s.
bencode::dict unsigned_dict(const claims& c, std::string_view signer_der) {
  bencode::dict d;
  d["e"] = unix_seconds(c.expires);
  d["h"] = std::string(reinterpret_cast<const char*>(c.swarm.data()), c.swarm.size());
  d["n"] = c.node;
  d["v"] = 1;
  d["x"] = std::string(signer_der);
  return d;
}

// SHA-256 with the key's own algorithm (ECDSA, RSA PKCS#1 v1.5); Ed25519 signs the message itself.
const EVP_MD* digest_for(EVP_PKEY* k) {
  int id = EVP_PKEY_get_base_id(k);
  if (id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448) return nullptr;
  return EVP_sha256();
}

result<bio_ptr> open_pem(const std::string& path, std::string_view what) {
  bio_ptr b(BIO_new_file(path.c_str(), "r"));
  if (!b) {
    int e = errno;
    return fail(errc::config_error,
                std::string(what) + " " + path + ": " + std::generic_category().message(e));
  }
  return b;
}

struct parsed_grant {
  claims c;
  std::string signer_der;
  std::string signature;
  std::string signed_bytes;  // the bencoding s covers
};

result<parsed_grant> parse(std::string_view grant) {
  if (grant.empty()) return fail(errc::protocol_error, "grant is empty");
  if (grant.size() > max_bytes) {
    return fail(errc::too_large, "grant is " + std::to_string(grant.size()) + " bytes, more than " +
                                     std::to_string(max_bytes));
  }
  bencode::limits lim;
  lim.max_depth = 2;
  lim.max_items = 16;
  lim.max_string = max_bytes;
  auto v = bencode::decode(grant, lim);
  if (!v) return fail(v.error().wrap("grant"));
  if (!v->is_dict()) return fail(errc::protocol_error, "grant is not a dictionary");
  const auto& d = v->as_dict();
  if (d.size() != 6) return fail(errc::protocol_error, "grant does not have exactly 6 keys");
  auto str = [&](const char* k) -> const std::string* {
    const auto* x = v->find(k);
    return x && x->is_string() ? &x->as_string() : nullptr;
  };
  auto num = [&](const char* k) -> const std::int64_t* {
    const auto* x = v->find(k);
    return x && x->is_int() ? &std::get<std::int64_t>(x->v) : nullptr;
  };
  const auto* ver = num("v");
  const auto* exp = num("e");
  const auto* hash = str("h");
  const auto* node = str("n");
  const auto* sig = str("s");
  const auto* der = str("x");
  if (!ver || !exp || !hash || !node || !sig || !der)
    return fail(errc::protocol_error, "grant lacks one of e, h, n, s, v, x or has a wrong type");
  if (*ver != 1) return fail(errc::protocol_error, "grant version " + std::to_string(*ver));
  if (hash->size() != 20) return fail(errc::protocol_error, "grant info-hash is not 20 bytes");
  if (node->empty() || node->size() > 253) return fail(errc::protocol_error, "grant node name");
  // The expiry becomes a clock time point (nanoseconds from 1970: up to the year 2262); one past
  // that would overflow in the conversion.
  constexpr std::int64_t max_exp =
      std::chrono::duration_cast<std::chrono::seconds>(clock::duration::max()).count();
  if (*exp <= 0 || *exp > max_exp) return fail(errc::protocol_error, "grant expiry out of range");
  parsed_grant p;
  std::copy(hash->begin(), hash->end(), reinterpret_cast<char*>(p.c.swarm.data()));
  p.c.node = *node;
  p.c.expires = clock::time_point(std::chrono::seconds(*exp));
  p.signer_der = *der;
  p.signature = *sig;
  p.signed_bytes = bencode::encode(bencode::value(unsigned_dict(p.c, p.signer_der)));
  return p;
}

}  // namespace

// ---- base64

std::string to_header(std::string_view grant) { return base64_encode(grant); }

result<std::string> from_header(std::string_view value) {
  if (value.empty()) return fail(errc::protocol_error, "grant header is empty");
  return base64_decode(value, max_bytes, "grant header");
}

result<info_hash> parse_info_hash(std::string_view hex) {
  if (hex.size() != 40) return fail(errc::invalid_argument, "an info-hash is 40 hex digits");
  info_hash out{};
  auto nib = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return fail(errc::invalid_argument, "an info-hash is 40 hex digits");
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return out;
}

result<claims> peek(std::string_view grant) {
  auto p = parse(grant);
  if (!p) return fail(p.error());
  return p->c;
}

// ---- signer

struct signer::impl {
  std::string cert_file, key_file;
  std::chrono::milliseconds recheck{0};
  std::mutex mu;
  std::array<file_stamp, 2> stamps{};
  std::chrono::steady_clock::time_point checked{};
  std::string der;  // the certificate, DER
  pkey_ptr key;

  // Loads both files; on failure the previous pair stays.
  status load() {
    clear_errors guard;
    auto cb = open_pem(cert_file, "grant signer certificate");
    if (!cb) return fail(cb.error());
    auto kb = open_pem(key_file, "grant signer key");
    if (!kb) return fail(kb.error());
    x509_ptr x(PEM_read_bio_X509(cb->get(), nullptr, nullptr, nullptr));
    if (!x) return fail(errc::config_error, "grant signer " + cert_file + ": no certificate");
    pkey_ptr k(PEM_read_bio_PrivateKey(kb->get(), nullptr, nullptr, nullptr));
    if (!k) return fail(errc::config_error, "grant signer " + key_file + ": no private key");
    if (X509_check_private_key(x.get(), k.get()) != 1)
      return fail(errc::config_error,
                  "grant signer: " + key_file + " is not the key of " + cert_file);
    int len = i2d_X509(x.get(), nullptr);
    if (len <= 0) return fail(errc::config_error, "grant signer: certificate does not encode");
    std::string d(static_cast<std::size_t>(len), '\0');
    auto* p = reinterpret_cast<unsigned char*>(d.data());
    i2d_X509(x.get(), &p);
    der = std::move(d);
    key = std::move(k);
    return {};
  }

  void refresh() {
    auto now = std::chrono::steady_clock::now();
    if (recheck.count() <= 0 || now - checked < recheck) return;
    checked = now;
    std::array<file_stamp, 2> s{stamp_of(cert_file), stamp_of(key_file)};
    if (s == stamps) return;
    stamps = s;
    (void)load();  // a half-rotated pair keeps the previous one; the TLS context logs the cause
  }
};

signer::signer() : impl_(std::make_unique<impl>()) {}
signer::~signer() = default;

result<std::shared_ptr<signer>> signer::load(std::string cert_file, std::string key_file,
                                             std::chrono::milliseconds recheck) {
  std::shared_ptr<signer> s(new signer());
  s->impl_->cert_file = std::move(cert_file);
  s->impl_->key_file = std::move(key_file);
  s->impl_->recheck = recheck;
  s->impl_->stamps = {stamp_of(s->impl_->cert_file), stamp_of(s->impl_->key_file)};
  s->impl_->checked = std::chrono::steady_clock::now();
  if (auto st = s->impl_->load(); !st) return fail(st.error());
  return s;
}

result<std::string> signer::sign(const claims& c) {
  clear_errors guard;
  std::lock_guard lk(impl_->mu);
  impl_->refresh();
  bencode::dict d = unsigned_dict(c, impl_->der);
  std::string msg = bencode::encode(bencode::value(d));
  std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
  std::size_t len = 0;
  if (!ctx ||
      EVP_DigestSignInit(ctx.get(), nullptr, digest_for(impl_->key.get()), nullptr,
                         impl_->key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(msg.data()),
                     msg.size()) != 1) {
    return fail(errc::internal, "grant: the signer's key cannot sign");
  }
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(msg.data()), msg.size()) != 1) {
    return fail(errc::internal, "grant: signing failed");
  }
  sig.resize(len);
  d["s"] = std::move(sig);
  return bencode::encode(bencode::value(std::move(d)));
}

// ---- verifier

struct verifier::impl {
  std::string ca_file;
  std::chrono::milliseconds recheck{0};
  std::mutex mu;
  file_stamp stamp{};
  std::chrono::steady_clock::time_point checked{};
  store_ptr store;
  // Signer certificates already verified against `store` (by their DER): key and validity.
  struct known_signer {
    std::string der;
    std::shared_ptr<EVP_PKEY> key;
    clock::time_point not_before, not_after;
  };
  std::list<known_signer> known;  // most recently used first, at most max_known
  static constexpr std::size_t max_known = 16;

  status load() {
    clear_errors guard;
    auto b = open_pem(ca_file, "grant CA bundle");
    if (!b) return fail(b.error());
    store_ptr s(X509_STORE_new());
    if (!s) return fail(errc::internal, "grant: out of memory");
    int n = 0;
    while (x509_ptr x{PEM_read_bio_X509(b->get(), nullptr, nullptr, nullptr)}) {
      if (X509_STORE_add_cert(s.get(), x.get()) == 1) ++n;
    }
    if (n == 0) return fail(errc::config_error, "grant CA bundle " + ca_file + ": no certificate");
    store = std::move(s);
    known.clear();
    return {};
  }

  void refresh() {
    auto now = std::chrono::steady_clock::now();
    if (recheck.count() <= 0 || now - checked < recheck) return;
    checked = now;
    auto s = stamp_of(ca_file);
    if (s == stamp) return;
    stamp = s;
    (void)load();  // a broken bundle keeps the previous one
  }

  result<std::shared_ptr<EVP_PKEY>> signer_key(const std::string& der, clock::time_point now) {
    for (auto it = known.begin(); it != known.end(); ++it) {
      if (it->der != der) continue;
      if (now < it->not_before || now >= it->not_after)
        return fail(errc::unauthorized, "grant signer certificate is not valid now");
      known.splice(known.begin(), known, it);
      return known.front().key;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(der.data());
    x509_ptr x(d2i_X509(nullptr, &p, static_cast<long>(der.size())));
    if (!x || p != reinterpret_cast<const unsigned char*>(der.data()) + der.size())
      return fail(errc::protocol_error, "grant signer certificate does not parse");
    std::unique_ptr<X509_STORE_CTX, store_ctx_free> ctx(X509_STORE_CTX_new());
    if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), x.get(), nullptr) != 1)
      return fail(errc::internal, "grant: out of memory");
    X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(unix_seconds(now)));
    if (X509_verify_cert(ctx.get()) != 1) {
      return fail(errc::unauthorized,
                  std::string("grant signer certificate does not verify against the CA: ") +
                      X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
    }
    std::string problem;
    auto id = tls::identity_from_certificate(x.get(), &problem);
    if (id.role != tls::peer_role::registry_proxy && id.role != tls::peer_role::scheduler) {
      return fail(
          errc::unauthorized,
          "grant signer is neither registry-proxy nor the scheduler (" +
              (id.role == tls::peer_role::none ? problem : std::string(tls::to_string(id.role))) +
              ")");
    }
    EVP_PKEY* raw = X509_get_pubkey(x.get());
    if (raw == nullptr) return fail(errc::protocol_error, "grant signer certificate has no key");
    std::shared_ptr<EVP_PKEY> key(raw, EVP_PKEY_free);
    auto when = [](const ASN1_TIME* t) {
      std::tm tm{};
      if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return clock::time_point{};
      return clock::from_time_t(timegm(&tm));
    };
    known.push_front(known_signer{der, key, when(X509_get0_notBefore(x.get())),
                                  when(X509_get0_notAfter(x.get()))});
    if (known.size() > max_known) known.pop_back();
    return key;
  }
};

verifier::verifier() : impl_(std::make_unique<impl>()) {}
verifier::~verifier() = default;

result<std::shared_ptr<verifier>> verifier::load(std::string ca_file,
                                                 std::chrono::milliseconds recheck) {
  std::shared_ptr<verifier> v(new verifier());
  v->impl_->ca_file = std::move(ca_file);
  v->impl_->recheck = recheck;
  v->impl_->stamp = stamp_of(v->impl_->ca_file);
  v->impl_->checked = std::chrono::steady_clock::now();
  if (auto st = v->impl_->load(); !st) return fail(st.error());
  return v;
}

result<claims> verifier::verify(std::string_view grant, const info_hash& swarm,
                                std::string_view node, clock::time_point now) {
  clear_errors guard;
  auto p = parse(grant);
  if (!p) return fail(p.error());
  if (p->c.swarm != swarm) return fail(errc::unauthorized, "grant is for another swarm");
  if (p->c.node != node) {
    return fail(errc::unauthorized,
                "grant is for node " + quote_excerpt(p->c.node, 64) + ", not this connection's");
  }
  if (now >= p->c.expires + clock_skew) return fail(errc::unauthorized, "grant expired");
  std::shared_ptr<EVP_PKEY> key;
  {
    std::lock_guard lk(impl_->mu);
    impl_->refresh();
    auto k = impl_->signer_key(p->signer_der, now);
    if (!k) return fail(k.error());
    key = std::move(*k);
  }
  std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
  if (!ctx ||
      EVP_DigestVerifyInit(ctx.get(), nullptr, digest_for(key.get()), nullptr, key.get()) != 1)
    return fail(errc::internal, "grant: cannot set up verification");
  if (EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(p->signature.data()),
                       p->signature.size(),
                       reinterpret_cast<const unsigned char*>(p->signed_bytes.data()),
                       p->signed_bytes.size()) != 1) {
    return fail(errc::unauthorized, "grant signature does not verify");
  }
  return p->c;
}

}  // namespace shoal::grant
