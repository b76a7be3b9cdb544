#pragma once
// Binary encoding of the index records (documented in docs/cache.md, "Index format").
//
// Key:   one record-type byte, the 32 raw digest bytes, then a type-specific suffix.
//          'O' <digest>            object row
//          'P' <digest> <owner>    pin (owner as UTF-8 bytes, 1..255 bytes)
//          'L' <digest> <label>    label (1..255 bytes)
//          'M' "schema"            format version of the whole index ("1")
// Value: a version byte (1) then little-endian fixed-width fields. Decoders accept longer
//        values of a known version (fields appended later) and refuse unknown versions.
//
// Stateless functions; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cache/types.h"
#include "common/digest.h"
#include "common/error.h"

namespace shoal::cache::detail {

enum class record : char { meta = 'M', object = 'O', pin = 'P', label = 'L' };

inline constexpr std::uint8_t value_version = 1;
inline constexpr std::string_view schema_key = "Mschema";
inline constexpr std::string_view schema_version = "1";
inline constexpr std::size_t max_owner_or_label = 255;

struct object_row {
  std::uint64_t size = 0;
  object_kind kind = object_kind::blob;
  std::int64_t created_ms = 0;  // unix milliseconds
  std::int64_t last_access_ms = 0;
  std::int64_t last_scrub_ms = 0;
  std::uint64_t hits = 0;
  friend bool operator==(const object_row&, const object_row&) = default;
};

struct pin_row {
  std::uint32_t count = 0;
  std::int64_t expiry_ms = 0;  // 0: never expires
  friend bool operator==(const pin_row&, const pin_row&) = default;
};

[[nodiscard]] std::string object_key(const digest& d);
[[nodiscard]] std::string pin_key(const digest& d, std::string_view owner);
[[nodiscard]] std::string label_key(const digest& d, std::string_view label);

struct parsed_key {
  record type = record::object;
  digest id;
  std::string_view suffix;  // owner or label; points into the parsed key
};
// Refuses keys of an unknown type, a short digest, or a missing/oversized suffix.
[[nodiscard]] result<parsed_key> parse_key(std::string_view key);

[[nodiscard]] std::string encode(const object_row& r);
[[nodiscard]] result<object_row> decode_object(std::string_view v);
[[nodiscard]] std::string encode(const pin_row& r);
[[nodiscard]] result<pin_row> decode_pin(std::string_view v);
[[nodiscard]] std::string encode_label(std::int64_t added_ms);
[[nodiscard]] status check_label_value(std::string_view v);

// Owners and labels: 1..255 bytes, no NUL (keys stay printable in tools).
[[nodiscard]] status check_name(std::string_view what, std::string_view s);

}  // namespace shoal::cache::detail
