#include "common/siphash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace shoal {
namespace {

// The reference vectors of the SipHash paper's implementation (vectors.h, "vectors_sip64"):
// key 00 01 .. 0f, message 00 01 .. (len-1) for len 0..63, as little-endian 64-bit values.
// Entry 15 is the paper's Appendix A example (0xa129ca6149be45e5).
constexpr std::uint64_t kVectors[64] = {
    0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
    0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
    0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
    0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
    0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794, 0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd,
    0xbed65cf21aa2ee98, 0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
    0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3, 0x2f2e6163076bcfad,
    0xde4daaaca71dc9a5, 0xa6a2506687956571, 0xad87a3535c49ef28, 0x32d892fad841c342,
    0x7127512f72f27cce, 0xa7f32346f95978e3, 0x12e0b01abb051238, 0x15e034d40fa197ae,
    0x314dffbe0815a3b4, 0x027990f029623981, 0xcadcd4e59ef40c4d, 0x9abfd8766a33735c,
    0x0e3ea96b5304a7d0, 0xad0c42d6fc585992, 0x187306c89bc215a9, 0xd4a60abcf3792b95,
    0xf935451de4f21df2, 0xa9538f0419755787, 0xdb9acddff56ca510, 0xd06c98cd5c0975eb,
    0xe612a3cb9ecba951, 0xc766e62cfcadaf96, 0xee64435a9752fe72, 0xa192d576b245165a,
    0x0a8787bf8ecb74b2, 0x81b3e73d20b49b6f, 0x7fa8220ba3b2ecea, 0x245731c13ca42499,
    0xb78dbfaf3a8d83bd, 0xea1ad565322a1a0b, 0x60e61c23a3795013, 0x6606d7e446282b93,
    0x6ca4ecb15c5f91e1, 0x9f626da15c9625f3, 0xe51b38608ef25f57, 0x958a324ceb064572,
};

siphash_key reference_key() {
  std::array<std::uint8_t, 16> k{};
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<std::uint8_t>(i);
  return siphash_key::from_bytes(k);
}

TEST(SipHash, ReferenceVectors) {
  auto key = reference_key();
  std::array<std::uint8_t, 64> msg{};
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i);
  for (std::size_t len = 0; len < 64; ++len) {
    EXPECT_EQ(siphash24(key, std::span<const std::uint8_t>(msg.data(), len)), kVectors[len])
        << "length " << len;
  }
}

TEST(SipHash, PaperAppendixExample) {
  // k = 00..0f, m = 00..0e (15 bytes) → a129ca6149be45e5.
  auto key = reference_key();
  std::string m;
  for (char c = 0; c < 15; ++c) m += c;
  EXPECT_EQ(siphash24(key, std::string_view(m)), 0xa129ca6149be45e5ull);
}

// SipHash-1-3 under the all-zero key, message 00 01 .. (len-1) for len 1..63: CPython's
// implementation (Python/pyhash.c, the bytes hash with PYTHONHASHSEED=0, which zeroes the key).
constexpr std::uint64_t kVectors13[63] = {
    0x68a914128e01e473, 0x010bac45c41e3669, 0x4d4c9a4a8ef6e0ad, 0x7cc43f98813e4dbd,
    0x5abe2169dff36275, 0xe3c25f87624f1cdb, 0x2f098ab0c751325a, 0xead411e67ebe2eea,
    0x75927f9d95124362, 0xaf9f77a65ab51a1d, 0xfe64ce8b6617fcff, 0xa6baf4fb0f9fe1c2,
    0xa0cf3211850f8e0d, 0x7f86049379fbfe67, 0xf30eb725bb91c9ea, 0x8972188433a5c5b7,
    0x4883c49a2c009c1d, 0xadc2c0b63044067d, 0x091f4a3329f87d19, 0x639e355ae68c0100,
    0xb17bef2cb5213239, 0xf8aeb1066236ccfe, 0x37332b1389daa4ff, 0x31185a47af932f3a,
    0xebf352e82ae23e2f, 0xed36ff242fe478b2, 0x2454d97d299299df, 0x8cd57fe8130d0ac7,
    0xbe98eb2faf0a0e85, 0xd427c34ee09470c6, 0x169739443111d49b, 0x31ef8061c910629b,
    0x7fb71d24dfa4c9f6, 0x92771f49e836d389, 0x3c393cf6f0853bc3, 0xac77921fcc642bd3,
    0x422a9751192ff266, 0xc680ae8a8c584ddf, 0x6c76b6d34bb6d26b, 0x95bc321ab41d8206,
    0x908a3a97a6d37669, 0xfcaf3c64874dd0b4, 0xf689479b32b84a44, 0xd857641079efd1fd,
    0x8b581578722633f7, 0x83cb09d35ea7bcd4, 0x8485f7f5ae725a0d, 0xfe1f2445ba50237f,
    0x23cece041d7866b0, 0x416687480b336c09, 0xf15960da7e7f3892, 0xded6177b9826835a,
    0xf80dae51668be6be, 0x17ecc6ee6647df18, 0x5220d642b4a52110, 0xa4f0cf4ba4adc016,
    0xe5125bb26d1f2976, 0x851b0e75f580d256, 0x12605250a37e39ac, 0xd95a713568daebf1,
    0xcdcf4a42ec0dd605, 0xa5c708712b617164, 0x385d3e39e5f37359,
};

TEST(SipHash13, CPythonVectors) {
  siphash_key zero;
  std::array<std::uint8_t, 64> msg{};
  for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<std::uint8_t>(i);
  for (std::size_t len = 1; len < 64; ++len) {
    EXPECT_EQ(siphash13(zero, std::span<const std::uint8_t>(msg.data(), len)), kVectors13[len - 1])
        << "length " << len;
  }
  // hash(b"siphash") in CPython 3.11 with PYTHONHASHSEED=0.
  EXPECT_EQ(siphash13(zero, std::string_view("siphash")), 0x8264ceeccb16bcbeull);
}

TEST(KeyedHash, IsSipHash13UnderTheProcessKey) {
  keyed_hash h;
  std::array<std::uint8_t, 32> d{};
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(3 * i + 1);
  const auto& k = process_siphash_key();
  EXPECT_EQ(h(d), siphash13(k, std::span<const std::uint8_t>(d)));
  EXPECT_EQ(h(digest(d)), siphash13(k, std::span<const std::uint8_t>(d)));
  std::array<std::uint8_t, 20> ih{};
  ih[19] = 7;
  EXPECT_EQ(h(ih), siphash13(k, std::span<const std::uint8_t>(ih)));
  EXPECT_EQ(h(std::string_view("abc")), siphash13(k, std::string_view("abc")));
  // Not the unkeyed value: the key is random.
  EXPECT_NE(h(d), siphash13(siphash_key{}, std::span<const std::uint8_t>(d)));
}

TEST(SipHash, ProcessKeyIsRandomAndStable) {
  const auto& k = process_siphash_key();
  EXPECT_FALSE(k.k0 == 0 && k.k1 == 0);
  EXPECT_EQ(&k, &process_siphash_key());
  auto ref = reference_key();
  EXPECT_FALSE(k.k0 == ref.k0 && k.k1 == ref.k1);
}

// Keys that share their first 8 bytes (what an attacker sends to collapse a first-bytes hash).
template <std::size_t N>
std::vector<std::array<std::uint8_t, N>> colliding_keys(std::size_t count) {
  std::vector<std::array<std::uint8_t, N>> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    out[i].fill(0xab);
    for (std::size_t b = 0; b < 4; ++b) out[i][N - 1 - b] = static_cast<std::uint8_t>(i >> (8 * b));
  }
  return out;
}

template <class Map>
std::size_t largest_bucket(const Map& m) {
  std::size_t most = 0;
  for (std::size_t b = 0; b < m.bucket_count(); ++b) most = std::max(most, m.bucket_size(b));
  return most;
}

// What the tracker and std::hash<digest> used before: the first 8 bytes.
struct first_bytes_hash {
  std::size_t operator()(const std::array<std::uint8_t, 20>& h) const noexcept {
    std::size_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | h[static_cast<std::size_t>(i)];
    return v;
  }
};

TEST(KeyedHash, CollidingInfoHashesSpreadOverBuckets) {
  constexpr std::size_t n = 20'000;
  auto keys = colliding_keys<20>(n);
  std::unordered_set<std::array<std::uint8_t, 20>, keyed_hash> keyed(keys.begin(), keys.end());
  ASSERT_EQ(keyed.size(), n);
  // A uniform hash puts about one key per bucket; the fullest of ~20k buckets holds a handful.
  EXPECT_GE(keyed.bucket_count(), n);
  EXPECT_LE(largest_bucket(keyed), 16u) << "buckets: " << keyed.bucket_count();

  // The first-bytes hash puts them all in one bucket (the finding), on a smaller sample.
  std::unordered_set<std::array<std::uint8_t, 20>, first_bytes_hash> naive(keys.begin(),
                                                                           keys.begin() + 2000);
  EXPECT_EQ(largest_bucket(naive), 2000u);
}

TEST(KeyedHash, CollidingDigestsSpreadOverBuckets) {
  constexpr std::size_t n = 20'000;
  std::unordered_map<digest, int, keyed_hash> m;
  for (const auto& k : colliding_keys<32>(n)) m.emplace(digest(k), 1);
  ASSERT_EQ(m.size(), n);
  EXPECT_LE(largest_bucket(m), 16u);
  // std::hash<digest> (first 8 bytes) would give every one of them the same value.
  EXPECT_EQ(std::hash<digest>{}(digest(colliding_keys<32>(2)[0])),
            std::hash<digest>{}(digest(colliding_keys<32>(2)[1])));
}

TEST(KeyedHash, DependsOnEveryByte) {
  keyed_hash h;
  std::array<std::uint8_t, 20> a{};
  auto base = h(a);
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto b = a;
    b[i] = 1;
    EXPECT_NE(h(b), base) << "byte " << i;
  }
}

}  // namespace
}  // namespace shoal
