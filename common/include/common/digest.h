#pragma once
// The content address of every object in Shoal: `sha256:<64 lowercase hex>`.
// Parsing is strict (OCI image-spec digest grammar restricted to the one algorithm we accept):
// anything else is a typed error (digest_errc) with a message that says what was wrong.

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "common/error.h"

namespace shoal {

// Why a digest string was refused. The error's code is one of these (category "digest").
enum class digest_errc {
  empty = 1,              // ""
  missing_algorithm,      // no "algorithm:" prefix (e.g. a bare hex string)
  unsupported_algorithm,  // "sha512:..", "md5:..", "SHA256:.."
  wrong_length,           // encoded part is not exactly 64 characters
  uppercase_hex,          // "sha256:ABCD.." (the spec requires lower case)
  invalid_character,      // a non-hex character, whitespace, NUL, trailing bytes
};
}  // namespace shoal

template <>
struct std::is_error_code_enum<shoal::digest_errc> : std::true_type {};

namespace shoal {

const std::error_category& digest_category() noexcept;
inline std::error_code make_error_code(digest_errc e) noexcept {
  return {static_cast<int>(e), digest_category()};
}

class digest {
 public:
  static constexpr std::size_t size = 32;
  static constexpr std::string_view prefix = "sha256:";
  static constexpr std::size_t string_length = 7 + 64;

  // The all-zero digest; only useful as a placeholder.
  constexpr digest() = default;
  explicit constexpr digest(const std::array<std::uint8_t, size>& b) : bytes_(b) {}

  // Parses `sha256:<64 lowercase hex>` exactly; no surrounding whitespace, nothing trailing.
  [[nodiscard]] static result<digest> parse(std::string_view s);
  // Parses 64 lowercase hex characters (no algorithm prefix), as used in file names.
  [[nodiscard]] static result<digest> from_hex(std::string_view hex);
  [[nodiscard]] static digest from_bytes(std::span<const std::uint8_t, size> b);

  [[nodiscard]] std::string str() const;  // "sha256:..."
  [[nodiscard]] std::string hex() const;  // 64 lowercase hex characters
  [[nodiscard]] const std::array<std::uint8_t, size>& bytes() const noexcept { return bytes_; }
  // Short form for logs: "sha256:0123456789ab".
  [[nodiscard]] std::string short_str() const;

  friend constexpr auto operator<=>(const digest&, const digest&) = default;
  friend constexpr bool operator==(const digest&, const digest&) = default;

 private:
  std::array<std::uint8_t, size> bytes_{};
};

// Lowercase hex of arbitrary bytes.
[[nodiscard]] std::string to_hex(std::span<const std::uint8_t> bytes);

}  // namespace shoal

template <>
struct std::hash<shoal::digest> {
  std::size_t operator()(const shoal::digest& d) const noexcept {
    // The digest is already uniformly distributed: its first 8 bytes are a fine hash.
    std::size_t h = 0;
    for (int i = 0; i < 8; ++i) h = (h << 8) | d.bytes()[static_cast<std::size_t>(i)];
    return h;
  }
};
