// Grants (common/grant.h) as they arrive from the network: the raw value of "shoal_grant" in a
// peer's BEP 10 handshake, which every uploader checks with verifier::verify on libtorrent's
// network thread, and the Shoal-Grant header of a metainfo answer (from_header). The first input
// byte says what the rest is:
//   even: a grant, raw (also taken as a header value and peeked at);
//   odd:  edits to a grant registry-proxy really signed (made at start under a throwaway CA with
//         the openssl CLI, support/test_pki.h): each 3 bytes (offset high, offset low, byte)
//         overwrite one byte; one byte left over cuts the grant there, two are appended.
// so mutations reach the signer certificate's chain and the signature, not only the bencoding.
// Nothing crashes; errors are UTF-8 and bounded; a grant verify accepts is byte for byte the one
// registry-proxy signed (every byte but the signature is signed, and the signature's DER is
// strict), for the swarm and node it was checked against. The unedited grant must verify, or
// the harness would test nothing.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/grant.h"
#include "../../common/support/test_pki.h"
#include "../harness.h"

namespace {

using namespace shoal;
using clock = std::chrono::system_clock;

struct env {
  testing::test_pki* pki = testing::test_pki::process_wide();  // kept: its files outlive env()
  std::shared_ptr<grant::verifier> verifier;
  grant::info_hash swarm{};
  std::string node = "n1";
  clock::time_point now = clock::now();
  std::string signed_grant;

  env() {
    pki->make_ca("ca");
    pki->issue("proxy", "ca", "URI:shoal://registry-proxy,DNS:*");
    auto s = grant::signer::load(pki->pem("proxy"), pki->key("proxy"));
    if (!s) fuzz::check_failed("signer", s.error().message);
    auto v = grant::verifier::load(pki->pem("ca"));
    if (!v) fuzz::check_failed("verifier", v.error().message);
    verifier = *v;
    for (std::size_t i = 0; i < swarm.size(); ++i) swarm[i] = static_cast<std::uint8_t>(0xa0 + i);
    auto g = (*s)->sign(grant::claims{swarm, node, now + std::chrono::hours(1)});
    if (!g) fuzz::check_failed("sign", g.error().message);
    signed_grant = *g;
    auto ok = verifier->verify(signed_grant, swarm, node, now);
    if (!ok) fuzz::check_failed("the signed grant does not verify", ok.error().message);
  }
};

env& the_env() {
  static env* e = new env;  // never destroyed: no static destructor races the driver's exit
  return *e;
}

std::string edited(const std::string& base, std::string_view edits) {
  std::string g = base;
  std::size_t i = 0;
  for (; i + 3 <= edits.size(); i += 3) {
    if (g.empty()) break;
    const std::size_t off =
        ((static_cast<unsigned char>(edits[i]) << 8) | static_cast<unsigned char>(edits[i + 1])) %
        g.size();
    g[off] = edits[i + 2];
  }
  const std::size_t left = edits.size() - i;
  if (left == 1) g.resize(static_cast<unsigned char>(edits[i]) % (g.size() + 1));
  if (left == 2) g.append(edits.substr(i));
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto& e = the_env();
  if (size == 0) return 0;
  const auto rest = fuzz::text(data + 1, size - 1);
  const bool edit = (data[0] & 1) != 0;
  const std::string g = edit ? edited(e.signed_grant, rest) : std::string(rest);

  auto c = e.verifier->verify(g, e.swarm, e.node, e.now);
  fuzz::check_result(c, "grant verify");
  if (c) {
    fuzz::accepted();
    if (g != e.signed_grant) fuzz::check_failed("verify accepted a grant nobody signed", g);
    if (c->swarm != e.swarm || c->node != e.node || c->expires <= e.now)
      fuzz::check_failed("verify accepted other claims", c->node);
  }
  // The same bytes for another node and another swarm: never.
  if (auto other = e.verifier->verify(g, e.swarm, "n2", e.now); other)
    fuzz::check_failed("verify accepted a grant for another node", g);
  auto swarm2 = e.swarm;
  swarm2[0] ^= 1;
  if (auto other = e.verifier->verify(g, swarm2, e.node, e.now); other)
    fuzz::check_failed("verify accepted a grant for another swarm", g);

  fuzz::check_result(grant::peek(g), "grant peek");
  auto h = grant::from_header(g);
  fuzz::check_result(h, "grant from_header");
  if (h) {
    auto again = grant::from_header(grant::to_header(*h));
    if (!again || *again != *h) fuzz::check_failed("grant header round trip", g);
  }
  return 0;
}
