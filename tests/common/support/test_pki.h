#pragma once
// A throwaway cluster PKI for TLS tests, made with the openssl CLI the way an operator would:
// CAs, and P-256 certificates signed by one of them with the SANs a test asks for (the shoal://
// URI identity, IP:127.0.0.1 for a server), valid for some days (negative: already expired). All
// files live in a mkdtemp directory removed by the destructor.
//
//   test_pki pki;
//   pki.make_ca("ca");
//   pki.issue("server", "ca", "URI:shoal://scheduler/s1,IP:127.0.0.1");
//   pki.issue("n1", "ca", "URI:shoal://node/n1");
//   pki.pem("n1"), pki.key("n1"), pki.pem("ca")
//
// Test code only: failures throw std::runtime_error with openssl's output. Not copyable.

#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace shoal::testing {

class test_pki {
 public:
  test_pki() {
    const char* base = getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/shoal-pki-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("pki: mkdtemp");
    dir_ = tmpl;
  }
  ~test_pki() { remove_dir(dir_); }

  // A PKI made once per test process and never destroyed (so no static destructor can outlive
  // it), whose directory is still removed when the process exits normally.
  static test_pki* process_wide() {
    static auto* dirs = new std::vector<std::string>;
    auto* p = new test_pki;
    if (dirs->empty())
      std::atexit([] {
        for (const auto& d : *dirs) remove_dir(d);
      });
    dirs->push_back(p->dir_);
    return p;
  }
  test_pki(const test_pki&) = delete;
  test_pki& operator=(const test_pki&) = delete;

  const std::string& dir() const { return dir_; }
  std::string pem(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
  std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }

  // A self-signed CA: <name>.pem and <name>.key.
  void make_ca(const std::string& name, int days = 30) {
    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout '" +
        key(name) + "' -out '" + pem(name) + "' -subj '/CN=" + name + "' -days " +
        std::to_string(days));
  }

  // A leaf certificate <name>.pem (+ <name>.key) signed by `ca`, with subjectAltName `san`
  // (openssl syntax, may be empty), valid from now for `days` (negative: expired already).
  void issue(const std::string& name, const std::string& ca, const std::string& san,
             int days = 30) {
    const std::string ext = dir_ + "/" + name + ".ext";
    {
      std::ofstream f(ext);
      if (!san.empty()) f << "subjectAltName=" << san << "\n";
      f << "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        << "extendedKeyUsage=serverAuth,clientAuth\n";
    }
    const std::string csr = dir_ + "/" + name + ".csr";
    run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout '" +
        key(name) + "' -out '" + csr + "' -subj '/CN=" + name + "'");
    run("openssl x509 -req -in '" + csr + "' -CA '" + pem(ca) + "' -CAkey '" + key(ca) +
        "' -set_serial " + std::to_string(next_serial()) + " -days " + std::to_string(days) +
        " -extfile '" + ext + "' -out '" + pem(name) + "'");
  }

  // Serial of a certificate file, as OpenSSL's hex.
  std::string serial(const std::string& name) const {
    std::string out = run("openssl x509 -noout -serial -in '" + pem(name) + "'");
    auto eq = out.find('=');
    if (eq == std::string::npos) return {};
    out = out.substr(eq + 1);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  }

  // Installs certificate `from` as `to` (.pem and .key) by atomic renames, key first, the way
  // a rotation tool replaces files under a running daemon.
  void install(const std::string& from, const std::string& to) const {
    copy_then_rename(key(from), key(to));
    copy_then_rename(pem(from), pem(to));
  }

  static std::string run(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
    if (p == nullptr) throw std::runtime_error("pki: popen " + cmd);
    std::array<char, 512> buf{};
    while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    if (::pclose(p) != 0) throw std::runtime_error("pki: " + cmd + ": " + out);
    return out;
  }

 private:
  static void remove_dir(const std::string& d) {
    (void)std::system(("rm -rf '" + d + "'").c_str());
  }
  static long next_serial() {
    static std::atomic<long> n{0x1000};
    return n.fetch_add(1) + static_cast<long>(::getpid() % 1000) * 100000;
  }
  static void copy_then_rename(const std::string& from, const std::string& to) {
    const std::string tmp = to + ".tmp";
    {
      std::ifstream in(from, std::ios::binary);
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << in.rdbuf();
    }
    if (std::rename(tmp.c_str(), to.c_str()) != 0) throw std::runtime_error("pki: rename " + to);
  }

  std::string dir_;
};

}  // namespace shoal::testing
