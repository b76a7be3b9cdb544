#pragma once
// Bencoding (BEP 3): a strict decoder with limits, for metainfo files and tracker traffic that
// arrive from the network, and an encoder that always emits canonical form (sorted dict keys), so
// the same data always gives the same bytes and therefore the same info-hash.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"

namespace shoal::bencode {

struct value;
using list = std::vector<value>;
using dict = std::map<std::string, value, std::less<>>;

struct value {
  std::variant<std::int64_t, std::string, list, dict> v;
  // The exact input bytes this value was decoded from (for hashing an info dict as received).
  // Points into the decoder's input; empty for values built in code.
  std::string_view raw;

  value() : v(std::int64_t{0}) {}
  value(std::int64_t i) : v(i) {}              // NOLINT(runtime/explicit)
  value(int i) : v(std::int64_t{i}) {}         // NOLINT(runtime/explicit)
  value(std::string s) : v(std::move(s)) {}    // NOLINT(runtime/explicit)
  value(const char* s) : v(std::string(s)) {}  // NOLINT(runtime/explicit)
  value(list l) : v(std::move(l)) {}           // NOLINT(runtime/explicit)
  value(dict d) : v(std::move(d)) {}           // NOLINT(runtime/explicit)

  [[nodiscard]] bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  [[nodiscard]] bool is_string() const { return std::holds_alternative<std::string>(v); }
  [[nodiscard]] bool is_list() const { return std::holds_alternative<list>(v); }
  [[nodiscard]] bool is_dict() const { return std::holds_alternative<dict>(v); }
  [[nodiscard]] std::int64_t as_int() const { return std::get<std::int64_t>(v); }
  [[nodiscard]] const std::string& as_string() const { return std::get<std::string>(v); }
  [[nodiscard]] const list& as_list() const { return std::get<list>(v); }
  [[nodiscard]] const dict& as_dict() const { return std::get<dict>(v); }
  // Dict lookup; nullptr when not a dict or the key is absent.
  [[nodiscard]] const value* find(std::string_view key) const;
};

struct limits {
  std::size_t max_depth = 32;
  std::size_t max_items = 1 << 20;     // total values
  std::size_t max_string = 64u << 20;  // bytes in one string
};

// Decodes exactly one value spanning all of `in`; trailing bytes are an error. Strict: no
// leading zeros, no "-0", dict keys must be strictly increasing. Errors name the offset.
[[nodiscard]] result<value> decode(std::string_view in, const limits& lim = {});

[[nodiscard]] std::string encode(const value& v);

}  // namespace shoal::bencode
