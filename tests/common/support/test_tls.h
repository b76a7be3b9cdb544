#pragma once
// A throwaway TLS identity for tests, header-only: a fresh P-256 key and a self-signed
// certificate for 127.0.0.1 (IP SAN), made in process with OpenSSL (no openssl CLI, no files
// from the tree). The certificate is written as PEM to a mkdtemp directory so a client can
// trust it through a CA file; the directory is removed by the destructor.
//
// Lifecycle: construct (throws std::runtime_error on failure: test code only), hand
// server_ctx() to test_http_server, ca_file() to the client. Not copyable.

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace shoal::testing {

class test_tls_identity {
 public:
  explicit test_tls_identity(const std::string& ip = "127.0.0.1") {
    key_ = EVP_EC_gen("P-256");
    cert_ = X509_new();
    if (key_ == nullptr || cert_ == nullptr) throw std::runtime_error("tls: key/cert alloc");
    X509_set_version(cert_, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert_), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert_), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert_), 24 * 3600);
    X509_set_pubkey(cert_, key_);
    X509_NAME* name = X509_get_subject_name(cert_);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(ip.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert_, name);
    add_ext(NID_subject_alt_name, "IP:" + ip);
    add_ext(NID_basic_constraints, "critical,CA:TRUE");
    if (X509_sign(cert_, key_, EVP_sha256()) == 0) throw std::runtime_error("tls: sign");

    ctx_ = SSL_CTX_new(TLS_server_method());
    if (ctx_ == nullptr || SSL_CTX_use_certificate(ctx_, cert_) != 1 ||
        SSL_CTX_use_PrivateKey(ctx_, key_) != 1) {
      throw std::runtime_error("tls: server context");
    }

    const char* base = getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shoal-tls-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("tls: mkdtemp");
    dir_ = tmpl;
    ca_file_ = dir_ + "/ca.pem";
    FILE* f = std::fopen(ca_file_.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("tls: write ca file");
    PEM_write_X509(f, cert_);
    std::fclose(f);
  }

  ~test_tls_identity() {
    if (!ca_file_.empty()) ::unlink(ca_file_.c_str());
    if (!dir_.empty()) ::rmdir(dir_.c_str());
    SSL_CTX_free(ctx_);
    X509_free(cert_);
    EVP_PKEY_free(key_);
  }
  test_tls_identity(const test_tls_identity&) = delete;
  test_tls_identity& operator=(const test_tls_identity&) = delete;

  SSL_CTX* server_ctx() const { return ctx_; }
  const std::string& ca_file() const { return ca_file_; }

 private:
  void add_ext(int nid, const std::string& value) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, cert_, cert_, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    if (ext == nullptr) throw std::runtime_error("tls: extension");
    X509_add_ext(cert_, ext, -1);
    X509_EXTENSION_free(ext);
  }

  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
  SSL_CTX* ctx_ = nullptr;
  std::string dir_;
  std::string ca_file_;
};

}  // namespace shoal::testing
