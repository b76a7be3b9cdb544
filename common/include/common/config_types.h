#pragma once
// The value types of daemon configuration (duration, byte_size), per-field constraints
// (field_options), and the scalar codecs and printers the walker in common/config.h uses
// (implemented in config_types.cc). Include common/config.h, not this file, to describe a config.

#include <chrono>
#include <compare>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/error.h"

namespace shoal::config {

// A length of time, written in YAML with a unit: "500ms", "5s", "2m", "1h30m", "7d". Units are
// ns, us (or µs), ms, s, m, h, d; fractions are allowed ("1.5s"); a bare "0" means zero; any
// other bare number is refused because its unit would be a guess. Never negative.
class duration {
 public:
  constexpr duration() noexcept = default;
  template <class Rep, class Period>
  constexpr duration(std::chrono::duration<Rep, Period> d) noexcept  // NOLINT: implicit on purpose
      : ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(d)) {}

  [[nodiscard]] constexpr std::chrono::nanoseconds get() const noexcept { return ns_; }
  // Parses the YAML text form; the error says what was expected.
  [[nodiscard]] static result<duration> parse(std::string_view text);
  // Shortest exact form in one unit: 90s → "90s", 60s → "1m", 1500ms → "1500ms", 0 → "0s".
  [[nodiscard]] std::string str() const;

  friend constexpr bool operator==(const duration&, const duration&) = default;
  friend constexpr auto operator<=>(const duration&, const duration&) = default;

 private:
  std::chrono::nanoseconds ns_{0};
};

// A number of bytes: "512KiB", "2GiB" (binary), "1GB", "500MB" (decimal), Kubernetes quantities
// ("10Gi", "500Mi", "1G", "1k", "1e6"), "10 MiB" (one space allowed) or a plain integer. Fractions
// are accepted when they come to a whole number of bytes ("1.5GiB" yes, "0.3KiB" no).
class byte_size {
 public:
  constexpr byte_size() noexcept = default;
  constexpr explicit byte_size(std::uint64_t bytes) noexcept : bytes_(bytes) {}
  static constexpr byte_size kib(std::uint64_t n) noexcept { return byte_size(n << 10); }
  static constexpr byte_size mib(std::uint64_t n) noexcept { return byte_size(n << 20); }
  static constexpr byte_size gib(std::uint64_t n) noexcept { return byte_size(n << 30); }
  static constexpr byte_size tib(std::uint64_t n) noexcept { return byte_size(n << 40); }

  [[nodiscard]] constexpr std::uint64_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] static result<byte_size> parse(std::string_view text);
  // Largest exact binary unit, else largest exact decimal unit, else plain bytes: "10MiB", "1GB",
  // "1000".
  [[nodiscard]] std::string str() const;

  friend constexpr bool operator==(const byte_size&, const byte_size&) = default;
  friend constexpr auto operator<=>(const byte_size&, const byte_size&) = default;

 private:
  std::uint64_t bytes_ = 0;
};

// Per-field constraints, checked after all layers are loaded (and by validate()). For lists and
// maps of scalars and for optionals they apply to each element / the contained value.
//   b.field("port", c.port, "...", {.min = 1, .max = 65535});
//   b.field("auth", c.auth, "...", {.one_of = {"anonymous", "basic", "bearer"}});
template <class T>
struct field_options {
  std::optional<T> min;   // inclusive lower bound (numbers, duration, byte_size)
  std::optional<T> max;   // inclusive upper bound
  std::vector<T> one_of;  // allowed values; empty means any
  bool required = false;  // some config layer must set the key: the default is only a placeholder
};

namespace detail {

// A YAML node reduced to what configuration needs, with its position for error messages.
// Built from yaml-cpp's tree at the parsing boundary (config_yaml.cc); never holds aliases.
struct node;
struct entry;
struct node {
  enum class kind : std::uint8_t { null, scalar, sequence, map };
  kind k = kind::null;
  bool quoted = false;         // quoted or block scalar: a string, never a number or a bool
  std::string text;            // scalar text as written (after YAML unescaping)
  std::vector<node> items;     // sequence items
  std::vector<entry> entries;  // map entries in file order; keys are unique
  int line = 0;                // 1-based; 0 when the node did not come from a file (--set)
  int column = 0;
};
struct entry {
  std::string key;
  node value;
  int line = 0;
  int column = 0;
};

class walk_state;

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};

template <class T>
concept config_integer =
    std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char> && sizeof(T) >= 2;
template <class T>
concept config_scalar = std::same_as<T, bool> || config_integer<T> || std::same_as<T, double> ||
    std::same_as<T, std::string> || std::same_as<T, duration> || std::same_as<T, byte_size>;

template <class T>
struct option_value {
  using type = T;
};
template <class T>
struct option_value<std::optional<T>> {
  using type = T;
};
template <class T>
struct option_value<std::vector<T>> {
  using type = T;
};
template <class T>
struct option_value<std::map<std::string, T>> {
  using type = T;
};
template <class T>
using option_value_t = typename option_value<T>::type;

template <class T>
inline constexpr bool is_field_type = config_scalar<T> ||
                                      ((is_optional<T>::value || is_vector<T>::value ||
                                        is_string_map<T>::value) &&
                                       config_scalar<option_value_t<T>>);

// Scalar codecs (config_types.cc). decode_* return an empty string on success, else the reason
// ("expected an integer, got a map").
std::string decode_scalar(const node& n, bool& out);
std::string decode_scalar(const node& n, double& out);
std::string decode_scalar(const node& n, std::string& out);
std::string decode_scalar(const node& n, duration& out);
std::string decode_scalar(const node& n, byte_size& out);
std::string decode_int64(const node& n, std::int64_t lo, std::int64_t hi, std::int64_t& out);
std::string decode_uint64(const node& n, std::uint64_t hi, std::uint64_t& out);
std::string encode_scalar(bool v);
std::string encode_scalar(double v);
std::string encode_scalar(const std::string& v);  // plain when unambiguous, else double-quoted
std::string encode_scalar(const duration& v);
std::string encode_scalar(const byte_size& v);
std::string type_name_of(const bool*);
std::string type_name_of(const double*);
std::string type_name_of(const std::string*);
std::string type_name_of(const duration*);
std::string type_name_of(const byte_size*);
std::string describe_node(const node& n);  // "a map", "a list", "nothing (null)", "\"abc\""

template <config_integer T>
std::string decode_scalar(const node& n, T& out) {
  if constexpr (std::is_signed_v<T>) {
    std::int64_t v = 0;
    std::string why =
        decode_int64(n, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v);
    if (why.empty()) out = static_cast<T>(v);
    return why;
  } else {
    std::uint64_t v = 0;
    std::string why = decode_uint64(n, std::numeric_limits<T>::max(), v);
    if (why.empty()) out = static_cast<T>(v);
    return why;
  }
}
template <config_integer T>
std::string encode_scalar(T v) {
  return std::to_string(v);
}
template <config_integer T>
std::string type_name_of(const T*) {
  return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(sizeof(T) * 8);
}

template <class T>
std::string type_name() {
  if constexpr (is_optional<T>::value) {
    return type_name<option_value_t<T>>() + " (optional)";
  } else if constexpr (is_vector<T>::value) {
    return "list of " + type_name<option_value_t<T>>();
  } else if constexpr (is_string_map<T>::value) {
    return "map of string to " + type_name<option_value_t<T>>();
  } else {
    return type_name_of(static_cast<const T*>(nullptr));
  }
}

// One-line YAML (flow style) of a value: used for defaults, docs and non_defaults().
template <class T>
std::string flow(const T& v) {
  if constexpr (is_optional<T>::value) {
    return v ? flow(*v) : std::string("null");
  } else if constexpr (is_vector<T>::value) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) s += ", ";
      s += encode_scalar(v[i]);
    }
    return s + "]";
  } else if constexpr (is_string_map<T>::value) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v) {
      if (!first) s += ", ";
      s += encode_scalar(k);
      s += ": ";
      s += encode_scalar(x);
      first = false;
    }
    return s + "}";
  } else {
    return encode_scalar(v);
  }
}

// Block-style lines for a non-empty list or map (print mode); empty means "use flow()".
template <class T>
std::vector<std::string> block(const T& v) {
  std::vector<std::string> lines;
  if constexpr (is_vector<T>::value) {
    for (const auto& x : v) lines.push_back("- " + encode_scalar(x));
  } else if constexpr (is_string_map<T>::value) {
    for (const auto& [k, x] : v) lines.push_back(encode_scalar(k) + ": " + encode_scalar(x));
  }
  return lines;
}

template <class U>
std::string check_bounds(const U& v, const field_options<U>& o) {
  if (o.min && v < *o.min)
    return "must be at least " + encode_scalar(*o.min) + ", got " + encode_scalar(v);
  if (o.max && *o.max < v)
    return "must be at most " + encode_scalar(*o.max) + ", got " + encode_scalar(v);
  if (!o.one_of.empty()) {
    bool found = false;
    std::string allowed;
    for (const auto& a : o.one_of) {
      found = found || a == v;
      if (!allowed.empty()) allowed += ", ";
      allowed += encode_scalar(a);
    }
    if (!found) return "must be one of " + allowed + "; got " + encode_scalar(v);
  }
  return {};
}

template <class U>
std::string describe_options(const field_options<U>& o) {
  std::string s;
  if (o.min) s += " Minimum " + encode_scalar(*o.min) + ".";
  if (o.max) s += " Maximum " + encode_scalar(*o.max) + ".";
  if (!o.one_of.empty()) {
    s += " One of:";
    for (std::size_t i = 0; i < o.one_of.size(); ++i) {
      s += i ? ", " : " ";
      s += encode_scalar(o.one_of[i]);
    }
    s += ".";
  }
  return s;
}

}  // namespace detail

}  // namespace shoal::config
