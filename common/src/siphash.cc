#include "common/siphash.h"

#include <sys/random.h>

#include <chrono>

namespace shoal {

siphash_key siphash_detail::make_process_key() noexcept {
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

siphash_key siphash_key::from_bytes(std::span<const std::uint8_t, 16> b) noexcept {
  return {siphash_detail::load_le64(b.data()), siphash_detail::load_le64(b.data() + 8)};
}

std::uint64_t siphash24(const siphash_key& key, std::span<const std::uint8_t> data) noexcept {
  return siphash_detail::sip<2, 4>(key, data.data(), data.size());
}

}  // namespace shoal
