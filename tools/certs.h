#pragma once
// `shoalctl certs`: the cluster CA and the certificates of docs/security.md's profile, for a small
// cluster without cert-manager. OpenSSL's C API; no exceptions; every failure is an error value
// whose message names the file or the rule that refused.
//
//   shoalctl certs init  --dir D [--days N]          D/ca.pem, D/ca.key (0600); never overwrites
//   shoalctl certs issue --dir D --node NAME [--ip A]... [--days N]
//   shoalctl certs issue --dir D --role registry-proxy|scheduler|operator|kube-scheduler
//                        [--name N] [--dns FQDN]... [--ip A]... [--client-auth] [--days N]
//
// What each role gets (the profile's table and rules 1-5):
//   node            CN <node>, URI shoal://node/<node>, DNS *, IPs; serverAuth+clientAuth
//   registry-proxy  CN shoal-registry-proxy, URI shoal://registry-proxy, DNS * and its FQDNs, IPs;
//                   serverAuth+clientAuth
//   scheduler       CN shoal-scheduler-<replica>, URI shoal://scheduler/<replica>, FQDNs and IPs
//                   as they appear in URLs (at least one); serverAuth (+clientAuth with
//                   --client-auth)
//   operator        CN shoal-operator-<user>, URI shoal://operator/<user>; clientAuth
//   kube-scheduler  CN shoal-kube-scheduler, URI shoal://kube-scheduler; clientAuth
// Every leaf is signed directly by the CA (libtorrent sends no intermediates), ECDSA P-256,
// SHA-256, basicConstraints CA:FALSE, keyUsage digitalSignature, a random 127-bit serial, valid
// from 5 minutes ago (clock skew). Leaves are written to D/<role>-<name>.pem/.key (D/<role>.pem for
// the single-instance roles) by rename, so a daemon watching the files sees whole files; issuing
// again renews in place.

#include <string>
#include <vector>

#include "common/error.h"

namespace shoal::tools::certs {

struct init_request {
  std::string dir;
  unsigned days = 3650;  // the CA outlives many leaves; a CA rotation changes every info-hash
};

struct issue_request {
  std::string dir;
  std::string role;  // node, registry-proxy, scheduler, operator, kube-scheduler
  std::string name;  // node name, scheduler replica, operator user; empty for the others
  std::vector<std::string> dns;
  std::vector<std::string> ips;
  bool client_auth = false;  // scheduler only: it also calls other daemons
  unsigned days = 30;
};

struct written {
  std::string cert_file;
  std::string key_file;
  std::string subject;    // "CN=..."
  std::string sans;       // "URI:shoal://node/n1, DNS:*, IP Address:10.0.0.1"
  std::string not_after;  // ISO 8601, UTC
};

[[nodiscard]] result<written> init_ca(const init_request& r);
// Checks the request against the profile before touching the CA (nothing is written on a refusal).
[[nodiscard]] status check(const issue_request& r);
[[nodiscard]] result<written> issue(const issue_request& r);

// `shoalctl certs ...` (argv after "certs"): parses, runs, prints; returns the exit code
// (0, 1 on a failure, 2 on a usage error).
int main(const std::vector<std::string>& args);

}  // namespace shoal::tools::certs
