#include "certs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string_view>

#include "common/peer_identity.h"

namespace shoal::tools::certs {
namespace {

struct bio_free {
  void operator()(BIO* b) const { BIO_free_all(b); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct ext_free {
  void operator()(X509_EXTENSION* e) const { X509_EXTENSION_free(e); }
};
struct bn_free {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

constexpr unsigned max_ca_days = 36500;
constexpr unsigned max_leaf_days = 3650;

// The newest OpenSSL error on this thread, or `fallback`; clears the queue.
std::string ssl_error(std::string_view fallback) {
  unsigned long e = ERR_get_error();
  std::string out(fallback);
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += ": ";
    out += buf;
  }
  ERR_clear_error();
  return out;
}

std::string join(const std::string& dir, const std::string& file) {
  return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

status ensure_dir(const std::string& dir) {
  if (dir.empty()) return fail(errc::invalid_argument, "--dir is required");
  if (::mkdir(dir.c_str(), 0700) == 0) return {};
  if (errno != EEXIST) return fail_errno(errno, "mkdir " + dir);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fail_errno(errno, "stat " + dir);
  if (!S_ISDIR(st.st_mode)) return fail(errc::invalid_argument, dir + " is not a directory");
  return {};
}

std::string bio_string(BIO* b) {
  BUF_MEM* m = nullptr;
  BIO_get_mem_ptr(b, &m);
  return m ? std::string(m->data, m->length) : std::string();
}

// Writes `data` to `path` with `mode` through a temporary file in the same directory. With
// `exclusive`, the final name is taken by link(2), which fails when it exists (the CA is never
// overwritten); otherwise by rename(2), which replaces it whole.
status write_file(const std::string& path, const std::string& data, mode_t mode, bool exclusive) {
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return fail_errno(errno, "create a temporary file for " + path);
  auto cleanup = [&] { ::unlink(tmp.c_str()); };
  if (::fchmod(fd, mode) != 0) {
    int e = errno;
    ::close(fd);
    cleanup();
    return fail_errno(e, "chmod " + tmp);
  }
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      cleanup();
      return fail_errno(e, "write " + tmp);
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    cleanup();
    return fail_errno(e, "fsync " + tmp);
  }
  if (exclusive) {
    if (::link(tmp.c_str(), path.c_str()) != 0) {
      int e = errno;
      cleanup();
      if (e == EEXIST) return fail(errc::already_exists, path + " already exists: not overwritten");
      return fail_errno(e, "link " + path);
    }
    cleanup();
    return {};
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    cleanup();
    return fail_errno(e, "rename " + tmp + " to " + path);
  }
  return {};
}

result<pkey_ptr> new_key() {
  pkey_ptr k(EVP_EC_gen("P-256"));
  if (!k) return fail(errc::internal, ssl_error("generate an ECDSA P-256 key"));
  return k;
}

result<std::string> key_pem(EVP_PKEY* k) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return fail(errc::internal, ssl_error("encode the private key"));
  return bio_string(b.get());
}

result<std::string> cert_pem(X509* x) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), x) != 1)
    return fail(errc::internal, ssl_error("encode the certificate"));
  return bio_string(b.get());
}

status add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ext_free> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return fail(errc::internal,
                ssl_error(std::string("add extension ") + OBJ_nid2sn(nid) + " = " + value));
  return {};
}

// A certificate with a random serial, the subject CN, the key and the validity set; not signed.
result<x509_ptr> new_cert(const std::string& cn, EVP_PKEY* key, unsigned days) {
  x509_ptr x(X509_new());
  if (!x || X509_set_version(x.get(), 2) != 1) return fail(errc::internal, ssl_error("X509_new"));
  std::unique_ptr<BIGNUM, bn_free> bn(BN_new());
  // 127 random bits: positive, at most 16 bytes, and unique without a serial database.
  if (!bn || BN_rand(bn.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ODD) != 1 ||
      !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(x.get())))
    return fail(errc::internal, ssl_error("random serial"));
  X509_NAME* name = X509_get_subject_name(x.get());
  // X.509 caps a CN at 64 characters and a node name may have 253. The CN is informational (the
  // identity is the URI SAN), and a prefix keeps the `shoal-` start that rule 2 relies on.
  const std::string short_cn = cn.substr(0, 64);
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(short_cn.c_str()), -1, -1,
                                 0) != 1)
    return fail(errc::internal, ssl_error("subject CN=" + cn));
  // Five minutes back: a node whose clock is slightly behind still accepts a fresh certificate.
  if (!X509_gmtime_adj(X509_getm_notBefore(x.get()), -300) ||
      !X509_time_adj_ex(X509_getm_notAfter(x.get()), static_cast<int>(days), 0, nullptr))
    return fail(errc::internal, ssl_error("validity"));
  if (X509_set_pubkey(x.get(), key) != 1) return fail(errc::internal, ssl_error("public key"));
  return x;
}

std::string describe_name(X509_NAME* n) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b) return "?";
  X509_NAME_print_ex(b.get(), n, 0, XN_FLAG_RFC2253);
  return bio_string(b.get());
}

std::string describe_sans(X509* x) {
  int idx = X509_get_ext_by_NID(x, NID_subject_alt_name, -1);
  if (idx < 0) return {};
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b) return "?";
  X509V3_EXT_print(b.get(), X509_get_ext(x, idx), 0, 0);
  return bio_string(b.get());
}

std::string describe_not_after(X509* x) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1) return "?";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

result<written> write_pair(X509* x, EVP_PKEY* key, const std::string& cert_path,
                           const std::string& key_path, bool exclusive) {
  auto kp = key_pem(key);
  if (!kp) return fail(kp.error());
  auto cp = cert_pem(x);
  if (!cp) return fail(cp.error());
  // The key first: a daemon that re-reads the pair on a change sees a new certificate only once
  // its key is in place (and retries a mismatched pair when the other file changes).
  if (auto s = write_file(key_path, *kp, 0600, exclusive); !s) return fail(s.error());
  if (auto s = write_file(cert_path, *cp, 0644, exclusive); !s) {
    if (exclusive) ::unlink(key_path.c_str());
    return fail(s.error());
  }
  return written{cert_path, key_path, describe_name(X509_get_subject_name(x)), describe_sans(x),
                 describe_not_after(x)};
}

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}

// docs/security.md rules 2 and 3: a DNS SAN of a non-node certificate must not be a prefix of a
// torrent name (64 lowercase hex digits, or "sha256" for packs; libtorrent compares prefixes)
// and must be an FQDN with a dot (Go clients match DNS `*` to single-label names).
status check_dns(const std::string& d) {
  if (d.find('*') != std::string::npos)
    return fail(errc::invalid_argument,
                "--dns " + d +
                    ": wildcards are refused; DNS * marks a swarm member and is added to node "
                    "and registry-proxy certificates only");
  if (d.empty() || d.size() > 253)
    return fail(errc::invalid_argument, "--dns '" + d + "': not a DNS name (1..253 characters)");
  if ((is_hex(d) && d.size() <= 64) || std::string_view("sha256").starts_with(d) ||
      d.starts_with("sha256"))
    return fail(errc::invalid_argument,
                "--dns " + d +
                    ": could be a prefix of a torrent name (hex digits or 'sha256'); libtorrent "
                    "would admit this certificate to swarms (docs/security.md, rule 2)");
  std::size_t start = 0;
  int labels = 0;
  while (start <= d.size()) {
    std::size_t dot = d.find('.', start);
    std::string_view label(d.data() + start, (dot == std::string::npos ? d.size() : dot) - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return fail(errc::invalid_argument, "--dns " + d +
                                              ": not a DNS name (empty, long or "
                                              "hyphen-edged label)");
    for (char c : label) {
      bool ok =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (!ok)
        return fail(errc::invalid_argument,
                    "--dns " + d + ": not a DNS name (character '" + std::string(1, c) + "')");
    }
    ++labels;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (labels < 2)
    return fail(errc::invalid_argument,
                "--dns " + d + ": a single-label name; use the FQDN (e.g. " + d +
                    ".shoal.svc.cluster.local): Go clients match a member's DNS * to any "
                    "single-label host (docs/security.md, rule 3)");
  return {};
}

status check_ip(const std::string& ip) {
  unsigned char buf[16];
  if (::inet_pton(AF_INET, ip.c_str(), buf) == 1 || ::inet_pton(AF_INET6, ip.c_str(), buf) == 1)
    return {};
  return fail(errc::invalid_argument, "--ip " + ip + ": not an IPv4 or IPv6 address");
}

struct role_profile {
  std::string_view role;
  bool named;                  // the URI carries a name (required)
  bool swarm;                  // DNS * and serverAuth+clientAuth
  bool server;                 // may carry --dns/--ip
  bool client_only;            // clientAuth only
  std::string_view cn_prefix;  // CN = prefix + name (node: the name itself)
};

constexpr role_profile profiles[] = {
    {"node", true, true, true, false, ""},
    {"registry-proxy", false, true, true, false, "shoal-registry-proxy"},
    {"scheduler", true, false, true, false, "shoal-scheduler-"},
    {"operator", true, false, false, true, "shoal-operator-"},
    {"kube-scheduler", false, false, false, true, "shoal-kube-scheduler"},
};

const role_profile* find_profile(std::string_view role) {
  for (const auto& p : profiles) {
    if (p.role == role) return &p;
  }
  return nullptr;
}

std::string identity_uri(const issue_request& r) {
  return "shoal://" + r.role + (r.name.empty() ? "" : "/" + r.name);
}

struct ca_pair {
  x509_ptr cert;
  pkey_ptr key;
};

result<ca_pair> load_ca(const std::string& dir) {
  const std::string cp = join(dir, "ca.pem"), kp = join(dir, "ca.key");
  ca_pair ca;
  {
    bio_ptr b(BIO_new_file(cp.c_str(), "r"));
    if (!b) return fail(errc::not_found, ssl_error("read " + cp + " (run `shoalctl certs init`)"));
    ca.cert.reset(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
    if (!ca.cert) return fail(errc::invalid_argument, ssl_error(cp + ": no PEM certificate"));
  }
  {
    bio_ptr b(BIO_new_file(kp.c_str(), "r"));
    if (!b) return fail(errc::not_found, ssl_error("read " + kp));
    ca.key.reset(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
    if (!ca.key) return fail(errc::invalid_argument, ssl_error(kp + ": no unencrypted PEM key"));
  }
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1)
    return fail(errc::invalid_argument, ssl_error(kp + " is not the key of " + cp));
  if (X509_check_ca(ca.cert.get()) == 0)
    return fail(errc::invalid_argument, cp + " is not a CA certificate");
  if (X509_cmp_current_time(X509_get0_notAfter(ca.cert.get())) <= 0)
    return fail(errc::invalid_argument,
                cp + " has expired (" + describe_not_after(ca.cert.get()) + ")");
  return ca;
}

}  // namespace

result<written> init_ca(const init_request& r) {
  if (r.days == 0 || r.days > max_ca_days)
    return fail(errc::invalid_argument, "--days must be 1.." + std::to_string(max_ca_days));
  if (auto s = ensure_dir(r.dir); !s) return fail(s.error());
  const std::string cp = join(r.dir, "ca.pem"), kp = join(r.dir, "ca.key");
  for (const auto& p : {cp, kp}) {
    if (file_exists(p))
      return fail(errc::already_exists,
                  p + " already exists: refusing to replace the cluster CA (a new CA changes "
                      "every info-hash and cuts every node off; see docs/certificates.md, "
                      "rotation)");
  }
  auto key = new_key();
  if (!key) return fail(key.error());
  auto x = new_cert("Shoal cluster CA", key->get(), r.days);
  if (!x) return fail(x.error());
  X509* c = x->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(c)) != 1)
    return fail(errc::internal, ssl_error("issuer"));
  // No intermediates in this profile: pathlen 0 says so to every verifier.
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                            std::pair{NID_subject_key_identifier, "hash"},
                            std::pair{NID_authority_key_identifier, "keyid:always"}}) {
    if (auto s = add_ext(c, c, nid, value); !s) return fail(s.error());
  }
  if (X509_sign(c, key->get(), EVP_sha256()) <= 0)
    return fail(errc::internal, ssl_error("sign the CA certificate"));
  return write_pair(c, key->get(), cp, kp, /*exclusive=*/true);
}

status check(const issue_request& r) {
  const role_profile* p = find_profile(r.role);
  if (!p)
    return fail(errc::invalid_argument,
                "--role " + r.role +
                    ": unknown (registry-proxy, scheduler, operator, kube-scheduler; or --node)");
  if (r.days == 0 || r.days > max_leaf_days)
    return fail(errc::invalid_argument, "--days must be 1.." + std::to_string(max_leaf_days));
  if (p->named && r.name.empty())
    return fail(errc::invalid_argument,
                r.role == "node" ? std::string("--node needs the node's name")
                                 : "--role " + r.role + " needs --name (" +
                                       (r.role == "scheduler" ? "the replica" : "the user") + ")");
  if (!p->named && !r.name.empty())
    return fail(errc::invalid_argument, "--role " + r.role + " is one party: its URI is shoal://" +
                                            r.role + " with no name; drop --name");
  // The same parser the daemons authorize with: a name they would not accept is refused here.
  auto parsed = tls::parse_identity_uri(identity_uri(r));
  if (!parsed || tls::to_string(parsed->role) != r.role)
    return fail(errc::invalid_argument,
                "name '" + r.name +
                    "': not a valid identity name (1..253 characters of A-Z a-z 0-9 . _ -)");
  if (!p->server && (!r.dns.empty() || !r.ips.empty()))
    return fail(errc::invalid_argument,
                "--role " + r.role + " is a client certificate: no --dns or --ip");
  if (r.role == "node" && !r.dns.empty())
    return fail(errc::invalid_argument,
                "a node certificate carries DNS * only (its identity is the URI); no --dns");
  if (r.client_auth && r.role != "scheduler")
    return fail(errc::invalid_argument, "--client-auth is for --role scheduler only");
  if (r.role == "scheduler" && r.dns.empty() && r.ips.empty())
    return fail(errc::invalid_argument,
                "--role scheduler needs --dns FQDN and/or --ip A exactly as they appear in URLs "
                "(the tracker's certificate is checked against the announce URL's host)");
  for (const auto& d : r.dns) {
    if (auto s = check_dns(d); !s) return s;
  }
  for (const auto& ip : r.ips) {
    if (auto s = check_ip(ip); !s) return s;
  }
  return {};
}

result<written> issue(const issue_request& r) {
  if (auto s = check(r); !s) return fail(s.error());
  const role_profile* p = find_profile(r.role);
  auto ca = load_ca(r.dir);
  if (!ca) return fail(ca.error());
  auto key = new_key();
  if (!key) return fail(key.error());
  std::string cn = r.role == "node" ? r.name : std::string(p->cn_prefix) + r.name;
  auto x = new_cert(cn, key->get(), r.days);
  if (!x) return fail(x.error());
  X509* c = x->get();
  if (X509_set_issuer_name(c, X509_get_subject_name(ca->cert.get())) != 1)
    return fail(errc::internal, ssl_error("issuer"));
  std::string san = "URI:" + identity_uri(r);
  if (p->swarm) san += ",DNS:*";
  for (const auto& d : r.dns) san += ",DNS:" + d;
  for (const auto& ip : r.ips) san += ",IP:" + ip;
  std::string eku = p->client_only                ? "clientAuth"
                    : (p->swarm || r.client_auth) ? "serverAuth,clientAuth"
                                                  : "serverAuth";
  for (auto [nid, value] : {std::pair{NID_basic_constraints, std::string("critical,CA:FALSE")},
                            std::pair{NID_key_usage, std::string("critical,digitalSignature")},
                            std::pair{NID_ext_key_usage, eku}, std::pair{NID_subject_alt_name, san},
                            std::pair{NID_subject_key_identifier, std::string("hash")},
                            std::pair{NID_authority_key_identifier, std::string("keyid:always")}}) {
    if (auto s = add_ext(c, ca->cert.get(), nid, value); !s) return fail(s.error());
  }
  if (X509_sign(c, ca->key.get(), EVP_sha256()) <= 0)
    return fail(errc::internal, ssl_error("sign the certificate"));
  std::string base = r.name.empty() ? r.role : r.role + "-" + r.name;
  return write_pair(c, key->get(), join(r.dir, base + ".pem"), join(r.dir, base + ".key"),
                    /*exclusive=*/false);
}

namespace {

int certs_usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: shoalctl certs init --dir D [--days N]\n"
      "         the cluster CA: D/ca.pem and D/ca.key (0600), ECDSA P-256, default 3650 days;\n"
      "         never replaces an existing CA\n"
      "       shoalctl certs issue --dir D --node NAME [--ip A]... [--days N]\n"
      "       shoalctl certs issue --dir D --role "
      "registry-proxy|scheduler|operator|kube-scheduler\n"
      "         [--name N] [--dns FQDN]... [--ip A]... [--client-auth] [--days N]\n"
      "         a certificate signed by D/ca.key, following docs/security.md's profile:\n"
      "         D/<role>-<name>.pem and .key (0600), default 30 days; issuing again renews\n");
  return code;
}

}  // namespace

int main(const std::vector<std::string>& args) {
  if (args.empty()) return certs_usage(2);
  if (args[0] == "-h" || args[0] == "--help") return certs_usage(0);
  const std::string& verb = args[0];
  if (verb != "init" && verb != "issue") {
    std::fprintf(stderr, "shoalctl certs: unknown command %s\n", verb.c_str());
    return certs_usage(2);
  }
  issue_request ir;
  init_request cr;
  bool days_set = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size()) return false;
      out = args[++i];
      return true;
    };
    bool ok = true;
    std::string v;
    if (a == "-h" || a == "--help") {
      return certs_usage(0);
    } else if (a == "--dir") {
      ok = value(v);
      ir.dir = cr.dir = v;
    } else if (a == "--days") {
      ok = value(v);
      char* end = nullptr;
      unsigned long n = ok ? std::strtoul(v.c_str(), &end, 10) : 0;
      ok = ok && !v.empty() && *end == '\0' && n > 0 && n <= max_ca_days;
      ir.days = cr.days = static_cast<unsigned>(n);
      days_set = true;
    } else if (verb == "issue" && a == "--node") {
      ok = value(v) && ir.role.empty();
      ir.role = "node";
      ir.name = v;
      if (!ok && !v.empty()) {
        std::fprintf(stderr, "shoalctl certs: give either --node or --role, once\n");
        return 2;
      }
    } else if (verb == "issue" && a == "--role") {
      ok = value(v) && ir.role.empty();
      ir.role = v;
      if (!ok && !v.empty()) {
        std::fprintf(stderr, "shoalctl certs: give either --node or --role, once\n");
        return 2;
      }
    } else if (verb == "issue" && a == "--name") {
      ok = value(ir.name);
    } else if (verb == "issue" && a == "--dns") {
      ok = value(v);
      ir.dns.push_back(v);
    } else if (verb == "issue" && a == "--ip") {
      ok = value(v);
      ir.ips.push_back(v);
    } else if (verb == "issue" && a == "--client-auth") {
      ir.client_auth = true;
    } else {
      std::fprintf(stderr, "shoalctl certs %s: unknown option %s\n", verb.c_str(), a.c_str());
      return certs_usage(2);
    }
    if (!ok) {
      std::fprintf(stderr, "shoalctl certs %s: %s needs a valid value\n", verb.c_str(), a.c_str());
      return certs_usage(2);
    }
  }
  if (!days_set) ir.days = 30;
  if (verb == "init") {
    auto w = init_ca(cr);
    if (!w) {
      std::fprintf(stderr, "shoalctl certs init: %s\n", w.error().message.c_str());
      return 1;
    }
    std::printf(
        "cluster CA %s\n  certificate %s\n  key         %s (0600; keep it offline)\n"
        "  valid until %s\n",
        w->subject.c_str(), w->cert_file.c_str(), w->key_file.c_str(), w->not_after.c_str());
    return 0;
  }
  if (ir.role.empty()) {
    std::fprintf(stderr, "shoalctl certs issue: give --node NAME or --role ROLE\n");
    return certs_usage(2);
  }
  auto w = issue(ir);
  if (!w) {
    std::fprintf(stderr, "shoalctl certs issue: %s\n", w.error().message.c_str());
    return 1;
  }
  std::printf(
      "issued %s\n  certificate %s\n  key         %s (0600)\n  subject     %s\n"
      "  SANs        %s\n  valid until %s\n",
      identity_uri(ir).c_str(), w->cert_file.c_str(), w->key_file.c_str(), w->subject.c_str(),
      w->sans.c_str(), w->not_after.c_str());
  return 0;
}

}  // namespace shoal::tools::certs
