#pragma once
// SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012), and hashers for
// unordered containers whose keys an attacker chooses (info-hashes in announces, digests in
// heartbeats). A hash made of the key's first bytes lets anyone put every key in one bucket;
// with SipHash under a secret random key nobody can predict which bucket a key lands in.
//
// Thread-safety: pure functions; the process key is made once (thread-safe static) and then only
// read.

#include <array>
#include <cstddef>
#include <cstdint>
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

// SipHash-2-4 of `data` under `key`.
[[nodiscard]] std::uint64_t siphash24(const siphash_key& key,
                                      std::span<const std::uint8_t> data) noexcept;
[[nodiscard]] inline std::uint64_t siphash24(const siphash_key& key,
                                             std::string_view data) noexcept {
  return siphash24(key, std::span<const std::uint8_t>(
                            reinterpret_cast<const std::uint8_t*>(data.data()), data.size()));
}

// A random key made once per process (getrandom; the clock and address-space layout if that
// fails, so a hash is never unkeyed).
[[nodiscard]] const siphash_key& process_siphash_key() noexcept;

// Hasher for std::unordered_{map,set} keyed by attacker-chosen bytes: SipHash-2-4 under the
// process key. Use it instead of std::hash<digest> (whose value is the digest's first 8 bytes)
// wherever the digest was not computed by this process from content it verified.
struct keyed_hash {
  template <std::size_t N>
  std::size_t operator()(const std::array<std::uint8_t, N>& b) const noexcept {
    return static_cast<std::size_t>(siphash24(process_siphash_key(), std::span(b)));
  }
  std::size_t operator()(const digest& d) const noexcept { return (*this)(d.bytes()); }
  std::size_t operator()(std::string_view s) const noexcept {
    return static_cast<std::size_t>(siphash24(process_siphash_key(), s));
  }
};

}  // namespace shoal
