#include "codec.h"

#include <cstring>

namespace shoal::cache::detail {
namespace {

void put_u8(std::string& s, std::uint8_t v) { s.push_back(static_cast<char>(v)); }

template <class T>
void put_le(std::string& s, T v) {
  auto u = static_cast<std::make_unsigned_t<T>>(v);
  for (std::size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

template <class T>
T get_le(std::string_view v, std::size_t off) {
  std::make_unsigned_t<T> u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    u |= static_cast<std::make_unsigned_t<T>>(static_cast<unsigned char>(v[off + i])) << (8 * i);
  }
  return static_cast<T>(u);
}

std::string key_with(record type, const digest& d, std::string_view suffix) {
  std::string k;
  k.reserve(1 + digest::size + suffix.size());
  k.push_back(static_cast<char>(type));
  k.append(reinterpret_cast<const char*>(d.bytes().data()), digest::size);
  k.append(suffix);
  return k;
}

status check_version(std::string_view what, std::string_view v, std::size_t min_size) {
  if (v.empty()) return fail(errc::protocol_error, std::string(what) + " row is empty");
  auto ver = static_cast<std::uint8_t>(v[0]);
  if (ver != value_version) {
    return fail(errc::protocol_error,
                std::string(what) + " row has unknown version " + std::to_string(ver));
  }
  if (v.size() < min_size) {
    return fail(errc::protocol_error, std::string(what) +
                                          " row too short: " + std::to_string(v.size()) +
                                          " bytes, need " + std::to_string(min_size));
  }
  return {};
}

constexpr std::size_t object_row_size = 1 + 1 + 8 + 8 + 8 + 8 + 8;
constexpr std::size_t pin_row_size = 1 + 4 + 8;

}  // namespace

std::string object_key(const digest& d) { return key_with(record::object, d, {}); }
std::string pin_key(const digest& d, std::string_view owner) {
  return key_with(record::pin, d, owner);
}
std::string label_key(const digest& d, std::string_view label) {
  return key_with(record::label, d, label);
}

result<parsed_key> parse_key(std::string_view key) {
  if (key.empty()) return fail(errc::protocol_error, "empty index key");
  parsed_key out;
  switch (key[0]) {
    case static_cast<char>(record::object):
      out.type = record::object;
      break;
    case static_cast<char>(record::pin):
      out.type = record::pin;
      break;
    case static_cast<char>(record::label):
      out.type = record::label;
      break;
    case static_cast<char>(record::meta):
      out.type = record::meta;
      out.suffix = key.substr(1);
      return out;
    default:
      return fail(errc::protocol_error, "index key has unknown record type " +
                                            std::to_string(static_cast<unsigned char>(key[0])));
  }
  if (key.size() < 1 + digest::size) {
    return fail(errc::protocol_error, "index key too short: " + std::to_string(key.size()));
  }
  std::array<std::uint8_t, digest::size> b{};
  std::memcpy(b.data(), key.data() + 1, digest::size);
  out.id = digest{b};
  out.suffix = key.substr(1 + digest::size);
  if (out.type == record::object) {
    if (!out.suffix.empty()) return fail(errc::protocol_error, "object key has trailing bytes");
  } else if (auto st = check_name("key suffix", out.suffix); !st) {
    return std::unexpected(st.error());
  }
  return out;
}

std::string encode(const object_row& r) {
  std::string s;
  s.reserve(object_row_size);
  put_u8(s, value_version);
  put_u8(s, static_cast<std::uint8_t>(r.kind));
  put_le<std::uint64_t>(s, r.size);
  put_le<std::int64_t>(s, r.created_ms);
  put_le<std::int64_t>(s, r.last_access_ms);
  put_le<std::int64_t>(s, r.last_scrub_ms);
  put_le<std::uint64_t>(s, r.hits);
  return s;
}

result<object_row> decode_object(std::string_view v) {
  if (auto st = check_version("object", v, object_row_size); !st) {
    return std::unexpected(st.error());
  }
  object_row r;
  auto kind = static_cast<std::uint8_t>(v[1]);
  if (kind >= object_kind_count) {
    return fail(errc::protocol_error, "object row has unknown kind " + std::to_string(kind));
  }
  r.kind = static_cast<object_kind>(kind);
  r.size = get_le<std::uint64_t>(v, 2);
  r.created_ms = get_le<std::int64_t>(v, 10);
  r.last_access_ms = get_le<std::int64_t>(v, 18);
  r.last_scrub_ms = get_le<std::int64_t>(v, 26);
  r.hits = get_le<std::uint64_t>(v, 34);
  return r;
}

std::string encode(const pin_row& r) {
  std::string s;
  s.reserve(pin_row_size);
  put_u8(s, value_version);
  put_le<std::uint32_t>(s, r.count);
  put_le<std::int64_t>(s, r.expiry_ms);
  return s;
}

result<pin_row> decode_pin(std::string_view v) {
  if (auto st = check_version("pin", v, pin_row_size); !st) return std::unexpected(st.error());
  pin_row r;
  r.count = get_le<std::uint32_t>(v, 1);
  r.expiry_ms = get_le<std::int64_t>(v, 5);
  if (r.count == 0) return fail(errc::protocol_error, "pin row with count 0");
  return r;
}

std::string encode_label(std::int64_t added_ms) {
  std::string s;
  put_u8(s, value_version);
  put_le<std::int64_t>(s, added_ms);
  return s;
}

status check_label_value(std::string_view v) { return check_version("label", v, 1 + 8); }

status check_name(std::string_view what, std::string_view s) {
  if (s.empty()) return fail(errc::invalid_argument, std::string(what) + " is empty");
  if (s.size() > max_owner_or_label) {
    return fail(errc::invalid_argument, std::string(what) + " longer than " +
                                            std::to_string(max_owner_or_label) + " bytes");
  }
  if (s.find('\0') != std::string_view::npos) {
    return fail(errc::invalid_argument, std::string(what) + " contains a NUL byte");
  }
  return {};
}

}  // namespace shoal::cache::detail
