// Metainfo (swarm): the piece size rule, deterministic object torrents, the async builder, and
// torrents that do not match their bytes; SSL torrents rooted at the cluster CA (ssl-cert), with
// real CA certificates made by the openssl CLI.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "../common/support/test_pki.h"

#include "common/bencode.h"
#include "common/sha256.h"
#include "swarm/metainfo.h"
#include "swarm/swarm.h"

namespace shoal {
namespace {

TEST(Metainfo, PieceSizeRule) {
  EXPECT_EQ(piece_size_for(0), 64u * 1024);
  EXPECT_EQ(piece_size_for(1 << 20), 64u * 1024);
  EXPECT_EQ(piece_size_for(256ull << 20), 256u * 1024);
  EXPECT_EQ(piece_size_for(1ull << 30), 1u << 20);
  EXPECT_EQ(piece_size_for(10ull << 30), 4u << 20);
  EXPECT_EQ(piece_size_for(1ull << 40), 4u << 20);
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(Metainfo, DeterministicAndParsesBack) {
  std::string data = random_bytes(3 * 65536 + 123, 1);
  digest d = sha256_of(data);
  metainfo_builder b1(data.size());
  b1.update(data.data(), data.size());
  auto m1 = b1.finish(d);
  ASSERT_TRUE(m1) << m1.error().to_string();
  EXPECT_EQ(m1->piece_count(), 4u);
  EXPECT_EQ(m1->piece_length(3), 123u);
  // Fed in odd-sized chunks: same result.
  metainfo_builder b2(data.size());
  for (std::size_t off = 0; off < data.size(); off += 777) {
    b2.update(data.data() + off, std::min<std::size_t>(777, data.size() - off));
  }
  auto m2 = b2.finish(d);
  ASSERT_TRUE(m2);
  EXPECT_EQ(m1->info_hash(), m2->info_hash());
  EXPECT_EQ(m1->pieces[1], sha1_of(std::string_view(data).substr(65536, 65536)));

  std::vector<std::string> tr;
  std::string t =
      m1->torrent_file({"http://10.0.0.1:7000/announce", "http://10.0.0.2:7000/announce"});
  auto parsed = object_metainfo::parse(t, d, &tr);
  ASSERT_TRUE(parsed) << parsed.error().to_string();
  EXPECT_EQ(parsed->info_hash(), m1->info_hash());
  EXPECT_EQ(tr.size(), 2u);
  // Trackers do not change the swarm identity.
  auto t2 = m1->torrent_file({});
  EXPECT_EQ(object_metainfo::parse(t2, d)->info_hash(), m1->info_hash());
}

TEST(Metainfo, AsyncBuilderMatchesSynchronous) {
  std::string data = random_bytes(5u << 20, 4);
  digest d = sha256_of(data);
  metainfo_builder sync(data.size());
  sync.update(data.data(), data.size());
  auto a = sync.finish(d);
  ASSERT_TRUE(a);
  // A tiny queue forces the producer to wait for the hashing thread.
  async_metainfo_builder async(data.size(), true, 100000);
  for (std::size_t off = 0; off < data.size(); off += 16384) {
    async.update(data.data() + off, std::min<std::size_t>(16384, data.size() - off));
  }
  auto b = async.finish(d);
  ASSERT_TRUE(b) << b.error().to_string();
  EXPECT_EQ(a->info_hash(), b->info_hash());
  async_metainfo_builder short_one(data.size(), false);
  short_one.update(data.data(), 100);
  EXPECT_FALSE(short_one.finish(d));
  {
    async_metainfo_builder abandoned(data.size(), true);
    abandoned.update(data.data(), 10);
  }
}

TEST(Metainfo, RejectsWrongBytesAndForgedTorrents) {
  std::string data = random_bytes(100000, 2);
  digest d = sha256_of(data);
  metainfo_builder b(data.size());
  b.update(data.data(), data.size() - 1);
  auto short_r = b.finish(d);
  ASSERT_FALSE(short_r);
  EXPECT_TRUE(short_r.error().is(errc::size_mismatch));

  metainfo_builder b2(data.size());
  data[5] ^= 1;
  b2.update(data.data(), data.size());
  auto bad = b2.finish(d);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.error().is(errc::digest_mismatch));
  data[5] ^= 1;

  metainfo_builder b3(data.size());
  b3.update(data.data(), data.size());
  auto m = b3.finish(d);
  ASSERT_TRUE(m);
  std::string t = m->torrent_file({});
  digest other = sha256_of("other");
  EXPECT_FALSE(object_metainfo::parse(t, other));
  // Flip the private flag.
  std::string t_pub = t;
  auto pos = t_pub.find("7:privatei1e");
  ASSERT_NE(pos, std::string::npos);
  t_pub.replace(pos, 12, "7:privatei0e");
  EXPECT_FALSE(object_metainfo::parse(t_pub, d));
  // Truncations never parse and never crash.
  for (std::size_t n = 0; n < t.size(); n += 7)
    EXPECT_FALSE(object_metainfo::parse(t.substr(0, n), d));
}

// Three CAs and a leaf from each of the first two, made once for the root tests.
testing::test_pki& root_pki() {
  static testing::test_pki* pki = [] {
    auto* p = testing::test_pki::process_wide();
    p->make_ca("ca");
    p->make_ca("other-ca");
    p->make_ca("third-ca");
    p->issue("leaf", "ca", "DNS:*,URI:shoal://node/n1");
    p->issue("other-leaf", "other-ca", "DNS:*,URI:shoal://node/n1");
    p->issue("third-leaf", "third-ca", "DNS:*,URI:shoal://node/n1");
    return p;
  }();
  return *pki;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

object_metainfo object_for(const std::string& data) {
  metainfo_builder b(data.size());
  b.update(data.data(), data.size());
  return *b.finish(sha256_of(data));
}

// The same CA written with other line ends, blank lines, text around it and a second certificate
// after it normalizes to the same bytes, so every party computes the same info-hash.
TEST(MetainfoRoot, SameCaInAnyWhitespaceGivesTheSameInfoHash) {
  std::string pem = slurp(root_pki().pem("ca"));
  auto canon = normalize_root_pem(pem);
  ASSERT_TRUE(canon) << canon.error().to_string();
  EXPECT_TRUE(canon->starts_with("-----BEGIN CERTIFICATE-----\n"));

  std::string crlf;
  for (char c : pem) {
    if (c == '\n')
      crlf += "\r\n";
    else
      crlf += c;
  }
  std::string noisy =
      "issuer: the cluster CA\n\n" + crlf + "\n\n" + slurp(root_pki().pem("other-ca"));
  auto canon2 = normalize_root_pem(noisy);
  ASSERT_TRUE(canon2) << canon2.error().to_string();
  EXPECT_EQ(*canon, *canon2);
  std::string bundle = root_pki().dir() + "/bundle.pem";
  std::ofstream(bundle) << noisy;
  auto loaded = load_root_pem(bundle);
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(*loaded, *canon);

  std::string data = random_bytes(200000, 3);
  auto plain = object_for(data);
  EXPECT_TRUE(plain.ssl_cert.empty());  // no process root: today's format
  EXPECT_EQ(plain.info_dict().find("ssl-cert"), std::string::npos);
  auto a = plain;
  a.ssl_cert = *canon;
  auto b = plain;
  b.ssl_cert = *canon2;
  EXPECT_EQ(a.info_hash_hex(), b.info_hash_hex());
  EXPECT_NE(a.info_hash_hex(), plain.info_hash_hex());
  EXPECT_NE(a.info_dict().find("8:ssl-cert"), std::string::npos);
  auto other = plain;
  other.ssl_cert = *load_root_pem(root_pki().pem("other-ca"));
  EXPECT_NE(other.info_hash_hex(), a.info_hash_hex());  // a new CA is a new swarm

  EXPECT_FALSE(normalize_root_pem("not a certificate"));
  EXPECT_FALSE(load_root_pem(root_pki().dir() + "/missing.pem"));
}

// parse() takes only torrents rooted at exactly our CA when we have one, and only plain ones when
// we do not; the process root set with set_metainfo_root() is what builders and parse() use.
TEST(MetainfoRoot, ParseRefusesAForeignOrMissingRoot) {
  auto ca = *load_root_pem(root_pki().pem("ca"));
  auto other = *load_root_pem(root_pki().pem("other-ca"));
  std::string data = random_bytes(150000, 4);
  digest d = sha256_of(data);
  auto plain = object_for(data);
  auto ours = plain;
  ours.ssl_cert = ca;
  auto theirs = plain;
  theirs.ssl_cert = other;

  auto ok = object_metainfo::parse_rooted(ours.torrent_file({"http://t/announce"}), d, ca);
  ASSERT_TRUE(ok) << ok.error().to_string();
  EXPECT_EQ(ok->ssl_cert, ca);
  EXPECT_EQ(ok->info_hash_hex(), ours.info_hash_hex());

  auto foreign = object_metainfo::parse_rooted(theirs.torrent_file({}), d, ca);
  ASSERT_FALSE(foreign);
  EXPECT_NE(foreign.error().message.find("rooted at another CA"), std::string::npos)
      << foreign.error().message;
  auto unrooted = object_metainfo::parse_rooted(plain.torrent_file({}), d, ca);
  ASSERT_FALSE(unrooted);
  EXPECT_NE(unrooted.error().message.find("not rooted at the cluster CA"), std::string::npos)
      << unrooted.error().message;
  auto no_tls = object_metainfo::parse_rooted(ours.torrent_file({}), d, "");
  ASSERT_FALSE(no_tls);
  EXPECT_NE(no_tls.error().message.find("without TLS"), std::string::npos);
  // The CA, but not in canonical form: another info-hash, so refused too.
  auto raw = plain;
  raw.ssl_cert = slurp(root_pki().pem("ca")) + "\n";
  EXPECT_FALSE(object_metainfo::parse_rooted(raw.torrent_file({}), d, ca));

  // Packs: the same rule.
  std::vector<std::pair<digest, std::uint64_t>> files{{d, data.size()}};
  auto pm = build_pack(
      files,
      [&](const digest&, std::uint64_t off, char* buf, std::size_t n) -> result<std::size_t> {
        std::size_t k = std::min<std::size_t>(n, data.size() - off);
        std::memcpy(buf, data.data() + off, k);
        return k;
      });
  ASSERT_TRUE(pm) << pm.error().to_string();
  auto pack_ours = *pm;
  pack_ours.ssl_cert = ca;
  auto pack_theirs = *pm;
  pack_theirs.ssl_cert = other;
  EXPECT_TRUE(pack_metainfo::parse_rooted(pack_ours.torrent_file({}), files, ca));
  auto pf = pack_metainfo::parse_rooted(pack_theirs.torrent_file({}), files, ca);
  ASSERT_FALSE(pf);
  EXPECT_NE(pf.error().message.find("rooted at another CA"), std::string::npos);
  EXPECT_FALSE(pack_metainfo::parse_rooted(pm->torrent_file({}), files, ca));
  EXPECT_FALSE(pack_metainfo::parse_rooted(pack_ours.torrent_file({}), files, ""));

  // The process root: builders root what they build, parse() checks against it.
  set_metainfo_root(ca);
  auto built = object_for(data);
  auto pack_built = build_pack(
      files,
      [&](const digest&, std::uint64_t off, char* buf, std::size_t n) -> result<std::size_t> {
        std::size_t k = std::min<std::size_t>(n, data.size() - off);
        std::memcpy(buf, data.data() + off, k);
        return k;
      });
  auto parsed_ours = object_metainfo::parse(ours.torrent_file({}), d);
  auto parsed_theirs = object_metainfo::parse(theirs.torrent_file({}), d);
  auto parsed_plain = object_metainfo::parse(plain.torrent_file({}), d);
  set_metainfo_root("");
  EXPECT_EQ(built.ssl_cert, ca);
  EXPECT_EQ(built.info_hash_hex(), ours.info_hash_hex());
  ASSERT_TRUE(pack_built);
  EXPECT_EQ(pack_built->info_hash_hex(), pack_ours.info_hash_hex());
  EXPECT_TRUE(parsed_ours);
  EXPECT_FALSE(parsed_theirs);
  EXPECT_FALSE(parsed_plain);
  EXPECT_TRUE(object_metainfo::parse(plain.torrent_file({}), d));
  EXPECT_FALSE(object_metainfo::parse(ours.torrent_file({}), d));
}

// A CA rotation: a bundle holds both CAs in either order; a leaf's root is the CA that signed it
// (not the bundle's first certificate); a caller's CA fingerprint picks the matching root.
TEST(MetainfoRoot, RotationRootIsTheLeafsIssuer) {
  auto ca = *load_root_pem(root_pki().pem("ca"));
  auto other = *load_root_pem(root_pki().pem("other-ca"));
  auto third = *load_root_pem(root_pki().pem("third-ca"));
  auto bundle = normalize_root_bundle("comment\n" + slurp(root_pki().pem("other-ca")) + "\n" +
                                      slurp(root_pki().pem("ca")));
  ASSERT_TRUE(bundle) << bundle.error().to_string();
  ASSERT_EQ(bundle->size(), 2u);
  EXPECT_EQ((*bundle)[0], other);
  EXPECT_EQ((*bundle)[1], ca);
  EXPECT_FALSE(normalize_root_bundle("no certificate here"));

  auto leaf = issuing_root(slurp(root_pki().pem("leaf")), *bundle);
  ASSERT_TRUE(leaf) << leaf.error().to_string();
  EXPECT_EQ(*leaf, 1u);
  auto other_leaf = issuing_root(slurp(root_pki().pem("other-leaf")), *bundle);
  ASSERT_TRUE(other_leaf);
  EXPECT_EQ(*other_leaf, 0u);
  auto stranger = issuing_root(slurp(root_pki().pem("third-leaf")), *bundle);
  ASSERT_FALSE(stranger);
  EXPECT_NE(stranger.error().message.find("not signed by any"), std::string::npos);
  // Another CA's own certificate was not issued by `ca`.
  EXPECT_FALSE(issuing_root(slurp(root_pki().pem("other-ca")), {ca}));

  EXPECT_EQ(root_fingerprint(ca).size(), 64u);
  EXPECT_NE(root_fingerprint(ca), root_fingerprint(other));
  EXPECT_EQ(root_with_fingerprint(root_fingerprint(other), {ca, other}), other);
  EXPECT_EQ(root_with_fingerprint(root_fingerprint(third), {ca, other}), "");
  EXPECT_EQ(root_with_fingerprint("", {ca, other}), "");
}

// With two roots (a rotation), builders use the primary one and parse() accepts a torrent rooted
// at either, returning that root; a third CA and a plain torrent are still refused.
TEST(MetainfoRoot, ParseAcceptsEitherRotationRoot) {
  auto ca = *load_root_pem(root_pki().pem("ca"));
  auto other = *load_root_pem(root_pki().pem("other-ca"));
  auto third = *load_root_pem(root_pki().pem("third-ca"));
  std::string data = random_bytes(150000, 5);
  digest d = sha256_of(data);
  auto plain = object_for(data);
  auto ours = plain, theirs = plain, strangers = plain;
  ours.ssl_cert = ca;
  theirs.ssl_cert = other;
  strangers.ssl_cert = third;
  std::vector<std::pair<digest, std::uint64_t>> files{{d, data.size()}};
  auto read = [&](const digest&, std::uint64_t off, char* buf,
                  std::size_t n) -> result<std::size_t> {
    std::size_t k = std::min<std::size_t>(n, data.size() - off);
    std::memcpy(buf, data.data() + off, k);
    return k;
  };
  auto pack = *build_pack(files, read);
  auto pack_theirs = pack;
  pack_theirs.ssl_cert = other;

  set_metainfo_roots({ca, other});
  auto built = object_for(data);
  auto primary = metainfo_root();
  auto all = metainfo_roots();
  auto p_ours = object_metainfo::parse(ours.torrent_file({}), d);
  auto p_theirs = object_metainfo::parse(theirs.torrent_file({}), d);
  auto p_strangers = object_metainfo::parse(strangers.torrent_file({}), d);
  auto p_plain = object_metainfo::parse(plain.torrent_file({}), d);
  auto p_pack = pack_metainfo::parse(pack_theirs.torrent_file({}), files);
  set_metainfo_root("");
  EXPECT_EQ(primary, ca);
  EXPECT_EQ(all, (std::vector<std::string>{ca, other}));
  EXPECT_EQ(built.ssl_cert, ca);
  ASSERT_TRUE(p_ours) << p_ours.error().to_string();
  EXPECT_EQ(p_ours->ssl_cert, ca);
  ASSERT_TRUE(p_theirs) << p_theirs.error().to_string();
  EXPECT_EQ(p_theirs->ssl_cert, other);
  EXPECT_EQ(p_theirs->info_hash_hex(), theirs.info_hash_hex());
  EXPECT_NE(p_theirs->info_hash_hex(), p_ours->info_hash_hex());
  ASSERT_FALSE(p_strangers);
  EXPECT_NE(p_strangers.error().message.find("rooted at another CA"), std::string::npos);
  EXPECT_FALSE(p_plain);
  ASSERT_TRUE(p_pack) << p_pack.error().to_string();
  EXPECT_EQ(p_pack->ssl_cert, other);
  EXPECT_TRUE(metainfo_roots().empty());
  // The explicit form, without the process roots.
  EXPECT_TRUE(object_metainfo::parse_any(theirs.torrent_file({}), d, {ca, other}));
  EXPECT_FALSE(object_metainfo::parse_any(theirs.torrent_file({}), d, {ca}));
  EXPECT_TRUE(object_metainfo::parse_any(plain.torrent_file({}), d, {}));
}

// The daemon's tls section → the swarm roots: the primary root is tls.cert_file's issuer wherever
// it sits in ca_file; tls.swarm_extra_cert_file adds its issuer; a one-CA file keeps rooting every
// torrent at that CA whatever the leaf (as before).
TEST(MetainfoRoot, EnableMembersOnlyFindsTheLeafsIssuer) {
  auto ca = *load_root_pem(root_pki().pem("ca"));
  auto other = *load_root_pem(root_pki().pem("other-ca"));
  auto& pki = root_pki();
  std::string bundle = pki.dir() + "/rotation-bundle.pem";
  std::ofstream(bundle) << slurp(pki.pem("other-ca")) << slurp(pki.pem("ca"));
  tls::tls_config c;
  c.enabled = true;
  c.ca_file = bundle;
  c.cert_file = pki.pem("leaf");
  c.key_file = pki.key("leaf");
  ASSERT_TRUE(swarm::enable_members_only(c));
  EXPECT_EQ(metainfo_roots(), (std::vector<std::string>{ca}));

  c.swarm_extra_cert_file = pki.pem("other-leaf");
  c.swarm_extra_key_file = pki.key("other-leaf");
  ASSERT_TRUE(swarm::enable_members_only(c));
  EXPECT_EQ(metainfo_roots(), (std::vector<std::string>{ca, other}));
  swarm::settings s;
  swarm::apply_tls(s, c);
  EXPECT_EQ(s.roots, (std::vector<std::string>{ca, other}));
  ASSERT_EQ(s.extra_certs.size(), 1u);
  EXPECT_EQ(s.extra_certs[0].cert_file, pki.pem("other-leaf"));

  c.swarm_extra_cert_file = pki.pem("leaf");  // the same CA twice
  auto same = swarm::enable_members_only(c);
  ASSERT_FALSE(same);
  EXPECT_NE(same.error().message.find("same CA"), std::string::npos) << same.error().message;
  c.swarm_extra_cert_file = pki.pem("third-leaf");
  EXPECT_FALSE(swarm::enable_members_only(c));
  c.swarm_extra_cert_file.clear();
  c.swarm_extra_key_file.clear();
  c.cert_file = pki.pem("third-leaf");  // signed by neither CA of a two-CA bundle
  EXPECT_FALSE(swarm::enable_members_only(c));

  c.ca_file = pki.pem("ca");  // one CA: it is the root whatever the leaf
  ASSERT_TRUE(swarm::enable_members_only(c));
  EXPECT_EQ(metainfo_roots(), (std::vector<std::string>{ca}));
  c.enabled = false;
  ASSERT_TRUE(swarm::enable_members_only(c));
  EXPECT_TRUE(metainfo_roots().empty());
}

}  // namespace
}  // namespace shoal
