// Metainfo (swarm): the piece size rule, deterministic object torrents, the async builder, and
// torrents that do not match their bytes.
#include <gtest/gtest.h>

#include <random>

#include "common/bencode.h"
#include "common/sha256.h"
#include "swarm/metainfo.h"

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

}  // namespace
}  // namespace shoal
