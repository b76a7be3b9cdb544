#include "common/siphash.h"

#include <sys/random.h>

#include <chrono>
#include <cstring>

namespace shoal {
namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }

std::uint64_t load_le64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct sip_state {
  std::uint64_t v0, v1, v2, v3;
  void round() noexcept {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void compress(std::uint64_t m) noexcept {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

siphash_key make_process_key() noexcept {
  std::uint8_t b[16] = {};
  std::size_t got = 0;
  for (int tries = 0; got < sizeof b && tries < 8; ++tries) {
    auto n = getrandom(b + got, sizeof b - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  siphash_key k = siphash_key::from_bytes(std::span<const std::uint8_t, 16>(b));
  if (got < sizeof b) {
    // No kernel randomness: still unpredictable enough to keep buckets apart from outside.
    auto t = static_cast<std::uint64_t>(
        std::chrono::high_resolution_clock::now().time_since_epoch().count());
    k.k0 ^= t;
    k.k1 ^= reinterpret_cast<std::uintptr_t>(&k) * 0x9e3779b97f4a7c15ull;
  }
  return k;
}

}  // namespace

siphash_key siphash_key::from_bytes(std::span<const std::uint8_t, 16> b) noexcept {
  return {load_le64(b.data()), load_le64(b.data() + 8)};
}

std::uint64_t siphash24(const siphash_key& key, std::span<const std::uint8_t> data) noexcept {
  sip_state s{0x736f6d6570736575ull ^ key.k0, 0x646f72616e646f6dull ^ key.k1,
              0x6c7967656e657261ull ^ key.k0, 0x7465646279746573ull ^ key.k1};
  const std::size_t n = data.size();
  const std::uint8_t* p = data.data();
  const std::size_t whole = n - n % 8;
  for (std::size_t i = 0; i < whole; i += 8) s.compress(load_le64(p + i));
  // The last block: the remaining bytes, and the length's low byte on top.
  std::uint64_t last = static_cast<std::uint64_t>(n & 0xff) << 56;
  for (std::size_t i = 0; i < n % 8; ++i)
    last |= static_cast<std::uint64_t>(p[whole + i]) << (8 * i);
  s.compress(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

const siphash_key& process_siphash_key() noexcept {
  static const siphash_key key = make_process_key();
  return key;
}

}  // namespace shoal
