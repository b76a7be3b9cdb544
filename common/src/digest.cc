#include "common/digest.h"
#include "common/text.h"

#include <cctype>

namespace shoal {
namespace {

class digest_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "digest"; }
  std::string message(int ev) const override {
    switch (static_cast<digest_errc>(ev)) {
      case digest_errc::empty:
        return "empty digest";
      case digest_errc::missing_algorithm:
        return "digest has no algorithm prefix";
      case digest_errc::unsupported_algorithm:
        return "unsupported digest algorithm";
      case digest_errc::wrong_length:
        return "digest has the wrong length";
      case digest_errc::uppercase_hex:
        return "digest hex must be lower case";
      case digest_errc::invalid_character:
        return "digest contains an invalid character";
    }
    return "unknown digest error";
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Printable, bounded rendering of untrusted input for error messages.
std::unexpected<error> digest_fail(digest_errc c, std::string_view input, std::string_view why) {
  return std::unexpected<error>(error{
      make_error_code(c), "invalid digest " + quote_excerpt(input) + ": " + std::string(why)});
}

result<digest> parse_hex(std::string_view hex, std::string_view whole) {
  if (hex.size() != 64) {
    return digest_fail(digest_errc::wrong_length, whole,
                       "sha256 needs 64 hex characters, got " + std::to_string(hex.size()));
  }
  std::array<std::uint8_t, digest::size> b{};
  for (std::size_t i = 0; i < 64; ++i) {
    char c = hex[i];
    if (c >= 'A' && c <= 'F') {
      return digest_fail(digest_errc::uppercase_hex, whole,
                         "upper-case hex at position " + std::to_string(i));
    }
    if (hex_value(c) < 0) {
      return digest_fail(digest_errc::invalid_character, whole,
                         "non-hex character at position " + std::to_string(i));
    }
  }
  for (std::size_t i = 0; i < digest::size; ++i) {
    b[i] = static_cast<std::uint8_t>(hex_value(hex[2 * i]) << 4 | hex_value(hex[2 * i + 1]));
  }
  return digest{b};
}

}  // namespace

const std::error_category& digest_category() noexcept {
  static const digest_category_impl cat;
  return cat;
}

result<digest> digest::parse(std::string_view s) {
  if (s.empty()) return digest_fail(digest_errc::empty, s, "empty string");
  auto colon = s.find(':');
  if (colon == std::string_view::npos) {
    return digest_fail(digest_errc::missing_algorithm, s, "expected \"sha256:<hex>\"");
  }
  std::string_view alg = s.substr(0, colon);
  if (alg != "sha256") {
    return digest_fail(digest_errc::unsupported_algorithm, s,
                       "algorithm " + quote_excerpt(alg) + " is not supported (only sha256)");
  }
  return parse_hex(s.substr(colon + 1), s);
}

result<digest> digest::from_hex(std::string_view hex) { return parse_hex(hex, hex); }

digest digest::from_bytes(std::span<const std::uint8_t, size> b) {
  std::array<std::uint8_t, size> a{};
  for (std::size_t i = 0; i < size; ++i) a[i] = b[i];
  return digest{a};
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static const char* hx = "0123456789abcdef";
  std::string out;
  out.resize(bytes.size() * 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = hx[bytes[i] >> 4];
    out[2 * i + 1] = hx[bytes[i] & 15];
  }
  return out;
}

std::string digest::hex() const { return to_hex(bytes_); }
std::string digest::str() const { return std::string(prefix) + hex(); }
std::string digest::short_str() const { return std::string(prefix) + hex().substr(0, 12); }

}  // namespace shoal
