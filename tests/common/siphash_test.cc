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
