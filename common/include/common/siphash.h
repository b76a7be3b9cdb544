#pragma once
// SipHash (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012), and hashers for
// unordered containers whose keys an attacker chooses (info-hashes in announces, digests in
// heartbeats). A hash made of the key's first bytes lets anyone put every key in one bucket;
// with SipHash under a secret random key nobody can predict which bucket a key lands in.
//
// Two variants: SipHash-2-4 (the paper's PRF) and SipHash-1-3 (one compression round, three
// finalization rounds), which is what hash tables use: Rust's std HashMap, CPython's str/bytes
// hash, Ruby. keyed_hash is SipHash-1-3, inlined for fixed-size keys (a 32-byte digest costs
// about 10 ns, SipHash-2-4 out of line about 25): the scheduler's index hashes every digest of
// every heartbeat several times.
//
// Thread-safety: pure functions; the process key is made once (thread-safe static) and then only
// read.

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "common/digest.h"

namespace shoal {

struct siphash_key {
  std::uint64_t k0 = 0, k1 = 0;
  // The 16 key bytes of the reference implementation: k0 is bytes 0-7, k1 bytes 8-15, both
  // little-endian.
  [[nodiscard]] static siphash_key from_bytes(std::span<const std::uint8_t, 16> b) noexcept;
};

namespace siphash_detail {

[[nodiscard]] inline std::uint64_t load_le64(const std::uint8_t* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = std::byteswap(v);
  return v;
}

// SipHash-C-D of `n` bytes at `p` (n known at compile time in keyed_hash, so the loops unroll).
template <int C, int D>
[[nodiscard]] inline std::uint64_t sip(const siphash_key& key, const std::uint8_t* p,
                                       std::size_t n) noexcept {
  std::uint64_t v0 = 0x736f6d6570736575ull ^ key.k0, v1 = 0x646f72616e646f6dull ^ key.k1,
                v2 = 0x6c7967656e657261ull ^ key.k0, v3 = 0x7465646279746573ull ^ key.k1;
  auto round = [&]() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  };
  auto compress = [&](std::uint64_t m) noexcept {
    v3 ^= m;
    for (int i = 0; i < C; ++i) round();
    v0 ^= m;
  };
  const std::size_t whole = n - n % 8;
  for (std::size_t i = 0; i < whole; i += 8) compress(load_le64(p + i));
  // The last block: the remaining bytes, and the length's low byte on top.
  std::uint64_t last = static_cast<std::uint64_t>(n & 0xff) << 56;
  for (std::size_t i = 0; i < n % 8; ++i)
    last |= static_cast<std::uint64_t>(p[whole + i]) << (8 * i);
  compress(last);
  v2 ^= 0xff;
  for (int i = 0; i < D; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

// getrandom; the clock and address-space layout if that fails, so a hash is never unkeyed.
[[nodiscard]] siphash_key make_process_key() noexcept;

}  // namespace siphash_detail

// SipHash-2-4 of `data` under `key`.
[[nodiscard]] std::uint64_t siphash24(const siphash_key& key,
                                      std::span<const std::uint8_t> data) noexcept;
[[nodiscard]] inline std::uint64_t siphash24(const siphash_key& key,
                                             std::string_view data) noexcept {
  return siphash24(key, std::span<const std::uint8_t>(
                            reinterpret_cast<const std::uint8_t*>(data.data()), data.size()));
}

// SipHash-1-3 of `data` under `key`.
[[nodiscard]] inline std::uint64_t siphash13(const siphash_key& key,
                                             std::span<const std::uint8_t> data) noexcept {
  return siphash_detail::sip<1, 3>(key, data.data(), data.size());
}
[[nodiscard]] inline std::uint64_t siphash13(const siphash_key& key,
                                             std::string_view data) noexcept {
  return siphash13(key, std::span<const std::uint8_t>(
                            reinterpret_cast<const std::uint8_t*>(data.data()), data.size()));
}

// A random key made once per process. Inline, so that keyed_hash pays a guard check rather
// than a call.
[[nodiscard]] inline const siphash_key& process_siphash_key() noexcept {
  static const siphash_key key = siphash_detail::make_process_key();
  return key;
}

// Hasher for std::unordered_{map,set} keyed by attacker-chosen bytes: SipHash-1-3 under the
// process key. Use it instead of std::hash<digest> (whose value is the digest's first 8 bytes)
// wherever the digest was not computed by this process from content it verified.
struct keyed_hash {
  template <std::size_t N>
  std::size_t operator()(const std::array<std::uint8_t, N>& b) const noexcept {
    return static_cast<std::size_t>(siphash_detail::sip<1, 3>(process_siphash_key(), b.data(), N));
  }
  std::size_t operator()(const digest& d) const noexcept { return (*this)(d.bytes()); }
  std::size_t operator()(std::string_view s) const noexcept {
    return static_cast<std::size_t>(siphash13(process_siphash_key(), s));
  }
};

}  // namespace shoal
