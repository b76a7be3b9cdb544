#include "common/flat_json.h"

#include "common/utf8.h"

#include <cmath>
#include <algorithm>
#include <cstdlib>
#include <limits>

namespace shoal::flat_json {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

class parser {
 public:
  parser(std::string_view text, int max_depth, document& doc)
      : s_(text), max_depth_(max_depth), doc_(doc) {}

  status run() {
    if (s_.size() >= std::numeric_limits<std::uint32_t>::max())
      return fail(errc::too_large, "JSON text of 4 GiB or more");
    if (s_.size() >= 3 && s_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
    doc_.text_ = s_;
    doc_.nodes_.reserve(s_.size() / 12 + 4);
    skip_ws();
    if (auto st = parse_value(0); !st) return st;
    skip_ws();
    if (pos_ != s_.size()) return error("unexpected text after the value");
    return {};
  }

 private:
  status error(const char* what) const {
    return fail(errc::invalid_argument,
                std::string("JSON: ") + what + " at byte " + std::to_string(pos_));
  }
  void skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
  }
  std::uint32_t add(kind k) {
    document::node n;
    n.k = k;
    n.begin_at = static_cast<std::uint32_t>(pos_);
    doc_.nodes_.push_back(n);
    return static_cast<std::uint32_t>(doc_.nodes_.size() - 1);
  }
  void close(std::uint32_t i) {
    doc_.nodes_[i].end = static_cast<std::uint32_t>(doc_.nodes_.size());
  }

  status parse_value(int depth) {
    if (pos_ >= s_.size()) return error("unexpected end of input");
    switch (s_[pos_]) {
      case '{':
        return parse_container(depth, true);
      case '[':
        return parse_container(depth, false);
      case '"':
        return parse_string();
      case 't':
        return literal("true", kind::boolean, 1);
      case 'f':
        return literal("false", kind::boolean, 0);
      case 'n':
        return literal("null", kind::null, 0);
      default:
        if (s_[pos_] == '-' || is_digit(s_[pos_])) return parse_number();
        return error("unexpected character");
    }
  }

  status literal(std::string_view word, kind k, std::uint64_t v) {
    if (s_.substr(pos_, word.size()) != word) return error("invalid literal");
    auto i = add(k);
    doc_.nodes_[i].v.u = v;
    pos_ += word.size();
    close(i);
    return {};
  }

  status parse_container(int depth, bool object) {
    if (depth >= max_depth_) return error("nesting too deep");
    auto i = add(object ? kind::object : kind::array);
    ++pos_;
    std::uint32_t count = 0;
    skip_ws();
    const char closer = object ? '}' : ']';
    if (pos_ < s_.size() && s_[pos_] == closer) {
      ++pos_;
    } else {
      for (;;) {
        if (object) {
          if (pos_ >= s_.size() || s_[pos_] != '"') return error("expected a member name");
          if (auto st = parse_string(); !st) return st;
          skip_ws();
          if (pos_ >= s_.size() || s_[pos_] != ':') return error("expected ':'");
          ++pos_;
          skip_ws();
        }
        if (auto st = parse_value(depth + 1); !st) return st;
        ++count;
        skip_ws();
        if (pos_ >= s_.size()) return error("unexpected end of input");
        if (s_[pos_] == ',') {
          ++pos_;
          skip_ws();
          continue;
        }
        if (s_[pos_] != closer)
          return error(object ? "expected ',' or '}'" : "expected ',' or ']'");
        ++pos_;
        break;
      }
    }
    auto& n = doc_.nodes_[i];
    n.size_or_len = count;
    n.v.at = static_cast<std::uint32_t>(pos_);
    close(i);
    return {};
  }

  status parse_string() {
    auto i = add(kind::string);
    ++pos_;  // the opening quote
    const std::size_t start = pos_;
    // Plain run first: printable ASCII and valid UTF-8 without escapes stays in the text.
    for (;;) {
      if (pos_ >= s_.size()) return error("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        auto& n = doc_.nodes_[i];
        n.v.at = static_cast<std::uint32_t>(start);
        n.size_or_len = static_cast<std::uint32_t>(pos_ - start);
        ++pos_;
        close(i);
        return {};
      }
      if (c == '\\') break;
      if (c < 0x20) return error("control character in a string");
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      auto n = utf8_sequence(s_.substr(pos_));
      if (n == 0) return error("invalid UTF-8 in a string");
      pos_ += n;
    }
    return parse_escaped(i, start);
  }

  // The rest of a string that has an escape: decoded into the document's buffer.
  status parse_escaped(std::uint32_t i, std::size_t start) {
    std::string& out = doc_.decoded_;
    const std::size_t at = out.size();
    out.append(s_.data() + start, pos_ - start);
    for (;;) {
      if (pos_ >= s_.size()) return error("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') break;
      if (c < 0x20) return error("control character in a string");
      if (c >= 0x80) {
        auto n = utf8_sequence(s_.substr(pos_));
        if (n == 0) return error("invalid UTF-8 in a string");
        out.append(s_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      if (auto st = parse_escape(out); !st) return st;
    }
    ++pos_;
    auto& n = doc_.nodes_[i];
    n.unescaped = true;
    n.v.at = static_cast<std::uint32_t>(at);
    n.size_or_len = static_cast<std::uint32_t>(out.size() - at);
    close(i);
    return {};
  }

  status parse_escape(std::string& out) {
    if (pos_ + 1 >= s_.size()) return error("unterminated string");
    const char e = s_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        return {};
      case 'b':
        out += '\b';
        return {};
      case 'f':
        out += '\f';
        return {};
      case 'n':
        out += '\n';
        return {};
      case 'r':
        out += '\r';
        return {};
      case 't':
        out += '\t';
        return {};
      case 'u':
        break;
      default:
        return error("invalid escape in a string");
    }
    std::uint32_t cp = 0;
    if (!hex4(cp)) return error("invalid \\u escape");
    if (cp >= 0xdc00 && cp <= 0xdfff) return error("lone low surrogate in a \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      std::uint32_t lo = 0;
      if (pos_ + 1 >= s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u')
        return error("high surrogate not followed by a low one");
      pos_ += 2;
      if (!hex4(lo)) return error("invalid \\u escape");
      if (lo < 0xdc00 || lo > 0xdfff) return error("high surrogate not followed by a low one");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    utf8_append(out, cp);
    return {};
  }

  bool hex4(std::uint32_t& out) {
    if (pos_ + 4 > s_.size()) return false;
    out = 0;
    for (int k = 0; k < 4; ++k) {
      int h = hex_value(s_[pos_ + k]);
      if (h < 0) return false;
      out = out * 16 + static_cast<std::uint32_t>(h);
    }
    pos_ += 4;
    return true;
  }

  status parse_number() {
    auto i = add(kind::number_unsigned);
    const std::size_t start = pos_;
    const bool negative = s_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= s_.size() || !is_digit(s_[pos_])) return error("invalid number");
    bool overflow = false;
    std::uint64_t mag = 0;
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (pos_ < s_.size() && is_digit(s_[pos_])) {
        auto d = static_cast<std::uint64_t>(s_[pos_] - '0');
        if (mag > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
        mag = mag * 10 + d;
        ++pos_;
      }
    }
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (pos_ >= s_.size() || !is_digit(s_[pos_])) return error("invalid number");
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      is_float = true;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size() || !is_digit(s_[pos_])) return error("invalid number");
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      is_float = true;
    }
    auto& n = doc_.nodes_[i];
    constexpr std::uint64_t min_magnitude =
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1;
    if (!is_float && !overflow && !negative) {
      n.v.u = mag;
    } else if (!is_float && !overflow && mag <= min_magnitude) {
      n.k = kind::number_integer;
      n.v.i = mag == min_magnitude ? std::numeric_limits<std::int64_t>::min()
                                   : -static_cast<std::int64_t>(mag);
    } else {
      // As nlohmann: strtod of the token (locale-independent digits here: no grouping).
      n.k = kind::number_float;
      std::string token(s_.data() + start, pos_ - start);
      n.v.d = std::strtod(token.c_str(), nullptr);
      if (!std::isfinite(n.v.d)) return error("number out of range");
    }
    close(i);
    return {};
  }

  std::string_view s_;
  int max_depth_;
  document& doc_;
  std::size_t pos_ = 0;
};

result<document> parse(std::string_view text, int max_depth) {
  document doc;
  parser p(text, max_depth, doc);
  if (auto st = p.run(); !st) return fail(st.error());
  return doc;
}

kind value::type() const noexcept { return doc_ ? doc_->nodes_[i_].k : kind::null; }

bool value::as_bool() const noexcept { return is_bool() && doc_->nodes_[i_].v.u != 0; }

std::uint64_t value::as_u64() const noexcept { return is_unsigned() ? doc_->nodes_[i_].v.u : 0; }

std::int64_t value::as_i64() const noexcept {
  if (type() == kind::number_integer) return doc_->nodes_[i_].v.i;
  if (is_unsigned() && doc_->nodes_[i_].v.u <= std::numeric_limits<std::int64_t>::max())
    return static_cast<std::int64_t>(doc_->nodes_[i_].v.u);
  return 0;
}

double value::as_double() const noexcept {
  switch (type()) {
    case kind::number_unsigned:
      return static_cast<double>(doc_->nodes_[i_].v.u);
    case kind::number_integer:
      return static_cast<double>(doc_->nodes_[i_].v.i);
    case kind::number_float:
      return doc_->nodes_[i_].v.d;
    default:
      return 0;
  }
}

std::string_view value::as_string() const noexcept {
  if (!is_string()) return {};
  const auto& n = doc_->nodes_[i_];
  if (n.unescaped) return std::string_view(doc_->decoded_).substr(n.v.at, n.size_or_len);
  return doc_->text_.substr(n.v.at, n.size_or_len);
}

std::size_t value::size() const noexcept {
  return is_array() || is_object() ? doc_->nodes_[i_].size_or_len : 0;
}

std::string_view value::source() const noexcept {
  if (!doc_) return {};
  const auto& n = doc_->nodes_[i_];
  std::size_t end = n.begin_at;
  switch (n.k) {
    case kind::array:
    case kind::object:
      end = n.v.at;
      break;
    case kind::string: {
      // To the closing quote (escapes skipped).
      const auto& t = doc_->text_;
      end = n.begin_at + 1;
      while (end < t.size() && t[end] != '"') end += t[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, t.size());
      break;
    }
    default: {
      end = n.begin_at;
      const auto& t = doc_->text_;
      while (end < t.size() && !is_ws(t[end]) && t[end] != ',' && t[end] != ']' && t[end] != '}')
        ++end;
    }
  }
  return doc_->text_.substr(n.begin_at, end - n.begin_at);
}

value value::find(std::string_view key) const noexcept {
  if (!is_object()) return {};
  const auto& nodes = doc_->nodes_;
  const std::uint32_t end = nodes[i_].end;
  value found;
  for (std::uint32_t k = i_ + 1; k < end; k = nodes[k + 1].end) {
    if (value(doc_, k).as_string() == key) found = value(doc_, k + 1);
  }
  return found;
}

value::element_range value::elements() const noexcept {
  if (!is_array()) return {doc_, 0, 0};
  return {doc_, i_ + 1, doc_->nodes_[i_].end};
}

value::member_range value::members() const noexcept {
  if (!is_object()) return {doc_, 0, 0};
  return {doc_, i_ + 1, doc_->nodes_[i_].end};
}

value::element_range::iterator& value::element_range::iterator::operator++() noexcept {
  i_ = doc_->nodes_[i_].end;
  return *this;
}

value::member value::member_range::iterator::operator*() const noexcept {
  return {flat_json::value(doc_, i_).as_string(), flat_json::value(doc_, i_ + 1)};
}

value::member_range::iterator& value::member_range::iterator::operator++() noexcept {
  i_ = doc_->nodes_[i_ + 1].end;
  return *this;
}

}  // namespace shoal::flat_json
