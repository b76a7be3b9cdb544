// Value types of configuration: duration and byte_size parsing and printing, and the scalar
// codecs that turn a YAML scalar into a typed field (strictly: a quoted "5" is not an integer).

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "common/config.h"

namespace shoal::config {
namespace {

using u128 = unsigned __int128;

constexpr std::string_view k_duration_units = "ns, us, ms, s, m, h, d";
constexpr std::string_view k_byte_units =
    "B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB, EiB, and Kubernetes' k, M, G, T, P, E, "
    "Ki, Mi, Gi, Ti, Pi, Ei";
constexpr int k_max_digits = 30;  // keeps mantissa * unit below 2^128 together with the checks

// A non-negative decimal number "123" or "1.25" as mantissa / 10^scale, exactly.
struct decimal {
  u128 mantissa = 0;
  int scale = 0;
  int digits = 0;
};

// Reads [0-9]+(\.[0-9]+)? from the front of `s`; returns the characters consumed (0: no number,
// npos: too many digits).
std::size_t read_decimal(std::string_view s, decimal& d) {
  std::size_t i = 0;
  d = {};
  bool dot = false;
  while (i < s.size()) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      if (++d.digits > k_max_digits) return std::string_view::npos;
      d.mantissa = d.mantissa * 10 + static_cast<unsigned>(c - '0');
      if (dot) ++d.scale;
    } else if (c == '.' && !dot && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9' &&
               d.digits > 0) {
      dot = true;
    } else {
      break;
    }
    ++i;
  }
  return d.digits == 0 ? 0 : i;
}

u128 pow10(int n) {
  u128 r = 1;
  while (n-- > 0) r *= 10;
  return r;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Quoted, truncated and control-free rendering of user text inside an error message.
std::string show(std::string_view s) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char c : s) {
    if (++n > 60) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct unit {
  std::string_view name;
  u128 factor;
};

constexpr u128 k_ns_per_s = 1'000'000'000;
const unit k_time_units[] = {
    {"ns", 1},
    {"us", 1'000},
    {"\xc2\xb5s", 1'000},  // µs (micro sign)
    {"\xce\xbcs", 1'000},  // μs (Greek mu)
    {"ms", 1'000'000},
    {"s", k_ns_per_s},
    {"m", 60 * k_ns_per_s},
    {"h", 3600 * k_ns_per_s},
    {"d", 86400 * k_ns_per_s},
};

const unit k_size_units[] = {
    {"B", 1},
    {"KB", 1'000},
    {"kB", 1'000},
    {"MB", 1'000'000},
    {"GB", 1'000'000'000},
    {"TB", 1'000'000'000'000},
    {"PB", 1'000'000'000'000'000},
    {"EB", 1'000'000'000'000'000'000},
    {"KiB", u128(1) << 10},
    {"MiB", u128(1) << 20},
    {"GiB", u128(1) << 30},
    {"TiB", u128(1) << 40},
    {"PiB", u128(1) << 50},
    {"EiB", u128(1) << 60},
    // Kubernetes quantity suffixes (resource.Quantity): what a pod spec's sizes are written in.
    {"k", 1'000},
    {"M", 1'000'000},
    {"G", 1'000'000'000},
    {"T", 1'000'000'000'000},
    {"P", 1'000'000'000'000'000},
    {"E", 1'000'000'000'000'000'000},
    {"Ki", u128(1) << 10},
    {"Mi", u128(1) << 20},
    {"Gi", u128(1) << 30},
    {"Ti", u128(1) << 40},
    {"Pi", u128(1) << 50},
    {"Ei", u128(1) << 60},
};

// A Kubernetes decimal exponent after the number: "e3", "E6", "e+2", "e-1". Returns the
// characters consumed (0: none, so "1E" stays the exa suffix) and sets `exp`.
std::size_t read_exponent(std::string_view s, int& exp) {
  if (s.size() < 2 || (s[0] != 'e' && s[0] != 'E')) return 0;
  std::size_t i = 1;
  bool neg = false;
  if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
  const std::size_t digits_at = i;
  int v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && v < 100) v = v * 10 + (s[i++] - '0');
  if (i == digits_at) return 0;
  exp = neg ? -v : v;
  return i;
}

const unit* find_unit(std::span<const unit> units, std::string_view name) {
  for (const auto& u : units) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

std::unexpected<error> bad(std::string msg) { return fail(errc::config_error, std::move(msg)); }

}  // namespace

result<duration> duration::parse(std::string_view text) {
  std::string_view s = trim(text);
  if (s.empty()) return bad("empty duration; write e.g. \"5s\" or \"500ms\"");
  if (s.front() == '-') return bad("duration " + show(text) + " is negative");
  if (s.front() == '+') s.remove_prefix(1);
  if (s == "0") return duration{};
  u128 total = 0;
  constexpr u128 k_max = static_cast<u128>(std::numeric_limits<std::int64_t>::max());
  bool first = true;
  while (!s.empty()) {
    decimal d;
    std::size_t n = read_decimal(s, d);
    if (n == std::string_view::npos) return bad("duration " + show(text) + " has too many digits");
    if (n == 0) {
      return bad("expected a duration like \"500ms\", \"5s\", \"2m\" or \"1h\", got " + show(text));
    }
    s.remove_prefix(n);
    s = trim(s);
    std::size_t u = 0;
    while (u < s.size() && ((s[u] >= 'a' && s[u] <= 'z') || (s[u] >= 'A' && s[u] <= 'Z') ||
                            static_cast<unsigned char>(s[u]) >= 0x80)) {
      ++u;
    }
    if (u == 0) {
      if (first && s.empty()) {
        return bad("duration " + show(text) + " has no unit; write e.g. \"" +
                   std::string(trim(text)) + "s\" or \"" + std::string(trim(text)) +
                   "ms\" (units: " + std::string(k_duration_units) + ")");
      }
      if (!s.empty()) return bad("duration " + show(text) + ": unexpected " + show(s));
      return bad("duration " + show(text) +
                 " has a number without a unit (units: " + std::string(k_duration_units) + ")");
    }
    const unit* un = find_unit(k_time_units, s.substr(0, u));
    if (un == nullptr) {
      return bad("unknown unit " + show(s.substr(0, u)) + " in duration " + show(text) +
                 " (units: " + std::string(k_duration_units) + ")");
    }
    s.remove_prefix(u);
    s = trim(s);
    if (d.mantissa != 0 && d.mantissa > (~u128(0)) / un->factor) {
      return bad("duration " + show(text) + " is too long");
    }
    u128 scaled = d.mantissa * un->factor;
    u128 div = pow10(d.scale);
    if (scaled % div != 0) return bad("duration " + show(text) + " is finer than a nanosecond");
    total += scaled / div;
    if (total > k_max)
      return bad("duration " + show(text) + " is too long (at most about 292 years)");
    first = false;
  }
  return duration(std::chrono::nanoseconds(static_cast<std::int64_t>(total)));
}

std::string duration::str() const {
  const auto ns = static_cast<std::int64_t>(ns_.count());
  if (ns == 0) return "0s";
  static const std::pair<std::int64_t, std::string_view> units[] = {{86400 * 1'000'000'000LL, "d"},
                                                                    {3600 * 1'000'000'000LL, "h"},
                                                                    {60 * 1'000'000'000LL, "m"},
                                                                    {1'000'000'000LL, "s"},
                                                                    {1'000'000LL, "ms"},
                                                                    {1'000LL, "us"},
                                                                    {1LL, "ns"}};
  for (const auto& [factor, name] : units) {
    if (ns % factor == 0) return std::to_string(ns / factor) + std::string(name);
  }
  return std::to_string(ns) + "ns";
}

result<byte_size> byte_size::parse(std::string_view text) {
  std::string_view s = trim(text);
  const std::string hint =
      " (units: " + std::string(k_byte_units) + ", or a plain number of bytes)";
  if (s.empty()) return bad("empty byte size; write e.g. \"512KiB\" or \"10MiB\"");
  if (s.front() == '-') return bad("byte size " + show(text) + " is negative");
  if (s.front() == '+') s.remove_prefix(1);
  decimal d;
  std::size_t n = read_decimal(s, d);
  if (n == std::string_view::npos) return bad("byte size " + show(text) + " has too many digits");
  if (n == 0) {
    return bad("expected a byte size like \"512KiB\", \"10MiB\" or \"2GiB\", got " + show(text));
  }
  s.remove_prefix(n);
  int exp = 0;
  if (const std::size_t e = read_exponent(s, exp); e > 0) {
    // An exponent stands in for the unit: the factor stays 1 and the scale moves instead.
    d.scale -= exp;
    if (d.scale < 0) {
      if (d.mantissa != 0 && (d.scale < -38 || d.mantissa > (~u128(0)) / pow10(-d.scale))) {
        return bad("byte size " + show(text) + " is too large (at most 16 EiB)");
      }
      d.mantissa *= pow10(-d.scale);
      d.scale = 0;
    } else if (d.scale > k_max_digits) {
      // mantissa < 10^k_max_digits: only zero is a whole number of bytes here.
      if (d.mantissa != 0)
        return bad("byte size " + show(text) + " is not a whole number of bytes");
      d.scale = 0;
    }
    s.remove_prefix(e);
    if (!s.empty()) {
      return bad("byte size " + show(text) + ": no unit may follow an exponent like \"e3\"");
    }
  }
  if (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  u128 factor = 1;
  if (!s.empty()) {
    const unit* un = find_unit(k_size_units, s);
    if (un == nullptr && (s == "K" || s == "m")) {
      return bad("unknown unit " + show(s) + " in byte size " + show(text) +
                 (s == "K" ? ": write \"k\" or \"KB\" (1000) or \"Ki\" or \"KiB\" (1024)"
                           : ": \"m\" is a thousandth; a byte size has no fractions"));
    }
    if (un == nullptr) return bad("unknown unit " + show(s) + " in byte size " + show(text) + hint);
    factor = un->factor;
  }
  if (d.mantissa != 0 && d.mantissa > (~u128(0)) / factor) {
    return bad("byte size " + show(text) + " is too large");
  }
  u128 scaled = d.mantissa * factor;
  u128 div = pow10(d.scale);
  if (scaled % div != 0) return bad("byte size " + show(text) + " is not a whole number of bytes");
  u128 bytes = scaled / div;
  if (bytes > std::numeric_limits<std::uint64_t>::max()) {
    return bad("byte size " + show(text) + " is too large (at most 16 EiB)");
  }
  return byte_size(static_cast<std::uint64_t>(bytes));
}

std::string byte_size::str() const {
  if (bytes_ == 0) return "0";
  static const std::pair<std::uint64_t, std::string_view> units[] = {
      {1ULL << 50, "PiB"},          {1ULL << 40, "TiB"},
      {1ULL << 30, "GiB"},          {1ULL << 20, "MiB"},
      {1ULL << 10, "KiB"},          {1'000'000'000'000'000ULL, "PB"},
      {1'000'000'000'000ULL, "TB"}, {1'000'000'000ULL, "GB"},
      {1'000'000ULL, "MB"},         {1'000ULL, "KB"}};
  for (const auto& [factor, name] : units) {
    if (bytes_ % factor == 0) return std::to_string(bytes_ / factor) + std::string(name);
  }
  return std::to_string(bytes_);
}

namespace detail {

std::string describe_node(const node& n) {
  switch (n.k) {
    case node::kind::null:
      return "nothing (null)";
    case node::kind::map:
      return "a map";
    case node::kind::sequence:
      return "a list";
    case node::kind::scalar:
      break;
  }
  return n.quoted ? "the quoted string " + show(n.text) : show(n.text);
}

namespace {

std::string expected(std::string_view what, const node& n) {
  std::string s = "expected " + std::string(what) + ", got " + describe_node(n);
  if (n.k == node::kind::scalar && n.quoted) s += " (remove the quotes)";
  return s;
}

// Parses the magnitude of a YAML 1.2 core-schema integer: decimal digits or 0x hex.
bool parse_magnitude(std::string_view s, std::uint64_t& out, bool& overflow) {
  overflow = false;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  if (p != s.data() + s.size()) return false;
  if (ec == std::errc::result_out_of_range) {
    overflow = true;
    return true;
  }
  return ec == std::errc();
}

}  // namespace

std::string decode_scalar(const node& n, bool& out) {
  if (n.k == node::kind::scalar && !n.quoted) {
    const std::string& t = n.text;
    if (t == "true" || t == "True" || t == "TRUE") {
      out = true;
      return {};
    }
    if (t == "false" || t == "False" || t == "FALSE") {
      out = false;
      return {};
    }
  }
  return expected("true or false", n);
}

std::string decode_int64(const node& n, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  if (n.k != node::kind::scalar || n.quoted) return expected("an integer", n);
  std::string_view s = n.text;
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  std::uint64_t mag = 0;
  bool overflow = false;
  if (!parse_magnitude(s, mag, overflow)) return expected("an integer", n);
  const std::string range =
      "the range is " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + n.text;
  if (overflow) return "integer out of range: " + range;
  const auto lo_mag = static_cast<std::uint64_t>(-(lo + 1)) + 1;  // |lo| without overflow
  if (neg ? mag > lo_mag : mag > static_cast<std::uint64_t>(hi)) {
    return "integer out of range: " + range;
  }
  out = neg ? static_cast<std::int64_t>(0 - mag) : static_cast<std::int64_t>(mag);
  return {};
}

std::string decode_uint64(const node& n, std::uint64_t hi, std::uint64_t& out) {
  if (n.k != node::kind::scalar || n.quoted) return expected("a non-negative integer", n);
  std::string_view s = n.text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (!s.empty() && s[0] == '-') {
    std::uint64_t mag = 0;
    bool overflow = false;
    if (!parse_magnitude(s.substr(1), mag, overflow)) return expected("a non-negative integer", n);
    if (!overflow && mag == 0) {
      out = 0;
      return {};
    }
    return "expected a non-negative integer, got " + n.text;
  }
  std::uint64_t v = 0;
  bool overflow = false;
  if (!parse_magnitude(s, v, overflow)) return expected("a non-negative integer", n);
  if (overflow || v > hi) {
    return "integer out of range: the range is 0 to " + std::to_string(hi) + ", got " + n.text;
  }
  out = v;
  return {};
}

std::string decode_scalar(const node& n, double& out) {
  if (n.k != node::kind::scalar || n.quoted) return expected("a number", n);
  std::string_view s = n.text;
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || !((s[0] >= '0' && s[0] <= '9') || s[0] == '-' || s[0] == '.')) {
    return expected("a number", n);
  }
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return expected("a number", n);
  if (!std::isfinite(v)) return "number out of range, got " + n.text;
  out = v;
  return {};
}

std::string decode_scalar(const node& n, std::string& out) {
  if (n.k != node::kind::scalar) return "expected a string, got " + describe_node(n);
  out = n.text;
  return {};
}

std::string decode_scalar(const node& n, duration& out) {
  if (n.k != node::kind::scalar) {
    return "expected a duration like \"5s\", got " + describe_node(n);
  }
  auto d = duration::parse(n.text);
  if (!d) return d.error().message;
  out = *d;
  return {};
}

std::string decode_scalar(const node& n, byte_size& out) {
  if (n.k != node::kind::scalar) {
    return "expected a byte size like \"10MiB\", got " + describe_node(n);
  }
  auto b = byte_size::parse(n.text);
  if (!b) return b.error().message;
  out = *b;
  return {};
}

std::string encode_scalar(bool v) { return v ? "true" : "false"; }

std::string encode_scalar(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "0";
  return std::string(buf, p);
}

std::string encode_scalar(const std::string& v) {
  // Plain only when a YAML reader can take it for nothing else than this string; everything
  // else is double-quoted, which round-trips any bytes.
  auto plain_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '/' || c == '@' || c == '+' || c == '-';
  };
  bool plain = !v.empty() && ((v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z') ||
                              v[0] == '_' || v[0] == '/');
  for (char c : v) plain = plain && plain_char(c);
  if (plain) {
    std::string lower;
    for (char c : v) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    static const std::string_view words[] = {"true", "false", "yes", "no", "on",
                                             "off",  "null",  "y",   "n"};
    for (auto w : words) plain = plain && lower != w;
  }
  if (plain) return v;
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string encode_scalar(const duration& v) { return v.str(); }
std::string encode_scalar(const byte_size& v) { return v.str(); }

std::string type_name_of(const bool*) { return "bool"; }
std::string type_name_of(const double*) { return "double"; }
std::string type_name_of(const std::string*) { return "string"; }
std::string type_name_of(const duration*) { return "duration"; }
std::string type_name_of(const byte_size*) { return "byte size"; }

}  // namespace detail
}  // namespace shoal::config
