// Grants (common/grant.h): registry-proxy signs {swarm, node, expiry}; a verifier accepts a grant
// only for that swarm and node, before it expires, signed by a registry-proxy certificate of its
// CA bundle. Certificates are made with the openssl CLI (support/test_pki.h).
#include "common/grant.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/bencode.h"
#include "support/test_pki.h"

namespace shoal {
namespace {

using testing::test_pki;
using clock = std::chrono::system_clock;

test_pki& pki() {
  static test_pki* p = [] {
    auto* k = test_pki::process_wide();
    k->make_ca("ca");
    k->make_ca("other-ca");
    k->issue("proxy", "ca", "URI:shoal://registry-proxy,DNS:*");
    k->issue("proxy-other", "other-ca", "URI:shoal://registry-proxy,DNS:*");
    k->issue("node", "ca", "URI:shoal://node/n1,DNS:*");
    k->issue("scheduler", "ca", "URI:shoal://scheduler,DNS:*");
    k->issue("proxy-expired", "ca", "URI:shoal://registry-proxy", -1);
    return k;
  }();
  return *p;
}

grant::info_hash swarm_of(std::uint8_t b) {
  grant::info_hash h{};
  h.fill(b);
  return h;
}

std::shared_ptr<grant::signer> signer_for(const std::string& who) {
  auto s = grant::signer::load(pki().pem(who), pki().key(who));
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  return s ? *s : nullptr;
}

std::shared_ptr<grant::verifier> verifier_for(const std::string& ca) {
  auto v = grant::verifier::load(pki().pem(ca));
  EXPECT_TRUE(v) << (v ? "" : v.error().message);
  return v ? *v : nullptr;
}

std::string sign(grant::signer& s, grant::info_hash h, std::string node,
                 clock::duration ttl = std::chrono::hours(1)) {
  auto g = s.sign(grant::claims{h, std::move(node), clock::now() + ttl});
  EXPECT_TRUE(g) << (g ? "" : g.error().message);
  return g ? *g : std::string();
}

TEST(Grant, SignedGrantVerifiesForItsSwarmAndNode) {
  auto s = signer_for("proxy");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  auto g = sign(*s, swarm_of(7), "n1");
  ASSERT_FALSE(g.empty());
  EXPECT_LE(g.size(), grant::max_bytes);
  auto c = v->verify(g, swarm_of(7), "n1");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->node, "n1");
  EXPECT_EQ(c->swarm, swarm_of(7));
  auto p = grant::peek(g);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->expires, c->expires);
}

TEST(Grant, RefusedForAnotherSwarmOrNode) {
  auto s = signer_for("proxy");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  auto g = sign(*s, swarm_of(7), "n1");
  auto other_swarm = v->verify(g, swarm_of(8), "n1");
  ASSERT_FALSE(other_swarm);
  EXPECT_NE(other_swarm.error().message.find("another swarm"), std::string::npos);
  auto other_node = v->verify(g, swarm_of(7), "n2");
  ASSERT_FALSE(other_node);
  EXPECT_NE(other_node.error().message.find("for node \"n1\""), std::string::npos)
      << other_node.error().message;
}

TEST(Grant, ExpiredAfterItsTimePlusSkew) {
  auto s = signer_for("proxy");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  auto g = sign(*s, swarm_of(1), "n1", std::chrono::seconds(10));
  EXPECT_TRUE(v->verify(g, swarm_of(1), "n1", clock::now() + std::chrono::seconds(30)));
  auto late = v->verify(g, swarm_of(1), "n1", clock::now() + std::chrono::minutes(5));
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message.find("expired"), std::string::npos);
}

// The scheduler signs the grants of checkpoint swarms (common/checkpoint.h).
TEST(Grant, SchedulerMaySign) {
  auto s = signer_for("scheduler");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  auto c = v->verify(sign(*s, swarm_of(9), "n1"), swarm_of(9), "n1");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(v->verify(sign(*s, swarm_of(9), "n1"), swarm_of(9), "n2"));
}

TEST(Grant, SignerMustBeRegistryProxyOfThisCa) {
  auto v = verifier_for("ca");
  ASSERT_TRUE(v);
  auto foreign = signer_for("proxy-other");
  auto r1 = v->verify(sign(*foreign, swarm_of(2), "n1"), swarm_of(2), "n1");
  ASSERT_FALSE(r1);
  EXPECT_NE(r1.error().message.find("does not verify against the CA"), std::string::npos)
      << r1.error().message;
  auto node = signer_for("node");  // a member signing grants for itself
  auto r2 = v->verify(sign(*node, swarm_of(2), "n1"), swarm_of(2), "n1");
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("neither registry-proxy nor the scheduler"), std::string::npos)
      << r2.error().message;
  auto expired = signer_for("proxy-expired");
  auto r3 = v->verify(sign(*expired, swarm_of(2), "n1"), swarm_of(2), "n1");
  ASSERT_FALSE(r3);
  EXPECT_NE(r3.error().message.find("expired"), std::string::npos) << r3.error().message;
}

TEST(Grant, TamperedClaimsFailTheSignature) {
  auto s = signer_for("proxy");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  auto g = sign(*s, swarm_of(3), "n1");
  // Re-encode with another node and expiry, keeping the signature and the signer.
  auto d = bencode::decode(g);
  ASSERT_TRUE(d);
  auto dict = d->as_dict();
  dict["n"] = std::string("n2");
  auto forged = bencode::encode(bencode::value(dict));
  auto r = v->verify(forged, swarm_of(3), "n2");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("signature does not verify"), std::string::npos)
      << r.error().message;
  dict = d->as_dict();
  dict["e"] = dict["e"].as_int() + 3600 * 24 * 365;
  r = v->verify(bencode::encode(bencode::value(dict)), swarm_of(3), "n1");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("signature does not verify"), std::string::npos);
  // An expiry past what the clock can hold (the year 2539 here; a mutation made it once) is
  // refused before any conversion could overflow, and so are zero and negative ones.
  for (std::int64_t e : {std::int64_t{17964069808}, std::int64_t{9223372036854775807},
                         std::int64_t{0}, std::int64_t{-5}}) {
    dict = d->as_dict();
    dict["e"] = e;
    r = v->verify(bencode::encode(bencode::value(dict)), swarm_of(3), "n1");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("grant expiry out of range"), std::string::npos)
        << r.error().message;
  }
  // An extra key is refused before any crypto.
  dict = d->as_dict();
  dict["z"] = 1;
  r = v->verify(bencode::encode(bencode::value(dict)), swarm_of(3), "n1");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("exactly 6 keys"), std::string::npos);
}

TEST(Grant, RandomMutationsNeverCrashNorVerify) {
  auto s = signer_for("proxy");
  auto v = verifier_for("ca");
  ASSERT_TRUE(s && v);
  const auto g = sign(*s, swarm_of(4), "n1");
  std::mt19937 rng(42);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string m = g;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      auto pos = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[pos] = static_cast<char>(rng());
          break;
        case 1:
          m.erase(pos, 1 + rng() % 8);
          break;
        default:
          m.insert(pos, 1, static_cast<char>(rng()));
          break;
      }
      if (m.empty()) m = "x";
    }
    if (m == g) continue;
    auto r = v->verify(m, swarm_of(4), "n1");
    if (r)
      ++accepted;
    else
      EXPECT_LE(r.error().message.size(), 400u);
    (void)grant::peek(m);
    (void)grant::from_header(m);
  }
  EXPECT_EQ(accepted, 0);
}

TEST(Grant, HeaderRoundTripAndGarbage) {
  auto s = signer_for("proxy");
  ASSERT_TRUE(s);
  auto g = sign(*s, swarm_of(5), "n1");
  auto h = grant::to_header(g);
  EXPECT_EQ(h.find_first_of("\r\n "), std::string::npos);
  auto back = grant::from_header(h);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, g);
  for (std::string n : {"ab", "ab", "abc", "abcd"}) {
    auto r = grant::from_header(grant::to_header(n));
    ASSERT_TRUE(r);
    EXPECT_EQ(*r, n);
  }
  EXPECT_FALSE(grant::from_header(""));
  EXPECT_FALSE(grant::from_header("abc"));         // not a multiple of 4
  EXPECT_FALSE(grant::from_header("ab=c"));        // padding inside
  EXPECT_FALSE(grant::from_header("a\nbc"));       // a line break
  EXPECT_FALSE(grant::from_header("ab\xc3\xa9"));  // not ASCII
  EXPECT_FALSE(grant::from_header(std::string(20000, 'A')));
  EXPECT_FALSE(grant::peek(std::string(grant::max_bytes + 1, 'd')));
  EXPECT_FALSE(grant::parse_info_hash("abc"));
  EXPECT_FALSE(grant::parse_info_hash(std::string(40, 'g')));
  auto ih = grant::parse_info_hash(std::string(40, 'A'));
  ASSERT_TRUE(ih);
  EXPECT_EQ(*ih, swarm_of(0xaa));
}

TEST(Grant, VerifierPicksUpANewCaBundle) {
  const std::string bundle = pki().dir() + "/bundle.pem";
  std::filesystem::copy_file(pki().pem("ca"), bundle,
                             std::filesystem::copy_options::overwrite_existing);
  auto v = grant::verifier::load(bundle, std::chrono::milliseconds(1));
  ASSERT_TRUE(v);
  auto foreign = signer_for("proxy-other");
  auto g = sign(*foreign, swarm_of(6), "n1");
  EXPECT_FALSE((*v)->verify(g, swarm_of(6), "n1"));
  // The rotation's first step: both CAs in the bundle.
  {
    std::ifstream a(pki().pem("ca")), b(pki().pem("other-ca"));
    std::ofstream out(bundle + ".tmp");
    out << a.rdbuf() << b.rdbuf();
  }
  std::filesystem::rename(bundle + ".tmp", bundle);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto r = (*v)->verify(g, swarm_of(6), "n1");
  EXPECT_TRUE(r) << r.error().message;
  EXPECT_FALSE(grant::verifier::load(pki().dir() + "/missing.pem"));
  EXPECT_FALSE(grant::signer::load(pki().pem("proxy"), pki().key("node")));
}

}  // namespace
}  // namespace shoal
