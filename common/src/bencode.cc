#include "common/bencode.h"

#include <charconv>

namespace shoal::bencode {
namespace {

class decoder {
 public:
  decoder(std::string_view in, const limits& lim) : in_(in), lim_(lim) {}

  result<value> run() {
    auto v = parse(0);
    if (!v) return v;
    if (pos_ != in_.size()) return err("trailing bytes after the value");
    return v;
  }

 private:
  std::unexpected<error> err(const std::string& what) const {
    return fail(errc::protocol_error, "bencode: " + what + " at offset " + std::to_string(pos_));
  }

  result<std::int64_t> parse_number(char end) {
    std::size_t start = pos_;
    auto stop = in_.find(end, pos_);
    if (stop == std::string_view::npos) return err("unterminated number");
    std::string_view digits = in_.substr(start, stop - start);
    bool neg = !digits.empty() && digits[0] == '-';
    std::string_view mag = neg ? digits.substr(1) : digits;
    if (mag.empty()) return err("empty number");
    for (char c : mag) {
      if (c < '0' || c > '9') return err("non-digit in number");
    }
    if (mag.size() > 1 && mag[0] == '0') return err("leading zero in number");
    if (neg && mag == "0") return err("negative zero");
    std::int64_t out = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (ec != std::errc() || p != digits.data() + digits.size()) return err("number out of range");
    pos_ = stop + 1;
    return out;
  }

  result<std::string> parse_string() {
    auto len = parse_number(':');
    if (!len) return std::unexpected(len.error());
    if (*len < 0) return err("negative string length");
    auto n = static_cast<std::uint64_t>(*len);
    if (n > lim_.max_string) return err("string longer than the limit");
    if (n > in_.size() - pos_) return err("string runs past the end of input");
    std::string s(in_.substr(pos_, static_cast<std::size_t>(n)));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }

  result<value> parse(std::size_t depth) {
    if (depth > lim_.max_depth) return err("nesting deeper than the limit");
    if (++items_ > lim_.max_items) return err("more values than the limit");
    if (pos_ >= in_.size()) return err("unexpected end of input");
    std::size_t start = pos_;
    char c = in_[pos_];
    value out;
    if (c == 'i') {
      ++pos_;
      auto n = parse_number('e');
      if (!n) return std::unexpected(n.error());
      out = value(*n);
    } else if (c >= '0' && c <= '9') {
      auto s = parse_string();
      if (!s) return std::unexpected(s.error());
      out = value(std::move(*s));
    } else if (c == 'l') {
      ++pos_;
      list l;
      for (;;) {
        if (pos_ >= in_.size()) return err("unterminated list");
        if (in_[pos_] == 'e') {
          ++pos_;
          break;
        }
        auto v = parse(depth + 1);
        if (!v) return v;
        l.push_back(std::move(*v));
      }
      out = value(std::move(l));
    } else if (c == 'd') {
      ++pos_;
      dict d;
      std::string prev;
      bool first = true;
      for (;;) {
        if (pos_ >= in_.size()) return err("unterminated dict");
        if (in_[pos_] == 'e') {
          ++pos_;
          break;
        }
        if (in_[pos_] < '0' || in_[pos_] > '9') return err("dict key is not a string");
        auto k = parse_string();
        if (!k) return std::unexpected(k.error());
        if (!first && !(prev < *k)) return err("dict keys not sorted or duplicated");
        first = false;
        prev = *k;
        auto v = parse(depth + 1);
        if (!v) return v;
        d.emplace(std::move(*k), std::move(*v));
      }
      out = value(std::move(d));
    } else {
      return err("unexpected byte");
    }
    out.raw = in_.substr(start, pos_ - start);
    return out;
  }

  std::string_view in_;
  const limits& lim_;
  std::size_t pos_ = 0;
  std::size_t items_ = 0;
};

void encode_to(const value& v, std::string& out) {
  if (v.is_int()) {
    out += 'i';
    out += std::to_string(v.as_int());
    out += 'e';
  } else if (v.is_string()) {
    const auto& s = v.as_string();
    out += std::to_string(s.size());
    out += ':';
    out += s;
  } else if (v.is_list()) {
    out += 'l';
    for (const auto& e : v.as_list()) encode_to(e, out);
    out += 'e';
  } else {
    out += 'd';
    for (const auto& [k, e] : v.as_dict()) {  // std::map: sorted by raw bytes
      out += std::to_string(k.size());
      out += ':';
      out += k;
      encode_to(e, out);
    }
    out += 'e';
  }
}

}  // namespace

const value* value::find(std::string_view key) const {
  if (!is_dict()) return nullptr;
  const auto& d = as_dict();
  auto it = d.find(key);
  return it == d.end() ? nullptr : &it->second;
}

result<value> decode(std::string_view in, const limits& lim) { return decoder(in, lim).run(); }

std::string encode(const value& v) {
  std::string out;
  encode_to(v, out);
  return out;
}

}  // namespace shoal::bencode
